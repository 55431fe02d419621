"""Benchmarks behind ``fanbot bench``: :mod:`~bot.bench.soak`, :mod:`~bot.bench.latency`,
:mod:`~bot.bench.stop_latency`. They measure; the test suite asserts behaviour."""
