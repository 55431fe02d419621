"""Skills written the way public skill collections write them, for the skills tests.

Each is a folder with a ``SKILL.md`` (front matter with the optional keys collections use:
``license``, ``allowed-tools``, ``metadata``, ``version``…; a folded multi-line
description), reference documents, scripts and a licence file next to it.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

PDF_FORMS = """---
name: pdf-forms
description: >-
  Fill in PDF forms and check the result. Use when the user asks to complete,
  fill or validate a PDF form.
license: Apache-2.0. LICENSE.txt has the complete terms
allowed-tools:
  - Read
  - Bash(python3:*)
metadata:
  author: example-org
  version: "1.2"
---

# Filling PDF forms

1. Read `references/fields.md` for the field names the forms use.
2. Run `scripts/fill.py <form> <values.json>` to fill one in.
3. Check the output against `references/checklist.md`.

The form's field called **Reference code** is always `FORM-7731`.
"""

RELEASE_NOTES = """---
name: release-notes
description: "Write release notes from a list of merged changes: group them, one line each."
version: 0.3.0
compatibility: Any agent that can read files
---
# Release notes

Group the changes as **Added**, **Changed**, **Fixed** (see [the template](assets/template.md)).
"""


def write(root: Path, rel: str, text: str | bytes) -> Path:
    """Write ``text`` at ``root/rel``, creating folders."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def pdf_forms(skills_dir: Path) -> Path:
    """The ``pdf-forms`` skill in ``skills_dir``: SKILL.md, nested references, a script,
    a licence; returns its folder."""
    folder = skills_dir / "pdf-forms"
    write(folder, "SKILL.md", PDF_FORMS)
    write(folder, "LICENSE.txt", "Apache License 2.0 (example)\n")
    write(folder, "references/fields.md", "# Fields\n\n- name\n- reference_code: FORM-7731\n")
    write(folder, "references/checklist.md", "- every field filled\n- signed\n")
    write(folder, "scripts/fill.py", "import sys\nprint('filled', sys.argv[1:])\n")
    return folder


def release_notes(skills_dir: Path) -> Path:
    """The ``release-notes`` skill in ``skills_dir``; returns its folder."""
    folder = skills_dir / "release-notes"
    write(folder, "SKILL.md", RELEASE_NOTES)
    write(folder, "assets/template.md", "## Added\n## Changed\n## Fixed\n")
    return folder


def skill_md(name: str, description: str = "Does a thing. Use when asked.", body: str = "") -> str:
    """A minimal ``SKILL.md``."""
    return f"---\nname: {name}\ndescription: {description}\n---\n{body or '# ' + name}\n"


EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "skills" / "examples"


@functools.cache
def open_copy(folder: Path) -> Path:
    """A copy of ``folder`` the sandbox's uid can read, whatever the clone's own directory
    allows (a clone under a 0700 directory is closed to it), made once per process."""
    where = Path(tempfile.mkdtemp(prefix="fanbot-skills-"))
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    copy = where / folder.name
    shutil.copytree(folder, copy)
    for path in (where, copy, *copy.rglob("*")):
        path.chmod(0o755 if path.is_dir() else path.stat().st_mode | 0o444)
    return copy


def open_examples() -> Path:
    """``docs/skills/examples``, readable by the sandbox's uid (:func:`open_copy`)."""
    return open_copy(EXAMPLES)
