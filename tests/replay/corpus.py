"""The replay corpus: real payloads other people wrote, each with its source and outcome.

One JSON file per source (a project's test file, a documentation page) under
``corpus/<platform>/``; each holds a list of cases::

    {"source": {"project": "slackapi/bolt-python", "path": "tests/...", "commit": "<40 hex>"},
     "cases": [{"name": "app_mention in a thread", "kind": "event",
                "expect": {"outcome": "turn", "status": 200, "thread": "1700000000.000100"},
                "payload": {...}}]}

A documentation source is ``{"url": "https://..."}`` instead of project/path/commit. A case
may override the file's ``source`` with its own. ``expect.outcome`` is ``turn`` (exactly one
turn, in ``expect.thread`` when given) or ``ignore`` (no turn, nothing sent); ``status`` is
the HTTP status the gateway answers where there is an HTTP endpoint; ``reply`` (optional) is
text the platform must be sent instead of a turn (e.g. an answered callback query).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parent / "corpus"
PLATFORMS = ("slack", "telegram", "matrix")
OUTCOMES = ("turn", "ignore")
_COMMIT = re.compile(r"^[0-9a-f]{7,40}$")


@dataclass(frozen=True)
class Case:
    """One payload to replay and what the gateway must do with it."""

    platform: str
    name: str
    kind: str
    payload: dict[str, Any]
    outcome: str
    status: int | None
    source: dict[str, str]
    file: str
    expect: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """A pytest id: the file's stem and the case's name."""
        return f"{Path(self.file).stem}:{self.name}"


def source_problem(source: dict[str, str]) -> str | None:
    """What a source lacks to be checked by someone else, or ``None``."""
    if source.get("url", "").startswith("https://"):
        return None
    if not source.get("project") or not source.get("path"):
        return "a source needs project and path (or an https url)"
    if not _COMMIT.match(source.get("commit", "")):
        return "a project source needs the commit it was read at"
    return None


def load(platform: str) -> list[Case]:
    """Every case for ``platform``, in file order.

    Raises:
        ValueError: A file or case without a usable source, name, kind or outcome.
    """
    cases: list[Case] = []
    for path in sorted((ROOT / platform).glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        for raw in doc["cases"]:
            source = raw.get("source") or doc.get("source") or {}
            problem = source_problem(source)
            expect = raw.get("expect", {})
            if problem:
                raise ValueError(f"{path.name}: {raw.get('name')}: {problem}")
            if expect.get("outcome") not in OUTCOMES or not raw.get("name") or not raw.get("kind"):
                raise ValueError(f"{path.name}: {raw.get('name')}: needs name, kind and outcome")
            cases.append(
                Case(
                    platform=platform,
                    name=raw["name"],
                    kind=raw["kind"],
                    payload=raw["payload"],
                    outcome=expect["outcome"],
                    status=expect.get("status"),
                    source=source,
                    file=path.name,
                    expect=expect,
                )
            )
    return cases
