"""Predict the wall time of candidate plans from a `Probe`, and recommend one.

A whole command costs the measured fixed cost of a tiny command (interpreter, imports,
kernel cache, job files), plus, for a group, the slowest worker's start-up and shut-down,
plus each pass. A pass of `n` chunks on a set of workers is dealt out as they free up, so
it lasts about `n / C` where `C` is the group's chunk rate (each slot finishes a chunk every
`chunk / rate + task cost` seconds), plus the last chunk's tail, plus the round trip and,
for a pass with new parameters, their transfer. Local threads pay no link.

A task's cost is the probe's, measured as jobs pay it: the slope of a whole job's time
against its number of one-item tasks, on local threads or on the worker alone, times the
worker's slots (a slot pays it with every chunk it runs). Since the process backend keeps
a latency-adaptive window of tasks in flight and batches its writes (aner_coord.job.pacing),
and the worker batches its results, a task on a worker costs the CPU the coordinator, the
link (an sshd on the same host included) and the worker spend on it, not a round trip: the
round trip enters once per pass. (Timed with tiny tasks written one at a time, as the probe
once did, it came out 4-6 times larger over loopback SSH.)

Local threads compute at the rate measured with as many threads as compute at once: a pass
of fewer chunks than threads leaves the others idle, and its chunks run at the rate of that
many threads, not at a share of all of them.

One host is one host (docs/contracts.md, section 18): records whose handshakes report
the same host share its CPUs, so their slots beyond its CPUs (this machine's effective CPUs,
another host's logical CPUs where it reported them) add no rate. A group, or a worker alone,
whose every record runs on this very host is never recommended over local threads: it can
only add start-up, links and copies to the CPUs the threads already have, so its predicted
time, made of noisy measurements, is shown but never trusted over theirs.

Candidates: local with 1..p workers, each worker alone, the whole group; chunks between
the overhead bound (task cost at most 5% of a task's computing) and the load-balance bound
(at least 4 chunks per slot, and a chunk for each of p threads), by factors of 4, and the
default chunk. Tasks in flight per worker: its slots plus enough to cover one round trip.
The plan is only advice: nothing here changes how a job runs.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any

from aner_coord.hosts import hosts_text, on_one_host
from aner_coord.limits import DEFAULT_CHUNK, MAX_CHUNKS
from aner_coord.scaling.probe import Probe, WorkerProbe

OVERHEAD_SHARE = 0.05
CHUNKS_PER_SLOT = 4
SIMULATE_CHUNKS = 4096  # up to this many chunks a pass is scheduled exactly
PARAMS_BYTES = 512  # a pass's parameters on the wire (seed and theta): small


@dataclass(frozen=True)
class Candidate:
    name: str
    workers: int | None  # local threads
    identities: tuple[str, ...]  # cluster records; empty for local
    slots: int
    chunk: int
    predicted_s: float
    startup_s: float  # what the plan pays before computing (command and workers)
    compute_s: float  # the passes
    in_flight: dict[str, int]  # tasks per worker to keep in flight
    on_this_host: bool = False  # a cluster plan whose every record runs on this host

    @property
    def local(self) -> bool:
        return self.workers is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "execution": "local" if self.local else "cluster",
            "workers": self.workers if self.local else list(self.identities),
            "slots": self.slots,
            "chunk": self.chunk,
            "predicted_s": round(self.predicted_s, 4),
            "startup_s": round(self.startup_s, 4),
            "compute_s": round(self.compute_s, 4),
            "in_flight": self.in_flight,
            "on_this_host": self.on_this_host,
        }


def _pass_seconds(items: int, chunk: int, lanes: list[tuple[int, float, float, float]]) -> float:
    """One pass over `items` in chunks of `chunk` on lanes of (slots, rate per slot, task
    cost, round trip)."""
    n = math.ceil(items / chunk)
    size = min(chunk, items)
    if n <= SIMULATE_CHUNKS:
        return _scheduled(items, chunk, lanes)
    chunk_rate = sum(slots / (size / rate + cost) for slots, rate, cost, _ in lanes)
    slowest = max(size / rate + cost for _, rate, cost, _ in lanes)
    rtt = max(r for *_, r in lanes)
    # Chunks are handed out as slots free up: the last round may leave slots idle, which
    # costs at most one chunk on the slowest lane; half of one on average.
    return n / chunk_rate + (slowest / 2 if n > sum(s for s, *_ in lanes) else 0.0) + rtt


def _scheduled(items: int, chunk: int, lanes: list[tuple[int, float, float, float]]) -> float:
    """List scheduling as the job machine does it: each chunk, in order, to the slot that
    frees up first; the last chunk keeps the remainder."""
    free = [(0.0, lane) for lane, (slots, *_) in enumerate(lanes) for _ in range(slots)]
    heapq.heapify(free)
    end = 0.0
    for start in range(0, items, chunk):
        size = min(chunk, items - start)
        at, lane = heapq.heappop(free)
        _, rate, cost, rtt = lanes[lane]
        done = at + size / rate + cost
        end = max(end, done + rtt)
        heapq.heappush(free, (done, lane))
    return end


def predict_local(probe: Probe, items: int, passes: int, workers: int, chunk: int) -> Candidate:
    # Threads without a chunk of the pass idle: the others run at their own count's rate.
    busy = max(1, min(workers, math.ceil(items / chunk)))
    rate = probe.local.rate(busy) / busy
    seconds = passes * _pass_seconds(items, chunk, [(workers, rate, probe.local.task_s, 0.0)])
    return Candidate(
        f"local, {workers} worker(s)",
        workers,
        (),
        workers,
        chunk,
        probe.local.command_s + seconds,
        probe.local.command_s,
        seconds,
        {},
    )


def host_cpus(probe: Probe, worker: WorkerProbe) -> int | None:
    """The CPUs of the host `worker` runs on, where known: this machine's effective CPUs
    for this host, else the logical CPUs its handshake reported."""
    if worker.host is not None and worker.host == probe.local.host:
        return probe.local.cpus
    logical = worker.machine.get("logical_cpus", "")
    return int(logical) if logical.isdigit() and int(logical) > 0 else None


def shared_rates(probe: Probe, group: tuple[WorkerProbe, ...]) -> list[float]:
    """Each worker's rate per slot, as its host can give it to the group: records that
    share a host share its CPUs, so where their slots outnumber them each slot gets its
    share (a worker of an unknown host is taken alone, at its measured rate)."""
    slots_on: dict[str, int] = {}
    for w in group:
        if w.host is not None:
            slots_on[w.host] = slots_on.get(w.host, 0) + w.slots
    rates = []
    for w in group:
        cpus = host_cpus(probe, w)
        share = 1.0 if w.host is None or cpus is None else min(1.0, cpus / slots_on[w.host])
        rates.append(w.rate_per_slot * share)
    return rates


def on_this_host(probe: Probe, group: tuple[WorkerProbe, ...]) -> bool:
    """Whether every record of `group` runs on the host the plan is made on."""
    return on_one_host({w.identity: w.host for w in group}, probe.local.host)


def predict_group(
    probe: Probe, items: int, passes: int, group: tuple[WorkerProbe, ...], chunk: int
) -> Candidate:
    rates = shared_rates(probe, group)
    lanes = [
        (w.slots, rate, w.task_s, w.round_trip_s) for w, rate in zip(group, rates, strict=True)
    ]
    per_pass = _pass_seconds(items, chunk, lanes)
    params = max(PARAMS_BYTES / (w.bandwidth_bps or math.inf) for w in group)
    seconds = passes * (per_pass + (params if passes > 1 else 0.0))
    together = probe.group(tuple(w.identity for w in group))
    if together is not None and together.command_s is not None:
        # A whole tiny command on this group, measured: everything but the passes.
        startup = together.command_s
    elif together is not None:  # measured starting all at once
        startup = probe.local.command_s + together.startup_s + together.shutdown_s
    else:
        startup = (
            probe.local.command_s
            + max(w.startup_s for w in group)
            + max(w.shutdown_s for w in group)
        )
    in_flight = {
        w.identity: w.slots
        * (1 + math.ceil(w.round_trip_s / (min(chunk, items) / w.rate_per_slot + w.task_s)))
        for w in group
    }
    here = on_this_host(probe, group)
    name = group[0].identity + " alone" if len(group) == 1 else "the group"
    return Candidate(
        name,
        None,
        tuple(w.identity for w in group),
        sum(w.slots for w in group),
        chunk,
        startup + seconds,
        startup,
        seconds,
        in_flight,
        here,
    )


def chunk_candidates(
    items: int, slots: int, rate: float, task_s: float, workers: int = 1
) -> list[int]:
    """Chunks from the overhead bound to the load-balance bound, by factors of 4."""
    low = max(1, math.ceil(task_s * rate / OVERHEAD_SHARE), math.ceil(items / MAX_CHUNKS))
    high = max(1, items // (CHUNKS_PER_SLOT * slots))
    high = min(high, max(1, items // workers))
    chunks = {min(max(DEFAULT_CHUNK, math.ceil(items / MAX_CHUNKS)), max(1, items // workers))}
    c = low
    while c <= high:
        chunks.add(c)
        c *= 4
    if high >= low:
        chunks.add(high)
    return sorted(chunks)


def candidates(probe: Probe, items: int, passes: int) -> list[Candidate]:
    out = []
    local_rate = probe.local.rates[1]
    for p in range(1, probe.local.cpus + 1):
        for chunk in chunk_candidates(items, p, local_rate, probe.local.task_s, p):
            out.append(predict_local(probe, items, passes, p, chunk))
    groups: list[tuple[WorkerProbe, ...]] = [(w,) for w in probe.workers]
    if len(probe.workers) > 1:
        groups.append(probe.workers)
    for group in groups:
        slots = sum(w.slots for w in group)
        slowest = min(shared_rates(probe, group))
        for chunk in chunk_candidates(
            items, slots, slowest, max(w.task_s for w in group), len(group)
        ):
            out.append(predict_group(probe, items, passes, group, chunk))
    return sorted(out, key=lambda c: c.predicted_s)


@dataclass(frozen=True)
class Recommendation:
    best: Candidate
    reason: str
    candidates: list[Candidate]

    def to_dict(self) -> dict[str, Any]:
        return {
            "recommended": self.best.to_dict(),
            "reason": self.reason,
            "candidates": [c.to_dict() for c in self.candidates],
        }


def recommend(
    probe: Probe, items: int, passes: int, rows_per_step: int | None = None
) -> Recommendation:
    """The fastest predicted plan that is not a group on this host, and one sentence on why
    it beats the other kind."""
    ranked = candidates(probe, items, passes)
    best = next(c for c in ranked if not c.on_this_host)  # local threads always qualify
    other = next((c for c in ranked if c.local != best.local), None)
    if other is not None and other.on_this_host:
        reason = f"{best.name}: {same_host_sentence(probe, other, best)}"
    elif other is None:
        reason = f"{best.name} at chunk {best.chunk:,}: the only kind of plan available."
    elif best.local:
        saves = best.compute_s - other.compute_s
        extra = other.startup_s - best.startup_s
        if saves > 0:
            reason = (
                f"{best.name}: {other.name}'s start-up of {extra:.2f} s exceeds the "
                f"{saves:.2f} s it could save."
            )
        else:
            reason = (
                f"{best.name}: {other.name} computes no faster ({other.compute_s:.2f} s "
                f"against {best.compute_s:.2f} s) and adds {extra:.2f} s of start-up."
            )
    else:
        saves = other.compute_s - best.compute_s
        extra = best.startup_s - other.startup_s
        reason = (
            f"{best.name}: its {best.slots} slots save {saves:.2f} s of computing, more than "
            f"its {extra:.2f} s of start-up."
        )
    if rows_per_step is not None and probe.workers:
        reason += " " + step_break_even(probe, rows_per_step)
    return Recommendation(best, reason, ranked)


def same_host_sentence(probe: Probe, candidate: Candidate, best: Candidate) -> str:
    """Why `candidate`, on this host's records, is not taken over local threads (`best`)."""
    hosts = {w.identity: w.host for w in probe.workers if w.identity in candidate.identities}
    predicted = f"predicted {candidate.predicted_s:.2f} s against {best.predicted_s:.2f} s"
    if candidate.predicted_s < best.predicted_s:
        predicted += ": a difference of measurement, not of CPUs"
    return (
        f"{candidate.name} runs on this host ({hosts_text(hosts, here=probe.local.host)}) and "
        f"adds no CPU to the {probe.local.cpus} local threads use, only its start-up and "
        f"links ({predicted})."
    )


def step_break_even(probe: Probe, rows: int) -> str:
    """For training: does one step gain from the group, against its round trip and
    parameter transfer?"""
    group = probe.workers
    if on_this_host(probe, group):
        return (
            f"Per step of {rows:,} rows the group cannot gain: its workers share this "
            f"machine's {probe.local.cpus} CPU(s) with local threads."
        )
    local = rows / probe.local.rate(probe.local.cpus)
    remote = rows / sum(
        w.slots * rate for w, rate in zip(group, shared_rates(probe, group), strict=True)
    )
    link = max(w.round_trip_s + PARAMS_BYTES / (w.bandwidth_bps or math.inf) for w in group)
    verdict = "gains" if local - remote > link else "loses"
    gain = local - remote
    speed = f"{gain:.4f} s faster" if gain >= 0 else f"{-gain:.4f} s slower"
    return (
        f"Per step of {rows:,} rows the group {verdict}: it computes {speed} than this "
        f"machine, against {link:.4f} s of round trip and parameter transfer."
    )
