"""How busy the machine was while a trial ran: a time taken on a loaded machine says as much
about the load as about the plan, so each trial records it and the report says which.

`LoadMeter` reads, before and after the trial's command, the machine's 1-minute load
average and the CPU time it spent busy (every process, from the kernel's counters), and
this process's reaped children's CPU time (the trial's command and its worker processes,
which it reaps). The others' share is the machine's busy CPU time during the trial less the
trial's own, over the wall time times the logical CPUs: 0 on an idle machine, near 1 when
other processes kept every CPU busy. A trial is taken on a busy machine when that share is
at least `BUSY_SHARE`. The load average alone cannot tell: it counts the trial itself, and
the trials before it for a minute after they end.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass

import psutil

# Other processes using at least this share of the machine's CPUs during a trial make it a
# trial taken on a busy machine: its time overstates what the plan costs on an idle one.
BUSY_SHARE = 0.25


@dataclass(frozen=True)
class MachineLoad:
    load_1m_before: float | None  # None where the platform has no load average
    load_1m_after: float | None
    others_cpu_share: float  # of the machine's CPU time during the trial, in [0, 1]
    cpus: int

    @property
    def busy(self) -> bool:
        return self.others_cpu_share >= BUSY_SHARE

    def to_record(self) -> dict[str, object]:
        return {
            "load_1m": [self.load_1m_before, self.load_1m_after],
            "others_cpu_share": round(self.others_cpu_share, 4),
            "busy": self.busy,
        }


def _load_1m() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _machine_busy_s() -> float:
    t = psutil.cpu_times()
    # Guest time is counted in user time already; waiting for I/O is idle.
    spare = t.idle + getattr(t, "iowait", 0.0)
    guests = getattr(t, "guest", 0.0) + getattr(t, "guest_nice", 0.0)
    return float(sum(t) - spare - guests)


def _children_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class LoadMeter:
    """`start()` before the trial's command, `stop()` once it has been reaped."""

    def start(self) -> None:
        self._load = _load_1m()
        self._busy = _machine_busy_s()
        self._own = _children_s() + time.process_time()
        self._began = time.monotonic()

    def stop(self) -> MachineLoad:
        wall = time.monotonic() - self._began
        cpus = psutil.cpu_count() or 1
        busy = _machine_busy_s() - self._busy
        own = _children_s() + time.process_time() - self._own
        share = (busy - own) / (wall * cpus) if wall > 0 else 0.0
        return MachineLoad(self._load, _load_1m(), min(1.0, max(0.0, share)), cpus)
