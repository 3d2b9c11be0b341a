"""`aner parallel resume --job DIR`: continue a job whose coordinator is gone, or that failed
or was cancelled, from its ledger (docs/contracts.md, section 11), and only if it is still the job
its manifest describes.

`prepare_resume` checks, in this order, and refuses with one line and exit 2, changing
nothing in the directory:

1. the directory is a job directory of ours, and no coordinator holds its lock (which it
   then takes);
2. the manifest is readable and was written by the installed `aner` (every file whose code
   computes the result's numbers, coordinator side included, and the source fingerprint:
   a different one could compute different numbers; the first file that differs is
   named) with a job identity;
3. `request.json` is readable and, with `run --spec FILE --resume`, is that spec's request;
4. the job has not COMPLETED (a `status.json` that cannot be read is refused, not guessed);
5. the request, admitted again now, is the job the manifest recorded: the computation and
   its identity, every recorded parameter, the data identity (for file data, the SHA256 of
   the very bytes parsed now against the one recorded when the job began), the chunk and
   pass plan, and `request.json`'s own SHA256; a change is refused naming what changed;
6. the ledger is a regular file of this job: every record carries the manifest's job
   identity, nothing is damaged before a torn tail (`aner_coord.jobdir.ledger`), its passes
   and chunks are ones this job has, every pass before the last it records is whole and
   committed, and a dry replay through the job machine checks each recorded chunk exactly
   as a live worker's result is checked (range, counts, the computation's plausibility);
7. for a run with checkpoints (`Checkpoints`, Dense), a `checkpoint.npz` present is a
   regular file within the run's own size bound whose size and SHA256 a `Checkpointed`
   record of the ledger vouches for, records at most as many passes as the job has, and
   restores into a fresh run of the request (every array of the model's own shapes).

Only then is a `cancel-request` left by `aner parallel cancel` removed (the user asked to
resume the job it cancelled). The new coordinator replays the ledger through a fresh run
and recomputes only the rest, so the result is the one an uninterrupted run gives; a run
with a checkpoint continues after the checkpoint's committed passes (`steps_recovered`).

`check_resumable` makes checks 1 to 4 alone, which do no work in proportion to the job's
data, for `resume --background`: the detached coordinator then makes them all.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import msgspec

from aner_coord import jobdir
from aner_coord.admission import Job, Prechecked, admit
from aner_coord.computations.base import Checkpoints, kernel_of
from aner_coord.computations.dense.request import DenseRequest
from aner_coord.errors import RequestError, cli_name
from aner_coord.job.checkpoints import CheckpointError, Restored, vouched
from aner_coord.job.execute import Resumption
from aner_coord.job.machine import JobMachine
from aner_coord.jobdir import ledger
from aner_coord.jobdir.manifest import Manifest, decode_manifest, sources_difference
from aner_coord.jobdir.status import JobState
from aner_coord.requests import JobRequest, with_absolute_paths
from aner_coord.specfile import decode_request

_SHOWN = 72  # characters of a changed value shown in a refusal


def prepare_resume(path: str | Path, *, expect: JobRequest | None = None) -> tuple[Job, Resumption]:
    """Check and lock the job at `path` for a new coordinator (RequestError, exit 2). With
    `expect`, the directory must hold that very request (`run --resume`)."""
    target = Path(path)
    directory, lock = _locked(target)
    try:
        return _check(target, directory, lock, expect)
    except BaseException:
        lock.release()
        directory.close()
        raise


def check_resumable(path: str | Path, *, expect: JobRequest | None = None) -> Prechecked:
    """Checks 1 to 4 of `prepare_resume`, which do no work in proportion to the job's data,
    for a command that hands the resumption to a detached coordinator (`--background`):
    that coordinator makes them all before it says it is ready, so a refusal is still the
    command's own. The lock is let go again; the request and the directory are returned."""
    target = Path(path)
    directory, lock = _locked(target)
    try:
        _manifest(target, directory)
        request = _recorded_request(target, directory, expect)[1]
        _last_seq(target, directory)
    finally:
        lock.release()
        directory.close()
    return Prechecked(request, target)


