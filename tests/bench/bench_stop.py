"""Kept for ``python -m tests.bench.bench_stop [stops]``.

The benchmark lives in :mod:`bot.bench.stop_latency`; ``fanbot bench stop --stops N`` runs it too.
"""

import sys

from bot.bench.bench_commands import app

if __name__ == "__main__":
    app(
        ["stop", *(["--stops", sys.argv[1]] if len(sys.argv) > 1 else [])], prog_name="fanbot bench"
    )
