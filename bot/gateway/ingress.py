"""Ingress: one normalized message -> middleware -> a command answer or a queued turn.

Sync on purpose (Redis and RQ calls); the gateway runs it in a worker thread so the event
loop never blocks. The decisions themselves (:func:`decide`) are pure.

An oversized message is cut to ``gateway.max_inbound_chars`` first (:func:`cap_inbound`),
with a note in the text, so commands, history and the turn job only ever see the cut text;
the sender is told once how much was read.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import uuid
from dataclasses import dataclass

from bot.commands.parse import parse_command
from bot.commands.router import CommandRequest, CommandRouter, reply_key
from bot.config import PlatformAccess, Settings
from bot.deps import Deps
from bot.errors import InboundBusy
from bot.gateway.inbox import save_attachments
from bot.observe import tracing
from bot.runs import approval_gate as approvals
from bot.runs.access import Actor, may_control
from bot.runs.approval_gate import DecisionRequest, parse_decision
from bot.runs.naming import Icon, run_title
from bot.runs.send import SendOutcome, send
from bot.runs.thread_children import bound_run
from bot.sessions import requester_session_key
from bot.store.dedupe import Claimed, Dedupe
from bot.store.jobs import TurnJob, new_turn_job_id
from bot.text.clip import clip
from bot.types import Inbound, Outbound, OutboundKind, RunRecord

log = logging.getLogger(__name__)

CLAIM_SECONDS = 30
"""How long a delivery that died before enqueueing holds up the redeliveries of its event."""


class Admit(enum.StrEnum):
    """What to do with one delivery of an inbound event, given its claim."""

    HANDLE = "handle"
    DUPLICATE = "duplicate"
    BUSY = "busy"
    TAKE_OVER = "take over"


def admit(claimed: Claimed, *, other_job_exists: bool, hold_seconds: float) -> Admit:
    """The dedupe decision (pure; see :mod:`bot.store.dedupe`)."""
    if claimed.mine:
        return Admit.HANDLE
    if claimed.done or other_job_exists:
        return Admit.DUPLICATE  # handled, or its delivery died after enqueueing
    if claimed.age < hold_seconds:
        return Admit.BUSY
    return Admit.TAKE_OVER  # that delivery died before enqueueing


class Verdict(enum.StrEnum):
    """What the middleware decided for one inbound message."""

    ACCEPT = "accept"
    SELF = "ignored: own message"
    BOT = "ignored: another bot"
    EDIT = "ignored: edit"
    EMPTY = "ignored: empty"
    DENIED = "ignored: not allowed"
    UNADDRESSED = "ignored: not addressed to the bot"
    TOO_LONG = "rejected: too long"
    """No longer decided: an oversized message is cut (:func:`cap_inbound`), not rejected."""


def platform_access(settings: Settings, platform: str) -> PlatformAccess:
    access = getattr(settings, platform, None)
    return access if isinstance(access, PlatformAccess) else PlatformAccess()


def decide(
    inbound: Inbound, *, settings: Settings, access: PlatformAccess, session_exists: bool
) -> Verdict:
    """The middleware's rules, in order (pure)."""
    if inbound.sender.is_self:
        return Verdict.SELF
    if inbound.sender.is_bot:
        return Verdict.BOT
    if inbound.is_edit:
        return Verdict.EDIT
    if not inbound.text.strip() and not inbound.attachments:
        return Verdict.EMPTY
    if access.allow_users and inbound.sender.user_id not in access.allow_users:
        return Verdict.DENIED
    if access.allow_chats and inbound.thread.chat not in access.allow_chats:
        return Verdict.DENIED
    addressed = inbound.mentioned or inbound.is_dm or not settings.gateway.require_mention
    continues = access.continue_threads and inbound.thread.thread is not None and session_exists
    if not (addressed or continues):
        return Verdict.UNADDRESSED
    return Verdict.ACCEPT


