"""Files in the workspace: ingress' inbox saving and the out/ files of a run (real Redis)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bot.config import Settings
from bot.deps import Deps
from bot.gateway.inbox import save_attachments
from bot.runs.execute import start_run
from bot.runs.outfiles import announce_files
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
