"""The replay corpus itself: enough real payloads per platform, each with a checkable source."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.replay.corpus import PLATFORMS, ROOT, load, source_problem

MIN_CASES = 100
"""At least this many real payloads per platform (the replay suite's promise)."""


@pytest.mark.parametrize("platform", PLATFORMS)
def test_each_platform_has_enough_cases_with_unique_names(platform: str) -> None:
    cases = load(platform)
    assert len(cases) >= MIN_CASES
    counts = Counter(case.id for case in cases)
    assert [name for name, n in counts.items() if n > 1] == []
    assert {case.outcome for case in cases} == {"turn", "ignore"}  # both kinds are replayed


@pytest.mark.parametrize("platform", PLATFORMS)
def test_every_case_names_a_source_someone_else_can_check(platform: str) -> None:
    for case in load(platform):
        assert source_problem(case.source) is None, case.id
        assert "fanbot" not in case.source.get("project", "").lower(), case.id  # not our fakes


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ({"url": "https://core.telegram.org/bots/webhooks"}, None),
        ({"project": "a/b", "path": "t.json", "commit": "0" * 40}, None),
        ({"url": "http://example.org"}, "a source needs project and path (or an https url)"),
        ({"project": "a/b", "path": "t.json"}, "a project source needs the commit it was read at"),
        (
            {"project": "a/b", "path": "t.json", "commit": "main"},
            "a project source needs the commit it was read at",
        ),
        ({}, "a source needs project and path (or an https url)"),
    ],
)
def test_source_rules(source: dict[str, str], problem: str | None) -> None:
    assert source_problem(source) == problem


def test_a_case_without_a_source_or_outcome_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "x").mkdir()
    bad: dict[str, Any] = {
        "cases": [{"name": "n", "kind": "event", "expect": {"outcome": "turn"}, "payload": {}}]
    }
    (tmp_path / "x" / "a.json").write_text(json.dumps(bad))
    monkeypatch.setattr("tests.replay.corpus.ROOT", tmp_path)
    with pytest.raises(ValueError, match="needs project and path"):
        load("x")
    bad["source"] = {"url": "https://example.org/doc"}
    bad["cases"][0]["expect"] = {"outcome": "maybe"}
    (tmp_path / "x" / "a.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="needs name, kind and outcome"):
        load("x")
    assert ROOT.name == "corpus"
