"""Running one agent's hooks at each hook point (docs/hooks.md).

A :class:`Hooks` holds the hooks of one run or turn, in order, and whose work it is. Each
hook point builds its event, hands it to every hook in turn (each sees what the one before
left) and takes back what may change. A hook that raises ends the run
(:class:`~bot.errors.HookFailed`); a :class:`~bot.hooks.events.Veto` of a tool call is
:class:`Vetoed`, which the tool loop turns into the call's error result. A hook slower than
:data:`SLOW_SECONDS` is reported through ``report`` (a run's notes) and the log: a hook runs
in its run's thread and cannot be cut short, but the run's own timeout still ends the run.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.config import Settings
from bot.errors import HookFailed
from bot.hooks.events import (
    Event,
    FanIn,
    FanInResult,
    ModelCall,
    ModelReply,
    RunEnd,
    ToolCall,
    ToolResult,
    Veto,
)
from bot.hooks.resolve import Hook, HookNotFound, paths_for, resolve
from bot.models.completion import Completion, ToolCallRequest
from bot.types import RunRecord

log = logging.getLogger(__name__)

SLOW_SECONDS = 10.0
"""A hook call longer than this is reported in the run's notes."""
MESSAGE_CHARS = 300
"""A failed hook's exception message is cut to this in the notes."""


class Vetoed(Exception):
    """A hook vetoed a tool call; the message is the model's tool result."""


def _ignore(_: str) -> None:
    pass


@dataclass(frozen=True, kw_only=True)
class Who:
    """Whose work the hooks serve (every event carries it)."""

    run_id: str | None = None
    session_key: str = ""
    agent_id: str = "main"
    type_name: str | None = None
    requester: str = ""

    def fields(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, kw_only=True)
