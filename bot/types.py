"""Core values that cross between adapters, the gateway, stores and workers.

Everything here is a frozen, keyword-only dataclass or a ``str`` enum (whose value is its
JSON and Redis form). The values that leave a process have one explicit codec each, and
``decode(encode(x)) == x`` holds for every one of them:

- :class:`ThreadRef` and :class:`Outbound`: ``to_json`` / ``from_json`` (JSON-able dicts for
  turn jobs, the outbox and progress streams). An empty ``thread`` is read back as ``None``
  (both mean the chat's main timeline), so build a ``ThreadRef`` with ``None`` there.
- :class:`RunRecord`: ``encode_record`` / ``decode_record`` in :mod:`bot.store.runs`, the
  flat string mapping of its Redis hash.

:class:`Inbound`, :class:`Sender` and :class:`Usage` stay inside one process and have no
codec. Adapters build :class:`Inbound` from native events and turn :class:`Outbound` into
native calls; nothing else in ``bot`` knows a platform.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any

FAN_IN_MARK = "[fan-in]"
"""How a continuation turn's prompt begins (:mod:`bot.runs.join`), so models, scripts and
logs can tell it from a person's message."""


class Platform(enum.StrEnum):
    """Channels fanbot can serve."""

    CONSOLE = "console"
    SLACK = "slack"
    TELEGRAM = "telegram"
    MATRIX = "matrix"


@dataclass(frozen=True, kw_only=True)
class ThreadRef:
    """Where a conversation lives.

    Attributes:
        platform: ``slack``, ``telegram``, ``matrix`` or ``console``.
        account: Slack team id, Telegram bot id, Matrix bot user id, ``local`` for console.
        chat: Slack channel, Telegram chat id, Matrix room id.
        thread: Slack root ``thread_ts``, Telegram ``message_thread_id``, Matrix thread
            root event id; ``None`` for the chat's main timeline / General topic.
    """

    platform: str
    account: str
    chat: str
    thread: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict; :meth:`from_json` reads it back to an equal value."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ThreadRef:
        """Read :meth:`to_json`'s dict; ``thread`` missing or ``""`` becomes ``None``."""
        thread = data.get("thread")
        return cls(
            platform=str(data["platform"]),
            account=str(data["account"]),
            chat=str(data["chat"]),
            thread=None if thread in (None, "") else str(thread),
        )


@dataclass(frozen=True, kw_only=True)
class Sender:
    """Who wrote an inbound message. ``user_id`` is the platform's own id."""

    user_id: str
    display_name: str = ""
    is_bot: bool = False
    is_self: bool = False


@dataclass(frozen=True, kw_only=True)
class Attachment:
    """A file a person posted with a message, as the adapter downloaded it (bounded).

    Attributes:
        name: The file name the platform gave (not yet made safe for the workspace).
        content_type: Its MIME type (``application/octet-stream`` when unknown).
        size: Its size in bytes (as the platform announced it when not downloaded).
        data: The bytes; empty when ``skipped``.
        skipped: Why it was not downloaded (too big, too many, download failed); empty
            when ``data`` holds the file.
    """

    name: str
    content_type: str = "application/octet-stream"
    size: int = 0
    data: bytes = field(default=b"", repr=False)
    skipped: str = ""


@dataclass(frozen=True, kw_only=True)
class Inbound:
    """One normalized message from any channel.

    Attributes:
        thread: Where the message was written (and where answers go).
        sender: Its author.
        text: Plain text with the bot mention already stripped by the adapter.
        message_id: The platform's id of this message or event (used for dedupe).
        mentioned: The bot was addressed (mention, reply to the bot, slash command).
        is_dm: A direct conversation with the bot.
        is_edit: An edit of an earlier message (ignored by the middleware).
        event_id: Dedupe key if different from ``message_id`` (e.g. a Slack event id).
        attachments: Files posted with the message (downloaded, or skipped with a reason).
    """

    thread: ThreadRef
    sender: Sender
    text: str
    message_id: str
    mentioned: bool = False
    is_dm: bool = False
    is_edit: bool = False
    event_id: str | None = None
    attachments: tuple[Attachment, ...] = ()
    callback: str = ""
    """A button press to answer (a Telegram ``callback_query`` id); ``text`` is then the
    pressed :class:`Action`'s id, e.g. ``!approve 3f9a``."""
    reply_thread: str | None = None
    """The reply thread it belongs to where the platform has them beside ``thread`` (a
    Telegram supergroup without topics: ``reply:<root message id>``); a thread-bound child's
    own thread can be one (:mod:`bot.runs.thread_children`)."""

    @property
    def dedupe_id(self) -> str:
        return self.event_id or self.message_id


@dataclass(frozen=True, kw_only=True)
class Action:
    """A button under a message (approval requests).

    Attributes:
        id: What pressing it says, as the text a person could type instead
            (``!approve 3f9a``): adapters hand it back as an :class:`Inbound`'s text.
        label: The button's caption.
        style: ``primary``, ``danger`` or "" (Slack colours it; others ignore it).
    """

    id: str
    label: str
    style: str = ""


