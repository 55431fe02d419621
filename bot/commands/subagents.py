"""``/subagents list|info|log|send|stop`` and ``/stop``.

:func:`parse_subagents` turns the arguments into a request (pure, table-tested); the
handlers find the runs in scope, resolve the id and check the actor
(:mod:`bot.runs.access`), act (:mod:`bot.runs.stop`, :mod:`bot.runs.send`) and answer with
short markdown (:mod:`~bot.commands.answers`). No handler raises on user input.
``spawn`` (:mod:`bot.commands.spawn_command`) and ``every|schedules|unschedule``
(:mod:`bot.commands.schedule_chat`) parse their own arguments (:data:`OWN_HANDLERS`). ``send``
to a running run answers with a steer receipt (:mod:`bot.runs.steer_receipts`), edited as the
message is read or missed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from bot.commands import schedule_chat as schedule_commands
from bot.commands.answers import render_family, render_info, render_list, render_log
from bot.commands.context_command import handle_context
from bot.commands.parse import Command
from bot.commands.registry import LOG_DEFAULT, LOG_MAX, SUBAGENTS, USAGE
from bot.commands.router import UNREAD, CommandRequest, CommandRouter, early_reply
from bot.commands.session_commands import handle_model, handle_new
from bot.commands.spawn_command import handle_spawn
from bot.commands.status_command import handle_status, handle_usage
from bot.runs.access import (
    Resolution,
    channel_scope,
    may_control,
    may_read_tools,
    partition,
    resolve_run,
    scope_runs,
)
from bot.runs.budget import run_spend
from bot.runs.join import cancel_joins
from bot.runs.logview import read_log
from bot.runs.naming import Icon, run_title
from bot.runs.send import SendOutcome, send
from bot.runs.steer_receipts import new_receipt, receipt_text
from bot.runs.stop import running_turn, stop_run, stop_turn
from bot.runs.thread_children import bound_run, close_thread
from bot.store.receipts import Receipt
from bot.types import RunRecord, RunStatus

# Subcommands with their own parsing and handler (no run id to resolve).
OWN_HANDLERS: dict[str, Callable[[CommandRequest], str]] = {
    "spawn": handle_spawn,
    "every": schedule_commands.handle_every,
    "schedules": schedule_commands.handle_list,
    "unschedule": schedule_commands.handle_unschedule,
    "context": handle_context,
    "new": handle_new,
    "model": handle_model,
    "status": handle_status,
    "usage": handle_usage,
}
SUBCOMMANDS = tuple(s.name for s in SUBAGENTS if s.name not in OWN_HANDLERS)
"""The actions :func:`parse_subagents` parses (the others have their own handlers)."""


@dataclass(frozen=True, kw_only=True)
class SubagentsRequest:
    """A well-formed ``/subagents`` request.

    Attributes:
        action: One of :data:`SUBCOMMANDS`.
        target: The ``<id>`` token (``all`` for ``stop all``).
        limit: ``log`` limit.
        tools: ``log ... tools``: tool calls and results are shown too.
        message: ``send`` text, as written.
    """

    action: str
    target: str = ""
    limit: int = LOG_DEFAULT
    tools: bool = False
    message: str = ""


def parse_subagents(command: Command) -> SubagentsRequest | str:
    """Arguments of ``/subagents`` -> a request, or a usage answer (pure)."""
    args = command.args
    action = args[0].lower() if args else "list"
    if action not in SUBCOMMANDS:
        shown = action[:32].replace("`", "'")
        return f"I don't know `/subagents {shown}`.\n{USAGE}"
    if action in ("list", "help"):
        return SubagentsRequest(action=action)
    if len(args) < 2:
        return f"`/subagents {action}` needs an id.\n{USAGE}"
    target = args[1]
    if action == "log":
        return _parse_log(target, args[2:])
    if action == "send":
        parts = command.rest.split(None, 2)
        if len(parts) < 3 or not parts[2].strip():
            shown = target[:40].replace("`", "'")
            return f"`/subagents send {shown}` needs a message to send.\n{USAGE}"
        return SubagentsRequest(action="send", target=target, message=parts[2].strip())
    if len(args) > 2:
        return f"`/subagents {action}` takes one id, e.g. `/subagents {action} 1`.\n{USAGE}"
    return SubagentsRequest(action=action, target=target)


def _parse_log(target: str, extra: tuple[str, ...]) -> SubagentsRequest | str:
    limit, tools = LOG_DEFAULT, False
    for word in extra:
        if word.lower() == "tools":
            tools = True
        elif word.isdigit() and word.isascii() and 1 <= int(word) <= 100_000:
            limit = min(int(word), LOG_MAX)
        else:
            shown = word[:20].replace("`", "'")
            return (
                f"`{shown}` is not a valid log limit: use a number from 1 to {LOG_MAX}, "
                "optionally followed by `tools`, e.g. `/subagents log 1 50 tools`."
            )
    return SubagentsRequest(action="log", target=target, limit=limit, tools=tools)


def handle_subagents(req: CommandRequest) -> str:
    own = OWN_HANDLERS.get(req.command.args[0].lower()) if req.command.args else None
    if own is not None:
        return own(req)
    parsed = parse_subagents(req.command)
    if isinstance(parsed, str):
        return parsed
    if parsed.action == "help":
        return USAGE
    runs = scope_runs(req.deps, session_key=_scope_session(req), thread=req.inbound.thread)
    if parsed.action == "list":
        waiting = any(r.status is RunStatus.QUEUED for r in runs)
        line = req.deps.jobs.subagent_line() if waiting else []
        return render_list(runs, now=time.time(), scope=_scope_name(req), line=line)
    if parsed.action == "stop" and parsed.target.lower() == "all":
        return stop_all(req, runs)
    found = resolve_run(parsed.target, runs)
    if found.run is None:
        return found.error
    if parsed.action == "info":
        return _info(req, found)
    if parsed.action == "log":
        return _log(req, found, parsed)
    if parsed.action == "send":
        return _send(req, found, parsed.message)
    if parsed.action == "close":
        return _close(req, found)
    return _stop_one(req, found, runs)


def _scope_session(req: CommandRequest) -> str:
    """In a child's own thread, the session it was spawned from; else the thread's."""
    thread = req.inbound.thread
    if req.bound is not UNREAD:
        bound = req.bound  # ingress looked it up
    else:
        bound = bound_run(req.deps, thread) if thread.thread else None
    return bound.session_key if bound else req.session_key


def _close(req: CommandRequest, found: Resolution) -> str:
    run = found.run
    assert run is not None
    decision = may_control(req.actor, run, verb="close the thread of")
    if not decision.allowed:
        name = run_title(run, noun="subagent", name="none")
        return f"I can't close the thread of {name}: {decision.reason}"
    return close_thread(req.deps, run)


def handle_stop(req: CommandRequest) -> str:
    """``/stop``: abort the session's running turn and stop every unfinished run."""
    runs = scope_runs(req.deps, session_key=req.session_key, thread=req.inbound.thread)
    # Cancel the fan-ins first: stopping their runs would otherwise fire them.
    cancelled = cancel_joins(req.deps, req.session_key, runs, actor=req.actor)
    lines = [_abort_turn(req)] if not channel_scope(req.inbound.thread) else []
    lines.append(stop_all(req, runs))
    if cancelled:
        lines.append("The follow-up answer that was waiting for them is cancelled.")
    return "\n".join(line for line in lines if line)


