"""The `aner` command line: one parser (`main`), one module per command group.

- `main`: the parser, the exit codes, `main()` (the console script);
- `arguments`: how numbers and the shared execution flags are read;
- `jobs`: `inventory`, `run`, `regression`, `resume`; `capabilities`: what this build (and
  each worker of a cluster) can do; `dense`: `train`, `predict`;
  `search`: `cv`, `search`;
- `monitor`: `status`, `cancel`; `joblist`: `jobs`, this user's jobs on this host;
  `interrupted`: the jobs a reboot interrupted, and `jobs --resume-interrupted`;
  `timeline`: where a job's time went; `scaling`: `scaling` and `plan`, over the
  experiments, probes and predictions of `aner_coord.scaling`; `background`: `--background`
  and the detached coordinator;
- `progress`: the live progress line; `sdnotify`: telling systemd how a job does;
  `outcome`: the `--json` document of the job commands (`aner-job-outcome/1`).
- `shell`: `aner completion bash|zsh` and `aner manpage`, made from the parser.

Heavy modules are imported only by the commands that need them.
"""

from aner_coord.cli.main import main

__all__ = ["main"]
