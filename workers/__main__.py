"""``python -m workers``: the worker launcher (what ``fanbot worker`` runs)."""

import sys

from bot.errors import ConfigError
from workers.launcher import main

try:
    sys.exit(main())
except ConfigError as exc:
    print(f"fanbot worker: {exc}", file=sys.stderr)
    sys.exit(2)
