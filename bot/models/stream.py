"""Reading a streamed chat completion, whatever server wrote it (pure).

:func:`read_stream` folds chunks into one :class:`StreamedReply` (which
:func:`bot.agent.llm.fold_stream` hands on as a ``Completion``) and tolerates what servers
do differently (docs/models.md, "Server kinds and their dialects"): tool-call arguments in pieces or whole, as a JSON string or an object; ids missing or
repeated; ``index`` missing; tool calls written into the text (Hermes/Qwen ``<tool_call>``,
Mistral ``[TOOL_CALLS]``, a bare JSON call naming an offered tool); reasoning as
``reasoning_content``, ``reasoning`` or ``<think>`` text; ``finish_reason`` spelled each
server's way; usage with cached and reasoning tokens, or counted here when the stream has
none (marked estimated).

Memory is bounded by ``limit``: text, reasoning and each call's arguments past it are still
read (so the usage at the end counts) but not kept; a cut text ends with a cut note.
Chunks are read defensively: the SDK builds them without validation, so any field may be
missing, None, a dict, or an extra attribute.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.models.tokens import CHARS_PER_TOKEN, count_messages, count_text
from bot.text.clip import cut_note
from bot.types import Usage

MAX_NAME_CHARS = 256
"""A tool name; real ones are short, a runaway one is cut."""

FINISH_REASONS = {
    "stop": "stop",
    "end_turn": "stop",
    "eos": "stop",
    "eos_token": "stop",
    "stop_sequence": "stop",
    "complete": "stop",
    "finished": "stop",
    "length": "length",
    "max_tokens": "length",
    "model_length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "tool_use": "tool_calls",
    "tool_call": "tool_calls",
    "content_filter": "content_filter",
    "safety": "content_filter",
    "recitation": "content_filter",
    "blocklist": "content_filter",
    "prohibited_content": "content_filter",
    "spii": "content_filter",
    "refusal": "content_filter",
}
"""``finish_reason`` as servers say it (lower-cased) → OpenAI's four (and ``error``)."""


def normalize_finish(reason: str) -> str:
    """A server's ``finish_reason`` as ``stop``, ``length``, ``tool_calls`` or
    ``content_filter`` (an unknown one kept as it is, lower-cased)."""
    said = reason.strip().lower()
    if said.startswith("finish_reason_"):  # Gemini's enum names
        said = said.removeprefix("finish_reason_")
    return FINISH_REASONS.get(said, said)


@dataclass(frozen=True, kw_only=True)
class StreamedCall:
    """A tool call as read (``arguments``: JSON text; ``cut_chars`` > 0: cut, not JSON)."""

    id: str
    name: str
    arguments: str
    cut_chars: int = 0