def _locked(target: Path) -> tuple[jobdir.JobDir, jobdir.JobLock]:
    """The job directory at `target`, open, with its lock held (checks 1)."""
    try:
        directory = jobdir.JobDir.open(target, own=True)
    except FileNotFoundError:
        raise RequestError(f"no job directory at {target}: check the --job path") from None
    except jobdir.JobDirError as exc:
        raise RequestError(str(exc)) from None
    except OSError as exc:
        raise RequestError(f"cannot open job directory {target}: {exc.strerror}") from None
    lock: jobdir.JobLock | None = None
    try:
        if not directory.exists(jobdir.MANIFEST):
            raise RequestError(f"{target} is not an aner job directory (no {jobdir.MANIFEST})")
        lock = jobdir.JobLock(directory)
        try:
            lock.acquire()
        except RequestError:
            lock = None
            raise RequestError(
                f"job {target} has a live coordinator (it holds the lock): nothing to resume; "
                f"follow it with `aner parallel status --job {target} --watch`"
            ) from None
        except jobdir.JobDirError as exc:
            lock = None
            raise _refuse(target, str(exc)) from None
        return directory, lock
    except BaseException:
        if lock is not None:
            lock.release()
        directory.close()
        raise


def _refuse(target: Path, why: str) -> RequestError:
    return RequestError(f"job {target} cannot be resumed: {why}")


def _check(
    target: Path, directory: jobdir.JobDir, lock: jobdir.JobLock, expect: JobRequest | None
) -> tuple[Job, Resumption]:
    manifest = _manifest(target, directory)
    raw, request = _recorded_request(target, directory, expect)
    last_seq = _last_seq(target, directory)
    try:
        admitted = admit(msgspec.structs.replace(request, output=None))
    except RequestError as exc:
        raise _refuse(target, f"its request no longer admits: {exc.render(cli_name)}") from None
    job = dataclasses.replace(admitted, output=target)
    _same_job(target, manifest, job, raw)
    key = bytes.fromhex(manifest.job)
    try:
        recovered = ledger.read_ledger(directory, key)
    except ledger.LedgerError as exc:
        raise _refuse(target, str(exc)) from None
    _check_ledger(target, job, recovered)
    restored = _checkpoint(target, directory, job, recovered)
    try:
        directory.unlink(jobdir.CANCEL_REQUEST)  # resuming is the user's answer to it
    except OSError as exc:
        where = directory.path / jobdir.CANCEL_REQUEST
        raise _refuse(target, f"cannot remove {where}: {exc.strerror or exc}") from None
    recovered.resumes += 1
    return job, Resumption(directory, lock, recovered, last_seq, key, restored)


def _checkpoint(
    target: Path, directory: jobdir.JobDir, job: Job, recovered: ledger.Recovered
) -> Restored | None:
    """The checkpoint a run with checkpoints continues from (None: from the start)."""
    if not directory.exists(jobdir.CHECKPOINT):
        return None
    run = job.computation.start(job.request.computation, job.chunk)
    if not isinstance(run, Checkpoints):
        return None  # a computation without checkpoints has nothing to read there
    try:
        restored = vouched(directory, recovered, run.checkpoint_limit())
    except CheckpointError as exc:
        raise _refuse(target, str(exc)) from None
    if restored is None:
        return None
    where = directory.path / jobdir.CHECKPOINT
    if not 0 <= restored.passes <= job.admitted.passes:
        raise _refuse(
            target, f"{where} records {restored.passes} passes of at most {job.admitted.passes}"
        )
    try:
        run.restore(restored.data)
    except ValueError as exc:
        raise _refuse(target, f"{where} is not a checkpoint of this job: {exc}") from None
    return restored


