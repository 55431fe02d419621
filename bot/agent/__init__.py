"""The agent: model calls, the tool loop, tools, spawning and subagent types.

The model is a small port (:class:`~bot.models.completion.ChatModel`; the ``openai`` one in
:mod:`~bot.agent.llm`); :mod:`~bot.agent.loop` is the tool loop; :mod:`~bot.agent.turn`
one main-agent turn and :mod:`~bot.agent.subagent` the work of a subagent run (a compiled
type's runnable in :mod:`~bot.agent.compiled`). The main agent's tools are in
:mod:`~bot.agent.session_tools` (``sessions_spawn`` in :mod:`~bot.agent.spawn_tool`); every
other tool family is in :mod:`bot.agent.tools`; which agent gets which tools in
:mod:`~bot.agent.policy` and :mod:`~bot.agent.subagent_types`.
"""