def _abort_turn(req: CommandRequest) -> str:
    actor = req.actor
    turn = running_turn(req.deps, req.session_key)
    if turn is None:
        return ""
    if not (actor.is_admin or turn.owner == actor.qualified):
        return "The answer in progress was asked for by someone else, so I left it running."
    stop_turn(req.deps, req.session_key, job_id=turn.job_id, approval_id=turn.approval_id)
    return f"{Icon.STOPPED} Stopping the answer in progress."


def stop_all(req: CommandRequest, runs: list[RunRecord]) -> str:
    unfinished = [r for r in runs if not r.status.terminal]
    if not unfinished:
        return "Nothing to stop: no subagent is queued or running here."
    allowed, refused = partition(req.actor, unfinished)
    by = _by(req)
    stopped = [r for r in allowed if stop_run(req.deps, r.run_id, by=by).ended]
    lines = []
    if stopped:
        lines.append(f"{Icon.STOPPED} Stopped {len(stopped)}: {_numbers(stopped)}.")
    if refused:
        lines.append(
            f"Skipped {len(refused)} started by someone else ({_numbers(refused)}): "
            "only an admin or the person who started a run can stop it."
        )
    if not stopped and not refused:
        lines.append("Those runs had just ended; nothing left to stop.")
    return "\n".join(lines)


