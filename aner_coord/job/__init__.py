"""The job engine: from an admitted job to its result.

- `machine`: the job logic, a pure state machine (`handle(event) -> [instruction]`) with its
  theory of operation at the top: dispatch, the pass barrier, retries, cancels, audits;
  `events` and `instructions`: what it hears and what it says; `chunks`: the order in which
  a pass's chunks go out;
- `coordinator`: the asyncio shell that carries the machine's instructions out and feeds
  what happened back as events; publishes status snapshots;
- `backend`, `threads`, `processes`: where tasks run: local threads, or worker processes
  over a transport (which of the two a local job's workers are, per kernel, is
  `aner_coord.localplan`'s, decided at admission);
  `link`: a worker process's command line, start, handshake and events, for everything
  that talks to one; `pool`: a session's worker processes kept between jobs;
- `staging`: file data sent to worker processes once per job; `pacing`: how many tasks a
  worker holds, from its measured round trip; `timing`: one record per task, and
  the compute, transfer and wait seconds they add up to; `timeline`: those records and the
  coordinator's own phases as lines of the job's `timeline.jsonl`; `pace`: progress
  weighted by what each kind of pass costs, and the ETA;
  `audits`: what `--audit` checked, per worker, for the result; `preflight`: a group's
  kernel sets checked before its job starts (`--strict-bits`);
- `liveness`: when a connected worker counts as lost, judged on whole frames;
  `checkpoints`: a training's committed state, written and read through the job directory;
- `queue`: the job's CPU slots on this host, taken from the lease table, waited for (QUEUED)
  or refused (`--no-wait`);
- `execute`: one job run inside its job directory; `resume`: continuing one from its ledger.
"""
