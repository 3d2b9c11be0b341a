"""Estimate pi serially and in parallel on this machine, and compare, with no configuration.

    python samples/local_pi.py [--samples N] [--seed S]

The two runs use the same (samples, seed), so they must print the same hits to the last
integer: the sample set depends on nothing else. Copy this file and change the numbers.
"""

from __future__ import annotations

import argparse

import aner.parallel as parallel

from aner_coord.scaling.load import BUSY_SHARE, LoadMeter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1_000_000_000)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    try:
        run(args.samples, args.seed)
    except parallel.AnerError as exc:  # a bad number: one line, no traceback
        raise SystemExit(f"local_pi: {exc}") from None


def run(samples: int, seed: int) -> None:
    inventory = parallel.inventory()
    print(f"effective CPUs: {inventory['effective_cpus']}  ({inventory['auto_rule']})")
    # Load (or compile, the first time) the kernels before timing anything.
    parallel.monte_carlo(samples=1_000, seed=seed, execution=parallel.local(workers=1))

    # What other processes took of the CPUs while the two runs were timed: a speedup measured
    # beside them says as much about them as about aner.
    meter = LoadMeter()
    meter.start()
    serial = parallel.monte_carlo(samples=samples, seed=seed, execution=parallel.local(workers=1))
    para = parallel.monte_carlo(samples=samples, seed=seed, execution=parallel.local())
    load = meter.stop()

    print(
        f"{'run':<10}{'workers':>8}{'hits':>16}{'estimate':>15}{'seconds':>10}{'M samples/s':>13}"
    )
    for name, r in (("serial", serial), ("parallel", para)):
        print(
            f"{name:<10}{len(r.workers):>8}{r.hits:>16,}{r.estimate:>15.10f}"
            f"{r.seconds:>10.3f}{r.throughput / 1e6:>13.1f}"
        )
    speedup = serial.seconds / para.seconds
    workers = len(para.workers)
    print(
        f"speedup {speedup:.2f}x on {workers} workers "
        f"(efficiency {speedup / workers:.2f}); identical hits: {serial.hits == para.hits}"
    )
    share = (
        f"other processes used {load.others_cpu_share:.0%} of the {load.cpus} CPUs while this timed"
    )
    if load.busy:
        print(
            f"note: {share} (at least {BUSY_SHARE:.0%} is a busy machine): the speedup and the "
            "efficiency understate an idle machine's; run it again when the machine is quiet"
        )
    else:
        print(f"({share})")
    if serial.hits != para.hits:
        raise SystemExit("hits differ between serial and parallel runs: this is a bug")


if __name__ == "__main__":
    main()