@dataclass(frozen=True, kw_only=True)
class StreamedReply:
    """One folded reply: the fields of ``bot.models.completion.Completion`` it fills."""

    content: str
    tool_calls: tuple[StreamedCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = ""
    cut_chars: int = 0
    reasoning: str = ""


@dataclass(kw_only=True)
class Capped:
    """Pieces of a streamed string, kept up to ``limit`` characters; the rest only counted."""

    limit: int
    parts: list[str] = field(default_factory=list)
    kept: int = 0
    seen: int = 0

    def add(self, piece: str) -> None:
        self.seen += len(piece)
        room = self.limit - self.kept
        if room > 0:
            piece = piece[:room]
            self.parts.append(piece)
            self.kept += len(piece)

    @property
    def cut(self) -> int:
        return self.seen - self.kept

    def text(self) -> str:
        return "".join(self.parts)


@dataclass(kw_only=True)
class _Slot:
    arguments: Capped
    id: str = ""
    name: str = ""


def _get(obj: Any, name: str) -> Any:
    """``obj.name`` or ``obj[name]`` or the pydantic extra ``name``; None if absent."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    value = getattr(obj, name, None)
    if value is None:
        extra = getattr(obj, "model_extra", None)
        if isinstance(extra, dict):
            value = extra.get(name)
    return value


def _str(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _int(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


class _Calls:
    """Tool-call pieces sorted into calls, by ``index`` where given, else by id and name."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.slots: list[_Slot] = []
        self.by_index: dict[Any, _Slot] = {}

    def add(self, piece: Any) -> None:
        function = _get(piece, "function")
        name = _str(_get(function, "name") or _get(piece, "name"))
        arguments = _get(function, "arguments")
        if arguments is None:
            arguments = _get(piece, "arguments")
        call_id = _str(_get(piece, "id"))
        slot = self._slot(_get(piece, "index"), call_id, name)
        slot.id = slot.id or call_id
        if name:
            slot.name = (slot.name + name)[:MAX_NAME_CHARS] if slot.name != name else name
        if arguments is not None:
            slot.arguments.add(_str(arguments))

    def _new(self, index: Any) -> _Slot:
        slot = _Slot(arguments=Capped(limit=self.limit))
        self.slots.append(slot)
        if index is not None:
            self.by_index[index] = slot
        return slot

    def _slot(self, index: Any, call_id: str, name: str) -> _Slot:
        if index is not None and not isinstance(index, (int, str)):
            index = None
        if index is not None:
            slot = self.by_index.get(index)
            if slot is None or _another(slot, call_id, name):
                return self._new(index)
            return slot
        last = self.slots[-1] if self.slots else None
        if call_id:
            match = next((s for s in reversed(self.slots) if s.id == call_id), None)
            if match is not None and not _another(match, "", name):
                return match
            if match is None and last is not None and not last.id and not name:
                return last  # the id came after the name
            return self._new(None)
        if last is None or _another(last, "", name):
            return self._new(None)
        return last


def _another(slot: _Slot, call_id: str, name: str) -> bool:
    """Does a piece with ``call_id``/``name`` start a new call rather than continue ``slot``?
    A different id does; so does a name after ``slot``'s arguments are whole JSON (a
    server repeating the name in every piece is still mid-arguments)."""
    if call_id and slot.id and call_id != slot.id:
        return True
    if not (name and slot.name and slot.arguments.seen) or slot.arguments.cut:
        return False
    kept = slot.arguments.parts
    if not kept or not kept[-1].rstrip().endswith(("}", "]")):
        return False
    return _json(slot.arguments.text()) is not None


def read_stream(
    stream: Any,
    on_text: Callable[[int], None] | None = None,
    *,
    limit: int,
    on_chunk: Callable[[], None] | None = None,
    messages: Sequence[dict[str, Any]] = (),
    tools: Sequence[dict[str, Any]] = (),
    model: str = "",
) -> StreamedReply:
    """Fold ``stream``'s chunks into one :class:`StreamedReply` (see the module's doc).

    Args:
        stream: The SDK's stream (a context manager yielding chunks) or any such iterable.
        on_text: Gets the running count of text characters.
        limit: Characters kept of the text, of the reasoning and of each call's arguments.
        on_chunk: Called for every chunk (a sign of life).
        messages: The request's messages and ``tools``: what usage is counted from when
            the stream has none, and which tool names a bare JSON reply may call.
        model: The model asked (for counting).
    """
    text = Capped(limit=limit)
    reasoning = Capped(limit=limit)
    calls = _Calls(limit)
    usage: Usage | None = None
    finish = ""
    response_id = ""
    with stream:
        for chunk in stream:
            if on_chunk:
                on_chunk()
            response_id = response_id or _str(_get(chunk, "id"))
            usage = _usage(chunk) or usage
            for choice in _get(chunk, "choices") or ():
                finish = _str(_get(choice, "finish_reason")) or finish
                delta = _get(choice, "delta") or _get(choice, "message")
                if delta is None:
                    continue
                thought = _get(delta, "reasoning_content") or _get(delta, "reasoning")
                if isinstance(thought, str) and thought:
                    reasoning.add(thought)
                content = _get(delta, "content")
                if isinstance(content, list):  # content parts (Mistral's Magistral)
                    content, thought = _parts(content)
                    if thought:
                        reasoning.add(thought)
                if content:
                    text.add(_str(content))
                    if on_text:
                        on_text(text.seen)
                for piece in _get(delta, "tool_calls") or ():
                    calls.add(piece)
                legacy = _get(delta, "function_call")
                if legacy is not None:
                    calls.add({"index": "function_call", "function": legacy})
    return _completion(
        text=text,
        reasoning=reasoning,
        calls=calls,
        usage=usage,
        finish=finish,
        seed=response_id,
        messages=messages,
        tools=tools,
        model=model,
    )


def _parts(parts: list[Any]) -> tuple[str, str]:
    """The text and the reasoning of a list of content parts: ``{"type": "text", "text"}``
    and ``{"type": "thinking", "thinking": <text or a list of text parts>}``."""
    text: list[str] = []
    thought: list[str] = []
    for part in parts:
        if isinstance(part, str):
            text.append(part)
        elif _get(part, "type") == "thinking":
            inner = _get(part, "thinking")
            if isinstance(inner, list):
                thought.extend(_str(_get(p, "text")) for p in inner)
            else:
                thought.append(_str(inner))
        else:
            text.append(_str(_get(part, "text")))
    return "".join(text), "".join(thought)


def _usage(chunk: Any) -> Usage | None:
    raw = _get(chunk, "usage")
    if raw is None:
        raw = _get(_get(chunk, "x_groq"), "usage")  # Groq puts it there
    if raw is None:
        return None
    prompt = _int(_get(raw, "prompt_tokens"))
    completion = _int(_get(raw, "completion_tokens"))
    cached = _int(_get(_get(raw, "prompt_tokens_details"), "cached_tokens")) or _int(
        _get(raw, "prompt_cache_hit_tokens")  # DeepSeek
    )
    thought = _int(_get(_get(raw, "completion_tokens_details"), "reasoning_tokens"))
    total = _int(_get(raw, "total_tokens"))
    if total > prompt + completion and total - prompt - completion == thought:
        completion += thought  # reasoning counted apart from the completion (Gemini)
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=min(cached, prompt),
        reasoning_tokens=min(thought, completion),
    )


