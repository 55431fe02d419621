"""The ``fanbot`` command line."""

from bot.cli.root import app, main

__all__ = ["app", "main"]
