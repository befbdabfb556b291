"""Per-task means over seeds, side by side, from several per-seed CSVs: python summarize.py label=file.csv:env ..."""

import collections
import csv
import sys
from pathlib import Path

cols = []
for a in sys.argv[1:]:
    label, rest = a.split("=", 1)
    path, env = rest.rsplit(":", 1)
    cols.append((label, path, env))
data = {}
tasks = []
for label, path, env in cols:
    g = collections.defaultdict(list)
    for r in csv.DictReader(Path(path).read_text().splitlines()):
        if r["env"] == env:
            g[r["task"]].append(r)
            if r["task"] not in tasks:
                tasks.append(r["task"])
    data[label] = g
print("| task | " + " | ".join(f"{l} last / any / return" for l, _, _ in cols) + " |")
print("|---|" + "---|" * len(cols))
for t in tasks:
    cells = []
    for l, _, _ in cols:
        rs = data[l].get(t, [])
        n = len(rs)
        if not n:
            cells.append("-")
            continue
        cells.append(
            f"{sum(float(r['success_last']) for r in rs) / n:.2f} / {sum(float(r['success_any']) for r in rs) / n:.2f} / {sum(float(r['return']) for r in rs) / n:.0f} (n={n})"
        )
    print(f"| {t.split('/')[1]} | " + " | ".join(cells) + " |")
