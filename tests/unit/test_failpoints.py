"""FANBOT_FAILPOINTS parsing and actions (the kill action is exercised in tests/faults)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot import failpoints


def test_parse_actions_and_hit_counts() -> None:
    points = failpoints.parse("a=kill; b=sleep(0.5)@2 ;c=raise")
    assert (points["a"].action, points["a"].at_hit) == ("kill", 1)
    assert (points["b"].action, points["b"].seconds, points["b"].at_hit) == ("sleep", 0.5, 2)
    assert points["c"].action == "raise"
    assert failpoints.parse("") == {}


@pytest.mark.parametrize("bad", ["a", "a=explode", "=kill", "a=sleep(x)", "a=kill@"])
def test_bad_specs_name_the_variable(bad: str) -> None:
    with pytest.raises(ValueError, match="FANBOT_FAILPOINTS"):
        failpoints.parse(bad)


def test_raise_fires_on_the_configured_hit_only() -> None:
    points = failpoints.Failpoints("p=raise@2")
    points.hit("p")
    with pytest.raises(failpoints.FailpointError):
        points.hit("p")
    points.hit("p")  # only the second hit fires
    points.hit("unconfigured")


def test_a_bang_path_fires_once_per_machine_not_once_per_process(tmp_path: Path) -> None:
    marker = tmp_path / "once"
    first = failpoints.Failpoints(f"p=raise!{marker}")
    second = failpoints.Failpoints(f"p=raise!{marker}")  # another process, same settings
    with pytest.raises(failpoints.FailpointError):
        first.hit("p")
    assert marker.exists()
    second.hit("p")  # the restarted worker goes past it
    assert failpoints.parse(f"p=kill@2!{marker}")["p"].once_file == str(marker)
