"""Honest scaling experiments (docs/contracts.md, section 10) and the plan recommender.

`aner parallel scaling` runs each case of an experiment as fresh `aner parallel` commands,
timed from outside; `aner parallel plan` probes the machines and predicts. The two commands
themselves, which check everything before they run anything, are `aner_coord.cli.scaling`.
The modules:

- `experiment`: the experiment file (TOML) and the standard `--auto` matrix;
- `trials`: running one trial (a whole command) and reading what it produced;
- `load`: how busy the machine was while a trial ran (load average, others' CPU share);
- `runner`: the rounds (warm-up, interleaved repetitions), progress and Ctrl-C;
- `records`: `trials.jsonl`, `cases.csv`, `report.md`;
- `charts`: the PNG charts (matplotlib, an optional extra imported only here);
- `registry`: public identities and their configuration revisions `C01, C02, ...`;
- `probe`: start-up, per-task overhead, kernel rate, round trip and bandwidth per machine;
- `plan`: predicted wall times of candidate plans and a recommendation.
"""
