"""A real LangGraph graph as a compiled subagent (``tests.compiled_graph:graph``): two
nodes over ``MessagesState``, so a run streams two states and answers with the second."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph


def research(state: MessagesState) -> dict[str, Any]:
    task = state["messages"][-1].content
    return {"messages": [AIMessage(content=f"notes on {task}")]}


def summarize(state: MessagesState) -> dict[str, Any]:
    notes = state["messages"][-1].content
    usage = {"input_tokens": 11, "output_tokens": 5, "total_tokens": 16}
    return {"messages": [AIMessage(content=f"summary: {notes}", usage_metadata=usage)]}


def _build() -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("research", research)
    builder.add_node("summarize", summarize)
    builder.add_edge(START, "research")
    builder.add_edge("research", "summarize")
    builder.add_edge("summarize", END)
    return builder.compile()


graph = _build()
