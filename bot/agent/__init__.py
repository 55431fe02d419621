"""The agent: model calls, the tool loop, tools, spawning and subagent types."""
