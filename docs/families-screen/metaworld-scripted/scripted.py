"""Run Meta-World's scripted policies in EnvPool's MetaWorld ports and in Meta-World's own envs.

Usage (from this folder, with the venv made as README.md says):
  nice -n 10 venv/bin/python scripted.py run [--tasks MetaWorld/DrawerOpen-v3 ...] [--seeds 0 1 2]
  nice -n 10 venv/bin/python scripted.py report

`run` appends one row per (task, env, seed) to results.csv (rows already there are skipped, so a run
can be resumed) and the first observation of every episode to obs0.jsonl; `report` writes results.md
from results.csv (and appends findings.md, if present, under the table).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TASKS_FILE = os.path.join(HERE, "tasks.txt")
CSV_PATH = os.path.join(HERE, "results.csv")
OBS0_PATH = os.path.join(HERE, "obs0.jsonl")
MD_PATH = os.path.join(HERE, "results.md")
FINDINGS_PATH = os.path.join(HERE, "findings.md")
FIELDS = [
    "task",
    "mw_name",
    "policy",
    "env",
    "seed",
    "steps",
    "success_last",
    "success_any",
    "first_success_step",
    "return",
    "seconds",
]
# The project's options for the MetaWorld family (ENV_OPTIONS in the project's ppo_continuous_envpool_jax.py).
ENVPOOL_OPTIONS = {"partially_observable": False}
STEPS = 500


def official_name(task_id: str) -> str:
    """EnvPool id (MetaWorld/DrawerOpen-v3) -> Meta-World name (drawer-open-v3), through EnvPool's registry."""
    from envpool.mujoco.metaworld.registration import metaworld_task_id, metaworld_v3_envs

    by_id = {metaworld_task_id(n): n for n in metaworld_v3_envs}
    return by_id[task_id]


def policy_class(mw_name: str):
    from metaworld.policies import ENV_POLICY_MAP

    return ENV_POLICY_MAP[mw_name]


def run_envpool(task_id: str, policy, seed: int):
    import envpool

    # As make_envs in the project's ppo_continuous_envpool_jax.py does it (num_envs=1).
    env = envpool.make(task_id, env_type="gymnasium", num_envs=1, num_threads=1, seed=seed, **ENVPOOL_OPTIONS)
    assert env.action_space.dtype == np.float32, env.action_space.dtype
    assert env.observation_space.shape == (39,), env.observation_space.shape
    obs, info = env.reset()
    obs0 = obs[0].copy()
    successes, ret, steps = [], 0.0, 0
    for _ in range(STEPS):
        act = np.clip(policy.get_action(obs[0]), -1.0, 1.0).astype(np.float32)[None]
        obs, rew, term, trunc, info = env.step(act, np.array([0], dtype=np.int32))
        steps += 1
        ret += float(rew[0])
        successes.append(float(info["success"][0]))
        if term[0] or trunc[0]:
            break
    env.close()
    return obs0, successes, ret, steps


def run_metaworld(mw_name: str, policy, seed: int):
    import metaworld

    mt1 = metaworld.MT1(mw_name, seed=seed)
    env = mt1.train_classes[mw_name]()
    env.set_task(mt1.train_tasks[0])  # MT tasks carry partially_observable=False
    env._partially_observable = False
    env.seed(seed)
    obs, info = env.reset()
    assert obs.shape == (39,), obs.shape
    obs0 = obs.copy()
    successes, ret, steps = [], 0.0, 0
    for _ in range(STEPS):
        act = np.clip(policy.get_action(obs), -1.0, 1.0)
        obs, rew, term, trunc, info = env.step(act)
        steps += 1
        ret += float(rew)
        successes.append(float(info["success"]))
        if term or trunc:
            break
    env.close()
    return obs0, successes, ret, steps


