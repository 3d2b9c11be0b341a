"""Several estimates of pi on one set of workers: a session starts them once.

    python samples/session_pi.py [CLUSTER_FILE] [--samples N] [--calls K]

With a cluster file the calls run on its worker group (started by the first call and kept
for the others); without, on local threads. Each call is its own job with its own seed, its
own accounting and its own timing; the first call on a group includes starting the workers.
"""

from __future__ import annotations

import argparse

import aner.parallel as parallel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cluster", nargs="?", help="a cluster file (ANER_CLUSTER 1)")
    parser.add_argument("--samples", type=int, default=100_000_000)
    parser.add_argument("--calls", type=int, default=4)
    args = parser.parse_args()
    try:
        execution = parallel.cluster(args.cluster) if args.cluster else parallel.local()
        run(execution, args.samples, args.calls)
    except parallel.AnerError as exc:  # a bad file or number: one line, no traceback
        raise SystemExit(f"session_pi: {exc}") from None


def run(
    execution: parallel.LocalExecution | parallel.ClusterExecution, samples: int, calls: int
) -> None:
    print(f"{'call':>4}{'seed':>6}{'hits':>16}{'estimate':>15}{'seconds':>10}  per worker")
    with parallel.session(execution) as s:
        for call in range(calls):
            r = s.monte_carlo(samples=samples, seed=call)
            share = ", ".join(f"{w.identity} {w.items:,}" for w in r.workers)
            print(f"{call:>4}{call:>6}{r.hits:>16,}{r.estimate:>15.10f}{r.seconds:>10.3f}  {share}")
            if sum(w.items for w in r.workers) != samples:
                raise SystemExit("the workers' accounting does not add up: this is a bug")


if __name__ == "__main__":
    main()
