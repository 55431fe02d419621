"""How a person decides an approval in chat: ``!approve <id> [{json}]`` or ``!deny <id>``.

Pure (no I/O), so adapters can tell fanbot's own buttons, whose data is such a text (see
:func:`bot.runs.approval_gate.request_actions`), from anyone else's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class DecisionRequest:
    """``!approve <id> [{json}]`` or ``!deny <id>`` as typed or pressed."""

    approval_id: str
    approve: bool
    arguments: str | None = None


_DECISION = re.compile(r"^\s*[!/](approve|deny)\s+([0-9a-f]{4,16})\b\s*(.*)$", re.S | re.I)


def parse_decision(text: str) -> DecisionRequest | None:
    """The decision in a message (pure); None when it is not one."""
    found = _DECISION.match(text)
    if found is None:
        return None
    rest = found[3].strip()
    approve = found[1].lower() == "approve"
    return DecisionRequest(
        approval_id=found[2].lower(), approve=approve, arguments=rest if approve and rest else None
    )
