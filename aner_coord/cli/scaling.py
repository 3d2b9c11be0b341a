"""`aner parallel scaling` and `aner parallel plan`: parse nothing, check everything, run.

Both take a computation (an experiment file's, or Monte Carlo with `--samples`), probe the
machines (`probe`), and predict (`plan`). `scaling` then runs the trials and writes the
records; `plan` prints the candidates and its recommendation and saves `probe.json`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from aner_coord.cli.arguments import count
from aner_coord.cli.progress import si
from aner_coord.clusterfile import WorkerRecord
from aner_coord.computations.montecarlo import MonteCarloRequest
from aner_coord.errors import EXIT_OK, RequestError
from aner_coord.hosts import host_groups, hosts_text
from aner_coord.kernelsets import bits_note
from aner_coord.requests import ComputationRequest
from aner_coord.scaling.experiment import Case, Experiment
from aner_coord.scaling.plan import (
    Recommendation,
    predict_group,
    predict_local,
    recommend,
)
from aner_coord.scaling.probe import Probe, run_probe

PROBE = "probe.json"


def _admitted(computation: ComputationRequest) -> tuple[int, int]:
    from aner_coord.computations import computation_for

    admitted = computation_for(computation).admit(computation)
    return admitted.items, admitted.passes


def _records(experiment: Experiment | None, cluster: str | None) -> tuple[WorkerRecord, ...]:
    """Every distinct worker record of the experiment's cases and of `cluster`."""
    from aner_coord.admission import load_cluster

    found: dict[str, WorkerRecord] = {}
    if experiment is not None:
        for case in experiment.cases:
            for r in case.records:
                found.setdefault(r.identity, r)
    if cluster is not None:
        for r in load_cluster(cluster).workers:
            found.setdefault(r.identity, r)
    return tuple(found.values())


def predict_case(probe: Probe, case: Case, computation: ComputationRequest) -> float | None:
    items, passes = _admitted(computation)
    if case.local:
        workers = case.workers or 1
        if workers > probe.local.cpus:
            return None
        return predict_local(probe, items, passes, workers, case.chunk).predicted_s
    by_identity = {w.identity: w for w in probe.workers}
    group = tuple(by_identity[i] for i in case.identities if i in by_identity)
    if len(group) != len(case.identities):
        return None
    return predict_group(probe, items, passes, group, case.chunk).predicted_s


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _probe(
    computation: ComputationRequest,
    records: tuple[WorkerRecord, ...],
    groups: list[tuple[WorkerRecord, ...]] | None = None,
) -> Probe:
    who = f"this machine and {len(records)} worker(s)" if records else "this machine"
    print(f"aner: probing {who}...", file=sys.stderr, flush=True)
    return run_probe(computation, records, groups)


def add_scaling_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--experiment", metavar="FILE.toml", help="the experiment to run")
    p.add_argument("--auto", action="store_true", help="the standard matrix (see README)")
    p.add_argument("--cluster", metavar="FILE", help="with --auto: its records alone and all")
    p.add_argument(
        "--samples", type=count, help="with --auto: Monte Carlo samples (default 200,000,000)"
    )
    p.add_argument("--seed", type=count, default=1, help="with --auto: seed (default 1)")
    p.add_argument(
        "--repetitions", type=count, default=3, help="with --auto: at least 3 (default 3)"
    )
    p.add_argument("--output", required=True, metavar="DIR", help="directory to create")
    p.add_argument(
        "--registry",
        metavar="FILE",
        help="configuration registry (default $XDG_DATA_HOME/aner/registry.json)",
    )
    p.add_argument("--no-predict", action="store_true", help="skip the probe and predictions")


def add_plan_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", metavar="FILE", help="probe the workers of this cluster file")
    p.add_argument("--samples", type=count, help="a Monte Carlo job of this many samples")
    p.add_argument("--experiment", metavar="FILE.toml", help="the computation of an experiment")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--save", metavar="FILE", help="also write the probe to this new file (default: none)"
    )


def scaling_command(args: argparse.Namespace) -> int:
    return scaling(
        experiment_file=args.experiment,
        auto=args.auto,
        cluster=args.cluster,
        samples=args.samples,
        seed=args.seed,
        repetitions=args.repetitions,
        output=args.output,
        registry_file=args.registry,
        predict=not args.no_predict,
    )


def plan_command(args: argparse.Namespace) -> int:
    return plan(
        cluster=args.cluster,
        samples=args.samples,
        experiment_file=args.experiment,
        as_json=args.json,
        save=args.save,
    )


def scaling(
    *,
    experiment_file: str | None,
    auto: bool,
    cluster: str | None,
    samples: int | None,
    seed: int,
    repetitions: int,
    output: str,
    registry_file: str | None,
    predict: bool,
) -> int:
    from aner_coord import jobdir
    from aner_coord.scaling.registry import Registry, default_path
    from aner_coord.scaling.runner import run_experiment

    if auto == (experiment_file is not None):
        raise RequestError("give --experiment FILE.toml, or --auto (with --cluster FILE)")
    if experiment_file is not None and (cluster is not None or samples is not None):
        raise RequestError("--cluster and --samples go with --auto; an experiment file has both")
    out = jobdir.check_new_output(output)
    registry = Registry(Path(registry_file) if registry_file else default_path())
    if auto:
        from aner_coord.scaling.experiment import auto_experiment
        from aner_worker.inventory import current

        experiment = auto_experiment(
            cluster, samples or 200_000_000, seed, repetitions, current().effective_cpus
        )
    else:
        from aner_coord.scaling.experiment import load_experiment

        assert experiment_file is not None
        experiment = load_experiment(experiment_file)
    groups = list(dict.fromkeys(c.records for c in experiment.cases if c.records))
    probe = _probe(experiment.computation, _records(experiment, None), groups) if predict else None

    def predicted(case: Case) -> float | None:
        return predict_case(probe, case, experiment.computation) if probe else None

    def save_probe(directory: Path) -> None:
        if probe is not None:
            data = json.dumps(probe.to_dict(), indent=2).encode() + b"\n"
            _write_private(directory / PROBE, data)

    return run_experiment(experiment, out, registry, predicted, on_created=save_probe)