def cmd_run(args):
    tasks = args.tasks or Path(TASKS_FILE).read_text().split()
    done = set()
    if os.path.exists(CSV_PATH):
        with open(CSV_PATH) as f:
            done = {(r["task"], r["env"], r["seed"]) for r in csv.DictReader(f)}
    new = not os.path.exists(CSV_PATH)
    with open(CSV_PATH, "a", newline="") as f, open(OBS0_PATH, "a") as fo:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        for task in tasks:
            mw_name = official_name(task)
            cls = policy_class(mw_name)
            for seed in args.seeds:
                for env_name in args.envs:
                    if (task, env_name, str(seed)) in done:
                        continue
                    t0 = time.time()
                    policy = cls()
                    if env_name == "envpool":
                        obs0, succ, ret, steps = run_envpool(task, policy, seed)
                    else:
                        obs0, succ, ret, steps = run_metaworld(mw_name, policy, seed)
                    first = next((i + 1 for i, s in enumerate(succ) if s > 0), "")
                    row = dict(
                        task=task,
                        mw_name=mw_name,
                        policy=cls.__name__,
                        env=env_name,
                        seed=seed,
                        steps=steps,
                        success_last=succ[-1],
                        success_any=float(max(succ) > 0),
                        first_success_step=first,
                        **{"return": round(ret, 3)},
                        seconds=round(time.time() - t0, 1),
                    )
                    w.writerow(row)
                    f.flush()
                    fo.write(
                        json.dumps(dict(task=task, env=env_name, seed=seed, obs0=[round(float(x), 4) for x in obs0]))
                        + "\n"
                    )
                    fo.flush()
                    print(row, flush=True)


def _mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def versions():
    from importlib.metadata import version

    return {
        "python": platform.python_version(),
        "envpool": version("envpool"),
        "metaworld": version("metaworld"),
        "mujoco": version("mujoco"),
        "gymnasium": version("gymnasium"),
        "numpy": version("numpy"),
    }


