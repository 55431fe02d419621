"""``python -m workers``: the worker launcher (what ``fanbot worker`` runs)."""

import sys

from bot.errors import ConfigError, RedisUnavailable
from workers.launcher import main

try:
    sys.exit(main())
except (ConfigError, RedisUnavailable) as exc:  # one line and exit 2, as `fanbot worker`
    print(f"fanbot worker: {' '.join(str(exc).split())}", file=sys.stderr)
    sys.exit(2)