def _stop_one(req: CommandRequest, found: Resolution, runs: list[RunRecord]) -> str:
    run = found.run
    assert run is not None
    name = run_title(run, noun="subagent", name="dotted")
    if run.status.terminal:
        return f"{name.capitalize()} already ended ({run.status.value}); nothing to stop."
    decision = may_control(req.actor, run, verb="stop")
    if not decision.allowed:
        return f"I can't stop {name}: {decision.reason}"
    # The runs just read are the run's session (its children are there): not read again.
    family = None if channel_scope(req.inbound.thread) else runs
    result = stop_run(req.deps, run.run_id, by=_by(req), record=run, family=family)
    if not result.ended:
        return f"{name.capitalize()} ended on its own just now; nothing to stop."
    return f"{Icon.STOPPED} Stopped {name} (`{run.run_id[:8]}`). Its announce follows."


def _send(req: CommandRequest, found: Resolution, message: str) -> str:
    run = found.run
    assert run is not None
    name = run_title(run, noun="subagent", name="dotted")
    decision = may_control(req.actor, run, verb="send to")
    if not decision.allowed:
        return f"I can't send to {name}: {decision.reason}"
    queued: list[Receipt] = []

    def receipt(target: RunRecord) -> str:
        inbound, deps = req.inbound, req.deps
        reply = early_reply(inbound, "")
        made = new_receipt(
            deps,
            run=target,
            name=run_title(target, noun="subagent", name="dotted"),
            thread=inbound.thread,
            reply_key=reply.idempotency_key,
            ephemeral_to=reply.ephemeral_to,
        )
        # Queued before the run can read the message, so the receipt's edits find it.
        deps.outbox.put(replace(reply, text=receipt_text(made)))
        queued.append(made)
        return made.receipt_id

    result = send(req.deps, run, message, requester=req.actor.qualified, receipt=receipt)
    if result.outcome is SendOutcome.STEERED and queued:
        return ""  # answered already: the receipt's reply, edited as the message moves on
    if result.outcome is SendOutcome.ARCHIVED:
        return (
            f"{name.capitalize()} has ended and its session is archived, so it can't take a "
            "follow-up. Ask me for a new task instead."
        )
    return (
        f"{Icon.FOLLOW_UP} {name.capitalize()} had ended ({run.status.value}), so I started a "
        f"follow-up on the same session: {run_title(result.run, noun='run', name='none')} "
        f"(`{result.run.run_id[:8]}`). Its answer will be announced here."
    )


def _info(req: CommandRequest, found: Resolution) -> str:
    run = found.run
    assert run is not None
    deps = req.deps
    info = render_info(
        run,
        now=time.time(),
        transcript_ref=deps.transcripts.current_key(run.session_id, archived_at=run.archived_at),
        archive_at=deps.runs.archive_at(run.run_id),
        spend=run_spend(deps, run),
    )
    root = run.root_run_id or run.run_id
    tree = [
        r for r in deps.runs.session_runs(run.session_key) if (r.root_run_id or r.run_id) == root
    ]
    family = render_family(run, tree)
    return "\n".join([info, *family]) if family else info


def _log(req: CommandRequest, found: Resolution, parsed: SubagentsRequest) -> str:
    run = found.run
    assert run is not None
    if parsed.tools:
        decision = may_read_tools(req.actor, run)
        if not decision.allowed:
            return decision.reason
    transcripts = req.deps.transcripts
    key = transcripts.current_key(run.session_id, archived_at=run.archived_at)
    view = read_log(transcripts, key, limit=parsed.limit, tools=parsed.tools)
    return render_log(run, view=view, tools=parsed.tools)


def _by(req: CommandRequest) -> str:
    actor = req.actor
    name = req.inbound.sender.display_name
    return f"{name} ({actor.qualified})" if name and name != actor.user_id else actor.qualified


def _numbers(runs: list[RunRecord]) -> str:
    return ", ".join(run_title(r, noun="", name="none") for r in sorted(runs, key=lambda r: r.seq))


def _scope_name(req: CommandRequest) -> str:
    return "this channel" if channel_scope(req.inbound.thread) else "this thread"


def register(router: CommandRouter) -> None:
    """Add ``/subagents``, ``/stop``, ``/context``, ``/new``, ``/model``, ``/status`` and
    ``/usage`` to ``router``."""
    router.register("subagents", handle_subagents)
    router.register("stop", handle_stop)
    router.register("context", handle_context)
    router.register("new", handle_new)
    router.register("model", handle_model)
    router.register("status", handle_status)
    router.register("usage", handle_usage)
