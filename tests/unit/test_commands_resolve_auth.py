"""Id resolution and authorization of the control commands (pure, table-driven)."""

from __future__ import annotations

import pytest

from bot.runs.access import Actor, channel_scope, may_control, partition, resolve_run, valid_forms
from bot.types import RunRecord, RunStatus, ThreadRef

THREAD = ThreadRef(platform="slack", account="T1", chat="C1", thread="1.0")


def run(run_id: str, *, child: str = "", requester: str = "slack:U1", **kw: object) -> RunRecord:
    values: dict[str, object] = {
        "run_id": run_id,
        "seq": 1,
        "session_key": "agent:main:slack:C1:thread:1.0",
        "child_session_key": child or f"agent:main:subagent:{run_id}-uuid",
        "session_id": "s" + run_id,
        "thread": THREAD,
        "requester": requester,
        "agent_id": "main",
        "subagent_type": "general-purpose",
        "task": "task " + run_id,
        "model": "m",
    }
    values.update(kw)
    return RunRecord(**values)  # type: ignore[arg-type]


# newest first, as the registry returns them; each run keeps its own number (seq), which
# is not its position in the list
RUNS = [
    run("abcd1111ffff", seq=8),
    run("abcd2222ffff", seq=7),
    run("1234eeee0000", seq=6, child="agent:main:subagent:shared"),
    run("9999aaaa0000", seq=5, child="agent:main:subagent:shared"),
]

FOUND = [
    ("last", 0),
    ("LAST", 0),
    ("8", 0),
    ("#8", 0),
    ("#5", 3),
    ("5", 3),
    (" 7 ", 1),
    ("abcd1", 0),
    ("ABCD2", 1),
    ("abcd1111ffff", 0),
    ("1234e", 2),
    ("1234", 2),  # no run has that number; unique as a run-id prefix
    ("agent:main:subagent:abcd2222ffff-uuid", 1),
    ("agent:main:subagent:shared", 2),  # a follow-up shares the key: the newest run
]


@pytest.mark.parametrize(("token", "index"), FOUND)
def test_every_id_form_finds_its_run(token: str, index: int) -> None:
    found = resolve_run(token, RUNS)
    assert found.run is RUNS[index]
    assert found.error == ""


NOT_FOUND = [
    ("0", "There is no run #0 here"),
    ("1", "There is no run #1 here"),  # a list position is not a run number
    ("#9", "There is no run #9 here"),
    ("12", "There is no run #12 here"),
    ("99999", "No run here has an id starting `99999`"),
    ("abcd", "`abcd` matches 2 runs (#8 `abcd1111ffff`, #7 `abcd2222ffff`)"),
    ("abc", "`abc` is too short for a run-id prefix (at least 4 characters)"),
    ("ffff0000", "No run here has an id starting `ffff0000`"),
    ("frobnicate", "`frobnicate` is not a run id I know"),
    ("agent:main:subagent:nope", "No run here has session `agent:main:subagent:nope`"),
    ("`rm -rf`", "`'rm -rf'` is not a run id I know"),
    ("#", "`#` is not a run id I know"),
    ("-1", "`-1` is not a run id I know"),
]


@pytest.mark.parametrize(("token", "message"), NOT_FOUND)
def test_unknown_ambiguous_and_out_of_range_ids_get_a_clear_answer(
    token: str, message: str
) -> None:
    found = resolve_run(token, RUNS)
    assert found.run is None
    assert message in found.error
    if "matches" not in message:
        assert valid_forms(RUNS) in found.error  # says what is valid


def test_valid_forms_names_every_form() -> None:
    text = valid_forms(RUNS)
    for form in ("`#5`–`#8`", "status card", "`last`", "run-id prefix", "child session key"):
        assert form in text


def test_a_number_two_threads_share_is_ambiguous_in_a_channel_wide_command() -> None:
    other = ThreadRef(platform="slack", account="T1", chat="C1", thread="2.0")
    runs = [run("aaaa0000", seq=3), run("bbbb0000", seq=3, thread=other)]
    found = resolve_run("#3", runs)
    assert found.run is None
    assert "#3 names 2 runs" in found.error and "`aaaa0000`" in found.error


def test_nothing_resolves_when_there_are_no_runs() -> None:
    found = resolve_run("last", [])
    assert found.run is None and "no subagent runs here yet" in found.error


def test_long_garbage_is_echoed_bounded() -> None:
    found = resolve_run("x" * 5000, RUNS)
    assert found.run is None and len(found.error) < 400


@pytest.mark.parametrize(
    ("thread", "channel_level"),
    [
        (ThreadRef(platform="slack", account="T", chat="C1"), True),
        (ThreadRef(platform="slack", account="T", chat="C1", thread="1.0"), False),
        (ThreadRef(platform="telegram", account="B", chat="-100"), False),
        (ThreadRef(platform="matrix", account="@b:x", chat="!r:x"), False),
    ],
)
def test_only_threadless_slack_commands_address_the_channel(
    thread: ThreadRef, channel_level: bool
) -> None:
    assert channel_scope(thread) is channel_level


ADMINS = ["slack:UADMIN", "telegram:42"]
MINE = run("aaaa0000", requester="slack:U1")
TELEGRAM_RUN = run(
    "bbbb0000",
    requester="telegram:7",
    thread=ThreadRef(platform="telegram", account="B", chat="-100", thread="5"),
)

AUTH = [
    ("requester stops own run", Actor(platform="slack", user_id="U1"), MINE, True),
    ("admin stops anyone's run", Actor(platform="slack", user_id="UADMIN", admins=ADMINS), MINE, True),
    ("someone else is refused", Actor(platform="slack", user_id="U2", admins=ADMINS), MINE, False),
    ("same id on another platform is not the requester", Actor(platform="telegram", user_id="U1"), MINE, False),
    ("telegram admin is no slack admin", Actor(platform="slack", user_id="42", admins=ADMINS), MINE, False),
    ("telegram admin on telegram", Actor(platform="telegram", user_id="42", admins=ADMINS), TELEGRAM_RUN, True),
    ("slack admin cannot reach a telegram run", Actor(platform="slack", user_id="UADMIN", admins=ADMINS), TELEGRAM_RUN, False),
    ("empty user id is nobody", Actor(platform="slack", user_id="", admins=["slack:"]), run("cccc", requester="slack:"), False),
]  # fmt: skip


@pytest.mark.parametrize(("case", "actor", "target", "allowed"), AUTH, ids=[a[0] for a in AUTH])
def test_control_needs_admin_or_requester_on_the_same_platform(
    case: str, actor: Actor, target: RunRecord, allowed: bool
) -> None:
    decision = may_control(actor, target)
    assert decision.allowed is allowed
    assert (decision.reason == "") is allowed


def test_refusal_says_why() -> None:
    decision = may_control(Actor(platform="slack", user_id="U2"), MINE, verb="send to")
    assert decision.reason == "Only an admin or the person who started it can send to this run."


def test_partition_splits_own_from_others() -> None:
    others = run("dddd", requester="slack:U9")
    allowed, refused = partition(Actor(platform="slack", user_id="U1"), [MINE, others])
    assert allowed == [MINE] and refused == [others]


def test_actor_from_qualified() -> None:
    actor = Actor.from_qualified("matrix:@alice:example.org", ["matrix:@alice:example.org"])
    assert actor.platform == "matrix" and actor.user_id == "@alice:example.org"
    assert actor.is_admin


def test_stopped_status_is_terminal_for_resolution_too() -> None:
    ended = run("eeee0000", status=RunStatus.STOPPED)
    assert resolve_run("last", [ended]).run is ended
