"""DrawerOpen's takeoff: per run, the training any-step success over the last 100k of its first STEPS steps.

    uv run python docs/families-screen/metaworld-drawer-takeoff/takeoff.py 300000 RUN_DIR [RUN_DIR ...]

A run took off if that mean (of the rates logged per iteration, each over the episodes that ended in it) is at
least 0.3; one logged rate is too noisy a test, for a batch of few steps ends few episodes an iteration. Prints one
line a run (exp name, seed, steps logged, that mean, the step a logged rate first reached 0.3), then a line a
configuration: how many seeds took off."""

import collections
import json
import pathlib
import sys

from tensorboard.backend.event_processing import event_accumulator

STEPS, TAKEOFF = int(sys.argv[1]), 0.3
opened = collections.defaultdict(list)
for run in map(pathlib.Path, sys.argv[2:]):
    summary = json.loads((run / "summary.json").read_text())
    events = event_accumulator.EventAccumulator(str(run), size_guidance={event_accumulator.SCALARS: 0})
    events.Reload()
    # a resumed run logs its steps again from the checkpoint: keep the last value written for each step
    rate = {e.step: e.value for e in events.Scalars("charts/any_step_success_rate") if e.step <= STEPS}
    last = max(rate, default=0)
    window = [value for step, value in rate.items() if step > last - 100_000]
    mean = sum(window) / max(len(window), 1)
    first = min((step for step, value in rate.items() if value >= TAKEOFF), default=None)
    opened[summary["exp_name"]].append((summary["seed"], mean >= TAKEOFF))
    print(
        f"{summary['exp_name']:36s} seed {summary['seed']:2d}  steps {last:7d}  "
        f"last 100k {mean:.2f}  first >= {TAKEOFF}: {first or '-'}"
    )
for exp, seeds in sorted(opened.items()):
    took = sorted(seed for seed, ok in seeds if ok)
    print(f"{exp:36s} opened by {STEPS}: {len(took)} of {len(seeds)} (seeds {', '.join(map(str, took)) or 'none'})")