def plan(
    *,
    cluster: str | None,
    samples: int | None,
    experiment_file: str | None,
    as_json: bool,
    save: str | None,
) -> int:
    if (samples is None) == (experiment_file is None):
        raise RequestError("give --samples N or --experiment FILE.toml")
    if save is not None:
        from aner_coord import jobdir

        jobdir.check_new_output(save)  # before probing: the probe takes seconds
    experiment = None
    computation: ComputationRequest
    if experiment_file is not None:
        from aner_coord.scaling.experiment import load_experiment

        experiment = load_experiment(experiment_file)
        computation = experiment.computation
    else:
        assert samples is not None
        if samples < 1:
            raise RequestError(f"--samples must be positive, got {samples}")
        computation = MonteCarloRequest(samples=samples, seed=1)
        from aner_coord.computations import computation_for

        computation_for(computation).admit(computation)
    records = _records(experiment, cluster)
    probe = _probe(computation, records)
    if save is not None:
        _write_private(Path(save), json.dumps(probe.to_dict(), indent=2).encode() + b"\n")
    items, passes = _admitted(computation)
    advice = recommend(probe, items, passes, items if passes > 1 else None)
    cases: dict[str, float | None] = {}
    if experiment is not None:
        cases = {c.name: predict_case(probe, c, computation) for c in experiment.cases}
    if as_json:
        data: dict[str, Any] = {"probe": probe.to_dict(), **advice.to_dict()}
        data["hosts"] = hosts_summary(probe)
        data["bits"] = bits_note({w.identity: w.machine for w in probe.workers})
        if experiment is not None:
            data["cases"] = cases
        print(json.dumps(data, indent=2))
    else:
        from aner_coord.computations import computation_for

        print(format_plan(probe, advice, cases, computation_for(computation).unit))
    if save is not None:
        print(f"aner: probe saved to {save}", file=sys.stderr)
    return EXIT_OK


def format_plan(
    probe: Probe, advice: Recommendation, cases: dict[str, float | None], unit: str
) -> str:
    """The plan as `plan` prints it; rates in the computation's own `unit` (samples, rows)."""
    local = probe.local
    lines = [
        f"this machine: {local.cpus} effective CPU(s), a command costs {local.command_s:.3f} s, "
        f"{rate_text(local.rates[1], unit)} per thread, {local.task_s * 1e6:.1f} us a task",
    ]
    for w in probe.workers:
        bandwidth = "N/A" if w.bandwidth_bps is None else f"{w.bandwidth_bps / 1e6:,.0f} MB/s"
        here = ", this host" if w.host is not None and w.host == local.host else ""
        lines.append(
            f"{w.identity} ({w.transport}, {w.slots} slot{'' if w.slots == 1 else 's'}{here}): "
            f"start-up {w.startup_s:.3f} s, "
            f"{rate_text(w.rate_per_slot, unit)} per slot, {w.task_s * 1e6:.1f} us a task, "
            f"round trip {w.round_trip_s * 1e3:.2f} ms, {bandwidth}"
        )
    if probe.workers:
        lines.append(f"hosts: {hosts_summary(probe)['text']}")
        note = bits_note({w.identity: w.machine for w in probe.workers})
        if note is not None:
            lines.append(f"kernel sets: {note}")
    lines += ["", f"{'plan':<28} {'slots':>5} {'chunk':>12} {'predicted s':>12}"]
    for c in advice.candidates[:12]:
        name = f"{c.name} (this host)" if c.on_this_host else c.name
        lines.append(f"{name:<28} {c.slots:>5} {c.chunk:>12,} {c.predicted_s:>12.3f}")
    if len(advice.candidates) > 12:
        lines.append(f"... {len(advice.candidates) - 12} more (--json lists them all)")
    if cases:
        lines += ["", "experiment cases:"]
        for name, seconds in cases.items():
            lines.append(f"  {name:<30} {'N/A' if seconds is None else f'{seconds:.3f} s'}")
    lines += ["", f"recommended: {advice.reason}"]
    return "\n".join(lines)


def hosts_summary(probe: Probe) -> dict[str, Any]:
    """Which probed records share a host, and which run on this one (docs/contracts.md,
    section 18): a sentence, the groups of records on one host, and this host's."""
    hosts = {w.identity: w.host for w in probe.workers}
    here = probe.local.host
    return {
        "text": hosts_text(hosts, here=here),
        "groups": [list(g) for g in host_groups(hosts)],
        "this_host": [i for i, h in hosts.items() if h is not None and h == here],
    }


def rate_text(rate: float, unit: str) -> str:
    """`590.0k rows/s`, `245.4M samples/s`, `0.35 rows/s`: a unit that fits the rate (never
    "0.0 M"), N/A where none was measured."""
    if not (math.isfinite(rate) and rate > 0):
        return "N/A"
    return f"{si(rate) if rate >= 1000 else f'{rate:.3g}'} {unit}/s"
