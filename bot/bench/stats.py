"""Small statistics helpers for the benchmarks' printed lines."""

from __future__ import annotations

import statistics


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank of the sorted values."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(name: str, samples: list[float]) -> str:
    """``name  n=24  median 12.3 ms  p95 20.1 ms  max 25.0 ms`` (samples in seconds)."""
    if not samples:
        return f"{name:<30} n=0"
    return (
        f"{name:<30} n={len(samples):<4} median {statistics.median(samples) * 1000:7.1f} ms"
        f"   p95 {percentile(samples, 0.95) * 1000:7.1f} ms"
        f"   max {max(samples) * 1000:7.1f} ms"
    )
