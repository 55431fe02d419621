"""``fanbot bench chaos`` small: workers SIGKILLed while runs call tools; nothing is lost,
announced twice or ended ``unknown``, and no call that is not safe to repeat runs twice."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bot.agent.resume import INTERRUPTED
from bot.bench.bench_commands import app
from bot.bench.chaos import ChaosConfig, run_chaos
from bot.bench.chaos_plan import hosts_to_kill, make_kills, make_plan
from bot.bench.chaos_report import _requests, table
from bot.demo.replies import ChatRequest


@pytest.mark.e2e
@pytest.mark.timeout(240)
async def test_a_small_chaos_loses_nothing_and_reruns_no_unsafe_call(tmp_path: Path) -> None:
    config = ChaosConfig(runs=12, kills=2, pool="threads", turns=3, seed=3, log_dir=tmp_path)
    result = await run_chaos(config)
    report = table([result])
    assert len(result.kills) == 2, report
    assert [k["what"] for k in result.kills if str(k["what"]).startswith("host")], report
    assert result.hits, report  # the kills hit runs
    assert result.lost == [], report
    assert result.duplicated == {}, report
    assert result.unknown_unexplained == [], report
    assert result.rerun == {}, report  # write_file and execute never ran twice
    assert result.not_resumed == [], report
    assert {h.outcome for h in result.hits} <= {"resumed", "ended success"}, report
    assert result.over_repeated == {}, report
    assert result.statuses == Counter({"success": 12}), report
    assert "resume after host death" in report and "== goals ==" in report


def _call(call_id: str, name: str) -> dict[str, object]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def test_the_figures_come_from_the_requests_the_model_saw() -> None:
    task = {"role": "user", "content": "chaos task chaos-0001: use the tools"}
    wrote = {"role": "assistant", "content": None, "tool_calls": [_call("c1", "write_file")]}
    ran = {"role": "assistant", "content": None, "tool_calls": [_call("c2", "execute")]}
    step0 = ChatRequest.from_body({"messages": [task]})
    twice = {"role": "tool", "tool_call_id": "c1", "content": "error: /x already exists; read it"}
    cut = {"role": "tool", "tool_call_id": "c2", "content": INTERRUPTED}
    step2 = ChatRequest.from_body({"messages": [task, wrote, twice, ran, cut]})
    repeated, interrupted, rerun = _requests([step0, step0, step2, step2, step2])
    assert repeated == Counter({"chaos-0001": 3})  # step 0 asked twice, step 2 three times
    assert interrupted == Counter({"execute": 1})
    assert rerun == {"write_file": ["chaos-0001 step 0"]}


def test_the_plan_and_the_kills_are_seeded_and_kill_at_least_two_hosts() -> None:
    plan = make_plan(runs=50, seed=1, topics=[1, 2], tools=("write_file",), delays=(0.5, 3))
    assert plan == make_plan(runs=50, seed=1, topics=[1, 2], tools=("write_file",), delays=(0.5, 3))
    assert all(2 <= len(r.delays) <= 4 and len(r.tools) == len(r.delays) - 1 for r in plan)
    assert all(0.5 <= d <= 3 for r in plan for d in r.delays)
    kills = make_kills(kills=12, seed=1, window=(2, 150), gap=3)
    assert sum(k.kind == "host" for k in kills) == hosts_to_kill(12) == 2
    assert kills[0].kind == kills[-1].kind == "process"
    moments = [k.at for k in kills]
    assert moments == sorted(moments) and all(b - a >= 3 for a, b in itertools.pairwise(moments))
    assert hosts_to_kill(2) == 1 and hosts_to_kill(1) == 0


def test_the_cli_offers_chaos_with_both_pools() -> None:
    output = CliRunner().invoke(app, ["chaos", "--help"]).output
    for option in ("--runs", "--kills", "--pool", "--seed"):
        assert option in output
    refused = CliRunner().invoke(app, ["chaos", "--pool", "nope"])
    assert refused.exit_code == 2
