"""The benchmarks, in the order `python -m bench` runs them.

Each name is a module `bench/NAME.py` that defines `BENCHMARK = runner.Benchmark(...)`; adding
a benchmark is that module plus one line here. See bench/README.md.
"""

BENCHMARKS: tuple[str, ...] = (
    "kernel",
    "scaling",
    "startup",
    "whole",
    "memory",
    "cluster",
    "latency",
    "session",
    "fixture",
    "durable",
    "plan",
    "dense",
    "search",
    "dense_workers",
    "checkpoints",
    "timeline",
    "replicates",
    "simulation",
)
