"""Observing fanbot: Prometheus metrics, health endpoints, tracing and job-scoped logs.

Why the counters live in Redis
------------------------------

A ``fanbot worker`` forks a job horse per turn and per run, and that horse is where
tokens are spent and runs end; the gateway delivers; several hosts run workers. Two ways
exist to count that correctly: prometheus-client's multiprocess mode (each process
writes mmap files in a shared directory and one process sums them) or counters kept in
the shared state and exported by any process. fanbot keeps them in Redis:

- **Cluster-wide totals from any process.** Every gateway and every worker launcher
  serves the same figures, because they all read one Redis; multiprocess mode only sums
  the processes of one host sharing one directory, and a horse's file outlives it only
  if the directory is cleaned up with care (``mark_process_dead``) at every restart.
- **They survive restarts.** A worker restart (a deploy, a crash) keeps the counts;
  Prometheus still handles a reset (a Redis flush) as a counter reset.
- **Few writes.** Each process adds its counts up in memory and writes them with
  ``HINCRBY`` in one pipeline at most ``FLUSH_SECONDS`` (5) later (histograms are hashes
  of bucket counters): a run's with its terminal transition (the finalize script), any
  job's at its end, before its horse's ``os._exit``; the gateway's every five seconds and
  before each scrape of its ``/metrics``. A busy process writes each series once per
  flush, not once per event (see :mod:`bot.store.metrics`).

Gauges (queue depths, workers, active runs, the outbox backlog, dead letters) are not
stored at all: each scrape reads them from RQ and Redis. The price of totals from any
process: scrape one target, or aggregate with ``max`` (not ``sum``) across targets.

Modules
-------

================  ====================================================================
module            what
================  ====================================================================
``metric_defs``   every metric's name, help, labels and buckets; events -> updates (pure)
``export``        the Prometheus collector read at scrape time
``record``        one-line hooks for sync code (spawn, jobs, ingress)
``job_observer``  the job entry points' scope: span, queue wait, model tokens and cost
``scope``         contextvars naming the current run and session; the model-call hook
``tracing``       optional OpenTelemetry (``fanbot[otel]``), a no-op when not configured
``health``        readiness checks -> status and JSON body; who may read them (pure)
``gateway``       the gateway's routes, ingress span and inbound/egress counting
``serve``         the worker launcher's ``--metrics-port`` HTTP server
================  ====================================================================

The Redis structures belong to :mod:`bot.store.metrics`.
"""
