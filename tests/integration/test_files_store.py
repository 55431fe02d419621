"""Files in the workspace: ingress' inbox saving and the out/ files of a run (real Redis)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from bot.config import Settings
from bot.deps import Deps
from bot.gateway.inbox import save_attachments
from bot.runs.execute import start_run
from bot.runs.outfiles import announce_files, out_snapshot
from bot.types import Attachment, RunRecord, ThreadRef

SESSION = "agent:main:telegram:1:topic:2"


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    settings = Settings(
        redis_url=redis_url,
        workspace={"max_file_bytes": 1_000},
        attachments={"max_out_files": 2},
    )
    d = Deps.build(settings)
    yield d
    d.close()


def test_attachments_are_saved_deduped_and_budget_errors_become_notes(deps: Deps) -> None:
    files = (
        Attachment(name="r.txt", content_type="text/plain", size=2, data=b"hi"),
        Attachment(name="r.txt", content_type="text/plain", size=3, data=b"two"),
        Attachment(name="huge.bin", size=5_000, data=b"x" * 5_000),
        Attachment(name="skipped.bin", size=9, skipped="download failed: HTTP 404"),
    )
    line = save_attachments(deps.workspace, SESSION, files)
    assert line.splitlines()[0] == (
        "[attached: inbox/r.txt (text/plain, 2 B); inbox/r-2.txt (text/plain, 3 B)]"
    )
    assert "[not attached: huge.bin (" in line
    assert "[not attached: skipped.bin (download failed: HTTP 404)]" in line
    assert deps.workspace.get_bytes(SESSION, "inbox/r.txt") == b"hi"
    assert deps.workspace.get_bytes(SESSION, "inbox/r-2.txt") == b"two"


def test_a_run_attaches_the_out_files_it_changed_bounded(deps: Deps) -> None:
    ws = deps.workspace
    ws.put_bytes(SESSION, "out/old.txt", b"before")
    ws.put_bytes(SESSION, "out/same.txt", b"same")
    record = RunRecord(
        run_id="r1", seq=1, session_key=SESSION, child_session_key="c", session_id="s",
        thread=ThreadRef(platform="telegram", account="1", chat="1"), requester="x",
        agent_id="main", subagent_type="general", task="t", model="m",
    )  # fmt: skip
    deps.runs.create(record)
    assert announce_files(deps, record) == ((), [])  # never started: no snapshot
    assert start_run(deps, record.run_id).started  # remembers out/ as it is
    ws.put_bytes(SESSION, "out/old.txt", b"after")
    ws.put_bytes(SESSION, "out/a.txt", b"new")
    ws.put_bytes(SESSION, "out/b.txt", b"new too")
    ws.put_bytes(SESSION, "notes.txt", b"not under out/")
    files, notes = announce_files(deps, record)
    assert files == ("/out/a.txt", "/out/b.txt")
    assert notes == ["out/old.txt not attached: more than 2 files"]


def test_the_out_files_read_with_the_record_in_one_round_trip_are_the_same(deps: Deps) -> None:
    """finalize_run reads the run, its snapshot and the out/ files now in one script; what
    the announce attaches is what announce_files finds reading them one by one."""
    ws = deps.workspace
    ws.put_bytes(SESSION, "out/old.txt", b"before")
    record = RunRecord(
        run_id="r2", seq=2, session_key=SESSION, child_session_key="c", session_id="s",
        thread=ThreadRef(platform="telegram", account="1", chat="1"), requester="x",
        agent_id="main", subagent_type="general", task="t", model="m",
    )  # fmt: skip
    deps.runs.create(record)
    read, seen = deps.runs.get_for_end(record.run_id, out_snapshot())
    assert read is not None and read.run_id == "r2"
    assert seen is not None and seen.before is None and seen.now == {}  # never started
    assert announce_files(deps, record, seen=seen) == ((), [])
    assert start_run(deps, record.run_id).started
    ws.put_bytes(SESSION, "out/old.txt", b"after")
    ws.put_bytes(SESSION, "out/a.txt", b"new")
    ws.put_bytes(SESSION, "notes.txt", b"not under out/")
    read, seen = deps.runs.get_for_end(record.run_id, out_snapshot())
    assert read is not None and seen is not None and seen.before is not None
    assert set(seen.now) == {"/out/old.txt", "/out/a.txt"}
    assert announce_files(deps, record, seen=seen) == announce_files(deps, record)
    assert announce_files(deps, record, seen=seen)[0] == ("/out/a.txt", "/out/old.txt")
    child = dataclasses.replace(record, run_id="r3", seq=3, depth=2, parent_run_id="r2")
    deps.runs.create(child)
    assert start_run(deps, child.run_id).started
    read, seen = deps.runs.get_for_end(child.run_id, out_snapshot())
    assert read is not None and read.depth == 2
    assert seen is not None and seen.now == {}  # a child attaches nothing: not hashed
    assert deps.runs.get_for_end("gone", out_snapshot())[0] is None