_THINK = re.compile(r"<think>(.*?)(?:</think>|\Z)", re.DOTALL)
_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)
_MISTRAL = "[TOOL_CALLS]"
_MISTRAL_ARGS = re.compile(r"\s*([A-Za-z0-9_.\-]+)(?:\[CALL_ID\]([A-Za-z0-9_\-]+))?\[ARGS\]")
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def split_think(content: str) -> tuple[str, str]:
    """``content`` without its ``<think>…</think>`` parts, and those parts, when the reply
    opens with one (or opens with reasoning and only closes the tag, as some chat templates
    do); a tag in the middle of an answer that did not open with one is just text."""
    if "</think>" in content and "<think>" not in content:
        thought, _, rest = content.partition("</think>")
        return rest.lstrip(), thought.strip()
    if not content.lstrip().startswith("<think>"):
        return content, ""
    thoughts = [m.group(1).strip() for m in _THINK.finditer(content)]
    return _THINK.sub("", content).strip(), "\n\n".join(t for t in thoughts if t)


def _call(data: Any, names: frozenset[str] | None) -> tuple[str, str] | None:
    """(name, arguments JSON) of a ``{"name", "arguments"|"parameters"}`` object, or None."""
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("function"), dict):
        data = data["function"]
    name = data.get("name")
    if not isinstance(name, str) or not name or (names is not None and name not in names):
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    return name[:MAX_NAME_CHARS], arguments if isinstance(arguments, str) else _str(arguments)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def text_tool_calls(content: str, tool_names: frozenset[str]) -> tuple[str, list[tuple[str, str]]]:
    """Tool calls a local model wrote into its text, and the text without them.

    Hermes/Qwen ``<tool_call>{…}</tool_call>`` blocks and Mistral's ``[TOOL_CALLS][…]`` (or
    ``[TOOL_CALLS]name[ARGS]{…}``) are read whatever the name; a reply that is only a JSON
    call (or a list of them, fenced or not) only when each names one of ``tool_names``.
    Markup that is not valid JSON stays text.
    """
    found: list[tuple[str, str]] = []
    if "<tool_call>" in content:
        kept = content
        for match in _HERMES.finditer(content):
            call = _call(_json(match.group(1)), None)
            if call is not None:
                found.append(call)
                kept = kept.replace(match.group(0), "", 1)
        content = kept.strip() if found else content
    if _MISTRAL in content:
        head, _, tail = content.partition(_MISTRAL)
        calls = _mistral(tail)
        if calls:
            found.extend(calls)
            content = head.strip()
    if not found and tool_names:
        bare = content.strip()
        fenced = _FENCE.match(bare)
        data = _json(fenced.group(1) if fenced else bare)
        items = data if isinstance(data, list) and data else [data]
        parsed = [_call(item, tool_names) for item in items]
        if all(p is not None for p in parsed):
            return "", [p for p in parsed if p is not None]
    return content, found


