"""fanbot: a thread-native chat bot that fans out subagents on RQ workers."""

__version__ = "0.1.0"
