"""Redis-backed stores, one owner per structure (:mod:`bot.store.owner`), each built once
per process in :meth:`bot.deps.Deps.build`; other code reaches Redis through them (only
health probes and RQ's worker loop hold a client of their own). Sync by design: workers are
sync, and the gateway calls them in a thread (its outbox and progress readers and its
metrics writer are the async exceptions, built by the gateway). RQ's own keys are touched
beyond RQ's API only in :mod:`bot.store.rq_layout`. Key names are built by
:class:`bot.keys.Keys`.

===================  ===================  ==================================================
module               owner on ``Deps``    what it owns
===================  ===================  ==================================================
``runs``             ``runs``             the run hashes, active set, session indexes,
                                          heartbeats, inboxes and the archive
``run_codec``                             a run record as a flat hash and back (pure)
``finalize_script``                       the finalize script, composed from the owners'
                                          fragments (:mod:`bot.store.lua_parts`)
``lua_parts``                             the pieces a script spanning owners is made of
``jobs``             ``jobs``             every call into RQ's API; the job wire contract
``fair``             (``jobs.fair``)      the fair line for subagent slots; admission
``rq_layout``        ``rq``               what fanbot does to RQ's own keys, and why
``outbox``           ``outbox``           the outbox stream, parts, delivered markers
                                          (writer; the gateway's async reader ``Outbox``)
``progress``         ``progress``         the progress stream and each run's status card
                                          (writer; the gateway's reader ``ProgressStore``)
``dead_letters``     ``dead_letters``     messages that ran out of retries; replay
``history``          ``history``          a requester session's bounded chat history
``thread_models``    ``thread_models``    a thread's own model (``/model``)
``transcripts``      ``transcripts``      a run's messages, in order
``dedupe``           ``dedupe``           inbound events seen, claimed once
``stops``            ``stops``            pending hard stops and turn-stop flags
``joins``            ``joins``            fan-ins: the runs a turn waits for
``approvals``        ``approvals``        tool calls of parked runs waiting for a person
``budgets``          ``budgets``          spend counters and their holds
``receipts``         ``receipts``         what became of each steering message
``threads``          ``thread_bindings``  which run owns a thread of its own, both ways
``schedules``        ``schedules``        recurring runs and their ticks
``workspace``        ``workspace``        the session's shared files
``leases``           ``leases``           short leases for periodic jobs (the sweep)
``lost_jobs``        ``lost_jobs``        when each job RQ lost was first seen lost
``metrics``          ``metrics``          cluster-wide counters and histograms, and the
                                          updates this process keeps until it writes them
``estimates``        ``estimates``        recent runs' spend per type and model (spawn
                                          estimates)
``owner``                                 what every owner keeps: client, keys, scripts
===================  ===================  ==================================================
"""

from __future__ import annotations

from typing import Any


def as_text(value: Any) -> str:
    """A Redis reply (bytes, or str with ``decode_responses``) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)
