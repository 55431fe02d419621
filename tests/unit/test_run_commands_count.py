"""The pure parts of ``fanbot bench commands``: deltas, per-run figures, attribution."""

from __future__ import annotations

import hashlib

import pytest

from bot.bench.run_commands import RunCommands, Seen, attribute, delta, key_family, per_run


def test_a_delta_keeps_what_moved() -> None:
    assert delta({"get": 3, "set": 1}, {"get": 5, "set": 1, "hset": 2}) == {"get": 2, "hset": 2}


def test_per_run_subtracts_the_idle_traffic_scaled_to_the_window() -> None:
    figures = per_run({"get": 25, "xread": 20}, {"xread": 10}, scale=2.0, runs=5)
    assert figures == {"get": 5.0, "xread": 0.0}


@pytest.mark.parametrize(
    ("key", "family"),
    [
        ("fanbot:run:0123456789abcdef0123:hb", "fanbot:run:…:hb"),
        ("rq:job:0123456789abcdef0123", "rq:job"),
        ("fanbot:metrics:counters", "fanbot:metrics:counters"),
        ("fanbot:fair:waiting:agent:main:console:chat:thread:t1", "fanbot:fair:waiting"),
        ("fanbot:session:agent:main:c:thread:t1:history", "fanbot:session:…:history"),
    ],
)
def test_a_key_is_named_by_its_family(key: str, family: str) -> None:
    assert key_family(key) == family


def test_a_scripts_commands_count_under_it_and_others_under_their_key() -> None:
    text = "return 1"
    sha = hashlib.sha1(text.encode()).hexdigest()
    seen = [
        Seen(0.0, False, ("EVALSHA", sha, "1", "fanbot:run:x")),
        Seen(0.0, True, ("HGET", "fanbot:run:x", "status")),
        Seen(0.0, True, ("XADD", "fanbot:progress", "*")),
        Seen(0.0, False, ("XREAD", "COUNT", "1", "STREAMS", "fanbot:progress", "$")),
        Seen(0.0, False, ("EVAL", text, "0")),
    ]
    counts = attribute(seen, {sha: "Owner.script"})
    assert counts == {
        ("script Owner.script", "EVALSHA"): 1,
        ("script Owner.script", "HGET"): 1,
        ("script Owner.script", "XADD"): 1,
        ("fanbot:progress", "XREAD"): 1,
        ("script Owner.script", "EVAL"): 1,
    }


def test_the_report_leads_with_the_figure_and_ranks_the_commands() -> None:
    result = RunCommands(
        runs=4, per_command={"get": 1.0, "hset": 3.0}, seconds=2.0, idle_per_second=1.5,
        sites={("fanbot:run", "HSET"): 3.0}, how=", 2 at once",
    )  # fmt: skip
    lines = result.lines()
    assert lines[0].startswith("Redis commands per subagent run, spawn -> announce delivered: 4.0")
    assert "2 at once" in lines[0]
    assert lines[1] == "  by command: HSET 3.0, GET 1.0"
    assert lines[-1].strip() == "3.0  fanbot:run: HSET 3.0"
