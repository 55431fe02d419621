"""The pure parts of ``fanbot bench map``: cycles, packages, lines, production files, the
static rules (``deps.redis``, title f-strings), shared names and the Redis tallies."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.bench.code_map import (
    count_lines,
    is_production,
    package_graph,
    parse_duplicates,
    raw_redis_uses,
    shared_basenames,
    strongly_connected,
    title_sites,
)
from bot.bench.trace_hooks import Send, Sent, store_calls


@pytest.mark.parametrize(
    ("graph", "cycles"),
    [
        ({}, []),
        ({"a": ["b"], "b": ["c"]}, []),
        ({"a": ["a"]}, []),  # a module importing itself is no cycle between modules
        ({"a": ["b"], "b": ["a"]}, [("a", "b")]),
        ({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}, [("a", "b", "c")]),
        ({"a": ["b"], "b": ["a"], "c": ["d"], "d": ["c", "a"]}, [("a", "b"), ("c", "d")]),
        ({"x": ["y"], "y": ["z", "x"], "z": ["y"]}, [("x", "y", "z")]),
    ],
)
def test_strongly_connected_finds_each_cycle_once(
    graph: dict[str, list[str]], cycles: list[tuple[str, ...]]
) -> None:
    assert strongly_connected(graph) == cycles


def test_strongly_connected_survives_a_long_chain() -> None:
    chain = {f"m{i}": [f"m{i + 1}"] for i in range(5000)} | {"m5000": ["m0"]}
    [cycle] = strongly_connected(chain)
    assert len(cycle) == 5001


def test_package_graph_folds_modules_into_their_first_two_names() -> None:
    graph = {
        "bot.runs.render": {"bot.observe.cost"},
        "bot.observe.record": {"bot.runs.render", "bot.observe.cost"},
        "bot.deps": {"bot.store.runs"},
    }
    packages = package_graph(graph)
    assert packages == {
        "bot.runs": {"bot.observe"},
        "bot.observe": {"bot.runs"},
        "bot.deps": {"bot.store"},
    }
    assert strongly_connected(packages) == [("bot.observe", "bot.runs")]


def test_count_lines_counts_physical_lines(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n\n# note\n")
    (tmp_path / "b.py").write_text("y = 2")  # no final newline: still a line
    assert count_lines([tmp_path / "a.py", tmp_path / "b.py"]) == 4


@pytest.mark.parametrize(
    ("rel", "production"),
    [
        ("bot/deps.py", True),
        ("bot/runs/stop.py", True),
        ("adapters/slack/channel.py", True),
        ("workers/jobs.py", True),
        ("bot/testing/fake_slack.py", False),
        ("bot/bench/code_map.py", False),
        ("bot/demo/server.py", False),
        ("bot/testing_notes.py", True),  # a name that starts like a left-out folder
        ("tests/unit/test_x.py", False),
        ("bot/templates/page.html", False),
    ],
)
def test_is_production(tmp_path: Path, rel: str, production: bool) -> None:
    assert is_production(tmp_path / rel, tmp_path) is production
    assert not is_production(Path("/elsewhere") / rel, tmp_path)


def test_raw_redis_uses_are_reads_of_deps_redis() -> None:
    source = (
        "def f(deps, req, self):\n"
        "    deps.redis.get('k')\n"
        "    req.deps.redis.set('k', 1)\n"
        "    self.deps.redis\n"
        "    self.redis.get('k')  # an owner's own client: not counted\n"
        "    redis = deps  # a name, not an attribute\n"
        "    '''deps.redis in a docstring'''\n"
    )
    assert raw_redis_uses(source) == 3


def test_title_sites_are_hash_then_seq_fields() -> None:
    source = (
        "a = f'#{run.seq} done'\n"
        "b = f'Subagent #{record.seq}: {x} and #{seq}'\n"
        "c = f'#{run.id}'\n"
        "d = '#{run.seq}'\n"  # not an f-string
    )
    assert title_sites(source) == 3


def test_shared_basenames_ignores_package_files() -> None:
    paths = [Path(p) for p in ("bot/a/spawn.py", "bot/b/spawn.py", "bot/c/spawn.py",
                               "bot/a/__init__.py", "bot/b/__init__.py", "bot/x.py")]  # fmt: skip
    assert shared_basenames(paths) == {"spawn": 3}


@pytest.mark.parametrize(
    ("output", "pairs"),
    [
        ("75 pairs of places (181 files read), each sharing runs\nD1 a ~ b\n", 75),
        ("1 pair of places (2 files read)\n", 1),
        ("no duplicates (12 files read)\n", 0),
        ("incomplete: no file that counts was read\n", None),
        ("", None),
    ],
)
def test_parse_duplicates(output: str, pairs: int | None) -> None:
    assert parse_duplicates(output) == pairs


def test_store_calls_keep_the_sends_of_the_handlers_that_reached_the_commands() -> None:
    run = "abc123"
    handler, egress = object(), object()
    record = f"fanbot:run:{run}"
    stop = (("MULTI",), ("HSET", record, "status", "stopped"), ("SET", f"{record}:stop", "1"),
            ("EXEC",))  # fmt: skip
    sent = Sent(
        sends=[
            Send((("SET", "fanbot:dedupe:1", "1"),), handler, False),
            Send((("HGETALL", record),), handler, True),
            Send(stop, handler, True),
            Send((("EVALSHA", "sha", "1", record),), handler, True),
            Send((("XREADGROUP", "GROUP", "g"),), egress, False),
        ],
        total=8,
    )
    calls = store_calls(sent, run_id=run)
    assert (calls.round_trips, calls.commands) == (4, 7)
    assert (calls.run_record, calls.run_reads) == (3, 2)  # HGETALL and the script read it
    assert calls.names[:2] == ("SET", "HGETALL") and "XREADGROUP" not in calls.names
    assert calls.window_commands == 8
