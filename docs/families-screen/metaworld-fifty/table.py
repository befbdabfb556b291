"""Issue 57's fifty-task table: each run's summary.json (exp name EXP, default mw50-1m; seed 1) beside TD-MPC2's
SAC; the tasks without a run of EXP that ended are left out, and counted.

    uv run python docs/families-screen/metaworld-fifty/table.py RUNS_DIR TDMPC2_RESULTS_SAC_DIR [EXP]

TDMPC2_RESULTS_SAC_DIR: results/sac of github.com/nicklashansen/tdmpc2 (mw-*.csv: step, success, one row a seed and
evaluation). TD-MPC2 repeats each action twice, so its 500k steps are our 1M MuJoCo steps."""

import collections
import csv
import json
import pathlib
import re
import sys

runs, sac_dir = map(pathlib.Path, sys.argv[1:3])
exp = sys.argv[3] if len(sys.argv) > 3 else "mw50-1m"
tasks = (pathlib.Path(__file__).parents[1] / "metaworld-scripted" / "tasks.txt").read_text().split()


def sac(task: str, upto: int = 500_000) -> tuple[float, float]:
    """SAC's success at its last evaluation up to `upto` steps (mean over seeds), and its best mean up to there."""
    name = "mw-" + re.sub(r"(?<!^)(?=[A-Z])", "-", task.split("/")[1][:-3]).lower()
    by_step = collections.defaultdict(list)
    with open(sac_dir / f"{name}.csv") as f:
        for row in csv.DictReader(f):
            by_step[int(float(row["step"]))].append(float(row["success"]))
    mean = {step: sum(v) / len(v) for step, v in by_step.items() if step <= upto}
    return mean[max(mean)], max(mean.values())


print("| task | last step | any step | evaluation | SAC | SAC, best | |\n|---|---:|---:|---:|---:|---:|---|")
verdicts, sac_solved = collections.Counter(), 0
for task in tasks:
    path = runs / f"{task.replace('/', '-')}__{exp}__1" / "summary.json"
    summary = json.loads(path.read_text()) if path.exists() else {}
    if summary.get("status") != "ok":
        verdicts["not run"] += 1
        continue
    last, any_step = summary["final_success"], summary["final_any_step_success"]
    at, best = sac(task)
    sac_solved += at >= 0.9  # of the tasks run
    verdict = "solved" if any_step >= 0.9 else "never" if any_step == 0 else "partial"
    verdicts[verdict] += 1
    evaluation = summary["last_eval"]["success_rate"]
    print(
        f"| {task.split('/')[1]} | {last:.2f} | {any_step:.2f} | {evaluation:.2f} | {at:.2f} | {best:.2f} | {verdict} |"
    )
print(f"\n{dict(verdicts)}; SAC solves {sac_solved} (success >= 0.9 at its 500k steps)")
