"""docs/models.md's conformance table is the fixtures' ``expect.support``, never drifting.

The section ``## Conformance: server kinds × features`` is rendered from the fixtures; when
a fixture changes, regenerate it with ``python -m tests.conformance.test_docs_table``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bot.testing.replay_openai import Fixture, load_fixtures

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "models.md"
HEADING = "## Conformance: server kinds × features"
CASES = {
    "plain": "plain",
    "parallel_tools": "parallel tools",
    "streamed_usage": "streamed usage",
    "reasoning": "reasoning",
    "context_too_long": "context too long",
    "overloaded": "overloaded",
}
INTRO = """\
Each server kind's wire traffic, taken from its public documentation, source and tests, is
kept as fixtures in `tests/conformance/fixtures/<kind>/<case>.json` and replayed by
`bot.testing.ReplayOpenAI` to fanbot's real client (`OpenAIChatModel` on the `openai` SDK)
configured with that `kind`; the suite checks what fanbot sends (for example `max_tokens`
rather than `max_completion_tokens` where a server only knows the former) and what it reads
(text, parallel tool calls, usage with cached and reasoning tokens, reasoning text, and the
failure kind of "context too long" and "overloaded" answers). **works**: the server speaks
OpenAI's dialect for this and fanbot reads it as it is; **adapted**: fanbot sends or reads
it the server's own way; **not supported**: the server does not give it (what fanbot then
does is in the fixture's note). This section is generated from the fixtures
(`python -m tests.conformance.test_docs_table`) and a test keeps them equal."""


def render(fixtures: list[Fixture]) -> str:
    by_kind: dict[str, dict[str, Fixture]] = {}
    for fixture in fixtures:
        by_kind.setdefault(fixture.kind, {})[fixture.case] = fixture
    lines = [HEADING, "", INTRO, ""]
    lines.append("| kind | " + " | ".join(CASES.values()) + " |")
    lines.append("|---|" + "---|" * len(CASES))
    for kind, cases in by_kind.items():
        cells = [str(cases[c].expect["support"]) if c in cases else "—" for c in CASES]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines += ["", "Where each fixture comes from:", ""]
    for kind, cases in by_kind.items():
        for case, fixture in sorted(cases.items()):
            note = f" *{fixture.note}*" if fixture.note else ""
            lines.append(f"- `{kind}/{case}`: {fixture.source}.{note}")
    return "\n".join(lines) + "\n"


def documented(text: str) -> str:
    """The section of ``text`` from the heading to the next ``## `` heading."""
    start = text.index(HEADING)
    end = text.find("\n## ", start + len(HEADING))
    return text[start : (len(text) if end < 0 else end + 1)]


def test_docs_table_matches_the_fixtures() -> None:
    fixtures = load_fixtures(Path(__file__).parent / "fixtures")
    wanted = render(fixtures)
    assert documented(DOC.read_text(encoding="utf-8")) == wanted, (
        "docs/models.md is out of date: run python -m tests.conformance.test_docs_table"
    )


def _write() -> None:
    wanted = render(load_fixtures(Path(__file__).parent / "fixtures"))
    text = DOC.read_text(encoding="utf-8") if DOC.exists() else "# Models\n"
    if HEADING in text:
        text = text.replace(documented(text), wanted)
    else:
        text = text.rstrip("\n") + "\n\n" + wanted
    DOC.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    _write()
    sys.exit(0)
