"""The pure parts of ``fanbot bench commands``: attribution by code, and its report.

The counting itself (deltas, idle traffic, per-run figures) is :mod:`bot.bench.redis_commands`'s,
tested in tests/bench/test_redis_commands.py."""

from __future__ import annotations

import hashlib

import pytest

from bot.bench import redis_commands
from bot.bench.run_commands import RunCommands, Seen, attribute, key_family


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


def test_the_commands_are_listed_as_bench_compare_lists_them_but_all_of_them() -> None:
    """Same names, amounts and order as compare's detail line (``redis_commands.top``);
    compare stops at 8, this lists every command; the idle window's surplus is left out of
    the list (not of the total)."""
    per_command = {f"cmd{n}": float(n + 1) for n in range(10)} | {"hset": 70.4, "ping": -2.0}
    result = RunCommands(runs=1, per_command=per_command, seconds=1.0, idle_per_second=0.0)
    listed = result.lines(sites=False)[1].removeprefix("  by command: ")
    assert listed.startswith(redis_commands.top(per_command))
    assert listed.split(", ") == [
        "HSET 70", "CMD9 10", *(f"CMD{n} {n + 1}.0" for n in range(8, -1, -1))
    ]  # fmt: skip
    assert result.total == redis_commands.total(per_command) == 70.4 + 55 - 2


def test_each_sites_commands_are_ranked_and_the_sites_by_their_sum() -> None:
    result = RunCommands(
        runs=1, per_command={"hset": 1.0}, seconds=1.0, idle_per_second=0.0,
        sites={("rq:job", "HSET"): 12.0, ("rq:job", "HGET"): 0.01, ("script finalize", "EVALSHA"): 1.0,
               ("script finalize", "HSET"): 20.0, ("fanbot:progress", "XREAD"): 0.01},
    )  # fmt: skip
    assert result.lines()[3:] == [
        "    21.0  script finalize: HSET 20, EVALSHA 1.0",
        "    12.0  rq:job: HSET 12",
    ]
