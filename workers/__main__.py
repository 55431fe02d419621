"""``python -m workers``: ``fanbot worker``, its options and its start-up errors alike (the
console and the tests start the launcher so, where the console script may not be on PATH)."""

import sys

from bot.cli.root import app

app(["worker", *sys.argv[1:]], prog_name="fanbot")
