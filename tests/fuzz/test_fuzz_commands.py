"""Fuzzing the chat commands: parse -> ingress -> router -> handlers, against real Redis.

Every example starts from the same seeded runs (a flush and a reseed per example keeps
failures reproducible and shrinkable), sends one message through
:meth:`bot.gateway.ingress.Ingress.handle` exactly as the gateway does, and reads the
answer from the outbox. Properties:

* nothing raises, whatever the text;
* every command gets exactly one answer: non-empty, with balanced code spans (untrusted
  text cannot break the formatting), short lines, and short enough to post as one message
  (``/subagents log`` is the one long answer by design: a bounded number of bounded lines);
* an id that names a run is answered about that run; one that names none gets an answer
  that says how to name one;
* nobody who is neither an admin nor a run's requester changes that run.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, event, given
from hypothesis import strategies as st

from bot.commands import default_router
from bot.commands.answers import LOG_LINE_CHARS, log_line, render_info, render_list, render_log
from bot.commands.parse import MAX_ARGS_CHARS, parse_command
from bot.commands.router import CommandRequest
from bot.commands.subagents import LOG_MAX, SUBCOMMANDS, parse_subagents
from bot.config import Settings
from bot.deps import Deps
from bot.gateway.ingress import Ingress
from bot.runs.access import MAX_TOKEN, Actor, may_control, resolve_run
from bot.runs.logview import select_log
from bot.sessions import requester_session_key
from bot.types import Cleanup, Inbound, RunRecord, RunStatus, Sender, ThreadRef
from tests.fuzz import fuzz_settings

FUZZ = fuzz_settings(suppress_health_check=[HealthCheck.function_scoped_fixture])

ONE_MESSAGE = 4_096
"""Every answer but a log fits one message on every platform (Telegram's 4096 is the least)."""
LINE_MAX = 1_000
LOG_BULLET_MAX = LOG_LINE_CHARS + 40

THREAD = ThreadRef(platform="slack", account="T1", chat="C1", thread="100.1")
SIBLING = ThreadRef(platform="slack", account="T1", chat="C1", thread="200.2")
CHANNEL = ThreadRef(platform="slack", account="T1", chat="C1", thread=None)
EMPTY = ThreadRef(platform="slack", account="T1", chat="C9", thread="300.3")
ADMIN, OWNER, OTHER = "UADMIN", "U1", "U2"


def session_of(thread: ThreadRef) -> str:
    return requester_session_key(agent_id="main", thread=thread)


def _run(run_id: str, created: float, **kw: Any) -> RunRecord:
    base = RunRecord(
        run_id=run_id,
        seq=1,
        session_key=session_of(THREAD),
        child_session_key=f"agent:main:subagent:{run_id[:8]}-0000-4000-8000-{run_id[-12:]}",
        session_id=f"sess-{run_id[:12]}",
        thread=THREAD,
        requester=f"slack:{OWNER}",
        agent_id="main",
        subagent_type="researcher",
        task="look into it",
        model="m",
        created_at=created,
        job_id=run_id,
    )
    return replace(base, **kw)


def seeded_runs(now: float) -> list[RunRecord]:
    """The thread's runs, newest first, numbered #5 (newest) to #1 like a real session."""
    long = "word " * 2_000
    runs = [
        _run(
            "abcd" + "1" * 28,
            now - 10,
            status=RunStatus.RUNNING,
            started_at=now - 9,
            label="Django `research`\nsecond line",
            result="half done " * 100,
        ),
        _run("abcd" + "2" * 28, now - 20, requester=f"slack:{OTHER}", task=long),
        _run(
            "1234" + "a" * 28,
            now - 30,
            status=RunStatus.SUCCESS,
            started_at=now - 29,
            ended_at=now - 25,
            result=long,
            notes="`" * 50,
            prompt_tokens=1200,
            completion_tokens=300,
            cost_usd=0.0012,
        ),
        _run(
            "ffee" + "3" * 28,
            now - 40,
            status=RunStatus.ERROR,
            started_at=now - 39,
            ended_at=now - 38,
            notes="boom " * 500,
            archived_at=now - 1,
            cleanup=Cleanup.DELETE,
        ),
        _run(
            "0000" + "4" * 28,
            now - 50,
            status=RunStatus.STOPPED,
            requester=f"slack:{OTHER}",
            started_at=now - 49,
            ended_at=now - 45,
            label="\u202e\u0000\x1b[31mred\x1b[0m " + "é" * 200,
        ),
    ]
    return [replace(r, seq=len(runs) - i) for i, r in enumerate(runs)]


TRANSCRIPT: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a researcher."},
    {"role": "user", "content": "look into it " * 300},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "web", "arguments": '{"q": 1'}},
            {"id": "c2", "type": "function", "function": {"name": "x" * 500, "arguments": "[]"}},
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "`" * 900},
    {"role": "assistant", "content": [{"type": "text", "text": "line\n" * 400}, "junk"]},
]


