"""``execute`` sees the run's skills read-only at ``/skills/<name>``, in a real bubblewrap
sandbox: a skill's script runs over the workspace, writes into a skill fail, and a run sees
exactly the skills of its agent and type (docs/skills.md).

The skills are the public-collection-style ones in ``tests/skill_collection`` and the two
examples shipped in ``docs/skills/examples``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from bot.agent.context import ToolContext
from bot.agent.skills import SKILLS_ROOT, load_skills, skills_for
from bot.agent.tools import execute_tool
from bot.agent.tools.sandbox import sandbox_status, sandbox_tools
from bot.config import Settings
from bot.deps import Deps
from bot.types import ThreadRef
from tests.skill_support import open_copy, open_examples

THREAD = ThreadRef(platform="slack", account="T1", chat="C1", thread="1.0")
SESSION = "agent:main:slack:C1:thread:1.0"
REPO = Path(__file__).resolve().parents[2]
COLLECTION = open_copy(REPO / "tests" / "skill_collection")  # readable by the sandbox
EXAMPLES = open_examples()  # readable by the sandbox's uid wherever the clone is
LIMITS = {"timeout_seconds": 10, "cpu_seconds": 5, "memory_mb": 512, "max_processes": 32,
          "max_output_bytes": 20_000, "disk_mb": 64}  # fmt: skip
PDF = (
    b"%PDF-1.4\n1 0 obj << /Type /Pages /Kids [2 0 R 3 0 R] >> endobj\n"
    b"2 0 obj << /Type /Page >> stream\nBT (Quarterly report) Tj ET\nendstream endobj\n"
    b"3 0 obj << /Type /Page >> stream\nBT (Revenue up 12%) Tj (in Q3) Tj ET\nendstream endobj\n"
    b"%%EOF\n"
)


def make_deps(redis_url: str, **values: Any) -> Deps:
    settings = Settings(redis_url=redis_url, sandbox=LIMITS, **values)  # type: ignore[arg-type]
    return Deps.build(settings, client=redis.Redis.from_url(redis_url))


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    """The collection for everyone; the examples for the ``writer`` type and the ``ops``
    agent's main turns besides."""
    types = [{"name": "writer", "description": "Writes.", "skills": [str(EXAMPLES)]}]
    agents = {"ops": {"skills": [str(EXAMPLES)]}}
    d = make_deps(redis_url, skills={"dirs": [str(COLLECTION)]}, subagent_types=types,
                  agents=agents)  # fmt: skip
    yield d
    d.close()


def execute(
    deps: Deps, command: str, *, agent_id: str = "main", type_name: str | None = None
) -> str:
    """``command`` through the real tool, in a run of ``agent_id`` (a subagent run of
    ``type_name``) that sees the skills start-up gives it."""
    tools = {t.name: t for t in sandbox_tools(deps.settings)}
    assert "execute" in tools, sandbox_status(deps.settings.sandbox)
    seen = skills_for(deps.settings, agent_id=agent_id, type_name=type_name)
    ctx = ToolContext(deps=deps, session_key=SESSION, thread=THREAD, requester="slack:U1",
                      agent_id=agent_id, skills=tuple(seen))  # fmt: skip
    return execute_tool(tools, name="execute", arguments=json.dumps({"command": command}),
                        ctx=ctx, max_chars=100_000)  # fmt: skip