def _manifest(target: Path, directory: jobdir.JobDir) -> Manifest:
    from aner_coord.jobdir.sources import installed_result_sources
    from aner_worker.contract import source_fingerprint

    try:
        manifest = decode_manifest(directory.read_bytes(jobdir.MANIFEST))
    except FileNotFoundError:
        raise _refuse(target, f"its {jobdir.MANIFEST} is gone") from None
    except jobdir.JobFileError as exc:
        raise _refuse(target, str(exc)) from None
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        raise _refuse(target, f"its {jobdir.MANIFEST} is not a manifest: {exc}") from None
    changed = sources_difference(manifest, installed_result_sources())
    if changed is not None:
        raise RequestError(
            f"job {target} was started by a different aner: {changed}; resume it with that "
            "version, or start it again with a new --output"
        )
    _check_plugins(target, manifest)
    installed = source_fingerprint()
    if manifest.source_fingerprint != installed:
        raise RequestError(
            f"job {target} was started by a different aner (source fingerprint "
            f"{manifest.source_fingerprint}, installed {installed}): resume it with that "
            "version, or start it again with a new --output"
        )
    try:
        if len(bytes.fromhex(manifest.job)) != ledger.JOB_KEY_BYTES:
            raise ValueError(manifest.job)
    except ValueError:
        raise _refuse(
            target, f"its {jobdir.MANIFEST} records no job identity: start it again"
        ) from None
    return manifest


def _check_plugins(target: Path, manifest: Manifest) -> None:
    """Refuse a job whose plugin is not installed now, or differs from the one it began with,
    naming the distribution and the first file that differs (docs/contracts.md, section 15)."""
    from aner_worker.plugins import installed_identities
    from protocol import PluginIdentity
    from protocol.connection import plugin_difference

    installed = installed_identities()
    for name, record in sorted(manifest.plugins.items()):
        now = installed.get(name)
        if now is None:
            raise RequestError(
                f"job {target} was started with plugin {name} {record.version}, which is not "
                f"installed now: install it, or start the job again with a new --output"
            )
        began = PluginIdentity(name, record.version, record.files)
        changed = plugin_difference(began, now, "when it began", "installed now")
        if changed is not None:
            raise RequestError(
                f"job {target} was started with a different plugin {name}: {changed}; resume "
                "it with that version, or start it again with a new --output"
            )


def _recorded_request(
    target: Path, directory: jobdir.JobDir, expect: JobRequest | None
) -> tuple[bytes, JobRequest]:
    """`request.json`'s bytes and request, which must be `expect` if given (check 3)."""
    raw, request = _request(target, directory)
    if expect is not None and with_absolute_paths(
        msgspec.structs.replace(expect, output=None)
    ) != with_absolute_paths(msgspec.structs.replace(request, output=None)):
        raise RequestError(
            f"{target} holds a different job than this request: give --output a new directory"
        )
    return raw, request


def _request(target: Path, directory: jobdir.JobDir) -> tuple[bytes, JobRequest]:
    try:
        raw = directory.read_bytes(jobdir.REQUEST)
    except FileNotFoundError:
        raise _refuse(target, f"it has no {jobdir.REQUEST}") from None
    except jobdir.JobFileError as exc:
        raise _refuse(target, str(exc)) from None
    try:
        return raw, decode_request(raw, fmt="json", source=str(directory.path / jobdir.REQUEST))
    except RecursionError:
        raise _refuse(target, f"its {jobdir.REQUEST} nests too deep to be a request") from None
    except RequestError as exc:
        raise _refuse(target, str(exc)) from None


def _last_seq(target: Path, directory: jobdir.JobDir) -> int:
    """The last status's sequence number (0 before the first); refuses a COMPLETED job."""
    try:
        status = jobdir.read_status(directory)
    except FileNotFoundError:
        return 0
    except jobdir.JobFileError as exc:
        raise _refuse(target, str(exc)) from None
    if status.state is JobState.COMPLETED and directory.exists(jobdir.RESULT):
        raise RequestError(f"job {target} has COMPLETED: nothing to resume (see {jobdir.RESULT})")
    return status.seq


