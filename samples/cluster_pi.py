"""Estimate pi on a configured worker group and check it against this machine, bit for bit.

    python samples/cluster_pi.py CLUSTER_FILE [--samples N] [--seed S]

CLUSTER_FILE is an `ANER_CLUSTER 1` file (see samples/cluster.example; chmod 600). The same
(samples, seed) run locally and on the group must give the same hits to the last integer.
"""

from __future__ import annotations

import argparse

import aner.parallel as parallel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cluster")
    parser.add_argument("--samples", type=int, default=100_000_000)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    try:
        group = parallel.cluster(config=args.cluster)
        on_group = parallel.monte_carlo(samples=args.samples, seed=args.seed, execution=group)
    except parallel.AnerError as exc:
        raise SystemExit(f"cluster run failed: {exc}") from None
    here = parallel.monte_carlo(samples=args.samples, seed=args.seed)

    for name, result in (("this machine", here), ("group", on_group)):
        print(f"{name:<13} {result.summary()}")
    for worker in on_group.workers:
        print(
            f"  {worker.identity:<20} {worker.slots} slot(s) {worker.items:>15,} samples "
            f"in {worker.chunks:,} chunks"
        )
    if here.hits != on_group.hits:
        raise SystemExit("hits differ between this machine and the group: this is a bug")
    print(f"identical hits: {on_group.hits:,}")


if __name__ == "__main__":
    main()
