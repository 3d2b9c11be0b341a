"""latency: small chunks against large ones over a slow link. An SSH worker (1 record x 1
slot, the loopback sshd) is reached through `tests/delay_relay.py` as its ProxyCommand, which
holds every chunk of bytes for a fixed time each way; the same job runs at chunk 10**6 and
chunk 10**8, interleaved, at each delay. Goal: at about 60 ms round trip (30 ms each way)
chunk 10**6 within 1.10x of chunk 10**8 at 3x10**8 samples.

One slot, so that both chunk sizes keep the slot equally busy (3 chunks of 10**8 on two slots
would leave one idle for a third of the job and flatter the small chunks). Wall time includes
the SSH connection and the worker's start, which cost the same at both chunk sizes."""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aner_coord import parallel
from bench.calls import environment, loopback_ssh, monte_carlo_workers, write_cluster
from bench.runner import (
    ROOT,
    Benchmark,
    Failure,
    attempt,
    counts,
    goal,
    interleave,
    mega,
    note,
    ratio,
    scratch_dir,
    secs,
    table,
)

SEED = 42
GOAL_RATIO = 1.10
GOAL_DELAY_S = 0.03  # each way: about 60 ms round trip
RELAY = ROOT / "tests" / "delay_relay.py"


@dataclass(frozen=True)
class Sizes:
    samples: int
    chunks: tuple[int, int]  # small, large
    delays_s: tuple[float, ...]  # one way
    reps: int


def slow_alias(home: Path, alias: str, delay_s: float) -> str:
    """Add to `home`'s ssh_config an alias like `alias`, reached through the delay relay."""
    config = home / ".ssh" / "config"
    text = config.read_text()
    block = text.split(f"Host {alias}\n", 1)[1].split("\nHost ", 1)[0]
    options = dict(line.split(None, 1) for line in block.strip().splitlines())
    name = f"{alias}-delay-{round(delay_s * 1000)}ms"
    proxy = f"{sys.executable} {RELAY} {delay_s} {options['HostName']} {options['Port']}"
    config.write_text(
        text.rstrip("\n") + f"\nHost {name}\n{block.rstrip()}\n    ProxyCommand {proxy}\n"
    )
    return name


def run(sizes: Sizes) -> dict[str, Any]:
    tmp = scratch_dir("aner-bench-latency-")
    tmp.chmod(0o700)
    (tmp / "sshd").mkdir(mode=0o700)
    small, large = sizes.chunks
    with contextlib.ExitStack() as stack:
        peer = stack.enter_context(loopback_ssh(tmp / "sshd"))
        home = Path(str(peer.env["HOME"]))
        cases = {}
        for delay in sizes.delays_s:
            alias = slow_alias(home, peer.alias, delay)
            cluster = write_cluster(tmp / f"c-{alias}", [("peer-1", "ssh", alias, 1)])
            for chunk in sizes.chunks:

                def call(cluster: Path = cluster, chunk: int = chunk) -> Any:
                    with environment(peer.env):
                        execution = parallel.cluster(cluster, chunk=chunk)
                        return attempt(lambda: monte_carlo_workers(sizes.samples, SEED, execution))

                cases[f"{delay}|{chunk}"] = call
        interleave({k: v for k, v in cases.items() if k.endswith(f"|{small}")}, 1)  # warm-up
        runs = interleave(cases, sizes.reps)

    out: dict[str, Any] = {"samples": sizes.samples, "seed": SEED, "reps": sizes.reps, "runs": {}}
    rows = []
    all_hits: set[int] = set()
    ratios: dict[float, float | None] = {}
    for delay in sizes.delays_s:
        medians = {}
        for chunk in sizes.chunks:
            series = runs[f"{delay}|{chunk}"]
            good = series.where(lambda v: not isinstance(v, Failure))
            failures = [v.text for v in series.values if isinstance(v, Failure)]
            hits = {v.hits for v in good.values}
            all_hits |= hits
            windows = sorted({w for v in good.values for w in v.windows if w is not None})
            rtts = [r for v in good.values for r in v.rtts if r is not None]
            rtt = sorted(rtts)[len(rtts) // 2] if rtts else None
            medians[chunk] = good.median
            out["runs"][f"delay {delay} s, chunk {chunk}"] = {
                "delay_one_way_s": delay,
                "chunk": chunk,
                **good.figures(),
                "hits": sorted(hits),
                "windows": windows,
                "rtt_s_median": rtt,
                "failures": failures,
            }
            rows.append(
                (
                    f"{delay * 1000:.0f} ms",
                    f"{chunk:,}",
                    secs(good.median),
                    good.span(),
                    mega(sizes.samples / good.median),
                    "-" if rtt is None else f"{rtt * 1000:.1f} ms",
                    ", ".join(map(str, windows)) or "-",
                    f"{len(failures)} failed" if failures else "",
                )
            )
        ok = all(m == m for m in medians.values())  # no NaN: every case ran at least once
        ratios[delay] = medians[small] / medians[large] if ok else None
    print(
        f"  {sizes.samples:,} samples, seed {SEED}, {sizes.reps} interleaved round(s); one SSH "
        "worker, 1 slot, through tests/delay_relay.py"
    )
    table(
        ("delay each way", "chunk", "median wall", "min:max s", "M samples/s", "rtt", "window", ""),
        rows,
    )
    for delay, r in ratios.items():
        shown = "n/a" if r is None else ratio(r)
        print(
            f"  delay {delay * 1000:.0f} ms each way: chunk {small:,} / chunk {large:,} = {shown}"
        )
    identical = len(all_hits) == 1
    print(f"  hits identical across all runs: {identical} ({counts(all_hits)})")
    note("'rtt' and 'window' are the worker's measured round trip and in-flight window (result)")
    at_goal = ratios.get(GOAL_DELAY_S)
    met = None if at_goal is None else at_goal <= GOAL_RATIO and identical
    out.update(
        ratios={str(k): v for k, v in ratios.items()}, hits_identical=identical, goal_met=met
    )
    goal(
        f"at {GOAL_DELAY_S * 1000:.0f} ms each way, chunk {small:,} within "
        f"{GOAL_RATIO:.2f}x of chunk {large:,} (hits identical)",
        met,
    )
    return out


BENCHMARK = Benchmark(
    title="small chunks over a slow SSH link (delay relay)",
    full=Sizes(samples=3 * 10**8, chunks=(10**6, 10**8), delays_s=(0.0, GOAL_DELAY_S), reps=3),
    quick=Sizes(samples=3 * 10**7, chunks=(10**5, 10**7), delays_s=(GOAL_DELAY_S,), reps=1),
    smoke=Sizes(samples=10**6, chunks=(10**5, 5 * 10**5), delays_s=(GOAL_DELAY_S,), reps=1),
    run=run,
)
