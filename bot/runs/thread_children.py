"""Thread-bound children: a run that works in a thread of its own.

``/subagents spawn --thread`` and ``sessions_spawn(thread=true)`` may run on a worker, but
only the gateway can open a thread, so the request is durable: :func:`request_thread`
notes the binding as pending and queues an outbox entry of kind ``open_thread``. The
gateway's egress asks the adapter (:class:`~bot.ports.ThreadOpener`) and calls
:func:`thread_opened`, which records the binding both ways and points the run's record at
the new thread, so its status, announce and follow-ups go there. Where no thread can be
opened the run stays in the thread it was spawned from, and that thread is told why.

People's messages in a bound thread go to the child (the gateway's ingress): a steer while it
runs, a follow-up run after it ended. Its final answer is announced in its own thread and
also in the parent thread with a link (:func:`copy_to_parent`, called by egress once
the announce is posted). ``/subagents close``
unbinds it (:func:`close_thread`); messages there then go to the main agent.
"""

from __future__ import annotations

import json

from bot.deps import Deps
from bot.observe import tracing
from bot.runs.naming import Icon, run_title
from bot.store.threads import Binding, BindState
from bot.text.clip import clip
from bot.types import Outbound, OutboundKind, RunRecord, ThreadRef

TITLE_CHARS = 96
INTRO_TASK_CHARS = 1_000


def thread_title(record: RunRecord) -> str:
    """``#3 explore: map the repo`` (pure; Telegram allows 128 characters)."""
    return run_title(record, noun="", kind="colon", name="folded", limit=TITLE_CHARS)


def open_key(run_id: str) -> str:
    return f"open-thread:{run_id}"


def run_of_open_key(key: str) -> str:
    """The run id in an ``open_thread`` entry's idempotency key ("" if it is not one)."""
    prefix = open_key("")
    return key[len(prefix) :] if key.startswith(prefix) else ""


def request_thread(deps: Deps, record: RunRecord) -> None:
    """Ask the gateway (through the outbox) to open ``record``'s own thread."""
    title = thread_title(record)
    deps.thread_bindings.request(Binding(run_id=record.run_id, parent=record.thread, title=title))
    ask = Outbound(
        thread=record.thread,
        text=title,
        kind=OutboundKind.OPEN_THREAD,
        idempotency_key=open_key(record.run_id),
        traceparent=tracing.traceparent() or record.traceparent,
    )
    deps.outbox.put(ask)


def thread_opened(
    deps: Deps, run_id: str, *, thread: ThreadRef | None, link: str = "", note: str = ""
) -> Binding | None:
    """Record what the gateway got for ``run_id``: its thread, or None and why not.

    Idempotent: a redelivered request finds the binding settled and changes nothing.
    """
    store = deps.thread_bindings
    found = store.for_run(run_id)
    record = deps.runs.get(run_id)
    if found is None or found.state != BindState.PENDING or record is None:
        return found
    state = BindState.BOUND if thread is not None else BindState.UNAVAILABLE
    binding = Binding(
        run_id=run_id,
        parent=found.parent,
        child=thread,
        link=link,
        title=found.title,
        state=state,
        note=note,
    )
    store.settle(binding)
    if thread is not None:
        deps.runs.update(run_id, thread=json.dumps(thread.to_json()))
    for message in opened_messages(binding, record):
        deps.outbox.put(message)
    return binding


def opened_messages(binding: Binding, record: RunRecord) -> list[Outbound]:
    """What people see once the thread is open, or could not be (pure)."""
    name = run_title(record, noun="subagent", name="none", kind="after")
    key = f"thread-note:{record.run_id}"
    if binding.child is None:
        text = (
            f"{Icon.THREAD} I couldn't open a thread of its own for {name} "
            f"({binding.note or 'unknown'}); "
            "it reports here."
        )
        return [Outbound(thread=binding.parent, text=text, idempotency_key=key)]
    intro = (
        f"{Icon.THREAD} {name}: {clip(record.task, INTRO_TASK_CHARS)}\n"
        f"Messages in this thread go to it. `/subagents close {record.seq}` unbinds it."
    )
    return [
        Outbound(thread=binding.child, text=intro, idempotency_key=f"thread-intro:{record.run_id}"),
        Outbound(
            thread=binding.parent,
            text=f"{Icon.THREAD} {name} works in {binding.link}",
            idempotency_key=key,
        ),
    ]


def bound_run(deps: Deps, thread: ThreadRef) -> RunRecord | None:
    """The run whose own thread ``thread`` is (None: a normal thread)."""
    run_id = deps.thread_bindings.for_thread(thread)
    return deps.runs.get(run_id) if run_id else None


def parent_announce(deps: Deps, announce: Outbound) -> Outbound | None:
    """The copy of a thread-bound run's announce for the thread it was spawned from (None
    for any other message, and for a run that announced before its thread was open)."""
    if announce.kind is not OutboundKind.ANNOUNCE or not announce.run_id:
        return None
    binding = deps.thread_bindings.for_run(announce.run_id)
    if binding is None or binding.child is None or announce.thread != binding.child:
        return None
    return Outbound(
        thread=binding.parent,
        text=f"{announce.text}\n{Icon.THREAD} Its thread: {binding.link}",
        kind=OutboundKind.ANNOUNCE,
        idempotency_key=f"announce-parent:{binding.run_id}",
        traceparent=announce.traceparent,
    )


def copy_to_parent(deps: Deps, announce: Outbound) -> None:
    """Queue :func:`parent_announce`'s copy, if any. Egress calls it after posting the
    announce and before recording it delivered, so a gateway that dies in between queues
    it again; the copy's own key makes it post once."""
    if (copy := parent_announce(deps, announce)) is not None:
        deps.outbox.put(copy)


def close_thread(deps: Deps, record: RunRecord) -> str:
    """Unbind ``record``'s thread (``/subagents close``); returns the answer."""
    store = deps.thread_bindings
    # A follow-up run lives in the thread under the id of the run it was opened for.
    binding = store.for_run(store.for_thread(record.thread) or record.run_id)
    if binding is None or binding.state != BindState.BOUND:
        return f"{run_title(record, name='none')} has no thread of its own to close."
    store.unbind(binding.run_id)
    return (
        f"{Icon.THREAD} Closed the thread of {run_title(record, noun='subagent', name='none')}: "
        "messages there now go to the main agent."
    )
