"""A job's timeline read back (`aner parallel timeline`): what `timeline.jsonl` says.

- `analysis`: per worker busy share, idle gaps, longest tasks and stragglers, the
  coordinator's phases and where the rest of the wall time went; the sums recomputed with
  the rule status and the result use; the text summary and its JSON form; the recent busy
  share `status --watch` shows;
- `chrome`: the Trace Event format (Perfetto, chrome://tracing);
- `gantt`: the Gantt chart as a PNG (matplotlib, the optional extra of the scaling charts).
"""
