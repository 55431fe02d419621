"""``/subagents spawn [type] <task>``: a person starts a subagent run themselves.

Parsing is pure (:func:`parse_spawn`): leading ``--flags`` (``--thread``: the child works in
a thread of its own, see :mod:`bot.runs.thread_children`; any other is an error), then a type word when
it names a configured or built-in type, else the whole text is the task. The run goes
through :func:`~bot.runs.spawn.spawn_run` like a model-made spawn (same policy, budget,
limits and announce), with the person as requester; it reports in the thread (no fan-in
waits for it). A person's commands in one minute count as one turn's spawns
(:mod:`bot.runs.quota`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from bot.commands.registry import subcommand
from bot.commands.router import CommandRequest
from bot.errors import FanbotError
from bot.runs.estimate import NO_ESTIMATE, text_of
from bot.runs.naming import Icon, RunRef, run_title
from bot.runs.quota import BY_COMMAND
from bot.runs.spawn import SpawnRequest, spawn_run
from bot.runs.type_registry import subagent_types
from bot.types import RunRecord

MAX_TASK_CHARS = 20_000
SPAWN_USAGE = f"`{subcommand('spawn').spelled}`, e.g. `/subagents spawn explore map the repo`"


@dataclass(frozen=True, kw_only=True)
class SpawnAsk:
    """What ``/subagents spawn`` asked for: a type (None: the default), a task, whether
    the child gets a thread of its own, and its model (``endpoint/model``; None: the
    type's or agent's, docs/models.md)."""

    subagent_type: str | None
    task: str
    own_thread: bool = False
    model: str | None = None


def words_after(rest: str, n: int) -> str:
    """``rest`` without its first ``n`` words, as written (pure)."""
    parts = rest.split(None, n)
    return parts[n].strip() if len(parts) > n else ""


def parse_type_and_task(text: str, types: Collection[str]) -> SpawnAsk | str:
    """``[type] <task>`` -> a request, or an error (pure). ``text`` may not start with a
    flag: the callers take those first."""
    first = text.split(None, 1)[0].lower() if text.strip() else ""
    kind = next((t for t in types if t.lower() == first), None)
    task = words_after(text, 1) if kind else text.strip()
    if not task:
        return f"the task is missing. Usage: {SPAWN_USAGE}"
    if len(task) > MAX_TASK_CHARS:
        return f"the task is {len(task):,} characters; at most {MAX_TASK_CHARS:,}"
    return SpawnAsk(subagent_type=kind, task=task)


def leading_flags(text: str) -> tuple[list[str], str]:
    """The ``--flags`` at the start of ``text`` and what follows them (pure)."""
    flags: list[str] = []
    while text.startswith("--"):
        flag = text.split(None, 1)[0]
        flags.append(flag)
        text = words_after(text, 1)
    return flags, text


def parse_spawn(rest: str, types: Collection[str]) -> SpawnAsk | str:
    """The text after ``/subagents spawn`` -> a request, or the answer saying why not."""
    text = rest.strip()
    own_thread, model = False, None
    while text.startswith("--"):
        flag = text.split(None, 1)[0]
        text = words_after(text, 1)
        name, equals, value = flag.partition("=")
        if name.lower() == "--thread" and not equals:
            own_thread = True
        elif name.lower() == "--model":
            if not equals:
                value, text = (text.split(None, 1) or [""])[0], words_after(text, 1)
            if not value or len(value) > MAX_MODEL_CHARS:
                return f"`--model` needs a model name (e.g. `--model local/qwen3`). Usage: {SPAWN_USAGE}"
            model = value
        else:
            shown = flag[:24].replace("`", "'")
            return f"I don't know the option `{shown}`. Usage: {SPAWN_USAGE}"
    parsed = parse_type_and_task(text, types)
    if not isinstance(parsed, SpawnAsk):
        return f"Can't spawn: {parsed}"
    return SpawnAsk(
        subagent_type=parsed.subagent_type, task=parsed.task, own_thread=own_thread, model=model
    )


MAX_MODEL_CHARS = 200
"""The longest model name ``--model`` takes."""


def shown_estimate(record: RunRecord) -> str:
    """The estimate line's text; none before the type and model have runs to go by (a
    person is not told on every first spawn that nothing is known yet; the model is)."""
    text = text_of(record)
    return "" if text == NO_ESTIMATE else text


def started_text(
    seq: int,
    type_name: str,
    task: str,
    warnings: Collection[str] = (),
    *,
    estimate: str = "",
    held: bool = False,
) -> str:
    """``🚀 Started subagent #3 (explore): <task>`` then ``💰 est. ~$0.04 (p90 $0.09)``
    (``estimate``: :func:`bot.runs.estimate.estimate_text`); ``held``: it waits for a
    person's approval to start (pure)."""
    shown = task if len(task) <= 120 else task[:119] + "…"
    ref = RunRef(seq=seq, subagent_type=type_name)
    if held:
        title = run_title(ref, name="none", kind="after")
        head = f"{Icon.APPROVAL} {title} waits for approval to start (estimate above the limit)"
    else:
        head = (
            f"{Icon.STARTED} Started {run_title(ref, noun='subagent', name='none', kind='after')}"
        )
    lines = [f"{head}: {shown}"]
    lines += [f"{Icon.ESTIMATE} {estimate}"] if estimate else []
    lines += [f"{Icon.WARNING} {w}" for w in warnings]
    return "\n".join(lines)


def handle_spawn(req: CommandRequest) -> str:
    deps = req.deps
    rest = words_after(req.command.rest, 1)
    parsed = parse_spawn(rest, subagent_types(deps.settings))
    if isinstance(parsed, str):
        return parsed
    actor = req.actor
    request = SpawnRequest(
        task=parsed.task,
        session_key=req.session_key,
        thread=req.inbound.thread,
        requester=actor.qualified,
        agent_id=deps.settings.agent_id,
        subagent_type=parsed.subagent_type,
        model=parsed.model,
        own_thread=parsed.own_thread,
        spawned_in_turn=BY_COMMAND,  # counted like a model's spawns (bot.runs.quota)
    )
    try:
        record = spawn_run(deps, request, known_models=lambda: None)
    except FanbotError as exc:
        return f"I couldn't start that subagent: {exc}"
    text = started_text(
        record.seq,
        record.subagent_type,
        record.task,
        record.warnings,
        estimate=shown_estimate(record),
        held=bool(record.approval_id),
    )
    return text + (f"\n{Icon.THREAD} Opening a thread of its own…" if parsed.own_thread else "")