# -- the same job ----------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """`value` as its JSON form reads back (tuples are lists), for comparison."""
    return msgspec.json.decode(msgspec.json.encode(value))


def _shown(value: Any) -> str:
    text = msgspec.json.encode(value).decode()
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _recorded(manifest: Manifest) -> dict[str, Any]:
    return {
        "computation": manifest.computation,
        "identity": manifest.identity,
        **{f"request.{k}": v for k, v in manifest.request.items()},
        **{f"plan.{k}": manifest.plan.get(k) for k in ("chunk", "chunks", "passes")},
    }


def _current(job: Job) -> dict[str, Any]:
    plan = {
        "chunk": job.chunk,
        "chunks": -(-job.admitted.items // job.chunk),
        "passes": job.admitted.passes,
    }
    current: dict[str, Any] = _plain(
        {
            "computation": job.kind,
            "identity": job.admitted.identity,
            **{f"request.{k}": v for k, v in job.admitted.describe.items()},
            **{f"plan.{k}": v for k, v in plan.items()},
        }
    )
    return current


def _same_job(target: Path, manifest: Manifest, job: Job, raw: bytes) -> None:
    """Refuse a request that is not the job the manifest recorded, naming what changed."""
    before, now = _recorded(manifest), _current(job)
    changed = [k for k in dict.fromkeys([*before, *now]) if before.get(k) != now.get(k)]
    if "request.data" in changed:  # the data file itself: the change that matters most
        data = job.request.computation
        name = (data.data if isinstance(data, DenseRequest) else None) or "the data"
        raise _refuse(
            target,
            f"its data {name} changed since the job began (SHA256 "
            f"{before.get('request.data')} when it began, {now.get('request.data')} now)",
        )
    if changed:
        what = "; ".join(
            f"{k.removeprefix('request.')}: {_shown(before.get(k))} when it began, "
            f"{_shown(now.get(k))} now"
            for k in changed
        )
        raise _refuse(target, f"its {jobdir.REQUEST} no longer describes the job begun: {what}")
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    if digest != manifest.request_sha256:
        raise _refuse(
            target,
            f"its {jobdir.REQUEST} was changed since the job began (SHA256 "
            f"{manifest.request_sha256} when it began, {digest} now)",
        )


# -- the ledger ------------------------------------------------------------------------------


def _check_ledger(target: Path, job: Job, recovered: ledger.Recovered) -> None:
    """Refuse a ledger this job cannot have written: passes it does not have, a pass
    recorded after one that is not whole and committed, statistics that do not pass the
    checks a live result gets (a dry replay through a fresh run and job machine)."""
    passes = job.admitted.passes
    where = target / jobdir.LEDGER
    for pass_id in sorted({*recovered.chunks, *recovered.committed}):
        if not 0 <= pass_id < passes:
            raise _refuse(target, f"{where} records pass {pass_id}; this job has {passes}")
    if not recovered.chunks:
        return
    n_chunks = -(-job.admitted.items // job.chunk)
    last = max(recovered.chunks)
    for pass_id in range(last):
        whole = len(recovered.chunks.get(pass_id, {})) == n_chunks
        if not whole or pass_id not in recovered.committed:
            raise _refuse(
                target,
                f"{where} records pass {last} but pass {pass_id} is not whole and committed "
                "before it",
            )
    try:
        kernel = kernel_of(job.computation, job.request.computation)
        statistics = recovered.statistics(kernel.stats_type)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
        raise _refuse(target, f"{where} holds statistics this job cannot read: {exc}") from None
    machine = JobMachine(
        job.computation.start(job.request.computation, job.chunk),
        job.workers.slots,
        chunk=job.chunk,
        passes=passes,
        recovered=statistics,
    )
    machine.start()
    if machine.state is JobState.FAILED:
        raise _refuse(target, f"{where}: {machine.error}")