class World:
    """Redis with seeded runs, and the gateway's ingress in front of it."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self.ingress = Ingress(deps=deps, router=default_router())
        self.ids = itertools.count()
        self.runs: list[RunRecord] = []

    def __repr__(self) -> str:  # hypothesis prints fixtures of failing examples
        return "World()"

    def reset(self) -> None:
        self.deps.redis.flushall()
        now = time.time()
        self.runs = seeded_runs(now)
        for record in self.runs:
            self.deps.runs.create(record)
            for message in TRANSCRIPT:
                self.deps.transcripts.append(record.session_id, message)
        self.deps.runs.create(
            _run("9999" + "5" * 28, now - 5, thread=SIBLING, session_key=session_of(SIBLING))
        )

    def send(self, text: str, *, user: str, thread: ThreadRef, dm: bool = False) -> list[str]:
        """One message through ingress; the command answers it put in the outbox."""
        message_id = f"m{next(self.ids)}"
        inbound = Inbound(
            thread=thread,
            sender=Sender(user_id=user, display_name=user.lower()),
            text=text,
            message_id=message_id,
            mentioned=True,
            is_dm=dm,
        )
        result = self.ingress.handle(inbound)
        assert not result.duplicate
        key = f"cmd:{thread.platform}:{message_id}"
        return [m["text"] for m in self.outbox() if m["idempotency_key"] == key]

    def outbox(self) -> list[dict[str, Any]]:
        return [json.loads(f[b"data"]) for _, f in self.deps.redis.xrange(self.deps.keys.outbox)]

    def statuses(self) -> dict[str, tuple[RunStatus, str]]:
        return {
            r.run_id: (r.status, r.requester)
            for r in self.deps.runs.get_many(r.run_id for r in self.runs)
        }


@pytest.fixture
def world(redis_url: str) -> Iterator[World]:
    settings = Settings(
        redis_url=redis_url,
        admins=[f"slack:{ADMIN}"],
        openai={"models": ["m"], "model": "m"},  # type: ignore[arg-type]
        gateway={"max_inbound_chars": 20_000},  # type: ignore[arg-type]
    )
    deps = Deps.build(settings, client=redis.Redis.from_url(redis_url))
    yield World(deps)
    deps.close()


# -- strategies ------------------------------------------------------------------------------

ws = st.sampled_from([" ", "  ", "\t", "\n", " \n ", "\r\n", "\u00a0", "\u2003", "\u3000"])
junk_text = st.text(max_size=60)


class Huge(str):
    """A long string that prints short (hypothesis warns about huge example reprs)."""

    piece: str
    times: int

    def __new__(cls, piece: str, times: int) -> Huge:
        self = super().__new__(cls, piece * times)
        self.piece, self.times = piece, times
        return self

    def __repr__(self) -> str:
        return f"{self.piece!r} * {self.times}"


huge_token = st.builds(Huge, st.text(min_size=1, max_size=4), st.integers(500, 6000))
any_token = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Zs", "Cc")), min_size=1),
    st.sampled_from(["#", "##1", "#0", "#-1", "0", "00", "#1", "1", "2", "5", "6", "last"]),
    st.sampled_from(["LAST", "abcd", "ABCD", "abc", "1234", "ffee", "9999", "a" * 200]),
    st.sampled_from(["all", "ALL", "tools", "²", "٣", "1e3", "0x1", "agent:main:subagent:x"]),
    st.sampled_from(["`", "a`b", "``x``", "**", "_x_", "<@U1>", "<!here>", "\u200b", "🙂"]),
    st.builds(
        Huge, st.text(alphabet="abcdef0123456789#`x", min_size=1, max_size=4), st.integers(30, 3000)
    ),
)
heads = st.sampled_from(["/subagents", "/SUBAGENTS", "/Subagents", "/stop", "/STOP", "/help"])
users = st.sampled_from([ADMIN, OWNER, OTHER, ""])
threads = st.sampled_from([THREAD, THREAD, CHANNEL, SIBLING, EMPTY])


@st.composite
def command_texts(draw: st.DrawFn) -> str:
    """Command-shaped text: a head, then tokens, with any whitespace around and between."""
    lead = draw(st.sampled_from(["", " ", "\n", "\t ", "\u00a0"]))
    head = draw(st.one_of(heads, st.builds("/{}".format, junk_text)))
    parts = [head]
    if draw(st.booleans()):
        parts.append(draw(st.one_of(st.sampled_from(SUBCOMMANDS), any_token)))
    parts += draw(st.lists(any_token, max_size=4))
    text = lead + "".join(p + draw(ws) for p in parts)
    return text if draw(st.booleans()) else text.rstrip()


any_text = st.one_of(
    command_texts(),
    st.text(),
    st.builds("/subagents {}".format, st.text()),
    st.builds("/stop{}".format, st.text(max_size=20)),
    huge_token,
)


# -- checks ----------------------------------------------------------------------------------


def check_reply(text: str) -> None:
    """What every command answer must look like."""
    assert text.strip(), "empty answer"
    assert text.count("`") % 2 == 0, f"unbalanced code span in {text!r}"
    if text.startswith("**Log of subagent"):
        head, *bullets = text.split("\n")
        assert len(head) <= LINE_MAX
        assert len(bullets) <= LOG_MAX
        assert all(len(b) <= LOG_BULLET_MAX for b in bullets), "log line too long"
        return
    assert len(text) <= ONE_MESSAGE, f"answer of {len(text)} characters"
    assert all(len(line) <= LINE_MAX for line in text.split("\n"))


def check_authorization(
    world: World, before: dict[str, tuple[RunStatus, str]], user: str, thread: ThreadRef
) -> None:
    """Only admins and requesters stop runs; nothing else ends one."""
    actor = Actor(platform=thread.platform, user_id=user, admins=world.deps.settings.admins)
    for run_id, (status, requester) in world.statuses().items():
        if status is before[run_id][0]:
            continue
        assert status is RunStatus.STOPPED, f"{run_id}: {before[run_id][0]} -> {status}"
        assert actor.is_admin or requester == actor.qualified, f"{user} stopped {run_id}"


# -- properties ------------------------------------------------------------------------------


@FUZZ
@given(text=any_text, user=users, thread=threads, dm=st.booleans())
def test_any_text_through_ingress_never_raises_and_answers_are_bounded(
    world: World, text: str, user: str, thread: ThreadRef, dm: bool
) -> None:
    world.reset()
    before = world.statuses()
    replies = world.send(text, user=user, thread=thread, dm=dm)
    command = parse_command(text)
    name = None if command is None else command.name if command.known else "(other)"
    event(f"answered: {bool(replies)}; command: {name}")
    if command is not None and command.known and text.strip() and len(text) <= 20_000:
        assert len(replies) == 1, f"{len(replies)} answers to {text!r}"
    assert len(replies) <= 1
    for reply in replies:
        check_reply(reply)
    check_authorization(world, before, user, thread)


@st.composite
def references(draw: st.DrawFn) -> tuple[str, int]:
    """A token naming one of THREAD's seeded runs, and that run's number."""
    run = draw(st.sampled_from(seeded_runs(0)))
    number = run.seq
    unique = 8 if run.run_id.startswith("abcd") else 4
    token = draw(
        st.sampled_from(
            [
                str(number),
                f"#{number}",
                run.child_session_key,
                run.run_id[: draw(st.integers(unique, len(run.run_id)))],
                run.run_id.upper()[:12],
            ]
        )
    )
    if draw(st.booleans()) and number == 5:  # the newest
        token = draw(st.sampled_from(["last", "Last", "LAST"]))
    return token, number


def _unresolvable(token: str) -> bool:
    lowered = token.lower()
    return lowered != "last" and not any(
        r.run_id.startswith(lowered) and len(lowered) >= 4 for r in seeded_runs(0)
    )


junk_ids = st.one_of(
    st.from_regex(r"[g-zG-Z_!?.~-]{1,12}", fullmatch=True),
    st.sampled_from(["#0", "#6", "#999999999", "0", "6", "abc", "ffff", "abcd", "a1b2c3"]),
    st.sampled_from(["agent:main:subagent:nope", "agent:x:subagent:" + "0" * 36, "#", "#x"]),
    st.text(min_size=1, max_size=30).map(lambda t: "".join(t.split()) + "z"),
).filter(_unresolvable)

verbs = st.sampled_from(
    [
        ("info", ""),
        ("log", ""),
        ("log", " 3"),
        ("log", " tools"),
        ("log", " 500 TOOLS"),
        ("stop", ""),
        ("send", " keep going"),
        ("send", " \n multi\nline `msg`"),
    ]
)


@FUZZ
@given(ref=references(), verb=verbs, user=users, sep=ws, case=st.sampled_from([str, str.upper]))
def test_an_id_that_names_a_run_is_answered_about_that_run(
    world: World,
    ref: tuple[str, int],
    verb: tuple[str, str],
    user: str,
    sep: str,
    case: Any,
) -> None:
    world.reset()
    token, number = ref
    action, extra = verb
    [reply] = world.send(
        f"/subagents{sep}{case(action)}{sep}{token}{extra}", user=user, thread=THREAD
    )
    check_reply(reply)
    assert f"ubagent #{number}" in reply, reply


@FUZZ
@given(token=junk_ids, verb=verbs, user=users, sep=ws)
def test_an_id_that_names_no_run_gets_a_clear_answer(
    world: World, token: str, verb: tuple[str, str], user: str, sep: str
) -> None:
    world.reset()
    action, extra = verb
    [reply] = world.send(f"/subagents{sep}{action}{sep}{token}{extra}", user=user, thread=THREAD)
    check_reply(reply)
    assert "/subagents list" in reply or "type more characters" in reply, reply


@FUZZ
@given(texts=st.lists(st.tuples(any_text, users, threads), min_size=2, max_size=6))
def test_command_sequences_never_raise(
    world: World, texts: list[tuple[str, str, ThreadRef]]
) -> None:
    world.reset()
    for text, user, thread in texts:
        before = world.statuses()
        for reply in world.send(text, user=user, thread=thread):
            check_reply(reply)
        check_authorization(world, before, user, thread)


def test_a_long_list_stays_one_message(world: World) -> None:
    world.reset()
    now = time.time()
    for i in range(300):
        run = _run(f"{i:04x}" + "e" * 28, now - 100 - i, seq=6 + i, label="x" * 100)
        world.deps.runs.create(run)
    [reply] = world.send("/subagents list", user=OWNER, thread=THREAD)
    check_reply(reply)
    assert "305" in reply  # the total is still told
    [info] = world.send("/subagents info 300", user=OWNER, thread=THREAD)
    assert info.startswith("**Subagent #300**")


# -- the pure parts, directly ----------------------------------------------------------------


@FUZZ
@given(
    lead=st.sampled_from(["", " ", "\n", "\t"]),
    name=st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,15}", fullmatch=True),
    sep=ws,
    args=st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",))), max_size=5),
)
def test_parse_command_splits_on_any_whitespace(
    lead: str, name: str, sep: str, args: list[str]
) -> None:
    rest = " ".join(args)
    command = parse_command(f"{lead}/{name}{sep}{rest}")
    assert command is not None
    assert command.name == name.lower()
    assert command.rest == rest.strip()[:MAX_ARGS_CHARS]
    assert command.args == tuple(command.rest.split())


@FUZZ
@given(text=st.text())
def test_parse_command_on_any_text(text: str) -> None:
    command = parse_command(text)
    if command is None:
        return
    assert text.lstrip().startswith("/")
    assert command.name and not any(c.isspace() for c in command.name)
    assert len(command.rest) <= MAX_ARGS_CHARS
    parsed = parse_subagents(command)
    if isinstance(parsed, str):
        check_reply(parsed)


@FUZZ
@given(
    sub=st.sampled_from(SUBCOMMANDS).map(lambda s: s.upper() if s == "log" else s),
    tokens=st.lists(any_token | any_token.map("{}`".format), max_size=3),
    sep=ws,
)
def test_subagents_arguments_get_a_request_or_a_well_formed_answer(
    sub: str, tokens: list[str], sep: str
) -> None:
    command = parse_command(sep.join(["/subagents", sub, *tokens]))
    assert command is not None and command.name == "subagents"
    parsed = parse_subagents(command)
    if isinstance(parsed, str):
        check_reply(parsed)
    else:
        assert parsed.action in SUBCOMMANDS


runs_strategy = st.lists(
    st.builds(
        _run,
        run_id=st.text(alphabet="0123456789abcdef", min_size=32, max_size=32),
        created=st.floats(0, 2e9),
        status=st.sampled_from(RunStatus),
        label=st.text(max_size=300),
        task=st.text(max_size=3000),
        result=st.text(max_size=3000),
        notes=st.text(max_size=3000),
        started_at=st.none() | st.floats(0, 2e9),
        ended_at=st.none() | st.floats(0, 2e9),
        archived_at=st.none() | st.floats(0, 2e9),
        cost_usd=st.none() | st.floats(0, 1e6),
    ),
    max_size=8,
)


@FUZZ
@given(token=st.one_of(any_token, st.text()), runs=runs_strategy)
def test_resolve_run_answers_every_token(token: str, runs: list[RunRecord]) -> None:
    found = resolve_run(token, runs)
    if found.run is None:
        check_reply(found.error)
        assert len(found.error) <= MAX_TOKEN + 400
    else:
        assert any(r is found.run for r in runs)
        number = token.strip().removeprefix("#")
        if number.isdigit() and number.isascii() and not number.startswith("0"):
            assert found.run.seq == int(number) or found.run.run_id.startswith(number)


@FUZZ
@given(runs=runs_strategy, now=st.floats(0, 2e9), user=users)
def test_render_and_auth_on_any_record(runs: list[RunRecord], now: float, user: str) -> None:
    check_reply(render_list(runs, now=now))
    actor = Actor(platform="slack", user_id=user, admins=[f"slack:{ADMIN}"])
    for run in runs:
        check_reply(render_info(run, now=now, transcript_ref="t", archive_at=now))
        decision = may_control(actor, run)
        assert decision.allowed or decision.reason


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)
messages = st.one_of(
    st.dictionaries(st.sampled_from(["role", "content", "tool_calls", "x"]), json_values),
    st.fixed_dictionaries(
        {"role": st.sampled_from(["assistant", "tool", "user"])},
        optional={
            "content": json_values,
            "tool_calls": st.lists(
                st.one_of(
                    json_values,
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "function": st.one_of(
                                json_values,
                                st.fixed_dictionaries(
                                    {}, optional={"name": json_values, "arguments": json_values}
                                ),
                            )
                        },
                    ),
                ),
                max_size=3,
            ),
        },
    ),
)


@FUZZ
@given(batch=st.lists(messages, max_size=6), limit=st.integers(0, LOG_MAX), tools=st.booleans())
def test_render_log_on_any_transcript(batch: list[dict[str, Any]], limit: int, tools: bool) -> None:
    run = seeded_runs(0)[0]
    text = render_log(run, view=select_log(batch, limit=limit, tools=tools), tools=tools)
    check_reply(text)
    for message in batch:
        assert len(log_line(message)) <= LOG_BULLET_MAX


def test_direct_dispatch_of_an_unknown_command(world: World) -> None:
    world.reset()
    command = parse_command("/x" + "`" * 41 + " y")
    assert command is not None
    inbound = Inbound(thread=THREAD, sender=Sender(user_id=OWNER), text="x", message_id="u")
    request = CommandRequest(
        command=command, inbound=inbound, session_key=session_of(THREAD), deps=world.deps
    )
    reply = default_router().dispatch(request)
    check_reply(reply)
    assert "/help" in reply
