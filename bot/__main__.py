"""``python -m bot`` is ``fanbot`` (handy where the console script is not on PATH)."""

from bot.cli import main

main()
