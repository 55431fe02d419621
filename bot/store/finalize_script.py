"""The finalize script: a run's terminal transition, one atomic Lua script over nine owners.

Every path that ends a run (the job, RQ's callbacks, the reaper, a stop) calls it; only
the first call changes anything. The decision is the script's compare-and-set of the run's
status from ``queued``/``running`` to terminal: callers only prepare what to write (see
:func:`bot.runs.finalize.end_run`) and never check the status themselves.

The script is composed here from pieces each owner provides (:mod:`bot.store.lua_parts`);
no owner's Lua names another owner's keys. In order:

=================  =================================  ==========================================
step               owner (fragment)                   writes
=================  =================================  ==========================================
``recheck_run``    :mod:`bot.store.stops`             a stop's hard-stop re-check on
                   (``RECHECK_RUN``)                  ``stops:pending``; stands whether or not
                                                      this call ends the run
``end_run``        :mod:`bot.store.runs`              the decision; the status, ``ended_at`` and
                   (``END_RUN``)                      result fields; leaves the active set; drops
                                                      the heartbeat; schedules archiving; raises
                                                      a stop's flag (either way, like the re-check)
``put_outbound``   :mod:`bot.store.outbox`            the announce, on the outbox stream
``append_history`` :mod:`bot.store.history`           the result, on the requester's history
``free_slot``      :mod:`bot.store.fair`              the run's job leaves ``fair:slots``
``put_final_...``  :mod:`bot.store.progress`          the run's last event on its status card,
                   (``FINAL_PROGRESS``)               with the tool count ``end_run`` returns
``apply_metrics``  :mod:`bot.store.metrics`           the run's end in the cluster's metrics
``leave_join``     :mod:`bot.store.joins`             the run leaves its fan-in, firing it if it
                                                      was the last pending run
``record_sample``  :mod:`bot.store.estimates`         what the run spent, for the estimates of
                   (``RECORD_SAMPLE``)                later spawns of its type and model (laid
                                                      out last, called before ``leave_join``)
=================  =================================  ==========================================

Returns 0 when the run had ended already (nothing after the decision ran), 1 when this
call ended it, 2 when that also fired its join; with the messages the run never read
(``end_run`` takes them from its inbox: they go to a follow-up run). One round trip.

The runs registry builds this script (it registers and calls it), so it hands its own
fragment to :class:`FinalizeScript` rather than this module importing the registry.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from bot.store.estimates import RECORD_SAMPLE
from bot.store.fair import FREE_SLOT
from bot.store.history import APPEND_HISTORY
from bot.store.joins import LEAVE_JOIN
from bot.store.lua_parts import Fragment, Part, call, flatten
from bot.store.metrics import APPLY_METRICS
from bot.store.outbox import PUT_OUTBOUND
from bot.store.progress import FINAL_PROGRESS
from bot.store.stops import RECHECK_RUN


@dataclass(frozen=True, kw_only=True)
class FinalizeParts:
    """One call's part of each step (see the module docstring), made by each owner."""

    recheck: Part
    end: Part
    announce: Part
    history: Part
    slot: Part
    progress: Part
    metrics: Part
    join: Part
    sample: Part

    def ordered(self) -> tuple[Part, ...]:
        return (
            self.recheck,
            self.end,
            self.announce,
            self.history,
            self.slot,
            self.progress,
            self.metrics,
            self.join,
            self.sample,
        )


def steps(end_run: Fragment) -> tuple[Fragment, ...]:
    """The fragments, in the order the script calls them and lays out their keys."""
    return (
        RECHECK_RUN,
        end_run,
        PUT_OUTBOUND,
        APPEND_HISTORY,
        FREE_SLOT,
        FINAL_PROGRESS,
        APPLY_METRICS,
        LEAVE_JOIN,
        RECORD_SAMPLE,
    )


def assemble(end_run: Fragment) -> str:
    """The script's Lua: every fragment, then the body calling them in order."""
    calls, key_at, arg_at = [], 1, 1
    for fragment in steps(end_run):
        extra = "tools" if fragment is FINAL_PROGRESS else ""
        calls.append(call(fragment, key_at=key_at, arg_at=arg_at, extra=extra))
        key_at, arg_at = key_at + fragment.keys, arg_at + fragment.args
    recheck, end, announce, history, slot, progress, metrics, join, sample = calls
    body = (
        f"{recheck}\n"
        f"local ended, tools, inbox, receipts = {end}\n"
        "if ended == 0 then return {0, {}, {}} end\n"
        f"{announce}\n{history}\n{slot}\n"
        f"{progress}\n{metrics}\n{sample}\n"
        f"return {{1 + {join}, inbox, receipts}}\n"
    )
    return "".join(fragment.lua for fragment in steps(end_run)) + body


class FinalizeScript:
    """The registered script; calling it runs one terminal transition.

    Args:
        redis: Sync client.
        end_run: The runs registry's fragment (``end_run``).
    """

    def __init__(self, *, redis: redis.Redis, end_run: Fragment) -> None:
        self.steps = steps(end_run)
        self._script = redis.register_script(assemble(end_run))

    def __call__(self, parts: FinalizeParts) -> tuple[int, list[bytes], list[bytes]]:
        """Run it: the code (0, 1, 2) and the messages and receipts ``end_run`` took."""
        ordered = parts.ordered()
        given = tuple(part.fragment for part in ordered)
        if given != self.steps:
            raise ValueError(f"finalize parts out of order: {[f.name for f in given]}")
        keys, args = flatten(ordered)
        code, inbox, receipts = self._script(keys=keys, args=args)
        return int(code), list(inbox), list(receipts)
