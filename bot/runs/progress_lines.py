"""What a run tells its status card: progress lines as in learn-claude-code.

While it works (with its spawn's estimate, :mod:`bot.runs.estimate`), and when it ends::

    ⏳ [explore] Subagent #2 "Django research" — step 3 · 🔧 web_search(django) · 1200 tokens · 5 tools, 3.2s · 💰 est. ~$0.04 (p90 $0.09)
    ✅ [explore] Subagent #2 "Django research" — success (8 tools, 5.1s)

The worker puts the numbers on each :class:`~bot.store.progress.ProgressEvent` (``tools``,
``elapsed``) and the gateway renders them (:mod:`bot.gateway.status_cards`). The tool count
is also kept in the run's hash (:data:`bot.store.runs.TOOLS_FIELD`), so whichever process
finalizes the run (the job, a stop, the reaper) puts the final count on the last event (the
finalize script does, :mod:`bot.store.finalize_script`). A run whose
answer is ``ANNOUNCE_SKIP`` ends *quiet*: its card goes away instead of reading "success".
"""

from __future__ import annotations

from bot.deps import Deps
from bot.runs.estimate import card_note
from bot.steps import Meter
from bot.store.progress import ProgressEvent
from bot.store.runs import TOOLS_FIELD
from bot.text.units import duration
from bot.types import RunRecord


def tally(tools: int, elapsed: float) -> str:
    """``5 tools, 3.2s`` (pure)."""
    return f"{tools} tool{'' if tools == 1 else 's'}, {duration(elapsed, style='tenths')}"


def step_event(record: RunRecord, meter: Meter, text: str) -> ProgressEvent:
    """A progress event for ``text``, with the meter's tool count and elapsed time; its
    standing note is the meter's (a budget warning), else the spawn's estimate."""
    return ProgressEvent(
        run_id=record.run_id,
        thread=record.thread,
        text=text,
        tools=meter.tool_calls,
        elapsed=meter.elapsed,
        note=meter.note or card_note(record),
    )


def show_waiting(deps: Deps, run_id: str, what: str) -> None:
    """Keep what the run waits for (the model's rate limit; "" once it goes on) in its hash,
    for ``/subagents list`` (its card has it as the meter's note)."""
    deps.runs.update(run_id, waiting=what)  # RunRecord.waiting


def save_tool_count(deps: Deps, run_id: str, meter: Meter) -> None:
    """Keep the meter's tool count in the run's hash, for the final event."""
    deps.runs.update(run_id, **{TOOLS_FIELD: meter.tool_calls})