class OutboundKind(enum.StrEnum):
    REPLY = "reply"
    ANNOUNCE = "announce"
    STATUS = "status"
    OPEN_THREAD = "open_thread"
    """Not a post: egress asks the adapter to open a child's thread (text: its title)."""


@dataclass(frozen=True, kw_only=True)
class Outbound:
    """One message the bot wants to post (markdown text; adapters convert).

    Attributes:
        thread: Destination.
        text: Markdown as the model writes it.
        kind: reply, announce or status.
        edit_of: Platform message id to edit instead of posting anew.
        idempotency_key: Egress delivers each key once.
        ephemeral_to: Platform user id for an ephemeral answer where supported.
        attachments: Workspace paths of files to post after the text (egress reads their
            bytes from ``workspace``; the outbox carries only the references).
        workspace: The session key whose workspace holds ``attachments``.
        traceparent: W3C trace context of the span that wrote it ("" without tracing);
            the gateway's delivery span continues it.
        actions: Buttons under the message (an edit with none removes them).
        callback: Answer this button press instead of posting (Telegram
            ``answerCallbackQuery``: an alert when ``ephemeral_to`` is set); other
            platforms post the text as usual.
        replaces: Idempotency key of an earlier message whose first part this one edits
            (the platform id is looked up at delivery; a steer receipt's update).
        run_id: The run an announce announces ("" for other messages).
        failed: A turn's reply saying the turn failed (its model call, a hook, its worker,
            its time limit): no answer came (the console's piped mode exits 1 on one).
    """

    thread: ThreadRef
    text: str
    kind: OutboundKind = OutboundKind.REPLY
    edit_of: str | None = None
    idempotency_key: str = ""
    ephemeral_to: str | None = None
    attachments: tuple[str, ...] = ()
    workspace: str = ""
    traceparent: str = ""
    actions: tuple[Action, ...] = ()
    callback: str = ""
    replaces: str = ""
    run_id: str = ""
    failed: bool = False

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (the outbox entry); :meth:`from_json` reads it back equal."""
        data: dict[str, Any] = {
            "thread": self.thread.to_json(),
            "text": self.text,
            "kind": self.kind.value,
            "edit_of": self.edit_of,
            "idempotency_key": self.idempotency_key,
            "ephemeral_to": self.ephemeral_to,
        }
        if self.attachments:
            data["attachments"] = list(self.attachments)
            data["workspace"] = self.workspace
        if self.traceparent:
            data["traceparent"] = self.traceparent
        if self.actions:
            data["actions"] = [dataclasses.asdict(a) for a in self.actions]
        if self.callback:
            data["callback"] = self.callback
        if self.replaces:
            data["replaces"] = self.replaces
        if self.run_id:
            data["run_id"] = self.run_id
        if self.failed:
            data["failed"] = True
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Outbound:
        """Read :meth:`to_json`'s dict (``kind`` defaults to ``reply``)."""
        return cls(
            thread=ThreadRef.from_json(data["thread"]),
            text=str(data["text"]),
            kind=OutboundKind(data.get("kind", "reply")),
            edit_of=data.get("edit_of"),
            idempotency_key=str(data.get("idempotency_key", "")),
            ephemeral_to=data.get("ephemeral_to"),
            attachments=tuple(str(p) for p in data.get("attachments") or ()),
            workspace=str(data.get("workspace") or ""),
            traceparent=str(data.get("traceparent") or ""),
            actions=tuple(
                Action(id=str(a["id"]), label=str(a["label"]), style=str(a.get("style") or ""))
                for a in data.get("actions") or ()
            ),
            callback=str(data.get("callback") or ""),
            replaces=str(data.get("replaces") or ""),
            run_id=str(data.get("run_id") or ""),
            failed=bool(data.get("failed")),
        )


class RunStatus(enum.StrEnum):
    """Lifecycle of a subagent run; exactly one terminal transition happens."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    ERROR = "error"
    TIMEOUT = "timeout"
    STOPPED = "stopped"
    UNKNOWN = "unknown"

    @property
    def terminal(self) -> bool:
        return self not in (RunStatus.QUEUED, RunStatus.RUNNING)


class Cleanup(enum.StrEnum):
    KEEP = "keep"
    DELETE = "delete"


class RunContext(enum.StrEnum):
    """What a run starts from: only its task, or also the requester's recent messages."""

    ISOLATED = "isolated"
    FORK = "fork"


class ResultFormat(enum.StrEnum):
    """How a run's result is stored: the final answer's text, or normalized JSON (a type
    with an ``output_schema``)."""

    TEXT = "text"
    JSON = "json"


