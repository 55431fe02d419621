"""The file tools over the Redis session workspace, called as the model calls them.

Real Redis; every call goes through ``execute_tool`` with a ToolContext, as the agent
loop makes it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from bot.agent.context import ToolContext
from bot.agent.tools import Tool, execute_tool
from bot.agent.tools.files import file_tools
from bot.config import Settings
from bot.deps import Deps
from bot.store.workspace import WorkspaceError
from bot.types import ThreadRef

THREAD = ThreadRef(platform="slack", account="T1", chat="C1", thread="1.0")
SESSION = "agent:main:slack:C1:thread:1.0"
Call = Callable[..., str]


def make_deps(redis_url: str, **workspace: int) -> Deps:
    settings = Settings(redis_url=redis_url, workspace=workspace)  # type: ignore[arg-type]
    return Deps.build(settings, client=redis.Redis.from_url(redis_url))


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    d = make_deps(redis_url)
    yield d
    d.close()


def main_ctx(deps: Deps) -> ToolContext:
    return ToolContext(deps=deps, session_key=SESSION, thread=THREAD, requester="slack:U1",
                       agent_id="main")  # fmt: skip


def sub_ctx(deps: Deps, child: str = "agent:main:subagent:abc") -> ToolContext:
    return ToolContext(deps=deps, session_key=child, thread=THREAD, requester="slack:U1",
                       agent_id="main", workspace_key=SESSION, run_id="r1")  # fmt: skip


def caller(ctx: ToolContext) -> Call:
    tools: dict[str, Tool] = {t.name: t for t in file_tools(ctx.deps.settings)}

    def call(name: str, **arguments: Any) -> str:
        return execute_tool(tools, name=name, arguments=json.dumps(arguments), ctx=ctx,
                            max_chars=100_000)  # fmt: skip

    return call


@pytest.fixture
def call(deps: Deps) -> Call:
    return caller(main_ctx(deps))


def test_write_read_edit_ls_grep(call: Call) -> None:
    assert call("write_file", file_path="notes/a.md", content="one\ntwo\nthree\n") == (
        "Wrote /notes/a.md (14 B)"
    )
    assert call("read_file", file_path="/notes/a.md") == "     1\tone\n     2\ttwo\n     3\tthree"
    assert call("edit_file", file_path="notes/a.md", old_string="two", new_string="2") == (
        "Successfully replaced 1 instance(s) of the string in /notes/a.md"
    )
    assert call("read_file", file_path="notes/a.md", offset=1, limit=1) == (
        "     2\t2\n[… 1 more lines: read_file with offset=2]"
    )
    call("write_file", file_path="top.txt", content="three little pigs")
    assert call("ls") == "/notes/  (1 file)\n/top.txt  17 B"
    assert call("ls", path="notes") == "/notes/a.md  12 B"
    assert call("grep", pattern="three") == "/notes/a.md\n/top.txt"
    assert call("grep", pattern="three", output_mode="content", glob="*.md") == (
        "/notes/a.md:3:three"
    )
    assert call("grep", pattern="three", output_mode="count", path="/notes") == "/notes/a.md:1"
    assert call("grep", pattern="nowhere") == "no matches for 'nowhere'"


def test_deepagents_habits(call: Call) -> None:
    call("write_file", path="a.txt", content="x x\n")  # "path" is understood for file_path
    assert call("write_file", file_path="/a.txt", content="new").startswith(
        "error: /a.txt already exists; read it and change it with edit_file"
    )
    assert call("edit_file", file_path="a.txt", old_string="y", new_string="z").startswith(
        "error: old_string not found in /a.txt"
    )
    assert call("edit_file", file_path="a.txt", old_string="x", new_string="z").startswith(
        "error: old_string appears 2 times in /a.txt"
    )
    assert "2 instance(s)" in call(
        "edit_file", file_path="a.txt", old_string="x", new_string="z", replace_all=True
    )
    assert call("read_file", file_path="a.txt") == "     1\tz z"
    assert call("read_file", file_path="nope.txt") == "error: file /nope.txt not found"
    assert call("read_file", file_path="a.txt", offset=5).startswith("error: line offset 5")
    call("write_file", file_path="empty", content="")
    assert "empty contents" in call("read_file", file_path="empty")
    assert call("ls", path="nowhere") == "error: no directory /nowhere"


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("../x", "error: '../x' leaves the workspace"),
        ("/../../etc/passwd", "error: '/../../etc/passwd' leaves the workspace"),
        ("a\x00b", "error: path holds a control character"),
        ("/", "error: '/' names the workspace root"),
        ("x" * 2000, "error: path is longer than 1024 bytes"),
    ],
)
def test_bad_paths_are_refused_and_nothing_is_written(
    call: Call, deps: Deps, path: str, error: str
) -> None:
    assert call("write_file", file_path=path, content="x").startswith(error)
    assert deps.workspace.paths(SESSION) == []


def test_dot_dot_inside_the_workspace_stays_inside(call: Call, deps: Deps) -> None:
    call("write_file", file_path="a/b/../../c.txt", content="x")
    assert deps.workspace.paths(SESSION) == ["/c.txt"]


def test_binary_files_are_kept_but_not_read_as_text(call: Call, deps: Deps) -> None:
    blob = bytes(range(256))
    deps.workspace.put_bytes(SESSION, "img.png", blob)
    assert deps.workspace.get_bytes(SESSION, "/img.png") == blob
    assert call("read_file", file_path="img.png") == (
        "error: /img.png is binary (256 B), not UTF-8 text; the file tools read and write text only"
    )
    assert call("grep", pattern="x") == "no matches for 'x'"


def test_a_file_cannot_also_be_a_directory(call: Call) -> None:
    call("write_file", file_path="a", content="file")
    assert call("write_file", file_path="a/b", content="x") == (
        "error: /a/b: /a is a file, not a directory"
    )
    call("write_file", file_path="d/e", content="x")
    assert call("write_file", file_path="d", content="x") == "error: /d is a directory"


def test_main_agent_and_subagents_share_the_requester_workspace(deps: Deps) -> None:
    main, sub, other = caller(main_ctx(deps)), caller(sub_ctx(deps)), caller(sub_ctx(deps, "c2"))
    main("write_file", file_path="plan.md", content="step 1\n")
    assert sub("read_file", file_path="plan.md") == "     1\tstep 1"
    sub("edit_file", file_path="plan.md", old_string="step 1", new_string="step 1 done")
    other("write_file", file_path="found.md", content="result")
    assert main("ls") == "/found.md  6 B\n/plan.md  12 B"
    assert deps.workspace.paths("agent:main:subagent:abc") == []  # no workspace of its own


def test_the_workspace_expires_with_the_session_and_writes_refresh_it(
    deps: Deps, call: Call, rconn: redis.Redis
) -> None:
    call("write_file", file_path="a", content="x")
    key = deps.keys.workspace(SESSION)
    retention = deps.settings.subagents.retention_days * 86_400
    assert retention - 5 < rconn.ttl(key) <= retention
    rconn.expire(key, 100)
    call("edit_file", file_path="a", old_string="x", new_string="y")
    assert rconn.ttl(key) > 100


def test_budgets(redis_url: str) -> None:
    deps = make_deps(redis_url, max_file_bytes=1_000, max_bytes=10_000, max_files=3)
    call = caller(main_ctx(deps))
    assert call("write_file", file_path="big", content="x" * 1_001) == (
        "error: /big: 1.001 kB is more than a file may hold (1 kB)"
    )
    for name in ("a", "b", "c"):
        call("write_file", file_path=name, content="x" * 900)
    assert call("write_file", file_path="d", content="x") == (
        "error: /d: the workspace holds its maximum of 3 files"
    )
    assert deps.workspace.usage(SESSION) == (3 * (2 + 900), 3)  # paths count too
    deps.close()


def test_a_full_session_refuses_growth_but_not_shrinking(redis_url: str) -> None:
    deps = make_deps(redis_url, max_file_bytes=6_000, max_bytes=10_000)
    call = caller(main_ctx(deps))
    call("write_file", file_path="a", content="x" * 5_990 + "tail")
    assert call("write_file", file_path="b", content="y" * 5_000).startswith(
        "error: /b: the workspace is full (5.996 kB of 10 kB used)"
    )
    assert "Successfully" in call("edit_file", file_path="a", old_string="tail", new_string="")
    deps.close()


def test_concurrent_writers_cannot_pass_the_session_budget(redis_url: str) -> None:
    deps = make_deps(redis_url, max_file_bytes=5_000, max_bytes=50_000, max_files=1_000)
    refused: list[str] = []

    def writer(n: int) -> None:
        own = Deps.build(deps.settings, client=redis.Redis.from_url(redis_url))
        for i in range(20):
            try:
                own.workspace.put_bytes(SESSION, f"w{n}/f{i}", b"z" * 1_000)
            except WorkspaceError as exc:
                refused.append(str(exc))
        own.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    used, count = deps.workspace.usage(SESSION)
    stored = sum(len(p) + len(d) for p, d in deps.workspace.files(SESSION))
    assert used == stored <= 50_000  # the books match the files, under budget
    assert count == len(deps.workspace.paths(SESSION)) == 160 - len(refused)
    assert refused and all("the workspace is full" in r for r in refused)
    deps.close()


def test_concurrent_edits_of_one_file_lose_none(deps: Deps) -> None:
    tokens = [f"<{n}>" for n in range(12)]
    deps.workspace.put_text(SESSION, "shared.txt", " ".join(tokens))

    def editor(token: str) -> None:
        own = Deps.build(deps.settings, client=redis.Redis.from_url(deps.settings.redis_url))
        out = caller(main_ctx(own))("edit_file", file_path="shared.txt", old_string=token,
                                    new_string=token.upper() + "done")  # fmt: skip
        assert "Successfully" in out, out
        own.close()

    threads = [threading.Thread(target=editor, args=(t,)) for t in tokens]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert deps.workspace.get_text(SESSION, "shared.txt") == " ".join(f"{t}done" for t in tokens)


def test_grep_globs_and_literal_patterns(call: Call) -> None:
    call("write_file", file_path="src/a.py", content="x = f(1)  # (1)\n")
    call("write_file", file_path="src/pkg/b.py", content="f(1)\n")
    call("write_file", file_path="docs/c.md", content="f(1)\n")
    assert call("grep", pattern="f(1)", glob="*.py") == "/src/a.py\n/src/pkg/b.py"
    assert call("grep", pattern="f(1)", glob="src/**/b.py") == "/src/pkg/b.py"
    assert call("grep", pattern="f(1)", glob="/docs/*.[mM]d") == "/docs/c.md"
    assert call("grep", pattern="(1)", path="src/a.py", output_mode="count") == "/src/a.py:1"
    assert call("grep", pattern=".*", glob="*") == "no matches for '.*'"  # literal, not regex
    assert call("grep", pattern="x", glob="*a*a*a*a*a*a*a*a*a*").startswith("error: glob has")


@pytest.mark.timeout(20)
def test_grep_with_a_pathological_glob_answers(call: Call) -> None:
    """Issue 27: ``*a*a*a*a*a*a*b`` on a 120-character name backtracked for minutes."""
    name = "a" * 120
    call("write_file", file_path=name, content="needle\n")
    call("write_file", file_path="x" + "a" * 60 + "b", content="needle\n")
    assert call("grep", pattern="needle", glob="*a*a*a*a*a*a*b") == "/x" + "a" * 60 + "b"
