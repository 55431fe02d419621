"""``fanbot console``: fanbot in one command (:mod:`~bot.console.app`).

A private Redis, a worker launcher (:mod:`~bot.console.procs`, which also counts Ctrl-C
presses), the gateway in-process, the terminal channel (:mod:`adapters.console`) and, with
no model endpoint configured, the offline demo model (:mod:`bot.demo`);
:mod:`~bot.console.live_runs` says what is in flight and stops it all on exit.
"""
