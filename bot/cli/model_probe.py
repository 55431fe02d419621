"""``fanbot doctor``'s model lines: each endpoint probed once, cheaply.

Per endpoint (``default`` is ``FANBOT_OPENAI__*``, then each ``[models.endpoints.<name>]``):
its model list, then one small streamed call offering one tool, through fanbot's own client
(so what is read is what a run would read). Each finding is one line saying what was found
and what fanbot does about it (docs/models.md, "fanbot doctor").
"""

from __future__ import annotations

from collections.abc import Callable

import openai

from bot.agent.llm import OpenAIChatModel
from bot.agent.model_errors import model_error_text
from bot.cli.check import Check
from bot.config import OpenAISettings, Settings
from bot.models.catalog import DEFAULT_ENDPOINT, endpoints
from bot.models.completion import Completion, CompletionRequest
from bot.models.dialect import dialect_for

PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "probe_echo",
        "description": "Echo a word back. Call it when asked to.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
}
PROBE_MESSAGES = (
    {"role": "system", "content": "You are a connectivity probe. Follow the instruction."},
    {"role": "user", "content": "Call the tool probe_echo with text 'ok'. Do not write text."},
)
PROBE_OUTPUT_TOKENS = 64
"""The probe's answer is capped at this many tokens: it costs next to nothing."""
PROBE_TIMEOUT = 30.0


def probe_all(settings: Settings) -> list[Check]:
    """The lines of every configured endpoint, ``default`` first."""
    lines = []
    for name, where in endpoints(settings).items():
        if name == DEFAULT_ENDPOINT and not where.configured:
            lines.append(Check(name="model", ok=False, detail=NOT_CONFIGURED))
            continue
        lines.extend(probe_endpoint(name, where))
    return lines


NOT_CONFIGURED = (
    "no endpoint (set FANBOT_OPENAI__BASE_URL or OPENAI_API_KEY); "
    "`fanbot console` falls back to the offline demo model"
)


def probe_endpoint(name: str, where: OpenAISettings) -> list[Check]:
    """The endpoint's lines: its model list, then streaming, tool calls and usage."""
    label = "model" if name == DEFAULT_ENDPOINT else f"model {name}"
    quick = where.model_copy(
        update={
            "max_retries": 0,
            "max_output_tokens": PROBE_OUTPUT_TOKENS,
            "request_timeout": min(where.request_timeout, PROBE_TIMEOUT),
        }
    )
    client = OpenAIChatModel(settings=quick)
    try:
        listed = _list_line(label, client, where)
        if not listed.ok and listed.detail.startswith(
            ("cannot reach", "the model endpoint refused")
        ):
            return [listed]  # nothing else can work: say the one thing to fix
        return [listed, kind_line(label, where), *_call_lines(label, client, where)]
    finally:
        client.close()


def _list_line(label: str, client: OpenAIChatModel, where: OpenAISettings) -> Check:
    try:
        page = client.client.models.list(timeout=min(10.0, where.request_timeout))
        listed = frozenset(m.id for m in page.data)
    except openai.APIError as exc:
        return Check(name=label, ok=False, detail=_refusal(exc, client, where.model))
    known = where.model in listed
    return Check(
        name=label,
        ok=known,
        detail=f"endpoint lists {len(listed)} model(s); "
        f"{where.model!r} {'listed' if known else 'NOT listed'}",
    )


def kind_line(label: str, where: OpenAISettings) -> Check:
    """Which dialect fanbot speaks to the endpoint, and what that means on the wire."""
    dialect = dialect_for(where.kind, where.base_url)
    how = "set" if where.kind != "auto" else "guessed from the URL; set `kind` if wrong"
    sends = [f"the output limit as {dialect.token_limit}"]
    sends.append("asks for usage in streams" if dialect.include_usage else "no stream_options")
    if dialect.reasoning:
        sends.append(f"thinking as {dialect.reasoning}")
    return Check(
        name=f"{label} kind", ok=True, detail=f"{dialect.kind} ({how}): " + ", ".join(sends)
    )


def _refusal(exc: openai.APIError, client: OpenAIChatModel, model: str) -> str:
    """``the model endpoint refused the API key (HTTP 401)`` and the like."""
    text = model_error_text(exc, base_url=client.base_url, model=model)
    status = getattr(exc, "status_code", None)
    if status and "HTTP" not in text:
        text += f" (HTTP {status})"
    return f"{text} (GET /models)" if isinstance(exc, openai.NotFoundError) else text


def _call_lines(label: str, client: OpenAIChatModel, where: OpenAISettings) -> list[Check]:
    chunks = [0]

    def count() -> None:
        chunks[0] += 1

    request = CompletionRequest(
        model=where.model,
        messages=PROBE_MESSAGES,
        tools=(PROBE_TOOL,),
        timeout=where.request_timeout,
        on_chunk=count,
    )
    try:
        completion = client.complete(request)
    except openai.APIError as exc:
        words = model_error_text(exc, base_url=client.base_url, model=where.model, detail=True)
        return [Check(name=f"{label} call", ok=False, detail=f"the probe call failed: {words}")]
    return [check(label, completion, chunks[0]) for check in LINE_CHECKS]


def _stream_line(label: str, completion: Completion, chunks: int) -> Check:
    if chunks > 1:
        return Check(name=f"{label} stream", ok=True, detail=f"streams ({chunks} chunks)")
    return Check(
        name=f"{label} stream",
        ok=True,
        warn=True,
        detail="answered in one piece: fanbot reads it the same, but the card shows no "
        "progress while the model writes",
    )


def _tools_line(label: str, completion: Completion, chunks: int) -> Check:
    calls = [c.name for c in completion.tool_calls]
    if "probe_echo" in calls:
        return Check(name=f"{label} tools", ok=True, detail="answers tool calls")
    said = " ".join(completion.content.split())[:80]
    return Check(
        name=f"{label} tools",
        ok=True,
        warn=True,
        detail="no tool call in the probe's answer: this model may not fan out "
        f"(sessions_spawn) or use tools (it said: {said!r})",
    )


def _usage_line(label: str, completion: Completion, chunks: int) -> Check:
    usage = completion.usage
    if usage.total and not usage.estimated:
        return Check(
            name=f"{label} usage",
            ok=True,
            detail=f"usage in streams ({usage.prompt_tokens} + {usage.completion_tokens} tokens)",
        )
    return Check(
        name=f"{label} usage",
        ok=True,
        detail="no usage in streams: fanbot counts tokens itself (shown with ~)",
    )


LINE_CHECKS: tuple[Callable[[str, Completion, int], Check], ...] = (
    _stream_line,
    _tools_line,
    _usage_line,
)
