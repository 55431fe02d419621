"""Ingress: one normalized message -> an ordered list of handlers -> one outcome.

Sync on purpose (Redis and RQ calls); the gateway runs it in a worker thread so the event
loop never blocks.

:meth:`Ingress.handle` admits each platform event once (the dedupe claim, see
:mod:`bot.store.dedupe`), prepares a :class:`Message` (the text cut to
``gateway.max_inbound_chars`` with a note, :func:`cap_inbound`; the thread-bound child it is
written to, if any; its session) and walks :attr:`Ingress.handlers` in order, the way
python-telegram-bot's ``Application`` walks its handlers (the pure guards are in
:mod:`bot.gateway.admission`): the first whose ``match`` (pure)
accepts the message and whose ``handle`` returns a result takes it. In order:

1. ``approval decision``: a button press or ``!approve``/``!deny`` (addressed by nature)
   from someone the access policy lets in (:func:`permitted`; anyone else's is ignored
   like any message of theirs, learning nothing about the approval);
2. ``ignored``: the middleware's rules (:func:`decide`: own and bots' messages, edits,
   empty ones, the access policy, mention gating) said no;
3. ``message limit``: the sender's and the thread's messages per minute
   (docs/architecture.md "Bounded use"): the first message over a limit in a minute is
   answered with when to retry, the rest of that minute are dropped (continues when within);
4. ``cut note``: the sender is told how much of an oversized message was read (continues);
5. ``command``: any ``/word`` is answered here, never spawning a model turn;
6. ``bound thread``: a message in a thread-bound child's thread steers it;
7. ``turn``: everything else queues a main-agent turn.

A handler that is not final takes the message when its ``handle`` returns a result.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from bot.commands.parse import parse_command
from bot.commands.router import CommandRequest, CommandRouter, reply_key
from bot.deps import Deps
from bot.errors import InboundBusy
from bot.gateway.admission import (
    CLAIM_SECONDS,
    Admit,
    Verdict,
    admit,
    cap_inbound,
    decide,
    message_limits,
    permitted,
    platform_access,
    session_counts,
    slow_down,
    window,
)
from bot.gateway.inbox import save_attachments
from bot.observe import tracing
from bot.runs import approval_gate as approvals
from bot.runs.access import Actor, may_control
from bot.runs.approval_gate import parse_decision
from bot.runs.naming import Icon, run_title
from bot.runs.send import SendOutcome, send
from bot.runs.thread_children import bound_run
from bot.sessions import requester_session_key
from bot.store.dedupe import Dedupe
from bot.store.jobs import TurnJob, TurnJobIds
from bot.types import Inbound, Outbound, OutboundKind, RunRecord

log = logging.getLogger(__name__)
PRESS_DENIED = "You are not allowed to use this button."
"""The answer to a button press by someone the access policy keeps out."""


@dataclass(frozen=True, kw_only=True)
class IngressResult:
    verdict: Verdict
    session_key: str = ""
    job_id: str | None = None
    duplicate: bool = False


@dataclass(frozen=True, kw_only=True)
class Message:
    """One admitted inbound message, prepared for the handlers.

    Attributes:
        inbound: The message (cut to the limit; moved into a bound child's thread).
        session_key: Its requester session.
        job_id: The turn job id its dedupe claim reserved.
        bound: The thread-bound child it is written to (None: none).
        cut: Characters cut off its text (0: none).
        session_exists: Its session has history (a thread the bot takes part in); False
            when the verdict does not depend on it (:func:`~bot.gateway.admission.session_counts`).
    """

    inbound: Inbound
    session_key: str
    job_id: str
    bound: RunRecord | None = None
    cut: int = 0
    session_exists: bool = False


@dataclass(frozen=True, kw_only=True)
class Handler:
    """One step of the list: ``match`` decides (pure), ``handle`` acts and returns the
    result; a handler that is not ``final`` acts and lets the next handlers have it."""

    name: str
    match: Callable[[Message], bool]
    handle: Callable[[Message], IngressResult | None]
    final: bool = True


class Ingress:
    """Admits each event once and walks the handlers (see the module docstring).

    Args:
        deps: Stores and settings.
        router: Command handlers.
        clock: Wall time (tests fix it so a burst stays in one minute's window).
    """

    def __init__(
        self, *, deps: Deps, router: CommandRouter, clock: Callable[[], float] = time.time
    ) -> None:
        self.deps = deps
        self.router = router
        self.clock = clock  # wall time: the message-limit windows are shared by processes
        self.turn_ids = TurnJobIds()
        self.handlers: tuple[Handler, ...] = (
            Handler(name="approval decision", match=self._is_decision, handle=self._decide),
            Handler(name="ignored", match=self._is_ignored, handle=self._ignore),
            Handler(name="message limit", match=self._is_limited, handle=self._limit, final=False),
            Handler(name="cut note", match=lambda m: m.cut > 0, handle=self._tell_cut, final=False),
            Handler(name="command", match=self._is_command, handle=self._command),
            Handler(name="bound thread", match=lambda m: m.bound is not None, handle=self._steer),
            Handler(name="turn", match=lambda m: True, handle=self._turn),
        )

    def session_key(self, inbound: Inbound) -> str:
        return requester_session_key(
            agent_id=self.deps.settings.agent_id,
            thread=inbound.thread,
            is_dm=inbound.is_dm,
            user_id=inbound.sender.user_id,
        )

    def handle(self, inbound: Inbound) -> IngressResult:
        """Handle ``inbound`` once, however often the platform delivers it.

        Raises:
            InboundBusy: another delivery of the same event is being handled: the adapter
                leaves this one unconfirmed and retries it (see :mod:`bot.store.dedupe`).
        """
        platform, event = inbound.thread.platform, inbound.dedupe_id
        ttl = self.deps.settings.gateway.dedupe_ttl_seconds
        token = uuid.uuid4().hex
        job_id = self.turn_ids.new(token)
        value = Dedupe.claim_value(token, job_id)
        claimed = self.deps.dedupe.claim(platform, event, value=value, ttl=ttl)
        exists = bool(claimed.job_id) and not claimed.mine and self.deps.jobs.exists(claimed.job_id)
        action = admit(claimed, other_job_exists=exists, hold_seconds=CLAIM_SECONDS)
        if action is Admit.TAKE_OVER and not self.deps.dedupe.take_over(
            platform, event, old=claimed.value, new=value, ttl=ttl
        ):
            action = Admit.BUSY
        if action is Admit.BUSY:
            raise InboundBusy(f"another delivery of {platform} event {event} is in progress")
        if action is Admit.DUPLICATE:
            result = IngressResult(verdict=Verdict.ACCEPT, duplicate=True)
        else:
            message = self.prepare(inbound, claimed.job_id if claimed.mine else job_id)
            result = self.dispatch(message)
        self.deps.dedupe.done(platform, event, ttl=ttl)
        return result

    def prepare(self, inbound: Inbound, job_id: str) -> Message:
        """Cut the text to the limit, find the bound child, and look up the session."""
        inbound, cut = cap_inbound(inbound, self.deps.settings.gateway.max_inbound_chars)
        inbound, bound = self._bound(inbound)
        session_key = self.session_key(inbound)
        access = platform_access(self.deps.settings, inbound.thread.platform)
        asks = session_counts(inbound, settings=self.deps.settings, access=access)
        return Message(
            inbound=inbound,
            session_key=session_key,
            job_id=job_id,
            bound=bound,
            cut=cut,
            # read only where the verdict depends on it (a bound child's thread: always)
            session_exists=bound is not None or (asks and self.deps.history.exists(session_key)),
        )

    def route(self, message: Message) -> Handler:
        """The handler that takes ``message`` (pure): the first final one that matches."""
        return next(h for h in self.handlers if h.final and h.match(message))

    def dispatch(self, message: Message) -> IngressResult:
        """Walk the handlers in order; the first to return a result takes the message."""
        for handler in self.handlers:
            if not handler.match(message):
                continue
            result = handler.handle(message)
            if result is not None:
                return result
            assert not handler.final, f"{handler.name} returned no result"
        raise AssertionError("the turn handler takes every message")

    def _accepted(self, message: Message, *, job_id: str | None = None) -> IngressResult:
        return IngressResult(verdict=Verdict.ACCEPT, session_key=message.session_key, job_id=job_id)

    def _is_decision(self, message: Message) -> bool:
        inbound = message.inbound
        sender = inbound.sender
        access = platform_access(self.deps.settings, inbound.thread.platform)
        return (
            parse_decision(inbound.text) is not None
            and not (sender.is_self or sender.is_bot)
            and permitted(inbound, access=access)
        )

    def _decide(self, message: Message) -> IngressResult:
        """An approval decided by a button press or ``!approve``/``!deny``: the answer goes
        back to that person (a refusal privately where the platform can)."""
        inbound = message.inbound
        request = parse_decision(inbound.text)
        assert request is not None
        answer = approvals.decide(
            self.deps, request, platform=inbound.thread.platform, user_id=inbound.sender.user_id
        )
        reply = Outbound(
            thread=inbound.thread,
            text=answer.text,
            idempotency_key=f"decide:{inbound.thread.platform}:{inbound.dedupe_id}",
            ephemeral_to=inbound.sender.user_id if answer.refused else None,
            callback=inbound.callback,
            traceparent=tracing.traceparent(),
        )
        self.deps.outbox.put(reply)
        return self._accepted(message)

    def verdict(self, message: Message) -> Verdict:
        """The middleware's verdict on ``message`` (pure)."""
        settings = self.deps.settings
        access = platform_access(settings, message.inbound.thread.platform)
        if message.bound is not None:  # a child's own thread is addressed to it
            access = access.model_copy(update={"continue_threads": True})
        return decide(
            message.inbound,
            settings=settings,
            access=access,
            session_exists=message.session_exists,
        )

    def _is_ignored(self, message: Message) -> bool:
        return self.verdict(message) is not Verdict.ACCEPT

    def _ignore(self, message: Message) -> IngressResult:
        verdict = self.verdict(message)
        log.debug("inbound %s: %s", message.inbound.dedupe_id, verdict.value)
        inbound = message.inbound
        if verdict is Verdict.DENIED and inbound.callback:
            # A button press is answered whoever pressed it, or their client keeps spinning;
            # only the press is answered (no message in the thread).
            self.deps.outbox.put(
                Outbound(
                    thread=inbound.thread,
                    text=PRESS_DENIED,
                    idempotency_key=f"denied:{inbound.thread.platform}:{inbound.dedupe_id}",
                    callback=inbound.callback,
                    traceparent=tracing.traceparent(),
                )
            )
        return IngressResult(verdict=verdict, session_key=message.session_key)

    def _is_limited(self, message: Message) -> bool:
        """Counted against a messages-per-minute limit (pure: not an admin, a limit on)."""
        settings = self.deps.settings
        return bool(
            message_limits(message.inbound, session_key=message.session_key, settings=settings)
        )

    def _limit(self, message: Message) -> IngressResult | None:
        """Count ``message``; over a limit, take it: the first of the minute is answered
        with when to retry, the rest are dropped (logged and counted as ``limited``)."""
        inbound = message.inbound
        now = self.clock()
        counters = message_limits(
            inbound, session_key=message.session_key, settings=self.deps.settings
        )
        hit = self.deps.usage.hit(counters, window=window(now))
        if hit.over is None:
            return None
        name = counters[hit.over][0]
        log.info("inbound %s: over the messages per minute of %s%s", inbound.dedupe_id, name,
                 "; answered" if hit.first else "; dropped")  # fmt: skip
        if hit.first:
            text = slow_down(now, thread=name.startswith("thread|"))
            self._reply(inbound, text, ephemeral=not name.startswith("thread|"), key="slow")
        return IngressResult(verdict=Verdict.LIMITED, session_key=message.session_key)

    def _is_command(self, message: Message) -> bool:
        # Any /word is answered here (an unknown one with "Unknown command"), never
        # spawning a model turn; a path such as /usr/bin at the start is text.
        command = parse_command(message.inbound.text)
        return command is not None and (command.is_word or self.router.handles(command))

    def _command(self, message: Message) -> IngressResult:
        inbound = message.inbound
        command = parse_command(inbound.text)
        assert command is not None
        request = CommandRequest(
            command=command,
            inbound=inbound,
            session_key=message.session_key,
            deps=self.deps,
            bound=message.bound,
        )
        answer = self.router.dispatch(request)
        if answer:  # "": the handler queued its answer itself (see early_reply)
            self._reply(inbound, answer, ephemeral=inbound.thread.thread is None)
        return self._accepted(message)

    def _steer(self, message: Message) -> IngressResult:
        assert message.bound is not None
        self._reply(message.inbound, self._steer_bound(message.inbound, message.bound), key="bound")
        return self._accepted(message)

    def _turn(self, message: Message) -> IngressResult:
        inbound = message.inbound
        if inbound.attachments:
            inbound = self._with_files(inbound, message.session_key)
        self._enqueue_turn(inbound, message.session_key, message.job_id)
        return self._accepted(message, job_id=message.job_id)

    def _bound(self, inbound: Inbound) -> tuple[Inbound, RunRecord | None]:
        """The thread-bound child ``inbound`` is written to, if any; a message of a reply
        thread bound to one is moved into that thread (answers go there)."""
        thread = inbound.thread
        if thread.thread:
            return inbound, bound_run(self.deps, thread)
        if inbound.reply_thread:
            replies = dataclasses.replace(thread, thread=inbound.reply_thread)
            run = bound_run(self.deps, replies)
            if run is not None:
                return dataclasses.replace(inbound, thread=replies), run
        return inbound, None

    def _steer_bound(self, inbound: Inbound, run: RunRecord) -> str:
        """A message in a thread-bound child's thread: a steer while it runs, else a
        follow-up run (same access rule as ``/subagents send``)."""
        actor = Actor(
            platform=inbound.thread.platform,
            user_id=inbound.sender.user_id,
            admins=self.deps.settings.admins,
        )
        decision = may_control(actor, run, verb="send to")
        if not decision.allowed:
            name = run_title(run, noun="subagent", name="none")
            return f"This thread belongs to {name}: {decision.reason}"
        result = send(self.deps, run, inbound.text, requester=actor.qualified)
        name = run_title(result.run, noun="subagent", name="none")
        if result.outcome is SendOutcome.STEERED:
            return f"{Icon.STEERED} Passed to {name}; it reads it before its next step."
        if result.outcome is SendOutcome.FOLLOW_UP:
            return f"{Icon.FOLLOW_UP} {name} continues with your message (a follow-up run)."
        return (
            f"{run_title(run, name='none')} is archived; "
            f"`/subagents close {run.seq}` frees this thread."
        )

    def _with_files(self, inbound: Inbound, session_key: str) -> Inbound:
        """Save the attachments into the workspace; the turn's text names them."""
        lines = save_attachments(self.deps.workspace, session_key, inbound.attachments)
        text = "\n\n".join(t for t in (inbound.text.strip(), lines) if t)
        return dataclasses.replace(inbound, text=text, attachments=())

    def _enqueue_turn(self, inbound: Inbound, session_key: str, job_id: str) -> None:
        if self.deps.jobs.exists(job_id):  # an earlier delivery enqueued it, then died
            return
        payload = TurnJob(
            session_key=session_key,
            thread=inbound.thread.to_json(),
            platform=inbound.thread.platform,
            sender_id=inbound.sender.user_id,
            sender_name=inbound.sender.display_name,
            text=inbound.text,
            message_id=inbound.dedupe_id,
            agent_id=self.deps.settings.agent_id,
            is_dm=inbound.is_dm,
            traceparent=tracing.traceparent(),
        )
        self.deps.jobs.enqueue_turn(
            payload, job_id=job_id, timeout=self.deps.settings.turn_timeout_seconds
        )

    def _tell_cut(self, message: Message) -> None:
        """Tell the sender how much was read; the message goes on to the next handlers."""
        inbound, cut = message.inbound, message.cut
        limit = self.deps.settings.gateway.max_inbound_chars
        log.info("inbound %s: cut %d characters past %d", inbound.dedupe_id, cut, limit)
        text = (
            f"✂️ Your message was {limit + cut:,} characters long; I read only the first {limit:,}."
        )
        self._reply(inbound, text, key="cut")

    def _reply(
        self, inbound: Inbound, text: str, *, ephemeral: bool = False, key: str = "cmd"
    ) -> None:
        message = Outbound(
            thread=inbound.thread,
            text=text,
            kind=OutboundKind.REPLY,
            idempotency_key=reply_key(inbound, key),
            ephemeral_to=inbound.sender.user_id if ephemeral and not inbound.is_dm else None,
            traceparent=tracing.traceparent(),
        )
        self.deps.outbox.put(message)