def tree_digest(root: Path) -> str:
    """Every path, mode and content under ``root``: equal before and after means untouched."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(f"{path.relative_to(root)} {path.lstat().st_mode}".encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def test_a_skills_script_runs_over_the_workspace(deps: Deps) -> None:
    deps.workspace.put_bytes(SESSION, "report.pdf", PDF, create=True, replaces="")
    out = execute(deps, f"python3 {SKILLS_ROOT}/pdf-tools/scripts/extract.py report.pdf "
                  "> pages.txt; cat pages.txt")  # fmt: skip
    assert out.startswith("exit code 0 · "), out
    assert "files changed: /pages.txt (new, 54 B)" in out
    assert "stdout:\npage 1: Quarterly report\npage 2: Revenue up 12% in Q3\n" in out
    assert deps.workspace.get_text(SESSION, "pages.txt").startswith("page 1: Quarterly")


def test_every_file_of_a_skill_is_there_as_its_collection_lays_it_out(deps: Deps) -> None:
    out = execute(deps, "cd /skills && find . -type f | sort; "
                  "cat pdf-tools/reference/forms/fields.json")  # fmt: skip
    expected = sorted(
        f"./{p.relative_to(COLLECTION)}"
        for p in COLLECTION.rglob("*")
        if p.is_file() and p.parent != COLLECTION
    )
    assert "stdout:\n" + "\n".join(expected) + "\n" in out, out
    assert '"applicant_name": "text"' in out
    # The loader reads the collection's front matter as its authors meant it.
    pdf = load_skills([COLLECTION])["pdf-tools"]
    assert pdf.description == (
        "Extracts the text and the form fields of PDF files and fills PDF forms. Use when the "
        "user works with a PDF: reading it, pulling out a table, or filling in a form."
    )
    assert pdf.body.startswith("# PDF tools\n")
    assert [f"./pdf-tools/{f}" for f in pdf.files] == [e for e in expected if "/pdf-tools/" in e]


def test_writes_into_a_skill_fail_and_leave_it_as_it_was(deps: Deps) -> None:
    before = tree_digest(COLLECTION)
    out = execute(deps, "echo x > /skills/pdf-tools/SKILL.md; touch /skills/pdf-tools/new; "
                  "rm -f /skills/pdf-tools/LICENSE.txt; mkdir /skills/mine; "
                  "chmod 777 /skills/pdf-tools/scripts/extract.py; "
                  "cp -r /skills/brand-voice copy && echo copied")  # fmt: skip
    assert out.count("Read-only file system") == 5, out
    assert "copied" in out  # reading is fine: a copy in the workspace comes back
    assert "/copy/SKILL.md (new" in out and "/copy/examples/before-after.md (new" in out
    assert tree_digest(COLLECTION) == before


def test_a_run_sees_its_agents_and_types_skills_only(deps: Deps) -> None:
    everyone = "stdout:\nbrand-voice\npdf-tools\nstderr"
    more = "stdout:\nbrand-voice\ncsv-summary\npdf-tools\nrelease-notes\nstderr"
    assert everyone in execute(deps, "ls /skills")
    assert more in execute(deps, "ls /skills", agent_id="ops")
    assert more in execute(deps, "ls /skills", type_name="writer")
    assert everyone in execute(deps, "ls /skills", type_name="general-purpose")
    assert everyone in execute(deps, "ls /skills", agent_id="ops", type_name="explore")


def test_without_skills_there_is_no_skills_folder(redis_url: str) -> None:
    deps = make_deps(redis_url)
    try:
        out = execute(deps, "ls /skills; ls /")
    finally:
        deps.close()
    assert "ls: cannot access '/skills': No such file or directory" in out
    assert "\nskills\n" not in out


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every uid may enter (as an operator's skills directory is; pytest's
    own are closed to the sandbox's uid when the tests run as root)."""
    where = Path(tempfile.mkdtemp(prefix="fanbot-skills-test-"))
    where.chmod(0o755)
    yield where
    shutil.rmtree(where)


def write_skill(folder: Path, body: str = "Read it.") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for d in (folder, folder.parent):
        d.chmod(0o755)
    name = folder.name
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: Test.\n---\n{body}\n")


def test_a_link_in_a_skill_leads_nowhere_on_the_host(redis_url: str, open_dir: Path) -> None:
    """The folder is bound, not copied: a link inside it resolves in the sandbox, where
    nothing of the host but ``/usr`` is."""
    skill = open_dir / "skills" / "leaky"
    write_skill(skill)
    (skill / "scripts").mkdir(mode=0o755)
    secret = open_dir / "secret.txt"
    secret.write_text("host secret")
    deps = make_deps(redis_url, skills={"dirs": [str(open_dir / "skills")]})
    try:
        assert "Read it." in execute(deps, "cat /skills/leaky/SKILL.md")
        # Added after loading (the loader refuses a link that leaves the skill, but a
        # folder can change under a running worker): it is still only a name in there.
        (skill / "scripts" / "secret").symlink_to(secret)
        out = execute(deps, "cat /skills/leaky/scripts/secret; ls /skills/leaky/scripts")
    finally:
        deps.close()
    assert "host secret" not in out
    assert "cat: /skills/leaky/scripts/secret: No such file or directory" in out
    assert "stdout:\nsecret\n" in out


