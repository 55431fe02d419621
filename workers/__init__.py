"""The worker side, beside ``bot`` (``bot`` never imports it: jobs are enqueued by name).

:mod:`~workers.launcher` (``fanbot worker``, ``python -m workers``) builds the
:class:`~workers.context.WorkerContext`, warms it up, forks the RQ workers
(:mod:`~workers.forked`) and runs the maintenance sweep (:mod:`~workers.maintenance`, with
:mod:`~workers.repair` for jobs RQ lost). :mod:`~workers.jobs` holds the job entry points
(``run_turn``, ``run_subagent``, ``resume_subagent``) and :mod:`~workers.callbacks` the
backup finalizers RQ calls when a job fails, is stopped or its horse dies.
"""
