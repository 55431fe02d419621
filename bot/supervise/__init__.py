"""Keeping processes, threads and tasks in hand: stopping asyncio tasks and the threads they
started (:mod:`~bot.supervise.aio`), back-off for retry loops (:mod:`~bot.supervise.backoff`),
stopping child processes (:mod:`~bot.supervise.childproc`), a directory lock held for a
process's lifetime (:mod:`~bot.supervise.dirlock`) and stop requests by signal
(:mod:`~bot.supervise.signals`). No fanbot state: every layer may use them.
"""
