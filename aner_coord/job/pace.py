"""How far a job is, weighted by what its work costs, and when it will end: pure.

A job's work is a plan of segments (`computations.base.Segment`), each some items of one
kind of pass (Dense: `normalisation`, `step`, `validation`, `test`; a computation whose
passes all cost alike has one kind). An item of one kind may cost a hundred times one of
another: a normalisation row is only summed, a training row goes forward and backward. So
progress is not items done over items planned but cost done over cost planned, each kind's
items weighted by its cost per item: measured, as this coordinator's seconds over its items
of that kind, where it has done some; else the computation's prior for the kind (a cost
relative to the others), scaled to the kinds measured so far.

Work a resume recovered (the ledger's chunks, the checkpoint's passes: the first items of the
plan, `prefix`) counts as done from the first snapshot on, and never as work of this run's
time: costs, rates and the ETA count only what this coordinator did.

`Pace.observe(at, live)` takes the items this coordinator has accepted so far, by kind, at a
time (the shell's monotonic clock). The seconds since the last observation that moved are
shared among the kinds that moved, in proportion to their items times their current cost.
A kind's cost is its recent seconds over its recent items, older work fading with a
half-life of `HALF_LIFE_SHARE` of the kind's planned items: a first epoch slowed by caches
warming up is forgotten within a few percent of the job, while the noise of single passes
is still averaged over many. Tests feed recorded sequences; nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aner_coord.computations.base import Segment

# An ETA only once it means something: this much of this run measured, and this share of
# the planned cost done by this run.
ETA_AFTER_S = 0.5
ETA_AFTER_SHARE = 0.01
# Work of a kind counts half as much once this share of the kind's planned items came after.
HALF_LIFE_SHARE = 0.1


def totals(plan: Sequence[Segment]) -> dict[str, int]:
    """The planned items of each kind."""
    out: dict[str, int] = {}
    for segment in plan:
        out[segment.kind] = out.get(segment.kind, 0) + segment.items
    return out


def prefix(plan: Sequence[Segment], items: int) -> dict[str, int]:
    """The first `items` items of the plan, by kind (what a resume recovered: passes are
    committed in the plan's order)."""
    out = {kind: 0 for kind in totals(plan)}
    left = items
    for segment in plan:
        if left <= 0:
            break
        taken = min(left, segment.items)
        out[segment.kind] += taken
        left -= taken
    return out


def added(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    return {kind: a.get(kind, 0) + b.get(kind, 0) for kind in {*a, *b}}


class Pace:
    """The measured cost of each kind of item, from observations of one run's work."""

    def __init__(self, plan: Sequence[Segment], prior_costs: Mapping[str, float]) -> None:
        self.total = totals(plan)
        self._prior = {kind: prior_costs.get(kind, 1.0) for kind in self.total}
        self._half_life = {k: max(1.0, n * HALF_LIFE_SHARE) for k, n in self.total.items()}
        # Recent seconds and items of each kind (faded), and all seconds measured.
        self._seconds = dict.fromkeys(self.total, 0.0)
        self._items = dict.fromkeys(self.total, 0.0)
        self._spent = 0.0
        self._last_at: float | None = None
        self._last: dict[str, int] = {}

    @property
    def measured_s(self) -> float:
        """Seconds of this run's work attributed so far."""
        return self._spent

    def observe(self, at: float, live: Mapping[str, int]) -> None:
        """This run had accepted `live` items of each kind by time `at`."""
        if self._last_at is None:
            self._last_at, self._last = at, dict(live)
            return
        moved = {
            kind: n - self._last.get(kind, 0)
            for kind, n in live.items()
            if n > self._last.get(kind, 0) and kind in self.total
        }
        if not moved:
            return  # the time goes to the items that move next
        seconds = max(0.0, at - self._last_at)
        weights = {kind: n * self.cost(kind) for kind, n in moved.items()}
        whole = sum(weights.values())
        for kind, n in moved.items():
            share = weights[kind] / whole if whole > 0 else 1.0 / len(moved)
            fade = 0.5 ** (n / self._half_life[kind])
            self._seconds[kind] = self._seconds[kind] * fade + seconds * share
            self._items[kind] = self._items[kind] * fade + n
        self._spent += seconds
        self._last_at, self._last = at, dict(live)

    def cost(self, kind: str) -> float:
        """Seconds per item of `kind`: measured, else its prior scaled by the measured kind
        most like it in prior cost (a test pass by the validations; relative units while
        nothing is measured)."""
        if self._items.get(kind):
            return self._seconds[kind] / self._items[kind]
        prior = self._prior.get(kind, 1.0)
        measured = [k for k, n in self._items.items() if n and self._seconds[k] > 0]
        if not measured:
            return prior
        like = min(measured, key=lambda k: (abs(self._prior[k] - prior), -self._items[k]))
        return prior * self._seconds[like] / (self._items[like] * self._prior[like])

    def fraction(self, done: Mapping[str, int]) -> float:
        """The planned cost done (0..1), `done` counting recovered and live items."""
        costs = {kind: self.cost(kind) for kind in self.total}
        planned = sum(n * costs[kind] for kind, n in self.total.items())
        if planned <= 0:
            return 0.0
        spent = sum(min(done.get(k, 0), n) * costs[k] for k, n in self.total.items())
        return min(1.0, spent / planned)

    def eta(self, done: Mapping[str, int]) -> float | None:
        """Seconds left: each kind's items still to do at its cost; None until this run
        has measured enough (`ETA_AFTER_S`, `ETA_AFTER_SHARE`) and the kind of most of the
        planned work (Dense: training steps) has a measured cost of its own."""
        if self.measured_s < ETA_AFTER_S:
            return None
        left = {kind: max(0, n - done.get(kind, 0)) for kind, n in self.total.items()}
        if not any(left.values()):
            return 0.0
        heaviest = max(self.total, key=lambda kind: self.total[kind] * self._prior[kind])
        if not self._items[heaviest]:
            return None
        costs = {kind: self.cost(kind) for kind in self.total}
        planned = sum(n * costs[kind] for kind, n in self.total.items())
        if self.measured_s < ETA_AFTER_SHARE * planned:
            return None
        return sum(n * costs[kind] for kind, n in left.items())