def _mistral(tail: str) -> list[tuple[str, str]]:
    decoder = json.JSONDecoder()
    stripped = tail.lstrip()
    if stripped.startswith(("[", "{")):
        try:
            data, _ = decoder.raw_decode(stripped)
        except ValueError:
            return []
        items = data if isinstance(data, list) else [data]
        parsed = [_call(item, None) for item in items]
        return [p for p in parsed if p is not None]
    out: list[tuple[str, str]] = []
    rest = tail
    while True:
        match = _MISTRAL_ARGS.match(rest)
        if match is None:
            return out
        try:
            arguments, end = decoder.raw_decode(rest, match.end())
        except ValueError:
            return out
        out.append((match.group(1), _str(arguments)))
        rest = rest[end:]
        if rest.lstrip().startswith(_MISTRAL):
            rest = rest.lstrip()[len(_MISTRAL) :]


def tool_names(tools: Sequence[dict[str, Any]]) -> frozenset[str]:
    """The names of offered chat-completions tools."""
    names: set[str] = set()
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.add(function["name"])
    return frozenset(names)


def _ids(calls: Iterable[tuple[str, str, str]], seed: str) -> list[str]:
    """Unique ids: the server's where it gave one, else stable ones from ``seed`` (the
    response id), the position, name and arguments; repeats get a suffix."""
    out: list[str] = []
    used: set[str] = set()
    for position, (call_id, name, arguments) in enumerate(calls):
        if not call_id:
            digest = hashlib.sha256(f"{seed}\0{position}\0{name}\0{arguments}".encode())
            call_id = f"call_{digest.hexdigest()[:20]}"
        unique, n = call_id, 1
        while unique in used:
            n += 1
            unique = f"{call_id}_{n}"
        used.add(unique)
        out.append(unique)
    return out


def _completion(
    *,
    text: Capped,
    reasoning: Capped,
    calls: _Calls,
    usage: Usage | None,
    finish: str,
    seed: str,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]],
    model: str,
) -> StreamedReply:
    content, thought = split_think(text.text())
    thinking = "\n\n".join(t for t in (reasoning.text(), thought) if t)
    raw = [(s.id, s.name, s.arguments.text(), s.arguments.cut) for s in calls.slots]
    raw = [r for r in raw if r[1] or r[2]]  # a piece with neither is noise
    if tools:
        content, written = text_tool_calls(content, tool_names(tools))
        raw.extend(("", name, arguments, 0) for name, arguments in written)
    ids = _ids(((r[0], r[1], r[2]) for r in raw), seed)
    tool_calls = tuple(
        StreamedCall(id=i, name=r[1], arguments=r[2] or "{}", cut_chars=r[3])
        for i, r in zip(ids, raw, strict=True)
    )
    if text.cut:
        content += "\n" + cut_note(text.cut)
    finish = normalize_finish(finish)
    if tool_calls and finish in ("", "stop"):
        finish = "tool_calls"
    if usage is None:
        said = text.text() + reasoning.text() + "".join(r[2] for r in raw)
        usage = Usage(
            prompt_tokens=count_messages(messages, tools, model=model) if messages else 0,
            completion_tokens=count_text(said, model=model)
            + -(-(text.cut + reasoning.cut + sum(r[3] for r in raw)) // CHARS_PER_TOKEN),
            estimated=True,
        )
    return StreamedReply(
        content=content,
        tool_calls=tool_calls,
        usage=usage,
        finish_reason=finish,
        cut_chars=text.cut + sum(r[3] for r in raw),
        reasoning=thinking,
    )