def cmd_report(args):
    with open(CSV_PATH) as f:
        rows = list(csv.DictReader(f))
    tasks = Path(TASKS_FILE).read_text().split()
    by = {}
    for r in rows:
        by.setdefault((r["task"], r["env"]), []).append(r)

    def stats(rs):
        last = _mean([float(r["success_last"]) for r in rs])
        anys = _mean([float(r["success_any"]) for r in rs])
        firsts = [int(r["first_success_step"]) for r in rs if r["first_success_step"]]
        ret = _mean([float(r["return"]) for r in rs])
        return last, anys, (_mean(firsts) if firsts else None), ret

    lines, n = [], {"envpool": [0, 0], "metaworld": [0, 0]}
    disagree = []
    for task in tasks:
        ep, mw = by.get((task, "envpool")), by.get((task, "metaworld"))
        if not ep or not mw:
            lines.append(f"| {task} | (missing) |||||||||")
            continue
        s = {"envpool": stats(ep), "metaworld": stats(mw)}
        for k, counts in n.items():
            counts[0] += s[k][0] == 1.0  # last-step success in all 3 seeds
            counts[1] += s[k][1] == 1.0  # any-step success in all 3 seeds
        flags = []
        if (s["envpool"][1] > 0) != (s["metaworld"][1] > 0) or (s["envpool"][1] == 1) != (s["metaworld"][1] == 1):
            flags.append("any-step success")
        if (s["envpool"][0] > 0) != (s["metaworld"][0] > 0) or (s["envpool"][0] == 1) != (s["metaworld"][0] == 1):
            flags.append("last-step success")
        a, b = s["envpool"][3], s["metaworld"][3]
        if abs(a - b) > 0.1 * max(abs(a), abs(b), 1e-9):
            flags.append(f"return {100 * (a - b) / max(abs(b), 1e-9):+.0f}%")
        if flags:
            disagree.append(task)

        def cells(x):
            last, anys, first, ret = x
            return [f"{last:.2f}", f"{anys:.2f}", "-" if first is None else f"{first:.0f}", f"{ret:.0f}"]

        lines.append(
            "| "
            + " | ".join(
                [task.split("/")[1], ep[0]["policy"]]
                + cells(s["envpool"])
                + cells(s["metaworld"])
                + ["**" + "; ".join(flags) + "**" if flags else ""]
            )
            + " |"
        )
    v = versions()
    seeds = sorted({int(r["seed"]) for r in rows})
    out = [
        "# Meta-World scripted policies: EnvPool vs Meta-World",
        "",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + f" ({platform.platform()}).",
        "",
        "Reproduce (from this folder; the machine's pyenv Python 3.12.1, uv from its shims):",
        "",
        "```",
        "export PYENV_VERSION=3.12.1",
        "UV_PYTHON_DOWNLOADS=never uv venv venv --python 3.12",
        "UV_PYTHON_DOWNLOADS=never uv pip install --python venv/bin/python envpool==1.2.7 metaworld packaging",
        "nice -n 10 venv/bin/python scripted.py run      # all 50 tasks of tasks.txt, seeds 0 1 2",
        "nice -n 10 venv/bin/python scripted.py report   # writes results.md from results.csv",
        "```",
        "",
        (
            "Both envs live in one venv (metaworld pulled its own mujoco, as listed above; EnvPool carries its own"
            " MuJoCo build inside its .so)."
        ),
        "",
        (
            "Policy matching: EnvPool's own registry (`envpool.mujoco.metaworld.registration.metaworld_v3_envs` with"
            " `metaworld_task_id`) maps each EnvPool id back to its Meta-World name (MetaWorld/PegInsertSide-v3 ->"
            " peg-insert-side-v3), and Meta-World's own `metaworld.policies.ENV_POLICY_MAP` maps that name to its"
            " policy class (peg-insert-side-v3 -> SawyerPegInsertionSideV3Policy). No hand mapping was needed; the"
            " class used is in the table."
        ),
        "",
        (
            'Set-up per (task, seed S): EnvPool `envpool.make(id, env_type="gymnasium", num_envs=1, num_threads=1,'
            " seed=S, partially_observable=False)` (as make_envs does; action space Box(-1, 1, (4,), float32), asserted;"
            " actions sent as float32); Meta-World `mt1 = metaworld.MT1(name, seed=S)`,"
            " `env = mt1.train_classes[name]()`, `env.set_task(mt1.train_tasks[0])`, `env._partially_observable = False`,"
            " `env.seed(S)`. One episode of 500 steps (both envs' max) per seed, action = clip(policy.get_action(obs),"
            " -1, 1). The two envs draw their goal/object positions from different random streams, so seed S is not the"
            " same placement in both."
        ),
        "",
        (
            f"Seeds: {seeds}. Columns: last = success at the last step (mean over seeds), any = success at any step"
            " (mean), first = mean first-success step over the seeds that succeeded, return = mean episode return."
            " Flag: one env succeeds where the other does not (in any seed: rates differ in being 0 or 1), or mean"
            " returns differ by more than 10% (given as EnvPool relative to Meta-World)."
        ),
        "",
        (
            f"Summary: tasks solved in all seeds at any step: EnvPool {n['envpool'][1]}/{len(tasks)},"
            f" Meta-World {n['metaworld'][1]}/{len(tasks)}; at the last step: EnvPool {n['envpool'][0]},"
            f" Meta-World {n['metaworld'][0]}. Flagged: {len(disagree)} ({', '.join(t.split('/')[1] for t in disagree) or 'none'})."
        ),
        "",
        "| task | policy | EP last | EP any | EP first | EP return | MW last | MW any | MW first | MW return | disagree |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *lines,
        "",
        "Per-seed rows: results.csv; first observation of each episode: obs0.jsonl.",
        "",
    ]
    if os.path.exists(FINDINGS_PATH):
        out.append(Path(FINDINGS_PATH).read_text())
    with open(MD_PATH, "w") as f:
        f.write("\n".join(out))
    print("\n".join(out[:30]))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--tasks", nargs="*")
    r.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    r.add_argument("--envs", nargs="*", default=["envpool", "metaworld"])
    r.add_argument("--csv", default=None, help="per-seed CSV to append to (default results.csv)")
    sub.add_parser("report")
    args = p.parse_args()
    global CSV_PATH, OBS0_PATH
    if getattr(args, "csv", None):
        CSV_PATH = os.path.join(HERE, args.csv)
        OBS0_PATH = CSV_PATH[:-4] + "_obs0.jsonl"
    {"run": cmd_run, "report": cmd_report}[args.cmd](args)


if __name__ == "__main__":
    main()
