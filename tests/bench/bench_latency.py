"""Kept for ``python -m tests.bench.bench_latency [--runs N] [--workers N] [--batch N]``.

The benchmark lives in :mod:`bot.bench.latency`; ``fanbot bench latency`` runs it too.
"""

import sys

from bot.bench.bench_commands import app

if __name__ == "__main__":
    app(["latency", *sys.argv[1:]], prog_name="fanbot bench")
