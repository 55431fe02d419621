"""Benchmarks behind ``fanbot bench`` (:mod:`~bot.bench.bench_commands`): ``soak``
(:mod:`~bot.bench.soak`), ``latency`` (:mod:`~bot.bench.latency`), ``stop``
(:mod:`~bot.bench.stop_latency`), ``compare`` against bare RQ
(:mod:`~bot.bench.compare`), ``map``, the code's figures (:mod:`~bot.bench.code_map`,
:mod:`~bot.bench.path_trace`), and ``commands``, Redis commands per subagent run
(:mod:`~bot.bench.run_commands`). They measure; the test suite asserts behaviour. Not
production code: only the CLI loads this package, by name, for ``fanbot bench``."""

BENCH_LIMITS = {
    "messages_per_minute_per_user": 10_000,
    "messages_per_minute_per_thread": 10_000,
    "runs_per_user": 10_000,
    "runs_per_session": 10_000,
}
"""A bench is one person starting hundreds of runs: the per-person limits are checked (their
cost is measured) but set out of its way."""
