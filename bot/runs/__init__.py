"""The run lifecycle, one concern per module.

==================  =================================================================
module              what it owns
==================  =================================================================
``spawn``           validate a request, write the run record, put its job in line
``line``            the line for subagent slots: admit on a freed slot, show places
``execute``         the run body inside the RQ horse: start, hooks, how it ended
``stall``           the stall watchdog (no output for too long), and the heartbeat
``budget``          spend limits of runs, trees, threads and users; the call guard
``finalize``        the one terminal transition, prepared for the finalize script
``render``          the announce and the history note (pure)
``outfiles``        the ``out/`` files a run wrote, for its announce
``join``            fan-in: one continuation turn once a turn's runs have all ended
``stop``            stop a run or a turn: read once, apply the plan; re-send hard stops
``stop_plan``       what stopping a run does, planned without I/O from one read
``send``            steer a running run, or follow a finished one up on its session
``steer_receipts``  what became of each steering message (queued, delivered, missed)
``thread_children`` thread-bound children: a run working in a thread of its own
``approval_gate``   approvals: park before a tool call, ask, resume on a decision
``decisions``       ``!approve``/``!deny`` as typed or pressed (pure)
``spawn_approval``  a spawn held for approval before it starts (its cost estimate)
``estimate``        a spawn's estimate from recent runs of its type and model (pure)
``recurring``       schedules: make, list, remove and fire recurring runs
``schedule_spec``   when a schedule fires: intervals and cron expressions (pure)
``access``          which runs a command may see, which run an id names, who may act
``naming``          a run's name and title in all its forms, and the icon table (pure)
``progress_lines``  what a run tells its status card (step, tool count, quiet end)
``logview``         what a run's log shows (``/subagents log``, ``sessions_history``)
``type_registry``   the subagent types: the built-in ones plus config's
==================  =================================================================

``bot.commands`` and ``bot.agent`` call this package; it imports neither (the agent's tool
loop reaches a run as a :class:`~bot.steps.RunBody` the worker passes in). Below it are
:mod:`bot.observe` and the stores (:mod:`bot.store`, one owner per Redis structure, each
reached through :class:`~bot.deps.Deps`). See ``docs/architecture.md``.
"""
