"""`--strict-bits`: a group's kernel sets checked before its job does anything
(docs/contracts.md, section 6, "Kernel sets").

For a job that asks (`ClusterExecution.strict_bits`) and whose bits depend on the BLAS
kernel set (`aner_coord.kernelsets.BLAS_KERNELS`), every worker of the group is taken from
the pool (a session's kept workers) or started, and shakes hands as the job's backend
would. If their handshakes report different kernel sets, every one is stopped and the job
is refused (`AdmissionError`, exit 2) before its directory exists or its slots are taken;
else they all wait in the pool, from which the backend takes them, so no worker starts
twice. A worker that fails to start or shake hands is left to the job, which reports it as
it reports any lost worker.
"""

from __future__ import annotations

import asyncio
import contextlib

from aner_coord.admission import Job
from aner_coord.clusterfile import WorkerRecord
from aner_coord.computations.base import kernel_of
from aner_coord.errors import AdmissionError, AnerError
from aner_coord.job.link import WorkerLink, connect
from aner_coord.job.liveness import handshake_timeout, heartbeat_interval, result_floor
from aner_coord.job.pool import LOST_CLOSE_S, LostBetweenJobs, WorkerPool
from aner_coord.kernelsets import BLAS_KERNELS, strict_refusal
from aner_coord.requests import ClusterExecution
from protocol import CoordinatorConnection, ProtocolError

# What keeps a worker from answering here; the job's own start of it then says why.
_UNANSWERED = (AnerError, ProtocolError, LostBetweenJobs, OSError, TimeoutError)


def wanted(job: Job) -> bool:
    """Whether `job` asks for its group's kernel sets to be checked, and they matter."""
    execution = job.request.execution
    return (
        isinstance(execution, ClusterExecution)
        and execution.strict_bits
        and job.workers.records is not None
        and kernel_of(job.computation, job.request.computation).name in BLAS_KERNELS
    )


async def check_kernel_sets(job: Job, pool: WorkerPool) -> None:
    """Refuse `job`'s group if its workers report different kernel sets; else leave each
    one that answered in `pool`."""
    assert job.workers.records is not None
    records = job.workers.records
    kernel = kernel_of(job.computation, job.request.computation).name
    found = await asyncio.gather(*(_greet(r, pool, kernel) for r in records))
    links = [link for link in found if link is not None]
    refusal = strict_refusal({link.identity: link.machine for link in links})
    if refusal is None:
        for link in links:
            pool.keep(link)
        return
    await asyncio.gather(*(link.transport.close(timeout=LOST_CLOSE_S) for link in links))
    raise AdmissionError(refusal, "strict_bits")


async def _greet(record: WorkerRecord, pool: WorkerPool, kernel: str) -> WorkerLink | None:
    """`record`'s worker past its handshake, kept or new; None where it could not be had."""
    from aner_worker.contract import source_fingerprint

    with contextlib.suppress(*_UNANSWERED):
        link = await pool.take(record)
        if link is not None:
            return link
    connection = CoordinatorConnection(
        record.identity,
        record.slots,
        source_fingerprint(),
        (kernel,),
        heartbeat_s=heartbeat_interval(result_floor()),
    )
    try:
        return await connect(record, connection, timeout_s=handshake_timeout())
    except _UNANSWERED:
        return None