@dataclass(frozen=True, kw_only=True)
class Usage:
    """Token counts of one or more model calls.

    ``cached_tokens`` (prompt tokens the provider served from its cache) are part of
    ``prompt_tokens``; ``reasoning_tokens`` are part of ``completion_tokens`` (readers
    normalize servers that report them apart). ``estimated``: at least one call's usage was
    not reported by the server and was counted here instead (docs/models.md).
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    estimated: bool = False

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def record_fields(self) -> dict[str, int]:
        """The run record's fields that hold this usage (:class:`RunRecord`), as stored."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "usage_estimated": int(self.estimated),
        }

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            estimated=self.estimated or other.estimated,
        )


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    """A subagent run as stored in its Redis hash (the source of truth, not RQ)."""

    run_id: str
    seq: int
    session_key: str
    child_session_key: str
    session_id: str
    thread: ThreadRef
    requester: str
    agent_id: str
    subagent_type: str
    task: str
    model: str
    label: str = ""
    thinking: str = ""
    timeout_s: int = 600
    """Its soft deadline in seconds from its start; 0: none at all (``runTimeoutSeconds: 0``
    with ``subagents.max_run_timeout_seconds`` 0, see :func:`bot.runs.spawn.resolve_timeout`)."""
    cleanup: Cleanup = Cleanup.KEEP
    status: RunStatus = RunStatus.QUEUED
    created_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    result: str = ""
    notes: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    job_id: str = ""
    warnings: tuple[str, ...] = field(default_factory=tuple)
    archived_at: float | None = None
    parent_run_id: str = ""
    """The run that spawned this one ("" = the main agent did: a root, depth 1)."""
    root_run_id: str = ""
    """The root of its run tree (its own id for a root)."""
    depth: int = 1
    parked_at: float | None = None
    """Set while an orchestrator waits for its children, or a run for a person's approval,
    with no job executing it."""
    approval_id: str = ""
    """The approval it is (or was last) parked for; "" when it parked for its children."""
    waiting: str = ""
    """What the running run waits for right now ("waiting for the model's rate limit"), ""
    when nothing."""
    answered_by: str = ""
    """The fallback that answered its latest call a fallback answered, as fanbot names the
    model (``local/qwen3``; "" = its own model answered every call; docs/models.md)."""
    fallback_reason: str = ""
    """Why the models before that fallback did not answer (``gpt-4o overloaded``)."""
    rounds: int = 0
    """Fan-in rounds of its own children it has been through."""
    resume_job: str = ""
    """The job admitted to resume it while parked ("" = none yet): it holds the run's slot."""
    join_id: str = ""
    """The fan-in this run belongs to ("" = none): when all its runs end, the main agent
    gets one continuation turn (:mod:`bot.runs.join`)."""
    traceparent: str = ""
    """W3C trace context of the spawn ("" without tracing): the run's job continues it."""
    context: RunContext = RunContext.ISOLATED
    fork_message: str = ""
    """For ``context: fork``: the spawning turn's own message (the history holds it only
    once that turn has ended), bounded; "" otherwise."""
    result_format: ResultFormat = ResultFormat.TEXT
    max_tokens: int | None = None
    """The run's token limit (prompt + completion; None: none of its own)."""
    max_cost_usd: float | None = None
    """The run's USD limit (None: none of its own)."""
    executor: str = ""
    """The job executing the run now, or queued to ("" = its own job, id = run id): its
    own, a parked run's resume job, or a recovery job after its worker was lost."""
    attempt: int = 1
    """Which attempt at the run this is (a lost worker's run goes on in the next)."""
    attempt_ends: tuple[str, ...] = field(default_factory=tuple)
    """How each earlier attempt ended: ``"<unix time>|<why>"`` (its worker was lost)."""
    resuming: float | None = None
    """When its recovery job was queued, until that job starts it (None: not waiting)."""
    estimate: str = ""
    """What its spawn expected it to spend, from recent runs of its type and model (JSON,
    :class:`bot.runs.estimate.Estimate`; "" = no estimate)."""
    cached_tokens: int = 0
    """Prompt tokens the provider served from its cache (part of ``prompt_tokens``)."""
    reasoning_tokens: int = 0
    """Completion tokens spent reasoning (part of ``completion_tokens``)."""
    usage_estimated: bool = False
    """Some of its tokens were counted by fanbot, the server reported none (docs/models.md)."""

    @property
    def usage(self) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cached_tokens=self.cached_tokens,
            reasoning_tokens=self.reasoning_tokens,
            estimated=self.usage_estimated,
        )

    def deadline_after(self, started: float) -> float | None:
        """Its soft deadline for a start at ``started`` (any clock), None when it has none."""
        return started + self.timeout_s if self.timeout_s > 0 else None

    def past_deadline(self, elapsed: float) -> bool:
        """Whether ``elapsed`` seconds since its start reach its soft deadline."""
        return self.timeout_s > 0 and elapsed >= self.timeout_s

    @property
    def resumes(self) -> int:
        """Times the run went on after its worker was lost."""
        return self.attempt - 1

    @property
    def executing_job(self) -> str:
        """The job that executes (or is queued to execute) the run."""
        return self.executor or self.job_id or self.run_id
