"""The ops page's rows and HTML from a snapshot (pure): trees, queue positions, escaping."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from bot.config import OpsSettings, Price, Settings, load_settings
from bot.errors import ConfigError
from bot.gateway.ops.snapshot import PageSnapshot
from bot.gateway.ops.templates import render_error, render_login, render_page
from bot.gateway.ops.view import build_page, dead_row, group_runs, run_row
from bot.store.dead_letters import DeadLetter
from bot.store.jobs import QueueOverview, WorkerInfo
from bot.types import RunRecord, RunStatus, ThreadRef

NOW = 1_800_000_000.0
EVIL = '<script>alert("x")</script><img src=x onerror=alert(1)>'
NO_PRICES = Settings()


def record(
    run_id: str, *, session: str = "agent:main:slack:C1:thread:1.1", **kw: object
) -> RunRecord:
    values: dict[str, object] = {
        "run_id": run_id,
        "seq": 1,
        "session_key": session,
        "child_session_key": f"agent:main:subagent:{run_id}",
        "session_id": f"sess-{run_id}",
        "thread": ThreadRef(platform="slack", account="T1", chat="C1", thread="1.1"),
        "requester": "U1",
        "agent_id": "main",
        "subagent_type": "general-purpose",
        "task": f"task {run_id}",
        "model": "gpt-x",
        "created_at": NOW - 90,
        "job_id": run_id,
    }
    values.update(kw)
    return RunRecord(**values)  # type: ignore[arg-type]


def snapshot(*runs: RunRecord, **kw: object) -> PageSnapshot:
    values: dict[str, object] = {
        "now": NOW,
        "runs": runs,
        "line": (),
        "queues": (),
        "workers": (),
        "dead": (),
        "dead_total": 0,
    }
    values.update(kw)
    return PageSnapshot(**values)  # type: ignore[arg-type]


def html_of(snap: PageSnapshot, *, csrf: str = "tok") -> str:
    page = build_page(snap, settings=NO_PRICES)
    return render_page(
        page, role="admin", csrf=csrf, generated="now", refresh=15, flash="", nonce="n"
    )


def test_top_level_runs_are_grouped_by_thread_and_nested_runs_hang_under_their_parent() -> None:
    parent = record("p1", status=RunStatus.RUNNING, started_at=NOW - 80)
    child = record("c1", session=parent.child_session_key, created_at=NOW - 50)
    grandchild = record("g1", session=child.child_session_key, created_at=NOW - 40)
    other = record("o1", session="agent:main:telegram:-100:topic:7", created_at=NOW - 10)
    runs = (parent, child, grandchild, other)
    rows = {r.run_id: run_row(r, now=NOW, settings=NO_PRICES, position=None) for r in runs}
    groups = group_runs(runs, rows)
    assert [g.session_key for g in groups] == [other.session_key, parent.session_key]
    [tree] = groups[1].nodes
    assert tree.row.run_id == "p1"
    assert [n.row.run_id for n in tree.children] == ["c1"]
    assert [n.row.run_id for n in tree.children[0].children] == ["g1"]


def test_groups_with_live_runs_come_first() -> None:
    ended = record("e1", status=RunStatus.SUCCESS, created_at=NOW - 5, ended_at=NOW - 1)
    live = record("l1", session="agent:main:slack:C2", created_at=NOW - 100)
    rows = {r.run_id: run_row(r, now=NOW, settings=NO_PRICES, position=None) for r in (ended, live)}
    assert [g.nodes[0].row.run_id for g in group_runs((ended, live), rows)] == ["l1", "e1"]


def test_a_queued_run_shows_its_place_in_line_and_a_live_run_its_estimated_cost() -> None:
    queued = record("q1")
    running = record(
        "r1",
        status=RunStatus.RUNNING,
        started_at=NOW - 30,
        prompt_tokens=2000,
        completion_tokens=500,
    )
    priced = Settings(prices={"gpt-x": Price(input=1.0, output=2.0)})
    page = build_page(snapshot(queued, running, line=("x", "q1")), settings=priced)
    rows = {n.row.run_id: n.row for g in page.groups for n in g.nodes}
    assert rows["q1"].position == 2 and rows["q1"].status == "queued"
    assert rows["r1"].position is None
    assert rows["r1"].cost == "$0.0030" and rows["r1"].runtime == "30s"
    assert rows["r1"].tokens == "2.5k (in 2.0k / out 500)"
    assert (page.running, page.queued) == (1, 1)


def test_a_row_shows_cached_reasoning_and_estimated_tokens() -> None:
    run = record(
        "r1",
        status=RunStatus.RUNNING,
        started_at=NOW - 30,
        prompt_tokens=2000,
        completion_tokens=500,
        cached_tokens=1500,
        reasoning_tokens=200,
        usage_estimated=True,
    )
    row = run_row(run, now=NOW, settings=NO_PRICES, position=None)
    assert row.tokens == "~2.5k (in 2.0k, 1.5k cached / out 500, 200 reasoning)"


def test_every_shown_value_is_escaped() -> None:
    run = record("r1", task=EVIL, model=EVIL, session=EVIL)
    letter = DeadLetter(
        entry_id="1799999999000-0",
        fields={
            "data": json.dumps(
                {
                    "thread": {"platform": EVIL, "account": "a", "chat": EVIL, "thread": None},
                    "text": EVIL,
                    "kind": "announce",
                    "idempotency_key": EVIL,
                }
            ),
            "reason": EVIL,
        },
    )
    worker = WorkerInfo(
        name=EVIL, state=EVIL, queues=(EVIL,), current_job=EVIL, last_heartbeat=None, host=EVIL
    )
    queue = QueueOverview(name=EVIL, queued=1, waiting_slot=0, started=0, failed=0)
    html = html_of(snapshot(run, dead=(letter,), dead_total=1, workers=(worker,), queues=(queue,)))
    assert "<script>" not in html and "<img" not in html
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html
    flash = render_page(
        build_page(snapshot(), settings=NO_PRICES),
        role=EVIL,
        csrf=EVIL,
        generated=EVIL,
        refresh=0,
        flash=EVIL,
        nonce="n",
    )
    assert "<script>" not in flash
    assert "<script>" not in render_login(error=EVIL, action="ops/login", nonce="n")
    assert "<script>" not in render_error(status=403, reason=EVIL, back="../ops", nonce="n")


def test_the_stylesheet_is_not_entity_escaped() -> None:
    html = html_of(snapshot())
    assert '"Segoe UI"' in html and "&#34;Segoe" not in html
    assert 'content:"●"' in html
    assert not any(ord(c) < 32 and c not in "\n\t" for c in html)  # no stray escape


def test_a_viewer_sees_no_replay_form_and_an_admin_one_per_replayable_letter() -> None:
    good = DeadLetter(entry_id="1-0", fields={"data": json.dumps({"text": "hi"})})
    bodyless = DeadLetter(entry_id="2-0", fields={"reason": "gone"})
    snap = snapshot(dead=(good, bodyless), dead_total=2)
    viewer = html_of(snap, csrf="")
    assert "ops/replay" not in viewer and "ADMIN_TOKEN" in viewer
    admin = html_of(snap, csrf="c5rf")
    assert len(re.findall(r'class="replay"', admin)) == 1
    assert admin.count('name="csrf" value="c5rf"') == 2  # that one and "Replay all"
    assert 'method="post"' in admin and 'method="get"' not in admin


def test_a_dead_letter_row_reads_its_outbound_message() -> None:
    data = {
        "thread": {"platform": "slack", "account": "T", "chat": "C9", "thread": "5.5"},
        "text": "x" * 500,
        "kind": "announce",
        "idempotency_key": "announce:r1",
    }
    row = dead_row(
        DeadLetter(
            entry_id=f"{int((NOW - 120) * 1000)}-0",
            fields={"data": json.dumps(data), "reason": "403"},
        ),
        now=NOW,
    )
    assert (row.kind, row.key, row.where, row.reason, row.age) == (
        "announce",
        "announce:r1",
        "slack C9 / 5.5",
        "403",
        "2m00s",
    )
    assert row.replayable and len(row.preview) == 161
    broken = dead_row(DeadLetter(entry_id="1-0", fields={"data": "{"}), now=NOW)
    assert broken.kind == "?" and broken.replayable


def test_the_page_refreshes_itself_only_when_asked() -> None:
    snap = build_page(snapshot(), settings=NO_PRICES)
    on = render_page(snap, role="viewer", csrf="", generated="", refresh=15, flash="", nonce="n")
    off = render_page(snap, role="viewer", csrf="", generated="", refresh=0, flash="", nonce="n")
    assert 'http-equiv="refresh" content="15; url=ops"' in on
    assert "http-equiv" not in off
    assert 'name="viewport"' in on and "<script" not in on


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"token": "short"}, "at least 16"),
        ({"admin_token": "a" * 20}, "needs token"),
        ({"token": "t" * 20, "admin_token": "t" * 20}, "differ"),
        ({"token": "t" * 20, "origin": "https://x.example/ops"}, "pattern"),
    ],
)
def test_ops_settings_refuse(values: dict[str, str], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        OpsSettings(**values)  # type: ignore[arg-type]


def test_ops_is_off_without_a_token_and_tokens_are_secrets(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for key in list(os.environ):
        if key.startswith(("FANBOT_", "OPENAI_")):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    assert not OpsSettings().enabled
    assert OpsSettings(token="t" * 16).enabled  # type: ignore[arg-type]
    config = tmp_path / "fanbot.toml"
    config.write_text('[ops]\ntoken = "0123456789abcdef"\n')
    monkeypatch.setenv("FANBOT_CONFIG", str(config))
    with pytest.raises(ConfigError, match=r"ops\.token.*environment"):
        load_settings()
    monkeypatch.setenv("FANBOT_CONFIG", "")
    monkeypatch.setenv("FANBOT_OPS__TOKEN", "0123456789abcdef")
    settings = load_settings()
    assert settings.ops.enabled and "0123456789abcdef" not in repr(settings)


def test_a_resumed_run_shows_how_often_it_went_on_after_a_lost_worker() -> None:
    plain = record("a1", status=RunStatus.RUNNING, started_at=NOW - 30)
    resumed = record("b2", status=RunStatus.RUNNING, started_at=NOW - 30, attempt=3)
    assert build_page(snapshot(plain, resumed), settings=NO_PRICES).resumed == 1
    assert run_row(resumed, now=NOW, settings=NO_PRICES, position=None).resumes == 2
    assert run_row(plain, now=NOW, settings=NO_PRICES, position=None).resumes == 0
    html = html_of(snapshot(plain, resumed))
    assert "↻ 2×" in html and "1 resumed after a lost worker" in html
