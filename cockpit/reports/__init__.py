"""What cockpit prints for people to read or paste: each module turns records into text.

- `plan`: the planner's verdicts as a terminal table (`cockpit plan`).
- `gpus`: one line per GPU (`cockpit gpus`).
- `comparison`: the journal read as tok/s per layout and concurrency, a table per workload
  (request lengths, open-loop rate) and box (simulated or not), the best of each marked.
- `results`: that comparison as a table, markdown, csv or json (`cockpit results`), and what
  to run first when nothing was benchmarked.
- `export`: a titled markdown document with the context a reader needs (`export md`).
- `numbers`: tok/s and milliseconds, written the same way everywhere, panes included.
"""
