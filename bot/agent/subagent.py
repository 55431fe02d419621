"""The work of a subagent run: its context, its tools and the tool loop.

Fresh context: the type's system prompt plus the task as the only user message; a
follow-up (same child session) continues its transcript instead. The run lifecycle
(:mod:`bot.runs.execute`) calls :class:`SubagentBody` with the hooks and the meter, and
maps how it ends; model failures surface as :class:`~bot.errors.ModelCallFailed`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import openai

from bot.agent.context import ToolContext
from bot.agent.llm import ChatModel
from bot.agent.loop import run_loop
from bot.agent.model_errors import model_error_text
from bot.agent.subagent_types import subagent_types, tools_for_type
from bot.deps import Deps
from bot.errors import ModelCallFailed
from bot.runs.catalog import system_prompt
from bot.runs.send import continuation
from bot.steps import LoopControl, LoopResult, Meter
from bot.types import RunRecord


@dataclass(frozen=True, kw_only=True)
class SubagentBody:
    """A :class:`~bot.runs.execute.RunBody` that runs the agent's tool loop.

    Attributes:
        deps: Stores and settings.
        model: The model client.
    """

    deps: Deps
    model: ChatModel

    def __call__(self, record: RunRecord, *, control: LoopControl, meter: Meter) -> LoopResult:
        deps = self.deps
        messages = self._context(record)
        ctx = ToolContext(
            deps=deps,
            session_key=record.child_session_key,
            thread=record.thread,
            requester=record.requester,
            agent_id=record.agent_id,
            workspace_key=record.session_key,
            model=self.model,
            run_id=record.run_id,
        )
        sub_type = subagent_types(deps.settings)[record.subagent_type]
        try:
            return run_loop(
                model=self.model,
                model_name=record.model,
                messages=messages,
                tools=tools_for_type(sub_type, deps.settings),
                ctx=ctx,
                max_steps=deps.settings.openai.max_steps,
                meter=meter,
                control=control,
                thinking=record.thinking,
                max_tool_chars=deps.settings.subagents.max_result_chars,
            )
        except openai.APIError as exc:
            base_url = str(self.model.client.base_url)
            text = model_error_text(exc, base_url=base_url, model=record.model, detail=True)
            timed_out = isinstance(exc, openai.APITimeoutError)
            raise ModelCallFailed(text, timed_out=timed_out) from exc

    def _context(self, record: RunRecord) -> list[dict[str, Any]]:
        """The run's starting messages, written to its transcript as they are new."""
        transcripts = self.deps.transcripts
        prior = transcripts.read(record.session_id)
        if prior:  # a follow-up: the child session goes on
            messages = continuation(prior, record.task)
            transcripts.append(record.session_id, messages[-1])
            return messages
        system = system_prompt(self.deps.settings, record.subagent_type)
        messages = [{"role": "system", "content": system}, {"role": "user", "content": record.task}]
        for message in messages:
            transcripts.append(record.session_id, message)
        return messages