def cap_inbound(inbound: Inbound, limit: int) -> tuple[Inbound, int]:
    """``inbound`` with its text cut to ``limit`` characters plus a note (pure).

    Returns:
        The message to handle and how many characters were cut (0: unchanged).
    """
    cut = len(inbound.text) - limit
    if cut <= 0:
        return inbound, 0
    return dataclasses.replace(inbound, text=clip(inbound.text, limit)), cut


@dataclass(frozen=True, kw_only=True)
class IngressResult:
    verdict: Verdict
    session_key: str = ""
    job_id: str | None = None
    duplicate: bool = False


class Ingress:
    """Applies middleware, answers commands and enqueues turns.

    Args:
        deps: Stores and settings.
        router: Command handlers.
    """

    def __init__(self, *, deps: Deps, router: CommandRouter) -> None:
        self.deps = deps
        self.router = router

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
        job_id = new_turn_job_id(token)
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
            result = self._handle_new(inbound, claimed.job_id if claimed.mine else job_id)
        self.deps.dedupe.done(platform, event, ttl=ttl)
        return result

    def _handle_new(self, inbound: Inbound, job_id: str) -> IngressResult:
        s = self.deps.settings
        inbound, cut = cap_inbound(inbound, s.gateway.max_inbound_chars)
        inbound, bound = self._bound(inbound)
        session_key = self.session_key(inbound)
        decision = parse_decision(inbound.text)
        if decision is not None and not (inbound.sender.is_self or inbound.sender.is_bot):
            self._decide(inbound, decision)  # a reply to a request: addressed by nature
            return IngressResult(verdict=Verdict.ACCEPT, session_key=session_key)
        access = platform_access(s, inbound.thread.platform)
        verdict = decide(
            inbound,
            settings=s,
            # A child's own thread is addressed to it, mention or not.
            access=access.model_copy(update={"continue_threads": True}) if bound else access,
            session_exists=bound is not None or self.deps.history.exists(session_key),
        )
        if verdict is not Verdict.ACCEPT:
            log.debug("inbound %s: %s", inbound.dedupe_id, verdict.value)
            return IngressResult(verdict=verdict, session_key=session_key)
        if cut:
            self._tell_cut(inbound, cut)
        command = parse_command(inbound.text)
        # Any /word is answered here (an unknown one with "Unknown command"), never
        # spawning a model turn; a path such as /usr/bin at the start is text.
        if command is not None and (command.is_word or self.router.handles(command)):
            request = CommandRequest(
                command=command, inbound=inbound, session_key=session_key, deps=self.deps
            )
            answer = self.router.dispatch(request)
            if answer:  # "": the handler queued its answer itself (see early_reply)
                self._reply(inbound, answer, ephemeral=inbound.thread.thread is None)
            return IngressResult(verdict=verdict, session_key=session_key)
        if bound is not None:
            self._reply(inbound, self._steer_bound(inbound, bound), key="bound")
            return IngressResult(verdict=verdict, session_key=session_key)
        if inbound.attachments:
            inbound = self._with_files(inbound, session_key)
        self._enqueue_turn(inbound, session_key, job_id)
        return IngressResult(verdict=verdict, session_key=session_key, job_id=job_id)

    def _decide(self, inbound: Inbound, request: DecisionRequest) -> None:
        """An approval decided by a button press or ``!approve``/``!deny``: the answer goes
        back to that person (a refusal privately where the platform can)."""
        answer = approvals.decide(
            self.deps, request, platform=inbound.thread.platform, user_id=inbound.sender.user_id
        )
        message = Outbound(
            thread=inbound.thread,
            text=answer.text,
            idempotency_key=f"decide:{inbound.thread.platform}:{inbound.dedupe_id}",
            ephemeral_to=inbound.sender.user_id if answer.refused else None,
            callback=inbound.callback,
            traceparent=tracing.traceparent(),
        )
        self.deps.outbox.put(message)

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

    def _tell_cut(self, inbound: Inbound, cut: int) -> None:
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