class Hooks:
    """One run's or turn's hooks, by dotted path, in the order they run.

    Attributes:
        paths: The hooks.
        who: Whose work it is.
        report: Told each slow hook call, one line (a run adds it to its notes).
    """

    paths: tuple[str, ...] = ()
    who: Who = field(default_factory=Who)
    report: Callable[[str], None] = _ignore

    def __bool__(self) -> bool:
        return bool(self.paths)

    def before_model(
        self, model: str, messages: list[dict[str, Any]], tools: Sequence[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The messages to send (``messages`` itself when there are no hooks)."""
        if not self.paths:
            return messages
        names = [str((t.get("function") or {}).get("name", "")) for t in tools]
        event = ModelCall(
            **self.who.fields(), model=model, messages=copy.deepcopy(messages), tools=names
        )
        self._run("before a model call", event)
        return list(event.messages)

    def after_model(self, model: str, completion: Completion) -> Completion:
        """The answer as the hooks leave its text."""
        if not self.paths:
            return completion
        calls = [(c.name, c.arguments) for c in completion.tool_calls]
        event = ModelReply(
            **self.who.fields(), model=model, text=completion.content, tool_calls=calls
        )
        self._run("after a model call", event)
        if event.text == completion.content:
            return completion
        return dataclasses.replace(completion, content=str(event.text))

    def before_tool(self, call: ToolCallRequest) -> ToolCallRequest:
        """The call to run, as the hooks leave its arguments.

        Raises:
            Vetoed: A hook vetoed it; the message is the call's result for the model.
        """
        if not self.paths:
            return call
        event = ToolCall(
            **self.who.fields(), tool=call.name, arguments=call.arguments, call_id=call.id
        )
        self._run("before a tool call", event, may_veto=True)
        if event.arguments == call.arguments:
            return call
        return dataclasses.replace(call, arguments=str(event.arguments))

    def after_tool(self, call: ToolCallRequest, result: str) -> str:
        """The result the model and the transcript get."""
        if not self.paths:
            return result
        event = ToolResult(
            **self.who.fields(),
            tool=call.name,
            arguments=call.arguments,
            call_id=call.id,
            result=result,
        )
        self._run("after a tool call", event)
        return str(event.result)

    def run_end(self, *, status: str, result: str, notes: str) -> str:
        """The run's result as the hooks leave it."""
        if not self.paths:
            return result
        event = RunEnd(**self.who.fields(), status=status, result=result, notes=notes)
        self._run("at the run's end", event)
        return str(event.result)

    def fan_in(self, results: list[FanInResult]) -> list[FanInResult]:
        """The results the continuation's prompt gets (only runs that were in ``results``)."""
        if not self.paths:
            return results
        event = FanIn(**self.who.fields(), results=[dataclasses.replace(r) for r in results])
        self._run("at fan-in", event)
        known = {r.run_id for r in results}
        return [r for r in event.results if isinstance(r, FanInResult) and r.run_id in known]

    def _run(self, point: str, event: Event, *, may_veto: bool = False) -> None:
        for path in self.paths:
            hook = _hook(path)
            started = time.monotonic()
            try:
                answer = hook(event)
                if isinstance(answer, Veto):
                    raise answer
                if answer is not None:
                    raise TypeError(
                        f"returned a {type(answer).__name__}; a hook changes the event and "
                        "returns None (or a Veto)"
                    )
            except Veto as veto:
                if not may_veto:
                    raise _failed(path, veto) from veto
                reason = veto.reason or "no reason given"
                raise Vetoed(f"error: vetoed by {path}: {reason}") from None
            except Exception as exc:
                raise _failed(path, exc) from exc
            finally:
                self._timed(path, point, time.monotonic() - started)

    def _timed(self, path: str, point: str, seconds: float) -> None:
        if seconds < SLOW_SECONDS:
            return
        line = f"hook {path} took {seconds:.0f}s {point}"
        log.warning("%s (run %s)", line, self.who.run_id or self.who.session_key)
        self.report(line)


def _hook(path: str) -> Hook:
    try:
        return resolve(path)
    except HookNotFound as exc:  # checked at start-up: only a module changed since
        raise HookFailed(f"hook {path} failed: {exc}") from None


def _failed(path: str, exc: BaseException) -> HookFailed:
    what = " ".join(str(exc).split())
    if len(what) > MESSAGE_CHARS:
        what = what[: MESSAGE_CHARS - 1] + "…"
    return HookFailed(f"hook {path} failed: {type(exc).__name__}" + (f": {what}" if what else ""))


def hooks_for(settings: Settings, who: Who, *, report: Callable[[str], None] = _ignore) -> Hooks:
    """The hooks of ``who``'s work: its agent's ``middleware``, then its type's."""
    paths = paths_for(settings, who.agent_id, who.type_name)
    return Hooks(paths=tuple(paths), who=who, report=report)


def run_hooks(
    settings: Settings, record: RunRecord, *, report: Callable[[str], None] = _ignore
) -> Hooks:
    """The hooks of a subagent run (its agent's, then its type's)."""
    who = Who(
        run_id=record.run_id,
        session_key=record.child_session_key,
        agent_id=record.agent_id,
        type_name=record.subagent_type,
        requester=record.requester,
    )
    return hooks_for(settings, who, report=report)


def at_fan_in(hooks: Hooks, runs: list[RunRecord]) -> list[RunRecord]:
    """``runs`` as the hooks leave them at fan-in: a changed result, a run left out."""
    if not hooks:
        return runs
    entries = [
        FanInResult(
            run_id=r.run_id,
            number=r.seq,
            label=r.label or r.task,
            type_name=r.subagent_type,
            status=r.status.value,
            result=r.result,
        )
        for r in runs
    ]
    by_id = {r.run_id: r for r in runs}
    return [
        dataclasses.replace(by_id[e.run_id], result=str(e.result)) for e in hooks.fan_in(entries)
    ]


NO_HOOKS = Hooks()
"""No hooks: every hook point passes its input through."""
