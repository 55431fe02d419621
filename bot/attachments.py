"""Files in and out of the thread: the pure rules the adapters and the gateway share.

In: an adapter lists the files of a message as :class:`FileRef` (pure, in its
``convert``) and hands them to :func:`download_selected` with its platform's download of
one file: :func:`select` decides which to download (the rest become skipped
:class:`~bot.types.Attachment` with a reason), and the adapter checks each download with
:func:`downloaded`. The gateway saves them into the session workspace
(:mod:`bot.gateway.inbox`) and names them in the turn's text (:func:`turn_line`).

Out: :func:`out_files` picks, from the ``out/`` files a run changed, those that fit the
announce's budget; egress posts them after the text.
"""

from __future__ import annotations

import mimetypes
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from bot.config import AttachmentSettings
from bot.text import units
from bot.types import Attachment

OCTET_STREAM = "application/octet-stream"
INBOX = "inbox"
OUT_PREFIX = "/out/"
_UNSAFE = re.compile(r"[\x00-\x1f\x7f/\\]+")


@dataclass(frozen=True, kw_only=True)
class FileRef:
    """A file a message points at, before it is downloaded.

    Attributes:
        name: The name the platform gave.
        content_type: Its MIME type if the platform said.
        size: Its size if the platform said (``None``: known only after download).
        source: What the adapter downloads it with (a URL, a file id, an ``mxc://`` URI).
    """

    name: str
    source: str
    content_type: str = ""
    size: int | None = None


def select(
    refs: Sequence[FileRef], *, max_files: int, max_bytes: int
) -> tuple[list[FileRef], list[Attachment]]:
    """Which files to download, and the others as skipped attachments (with the reason)."""
    fetch: list[FileRef] = []
    skipped: list[Attachment] = []
    for ref in refs:
        if ref.size is not None and ref.size > max_bytes:
            reason = f"larger than the {units.size(max_bytes)} limit"
            skipped.append(skip(ref, reason))
        elif len(fetch) >= max_files:
            skipped.append(skip(ref, f"more than {max_files} files in one message"))
        else:
            fetch.append(ref)
    return fetch, skipped


async def download_selected(
    refs: Sequence[FileRef],
    *,
    limits: AttachmentSettings,
    download: Callable[[FileRef], Awaitable[Attachment]],
) -> tuple[Attachment, ...]:
    """Download, one after the other, what :func:`select` allows; the others come after
    them as skipped. ``download`` turns its failures into skipped attachments itself."""
    fetch, skipped = select(refs, max_files=limits.max_files, max_bytes=limits.max_bytes)
    got = [await download(ref) for ref in fetch]
    return (*got, *skipped)


def skip(ref: FileRef, reason: str) -> Attachment:
    """``ref`` as an attachment that was not downloaded, and why."""
    return Attachment(
        name=ref.name, content_type=content_type(ref), size=ref.size or 0, skipped=reason
    )


def downloaded(ref: FileRef, data: bytes, *, max_bytes: int) -> Attachment:
    """The attachment for ``data`` (skipped when it is past ``max_bytes`` after all)."""
    if len(data) > max_bytes:
        return skip(ref, f"larger than the {units.size(max_bytes)} limit")
    return Attachment(
        name=ref.name, content_type=content_type(ref), size=len(data), data=bytes(data)
    )


def content_type(ref: FileRef) -> str:
    """The platform's MIME type, else a guess from the name, else octet-stream."""
    if ref.content_type:
        return ref.content_type
    return mimetypes.guess_type(ref.name)[0] or OCTET_STREAM


def safe_name(name: str, *, fallback: str = "file") -> str:
    """A single workspace path segment for ``name`` (no slashes, controls, dot names)."""
    cleaned = _UNSAFE.sub("_", name).strip().lstrip(".")
    cleaned = cleaned.encode()[:200].decode(errors="ignore")
    return cleaned or fallback


def unique_name(name: str, taken: Iterable[str]) -> str:
    """``name``, or ``stem-2.ext``, ``stem-3.ext``... when ``taken`` holds it already."""
    used = set(taken)
    if name not in used:
        return name
    stem, dot, ext = name.rpartition(".")
    if not stem:
        stem, dot, ext = name, "", ""
    n = 2
    while f"{stem}-{n}{dot}{ext}" in used:
        n += 1
    return f"{stem}-{n}{dot}{ext}"


def saved_line(path: str, attachment: Attachment) -> str:
    """The note naming a file that was saved, e.g. ``inbox/a.pdf (application/pdf, 120 KB)``."""
    return f"{path.lstrip('/')} ({attachment.content_type}, {units.size(attachment.size)})"


def turn_line(saved: Sequence[str], notes: Sequence[str]) -> str:
    """The lines appended to the turn's text: what was attached and what was not."""
    lines = []
    if saved:
        lines.append(f"[attached: {'; '.join(saved)}]")
    lines += [f"[not attached: {note}]" for note in notes]
    return "\n".join(lines)


def out_files(
    changed: Sequence[str],
    sizes: Mapping[str, int],
    *,
    max_files: int,
    max_bytes: int,
) -> tuple[list[str], list[str]]:
    """The changed ``out/`` paths to attach (in order) and notes for those left out."""
    chosen: list[str] = []
    notes: list[str] = []
    total = 0
    for path in changed:
        size = sizes.get(path, 0)
        shown = path.lstrip("/")
        if len(chosen) >= max_files:
            notes.append(f"{shown} not attached: more than {max_files} files")
        elif total + size > max_bytes:
            notes.append(f"{shown} not attached: past the {units.size(max_bytes)} total for files")
        else:
            chosen.append(path)
            total += size
    return chosen, notes


def changed_paths(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """Paths in ``after`` that are new or hold other content than ``before`` (sorted)."""
    return sorted(p for p, h in after.items() if before.get(p) != h)