def test_a_skill_the_sandboxs_uid_cannot_reach_is_left_out_saying_why(
    redis_url: str, open_dir: Path
) -> None:
    write_skill(open_dir / "skills" / "open")
    write_skill(open_dir / "skills" / "closed")
    (open_dir / "skills" / "closed").chmod(0o700)
    deps = make_deps(redis_url, skills={"dirs": [str(open_dir / "skills")]})
    try:
        out = execute(deps, "ls /skills")
    finally:
        deps.close()
    if os.geteuid() == 0:  # a root worker starts the sandbox as sandbox.uid (65534)
        closed = open_dir / "skills" / "closed"
        assert out.startswith("exit code 0 · "), out
        assert (
            f"skills not mounted: /skills/closed ({closed} is closed to uid 65534, the "
            "sandbox's (FANBOT_SANDBOX__UID))\nstdout:\nopen\n"
        ) in out
    else:  # the worker's own uid, which loaded both
        assert "stdout:\nclosed\nopen\n" in out and "not mounted" not in out


def test_the_example_skills_load_and_the_csv_one_runs_in_the_sandbox(deps: Deps) -> None:
    examples = load_skills([EXAMPLES])
    assert sorted(examples) == ["csv-summary", "release-notes"]
    csv_skill = examples["csv-summary"]
    assert csv_skill.description.startswith("Summarizes a CSV file")
    assert "scripts/summarize.py" in csv_skill.files
    assert "/skills/csv-summary/scripts/summarize.py" in csv_skill.body
    notes = examples["release-notes"]
    assert "TEMPLATE.md" in notes.files and "/skills/release-notes/TEMPLATE.md" in notes.body
    deps.workspace.put_text(
        SESSION, "data/sales.csv", "city,units,note\nOslo,12,\nBergen,30,rain\n"
    )
    command = "python3 /skills/csv-summary/scripts/summarize.py data/sales.csv"
    out = execute(deps, command, type_name="writer")
    assert out.startswith("exit code 0 · "), out
    assert (
        "stdout:\ndata/sales.csv: 2 rows, 3 columns\n- city: text, 2 distinct\n"
        "- units: number, min 12, max 30, mean 21\n- note: text, 1 distinct, 1 empty\n"
    ) in out
    missing = execute(deps, "python3 /skills/csv-summary/scripts/summarize.py nope.csv",
                      type_name="writer")  # fmt: skip
    assert missing.startswith("exit code 2 · ") and "summarize: cannot read nope.csv" in missing


def test_unsafe_host_mode_says_the_skills_are_not_mounted(redis_url: str) -> None:
    unsafe = Settings(redis_url=redis_url, skills={"dirs": [str(COLLECTION)]},  # type: ignore[arg-type]
                      sandbox={**LIMITS, "mode": "unsafe-host"})  # type: ignore[arg-type]  # fmt: skip
    deps = Deps.build(unsafe, client=redis.Redis.from_url(redis_url))
    try:
        out = execute(deps, "echo ran")
    finally:
        deps.close()
    assert "skills not mounted: /skills (unsafe-host mode: no sandbox)\nstdout:\nran\n" in out


def test_executes_description_names_the_skills_folder_only_when_there_are_skills() -> None:
    def described(**values: Any) -> str:
        [tool] = sandbox_tools(Settings(**values))
        return tool.description

    assert "/skills" not in described()
    assert "read-only at /skills/<name>/" in described(skills={"dirs": [str(COLLECTION)]})
    types = [{"name": "writer", "description": "Writes.", "skills": [str(EXAMPLES)]}]
    assert "read-only at /skills/<name>/" in described(subagent_types=types)


def test_a_skill_folder_gone_since_loading_is_left_out(redis_url: str, open_dir: Path) -> None:
    write_skill(open_dir / "skills" / "stays")
    write_skill(open_dir / "skills" / "goes")
    deps = make_deps(redis_url, skills={"dirs": [str(open_dir / "skills")]})
    try:
        seen = skills_for(deps.settings, agent_id="main", type_name=None)
        shutil.rmtree(open_dir / "skills" / "goes")
        tools = {t.name: t for t in sandbox_tools(deps.settings)}
        ctx = ToolContext(deps=deps, session_key=SESSION, thread=THREAD, requester="slack:U1",
                          agent_id="main", skills=tuple(seen))  # fmt: skip
        out = execute_tool(tools, name="execute", arguments=json.dumps({"command": "ls /skills"}),
                           ctx=ctx, max_chars=10_000)  # fmt: skip
    finally:
        deps.close()
    assert out.startswith("exit code 0 · "), out
    assert f"skills not mounted: /skills/goes ({open_dir / 'skills' / 'goes'}" in out
    assert "stdout:\nstays\n" in out
