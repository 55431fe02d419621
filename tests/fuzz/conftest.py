"""Hypothesis profiles for tests/fuzz.

``fuzz`` (default): deterministic (``derandomize``; no example database, so nothing is
written into the tree) and sized so the whole directory stays well under a minute. A
failure is shrunk once (one bug at a time, no explain phase), so even a failing run of
the costlier properties ends well within the suite's per-test timeout.
``fuzz-deep``: random seeds and twenty times the examples, for bug hunting by hand.
"""

from __future__ import annotations

from hypothesis import Phase, settings

_QUICK_PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)

settings.register_profile(
    "fuzz",
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    report_multiple_bugs=False,
    phases=_QUICK_PHASES,
)
settings.register_profile(
    "fuzz-deep", max_examples=2_000, deadline=None, derandomize=False, database=None
)
