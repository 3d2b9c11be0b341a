"""Model search and cross-validation `aner-search/v1` (docs/contracts.md, section 12), the worker's
half: whole Dense fits, each on one worker slot.

- `kernel`: the "search" kernel a worker runs per task (a range of the pass's fits);
- `params`: what a task carries (`SearchParams`) and what a fit returns (`FitResult`);
- `fits`: one fit, section 9's training state machine driven to its end on this slot with
  a fold's rows as its roles, on the data set Dense's store holds (`dense.rows`: staged
  file data, the coordinator's own copy for local threads, the teacher set).

The coordinator's half is `aner_coord.computations.search`.
"""
