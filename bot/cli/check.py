"""One line of ``fanbot doctor``'s report, shared by every check that writes one."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Check:
    """One line of the report: ``ok``, ``warn`` (works, but probably not as meant) or ``BAD``.

    Attributes:
        name: What was checked.
        ok: False fails the doctor (exit code 1).
        detail: What was found, and the fix when something is wrong.
        warn: A warning (``ok`` stays True).
    """

    name: str
    ok: bool
    detail: str
    warn: bool = False

    @property
    def mark(self) -> str:
        return "BAD" if not self.ok else "warn" if self.warn else "ok"
