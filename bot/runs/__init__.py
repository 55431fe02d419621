"""The run lifecycle, one concern per module.

==============  =====================================================================
module          what it owns
==============  =====================================================================
``spawn``       validate a request, write the run record, enqueue its job
``execute``     the run body inside the RQ horse: heartbeat, hooks, how it ended
``finalize``    the one terminal transition (announce, history note, slot, archive)
``stop``        stop a run or a turn; re-send hard stops that did not land
``stop_plan``   what stopping a run does, planned without I/O from one read
``send``        steer a running run, or follow a finished one up on its session
``access``      which runs a command may see, which run an id names, who may act
``naming``      a run's name and title in all its forms, and the icon table
``render``      the announce and the history note
``progress``    what a run tells its status card (type tag, tool count, tally, quiet end)
``logview``     what a run's log shows (``/subagents log``, ``sessions_history``)
``catalog``     the subagent types (built-in ones plus config's)
==============  =====================================================================

``bot.commands`` and ``bot.agent`` call this package; it imports neither (the agent's tool
loop reaches a run as a :class:`~bot.steps.RunBody` the worker passes in). Below
it are the stores (:mod:`bot.store`), one owner per Redis structure.
"""
