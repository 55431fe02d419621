"""What each kind of server accepts on the wire (pure), and what a client learns from its 400s.

A :class:`Dialect` says how a chat-completions request is shaped for one kind of server:
whether to ask for usage in the stream, which token-limit parameter it reads, whether it
takes ``reasoning_effort`` (or OpenRouter's ``reasoning`` object), whether reasoning
models refuse a temperature, whether ``parallel_tool_calls`` is sent, and which header
carries the key. :func:`dialect_for` picks one from the endpoint's ``kind`` (``auto``: from
its base URL). :class:`Learned` remembers, per client, parameters a server refused with a
400 naming them, so the next request leaves them out (docs/models.md, "Server kinds and
their dialects").
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import urlsplit

from bot.config import ServerKind

TokenLimit = Literal["max_tokens", "max_completion_tokens"]
Reasoning = Literal["", "reasoning_effort", "reasoning"]

REASONING_MODELS = ("o1", "o3", "o4", "gpt-5")
"""Model name prefixes (after any ``vendor/``) of OpenAI's reasoning models, which refuse any
temperature but the default."""

OPTIONAL = (
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "reasoning_effort",
    "reasoning",
    "parallel_tool_calls",
    "temperature",
)
"""Request parameters a server may refuse; only these are ever dropped on a 400."""


@dataclass(frozen=True, kw_only=True)
class Dialect:
    """How one kind of server is spoken to.

    Attributes:
        kind: The server kind (never ``auto``).
        include_usage: Send ``stream_options: {include_usage: true}`` (the usage chunk).
        token_limit: The parameter carrying the output-token limit.
        reasoning: How a reasoning effort is sent: ``reasoning_effort``, OpenRouter's
            ``reasoning: {effort}``, or not at all (``""``: the server refuses or ignores it).
        parallel_tool_calls: Send ``parallel_tool_calls: true`` with tools.
        temperature_refused_by: Model prefixes that refuse a temperature (not sent to them).
        key_header: The header carrying the key (``""``: ``Authorization: Bearer``).
    """

    kind: str
    include_usage: bool = True
    token_limit: TokenLimit = "max_completion_tokens"
    reasoning: Reasoning = "reasoning_effort"
    parallel_tool_calls: bool = False
    temperature_refused_by: tuple[str, ...] = ()
    key_header: str = ""

    def refuses_temperature(self, model: str) -> bool:
        bare = model.rsplit("/", 1)[-1].lower()
        return any(bare.startswith(p) for p in self.temperature_refused_by)

    def shape(
        self,
        *,
        model: str,
        max_output_tokens: int | None,
        thinking: str,
        has_tools: bool,
        temperature: float | None = None,
        learned: Learned | None = None,
    ) -> dict[str, Any]:
        """The optional parameters of one request (beside model, messages, tools, stream),
        as this dialect sends them, less what ``learned`` says the server refused."""
        token_limit = learned.token_limit(self.token_limit) if learned else self.token_limit
        out: dict[str, Any] = {}
        if self.include_usage:
            out["stream_options"] = {"include_usage": True}
        if max_output_tokens:
            out[token_limit] = max_output_tokens
        if thinking and thinking != "off":
            if self.reasoning == "reasoning_effort":
                out["reasoning_effort"] = thinking
            elif self.reasoning == "reasoning":
                out["reasoning"] = {"effort": thinking}
        if has_tools and self.parallel_tool_calls:
            out["parallel_tool_calls"] = True
        if temperature is not None and not self.refuses_temperature(model):
            out["temperature"] = temperature
        if learned is not None:
            for name in learned.dropped():
                out.pop(name, None)
        return out


_OPENAI = Dialect(kind="openai", parallel_tool_calls=True, temperature_refused_by=REASONING_MODELS)

DIALECTS: dict[str, Dialect] = {
    "openai": _OPENAI,
    # Azure OpenAI (v1 API): OpenAI's parameters, the key in an ``api-key`` header.
    "azure": replace(_OPENAI, kind="azure", key_header="api-key"),
    # OpenRouter normalizes ``max_tokens``; reasoning is its ``reasoning`` object.
    "openrouter": replace(
        _OPENAI, kind="openrouter", token_limit="max_tokens", reasoning="reasoning"
    ),
    # LiteLLM translates OpenAI's parameters for the provider behind it.
    "litellm": replace(_OPENAI, kind="litellm", token_limit="max_tokens"),
    # vLLM: usage when asked, ``max_tokens``; ``parallel_tool_calls`` is taken but ignored.
    "vllm": Dialect(kind="vllm", token_limit="max_tokens"),
    # Ollama's /v1: ``max_tokens``, usage when asked, tool calls whole in one chunk.
    "ollama": Dialect(kind="ollama", token_limit="max_tokens"),
    # llama.cpp's server: ``max_tokens``; its reasoning is set at launch, not per request.
    "llamacpp": Dialect(kind="llamacpp", token_limit="max_tokens", reasoning=""),
    "lmstudio": Dialect(kind="lmstudio", token_limit="max_tokens", reasoning=""),
    # Gemini's OpenAI compatibility: ``reasoning_effort`` maps to its thinking budget.
    "gemini": Dialect(kind="gemini", token_limit="max_tokens"),
    # Anthropic's OpenAI compatibility ignores ``reasoning_effort``; parallel calls work.
    "anthropic": Dialect(
        kind="anthropic", token_limit="max_tokens", reasoning="", parallel_tool_calls=True
    ),
    # DeepSeek: ``max_tokens``; deepseek-reasoner reasons always and takes no effort.
    "deepseek": Dialect(kind="deepseek", token_limit="max_tokens", reasoning=""),
    # Mistral refuses unknown fields (422): no ``stream_options`` (usage comes anyway).
    "mistral": Dialect(
        kind="mistral",
        include_usage=False,
        token_limit="max_tokens",
        reasoning="",
        parallel_tool_calls=True,
    ),
    "groq": replace(_OPENAI, kind="groq", temperature_refused_by=()),
    # Unknown servers get OpenAI's shape; what they refuse is learned (:class:`Learned`).
    "generic": Dialect(kind="generic"),
}

_HOSTS: tuple[tuple[str, str], ...] = (
    ("api.openai.com", "openai"),
    (".openai.azure.com", "azure"),
    (".cognitiveservices.azure.com", "azure"),
    ("openrouter.ai", "openrouter"),
    ("generativelanguage.googleapis.com", "gemini"),
    ("api.anthropic.com", "anthropic"),
    ("api.deepseek.com", "deepseek"),
    ("api.mistral.ai", "mistral"),
    ("api.groq.com", "groq"),
)
_PORTS = {11434: "ollama", 1234: "lmstudio"}


def guess_kind(base_url: str | None) -> str:
    """The server kind a base URL suggests (``generic`` when it says nothing)."""
    try:
        parts = urlsplit(base_url or "")
        host = (parts.hostname or "").lower()
        port = parts.port
    except ValueError:
        return "generic"
    for suffix, kind in _HOSTS:
        if host == suffix.lstrip(".") or host.endswith(
            suffix if suffix[0] == "." else "." + suffix
        ):
            return kind
    return _PORTS.get(port or 0, "generic")


def dialect_for(kind: ServerKind | str, base_url: str | None) -> Dialect:
    """The dialect of an endpoint of ``kind`` at ``base_url`` (``auto``: guessed from it)."""
    if kind == "auto":
        kind = guess_kind(base_url)
    return DIALECTS.get(kind, DIALECTS["generic"])


_REFUSAL_WORDS = (
    "unsupported parameter",
    "unsupported value",
    "not supported",
    "unrecognized request argument",
    "unrecognized",
    "unknown name",
    "unknown parameter",
    "unknown field",
    "extra inputs are not permitted",
    "extra_forbidden",
    "is unsupported",
    "not allowed",
    "not permitted",
    "invalid parameter",
)


def refused_parameter(status: int, body: object, message: str, sent: set[str]) -> str | None:
    """The request parameter a 400/422 answer says the server refuses, if it names one of
    ``sent`` (only :data:`OPTIONAL` ones); None when it is about something else."""
    if status not in (400, 422):
        return None
    candidates = [p for p in OPTIONAL if p in sent]
    if not candidates:
        return None
    inner = body.get("error", body) if isinstance(body, dict) else body
    param = inner.get("param") if isinstance(inner, dict) else None
    if isinstance(param, str) and param in candidates:
        return param
    text = f"{_flat(body)} {message}".lower()
    if not any(w in text for w in _REFUSAL_WORDS):
        return None
    found: list[tuple[int, str]] = []
    for name in candidates:
        match = re.search(rf"(?<![a-z_]){re.escape(name)}(?![a-z_])", text)
        if match:
            found.append((match.start(), name))
    return min(found)[1] if found else None


def _flat(body: object) -> str:
    """Every string in a JSON body, space-joined (bounded)."""
    out: list[str] = []

    def walk(value: object, depth: int) -> None:
        if depth > 6 or len(out) > 200:
            return
        if isinstance(value, str):
            out.append(value[:2000])
        elif isinstance(value, dict):
            for v in value.values():
                walk(v, depth + 1)
        elif isinstance(value, list):
            for v in value:
                walk(v, depth + 1)

    walk(body, 0)
    return " ".join(out)


@dataclass(kw_only=True)
class Learned:
    """Parameters one client's server refused (thread-safe; lives with the client).

    ``learn(name)``: ``max_tokens`` refused switches to ``max_completion_tokens`` and back;
    when both were refused, neither is sent; anything else is no longer sent.
    """

    _lock: threading.Lock = field(default_factory=threading.Lock)
    _dropped: set[str] = field(default_factory=set)
    _refused_limits: set[str] = field(default_factory=set)

    def learn(self, name: str) -> bool:
        """Remember that the server refuses ``name``; False if it was known already (so a
        retry would change nothing)."""
        with self._lock:
            if name in ("max_tokens", "max_completion_tokens"):
                if name in self._refused_limits:
                    return False
                self._refused_limits.add(name)
                if len(self._refused_limits) == 2:
                    self._dropped.update(self._refused_limits)
                return True
            if name in self._dropped:
                return False
            self._dropped.add(name)
            return True

    def dropped(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._dropped)

    def token_limit(self, default: TokenLimit) -> TokenLimit:
        with self._lock:
            if default in self._refused_limits:
                other: TokenLimit = (
                    "max_completion_tokens" if default == "max_tokens" else "max_tokens"
                )
                return other
            return default
