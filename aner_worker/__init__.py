"""The worker package: what runs wherever a computation's work is done.

`aner parallel worker --stdio` (`worker`) serves one coordinator over its stdin and stdout;
local threads call the same kernels in-process. Nothing here imports the coordinator
(`aner_coord`), and every source file here and in `protocol/` is part of the source-contract
fingerprint that both sides compare at the handshake.

- `kernels/`: the worker halves of the computations, by name;
- `plugins/`: the computations installed, aner's own and each plugin's, found by entry
  point, and what a plugin's code is (its distribution's identity);
- `worker`: the worker process; `cli`: its command; `contract`: this installation's
  fingerprint;
- `inventory`: what this process may use (affinity, cgroup quotas, the scheduler's hints,
  memory), with `cgroups` reading the quota and memory limit of its cgroup hierarchy;
  `leases`: the per-user, per-host lease table of CPU slots that local jobs and granted
  workers take; `machine`: the hardware and software identity reported at the handshake;
  `blasenv`: the OpenBLAS settings (kernel set, L2 size) a worker computes with;
  `host`: the host identity reported with it (a salted hash of the machine ID and boot id);
  `build`: where this installation came
  from (the provenance it reports too);
- `blocks`: the staging block cache; `files`: bounded reads and the one atomic writer;
  `npzfile`: the files a user names (data, a model), read without trusting them;
- `registry`: the lazy registry behind kernels and computations; `startup`: what an aner
  process does at its start; `oracle`: numpy references of the kernels, for tests.
"""
