"""Property-based fuzzing of everything that parses what people and platforms send (issue 7).

The profile lives in ``conftest.py``; :func:`fuzz_settings` applies it per test so the rest
of the suite keeps hypothesis' defaults. ``FANBOT_FUZZ_PROFILE=fuzz-deep`` explores more
(random seeds, many more examples) when hunting bugs locally.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import settings


def fuzz_settings(**overrides: Any) -> settings:
    """The active fuzz profile (``fuzz`` unless ``FANBOT_FUZZ_PROFILE`` names another)."""
    profile = settings.get_profile(os.environ.get("FANBOT_FUZZ_PROFILE", "fuzz"))
    return settings(profile, **overrides)
