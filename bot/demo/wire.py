"""OpenAI chat-completions wire objects, built as plain data (no I/O) for the chat server.

Shapes follow the public API: ``chat.completion``, ``chat.completion.chunk`` (SSE),
``model`` and ``{"error": {...}}``. Ids are deterministic (derived from the request's
arrival number) so tests can assert on them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from bot.demo.replies import ChatRequest, Fail, Text, ToolCalls, message_text
from bot.types import Usage

_CREATED = 1_700_000_000
_FINGERPRINT = "fp_fanbot_fake"
_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


def model(name: str) -> dict[str, Any]:
    """A ``model`` object for ``GET /v1/models``."""
    return {"id": name, "object": "model", "created": _CREATED, "owned_by": "fanbot-fake"}


def error_response(fail: Fail) -> web.Response:
    """An OpenAI-shaped error, with ``retry-after`` headers when the failure sets one."""
    kind, code = _ERROR_TYPES.get(fail.status, ("server_error", None))
    headers: dict[str, str] = {}
    if fail.retry_after is not None:
        headers["retry-after"] = f"{fail.retry_after:g}"
        headers["retry-after-ms"] = str(round(fail.retry_after * 1000))
    body = {"error": {"message": fail.message, "type": kind, "param": None, "code": code}}
    return web.json_response(body, status=fail.status, headers=headers)


def validate(body: Any, models: Sequence[str] | None) -> Fail | None:
    """The 400/404 a real server would give this body, or ``None`` when it is acceptable."""
    if not isinstance(body, dict):
        return Fail(400, message="The body must be a JSON object.")
    if not isinstance(body.get("model"), str) or not body["model"]:
        return Fail(400, message="you must provide a model parameter")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return Fail(400, message="'messages' must be a non-empty array.")
    if models is not None and body["model"] not in models:
        return Fail(404, message=f"The model `{body['model']}` does not exist.")
    return None


def _tokens(chars: int) -> int:
    return max(1, math.ceil(chars / 4))


def usage(reply: Text | ToolCalls, chat: ChatRequest) -> dict[str, Any]:
    """Token usage: the reply's explicit values, else ceil(characters / 4) estimates."""
    if reply.usage is not None:
        explicit: Usage = reply.usage
        prompt, completion = explicit.prompt_tokens, explicit.completion_tokens
    else:
        prompt_chars = 0
        for message in chat.messages:
            prompt_chars += len(message_text(message.get("content")))
            for call in message.get("tool_calls") or ():
                prompt_chars += len(str(call.get("function", {}).get("arguments", "")))
        prompt = _tokens(prompt_chars)
        completion = _tokens(len(_content(reply)) + sum(len(a) for _, a in _calls(reply, 0)))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def _content(reply: Text | ToolCalls) -> str:
    return reply.content if isinstance(reply, Text) else reply.content or ""


def _calls(reply: Text | ToolCalls, index: int) -> list[tuple[dict[str, Any], str]]:
    """(tool call header, arguments JSON) for each call of a ToolCalls reply."""
    if isinstance(reply, Text):
        return []
    return [
        (
            {"id": call.id or f"call_{index}_{i}", "type": "function", "name": call.name},
            call.arguments_json(),
        )
        for i, call in enumerate(reply.calls)
    ]


def _finish_reason(reply: Text | ToolCalls) -> str:
    return "stop" if isinstance(reply, Text) else "tool_calls"


def completion(reply: Text | ToolCalls, chat: ChatRequest, index: int) -> dict[str, Any]:
    """A non-streamed ``chat.completion``."""
    content = _content(reply)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content if isinstance(reply, Text) or content else None,
        "refusal": None,
        "annotations": [],
    }
    calls = _calls(reply, index)
    if calls:
        message["tool_calls"] = [
            {
                "id": head["id"],
                "type": "function",
                "function": {"name": head["name"], "arguments": arguments},
            }
            for head, arguments in calls
        ]
    return {
        "id": f"chatcmpl-fake{index}",
        "object": "chat.completion",
        "created": _CREATED,
        "model": chat.model,
        "system_fingerprint": _FINGERPRINT,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _finish_reason(reply),
            }
        ],
        "usage": usage(reply, chat),
    }


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def stream_chunks(
    reply: Text | ToolCalls, chat: ChatRequest, index: int, size: int
) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a streamed answer (without ``[DONE]``).

    Like OpenAI: a first delta with the role; content in pieces; each tool call opens with
    its ``index``, ``id``, ``type`` and name (empty arguments), then argument pieces
    carrying only ``index``; a last delta with ``finish_reason``; and, when
    ``stream_options.include_usage`` is set, ``usage: null`` on every chunk plus a final
    chunk with empty ``choices`` and the usage.
    """
    options = chat.body.get("stream_options") or {}
    include_usage = bool(options.get("include_usage")) if isinstance(options, dict) else False
    content = _content(reply)
    deltas: list[dict[str, Any]] = [
        {
            "role": "assistant",
            "content": "" if isinstance(reply, Text) or content else None,
            "refusal": None,
        }
    ]
    deltas += [{"content": piece} for piece in _pieces(content, size)]
    for i, (head, arguments) in enumerate(_calls(reply, index)):
        opening = {
            "index": i,
            "id": head["id"],
            "type": "function",
            "function": {"name": head["name"], "arguments": ""},
        }
        deltas.append({"tool_calls": [opening]})
        deltas += [
            {"tool_calls": [{"index": i, "function": {"arguments": piece}}]}
            for piece in _pieces(arguments, size)
        ]
    finish = [None] * len(deltas) + [_finish_reason(reply)]
    deltas.append({})
    chunks = [
        _chunk(index, chat, [{"index": 0, "delta": d, "logprobs": None, "finish_reason": f}])
        for d, f in zip(deltas, finish, strict=True)
    ]
    if include_usage:
        for chunk in chunks:
            chunk["usage"] = None
        chunks.append(_chunk(index, chat, []) | {"usage": usage(reply, chat)})
    return chunks


def _chunk(index: int, chat: ChatRequest, choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-fake{index}",
        "object": "chat.completion.chunk",
        "created": _CREATED,
        "model": chat.model,
        "system_fingerprint": _FINGERPRINT,
        "choices": choices,
    }


def sse(chunk: dict[str, Any]) -> bytes:
    """One SSE event line for a chunk."""
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"
