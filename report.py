"""Summarise a sweep of ppo_continuous_envpool_jax.py runs from their TensorBoard event files.

Reads every run directory `{env_id}__{exp_name}__{seed}` (benchmark.sh's) or `{env_id}__{exp_name}__{seed}__{time}`
(a run started by hand, or by an older benchmark.sh) directly under a runs directory, groups the runs by (env id,
exp name) over seeds, and writes

* a Markdown report (also printed): per (env id, exp name) the final return, the best evaluation return and
  the wall-clock time, mean ± std over seeds, plus a per-run table;
* learning curves, 500x300 PNGs per env id: return against environment steps and against wall-clock time,
  and, when some run of the env id logged `eval/episodic_return`, the evaluation return against environment
  steps; a mean line and a shaded ±std band over seeds per exp name;
* the same curves as numbers, `curves.csv` (env id, exp name, tag, step, mean, std, seeds; also
  the success rates where logged), and every run's finals, `runs.csv`, so that
  others can plot and compare against their own baselines;
* a comparison across tasks (below): per experiment the IQM and mean of normalised scores with 95%
  confidence intervals, the probability that one experiment improves on another, and a performance
  profile, `performance_profile.png`.

With `--finals CSV` it reads per-run finals from a CSV (a `runs.csv` of this tool, or one built from
published tables) instead of a runs directory, and writes the comparison alone; repeated, it reads them
all, e.g. the runs.csv of each sweep of a screen, kept after the run directories are gone.

A sweep may still be running: a run whose training process holds its run directory's lock (as benchmark.sh's
runs do), that has logged fewer steps than the longest run of its (env id, exp name) or, without a summary.json,
than its own flags plan for, or no scalar at all yet, is listed as "in progress" and left out of the means and curves. A
run whose training diverged, failed or was interrupted (its summary.json's status, where it has one), or that ended
with fewer steps than the longest run of its group, is listed as such and left out too, with a line on stderr.
Other directories are skipped with a line on stderr, except `logs` (Slurm's logs of a benchmark.sh sweep; an older
benchmark.sh's sweep logs).

Definitions
  final return  the mean of the `charts/episodic_return` values logged in the last `--window-steps`
                environment steps of a run (steps > last step - window); a run shorter than the window
                uses its last `--short-run-fraction` instead.
  final success the mean of `charts/success_rate` over the same window, for tasks that report success
                (MetaWorld, robotics, MyoSuite, four Playground tasks): an episode succeeded if its last step
                did; a column of the table only where some run logged it. "Any step": the same of
                `charts/any_step_success_rate`, an episode that succeeded at some step (Meta-World's count;
                MyoSuite: on more than 5 steps, its own count).
  eval return   `eval/episodic_return`: the training script's evaluation of the mean action, averaged over
                several episodes, logged at fixed steps (the same for every seed of a configuration).
  last eval     a run's last eval return.
  max eval return
                per (env id, exp name), the maximum over steps of the mean over seeds of the eval return,
                and the step where it is reached; only steps at which every seed with eval data has a value
                count, so the maximum is that of one curve, not a mix of each seed's best step.
  wall-clock    the wall time of a run's last scalar event minus that of its first event (the event
                file's header, written when the run starts); of a resumed run, the time its attempts ran: each
                resumed attempt (an event file of its own) counts from its header, the attempts before it up
                to their last event kept (the pause between them, and what a resumed run superseded, left
                out), as the training script's summary.json counts it.
  in progress   a run whose last step is below that of the longest run of its (env id, exp name), or,
                without a summary.json, below the steps its flags plan for (killed before its end), or
                with no scalar event yet (a run that has just started): listed with what it has logged so
                far, and left out of the means, of the seed counts behind them and of the curves.
  diverged      a run that the training script stopped at a non-finite loss or parameter (its summary.json
                says so, or, without one, its `failure` text): listed, counted beside the seeds ("3 (+1
                diverged)"), and left out like a run in progress, so the means are over the seeds that did not
                diverge. In the comparison across tasks it counts, scored by the policy it kept (the last
                finite one): its final return over what it logged before it diverged (its last episode's
                return where none ended in that window), its eval return at its experiment's best step or,
                short of it, its last (also its `eval_at_max` in runs.csv); else an experiment whose runs
                diverge would be ranked on the seeds that survived. `--baseline` and `--against` take means
                without it, as the per-task tables do.
  failed, interrupted
                a run whose summary.json says it stopped early (an error; a signal, its checkpoint kept to resume
                it): listed, counted and left out the same way.
  shorter       a run whose summary.json says it ended (ok) with fewer steps than the longest run of its (env
                id, exp name): another --total-timesteps under the same exp name; listed, counted and left out
                the same way.
  std           population standard deviation over seeds (numpy's default, ddof=0).
  curves        each seed's curve is linearly interpolated onto a common grid spanning the x range
                that all seeds cover; the line is the mean over seeds, the band mean ± std. The eval curves
                need no interpolation: they are the mean and std at the steps every seed evaluated.
  eval at max   a run's eval return at the step where the mean eval curve of its (env id, exp name) peaks:
                the per-run values whose mean is the max eval return.

Comparison across tasks (Agarwal et al., "Deep RL at the Edge of the Statistical Precipice", NeurIPS 2021,
computed with their `rliable` library)
  normalised score
                a run's final return (or eval at max) divided by the reference of its task: the published
                figure of `--reference` (REFERENCES below), or with `--baseline EXP` the mean final return
                of EXP on that task. `--reference suite` also takes a uniformly random policy's return
                (random_returns.py) as zero: (return - random) / (figure - random). Tasks without a
                reference, or that some compared experiment has not run, are left out, with a line on stderr.
  runs          per experiment, the seeds it has on every compared task (the bootstrap needs as many runs
                on each task); the others are left out, with a line on stderr.
  IQM           interquartile mean: the mean of the middle 50% of all (run, task) scores, robust to the
                outlying runs that move a mean and less noisy than a median.
  95% CI        percentile stratified bootstrap: runs resampled with replacement within each task,
                `--bootstrap-reps` times, from `--bootstrap-seed`, so a report repeats exactly.
  P(X > Y)      probability of improvement: the chance that a run of X scores above a run of Y on the
                same task (ties count half; the Mann-Whitney U statistic), averaged over tasks; each pair
                once, the experiment with the higher IQM as X. Its CI resamples X's and Y's runs apart.
  performance profile
                the fraction of (run, task) scores above each threshold tau, with 95% CI bands.
  against       with `--against EXP`, per task (every task, with a reference or not), each experiment's mean
                final return minus EXP's, in standard errors of EXP's mean (population std / sqrt(seeds)), and
                per experiment the tasks where it is more than one SE below EXP.

This tool reads the event files only; it does not import the training script.
"""

from __future__ import annotations

import csv
import fcntl
import itertools
import json
import math
import os
import re
import signal
import struct
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
import tyro

RETURN_TAG = "charts/episodic_return"
EVAL_TAG = "eval/episodic_return"
SUCCESS_TAG = "charts/success_rate"  # success at the episode's last step (TD-MPC2's count)
ANY_STEP_SUCCESS_TAG = "charts/any_step_success_rate"  # at some step of it (Meta-World's; MyoSuite's: > 5 steps)
EVAL_SUCCESS_TAG = "eval/success_rate"
EVAL_ANY_STEP_SUCCESS_TAG = "eval/any_step_success_rate"
# Training tags are logged as episodes end, at steps that differ between seeds: their curves are interpolated.
# Eval tags are logged at the same steps for every seed of a configuration: their curves need no interpolation.
TRAINING_TAGS = (RETURN_TAG, SUCCESS_TAG, ANY_STEP_SUCCESS_TAG)
EVAL_TAGS = (EVAL_TAG, EVAL_SUCCESS_TAG, EVAL_ANY_STEP_SUCCESS_TAG)
PNG_SIZE = (500, 300)  # pixels: figsize (5, 3) at dpi 100
# benchmark.sh's run directories have no time (the command fixes them), a run started by hand (and an older
# benchmark.sh's) has one; summary.json's exp name and seed settle an exp name that ends in "__<digits>".
RUN_DIR = re.compile(r"^(?P<env_id>[^_].*?)__(?P<exp_name>.+?)__(?P<seed>\d+)(?:__(?P<time>\d+))?$")
RUN_DIR_TEXT = "{env_id}__{exp_name}__{seed}[__{time}]"
EVENT_FILE = re.compile(r"^events\.out\.tfevents\.(\d+)\.")  # its number: when it was opened, in unix seconds
SWEEP_LOGS = "logs"  # runs/logs/: Slurm's logs of a benchmark.sh sweep (an older one's sweep logs): not a run
IN_PROGRESS = "in progress"
INCLUDED = "included"
DIVERGED = "diverged"
ENDED_SHORT = ("failed", "interrupted")  # summary.json's statuses of a run that stopped before its end, left out
SHORTER = "shorter"  # ended (ok) with fewer steps than its group's longest run: another budget, left out
FAILURE_TAG = "failure/text_summary"  # the training script's text when it stops at a non-finite value
HYPERPARAMETERS_TAG = "hyperparameters/text_summary"  # its flags as a Markdown table, at each start and resume


class Reference(NamedTuple):
    """What a task's scores are normalised by: (return - zero) / (figure - zero), so `zero` scores 0 and `figure` 1."""

    description: str
    figures: dict[str, float]  # task -> the return that scores 1
    zeros: dict[str, float]  # task -> the return that scores 0; 0.0 for a task not listed (a plain ratio)


TIANSHOU = {
    "HalfCheetah-v4": 5783.9,
    "Hopper-v4": 2609.3,
    "Walker2d-v4": 3588.5,
    "Ant-v4": 3258.4,
    "Humanoid-v4": 787.1,
    "InvertedPendulum-v4": 1000.0,
    "InvertedDoublePendulum-v4": 9231.3,
    "Swimmer-v4": 66.7,
    "Reacher-v4": -4.1,
}
# CleanRL's ppo_continuous_action.py on DeepMind Control: its ppo.md table, 1M steps, 3 seeds (the 15-task
# suite's figures: the screens were scored by them), and its rpo.md tables, 8M steps, 10 seeds, for PPO and
# RPO. Each the mean over seeds of a run's last 100 training returns.
CLEANRL_DMC = {
    "CartpoleSwingup-v1": 640.86,
    "CheetahRun-v1": 432.56,
    "WalkerWalk-v1": 392.51,
    "WalkerRun-v1": 125.92,
    "FingerSpin-v1": 590.49,
    "ReacherHard-v1": 443.80,
}
CLEANRL_DMC_8M = {  # task: (PPO, RPO)
    "AcrobotSwingup-v1": (26.87, 42.97),
    "PendulumSwingup-v1": (472.19, 774.30),
    "QuadrupedRun-v1": (171.50, 367.98),
    "FingerTurnHard-v1": (83.76, 259.99),
    "WalkerStand-v1": (439.24, 734.74),
    "HumanoidWalk-v1": (8.92, 77.00),
    "CheetahRun-v1": (472.14, 565.51),
    "WalkerWalk-v1": (305.74, 787.11),
    "WalkerRun-v1": (128.18, 391.56),
    "CartpoleSwingup-v1": (590.21, 613.46),
    "FingerSpin-v1": (630.06, 848.67),
    "ReacherHard-v1": (637.84, 576.81),
}
# The mean return of uniformly random actions, 100 episodes from seed 0: `python random_returns.py`.
RANDOM_RETURNS = {
    "HalfCheetah-v4": -286.09,
    "Hopper-v4": 17.78,
    "Walker2d-v4": 2.07,
    "Ant-v4": -63.71,
    "Humanoid-v4": 120.85,
    "InvertedPendulum-v4": 5.4,
    "InvertedDoublePendulum-v4": 54.21,
    "Swimmer-v4": 0.93,
    "Reacher-v4": -43.47,
    "CartpoleSwingup-v1": 28.92,
    "CheetahRun-v1": 4.17,
    "WalkerWalk-v1": 32.36,
    "WalkerRun-v1": 23.0,
    "FingerSpin-v1": 0.03,
    "ReacherHard-v1": 8.93,
}
# Published figures to normalise by.
REFERENCES = {
    "tianshou": Reference(
        (
            "tianshou's PPO (its examples/mujoco benchmark table): the best point of its 10-seed mean test curve "
            "within 1M steps, on the gym v3 tasks, test actions sampled from the policy"
        ),
        TIANSHOU,
        {},
    ),
    "cleanrl": Reference(
        (
            "CleanRL's ppo_continuous_action.py (its documentation's benchmark table): the final training return, "
            "3 seeds, 1M steps"
        ),
        {"HalfCheetah-v4": 1443, "Hopper-v4": 2383, "Walker2d-v4": 2288, "Humanoid-v4": 716},
        {},
    ),
    "suite": Reference(
        (
            "the 15-task suite the defaults are chosen on: tianshou's 1M-step figure on its nine gym tasks, CleanRL's "
            "1M-step final training return (3 seeds) on six DeepMind Control tasks, with a uniformly random "
            "policy's return as 0 on all 15"
        ),
        TIANSHOU | CLEANRL_DMC,
        RANDOM_RETURNS,
    ),
    "cleanrl-dmc-8m": Reference(
        "CleanRL's ppo_continuous_action.py on DeepMind Control (its rpo.md): the final training return, 10 seeds, 8M steps",
        {task: ppo for task, (ppo, _) in CLEANRL_DMC_8M.items()},
        {},
    ),
    "rpo-dmc-8m": Reference(
        "CleanRL's RPO, rpo_continuous_action.py, on DeepMind Control (its rpo.md): the final training return, 10 seeds, 8M steps",
        {task: rpo for task, (_, rpo) in CLEANRL_DMC_8M.items()},
        {},
    ),
}
# The per-run CSV, runs.csv: written from the event files, read back by --finals.
RUNS_CSV_COLUMNS = ["env_id", "exp_name", "seed", "status", "steps", "window", "final_return", "eval_at_max"]
RUNS_CSV_COLUMNS += ["last_eval", "final_success", "final_any_step_success", "wall_clock", "run"]
# What the comparison across tasks scores, by --metric: CSV columns -> what the tables say. A return is normalised by
# a reference; a success rate, already from 0 to 1, is not.
SCORES = {
    "return": {"final_return": "final return", "eval_at_max": "eval at max"},
    "success": {"final_success": "final success"},
    "any-step-success": {"final_any_step_success": "final success, any step"},
}


@dataclass
class Run:
    env_id: str
    exp_name: str
    seed: int
    start_time: int  # from the directory name, else its first event file's
    path: Path
    empty: bool  # no scalar logged yet: the run has just started
    curves: dict[str, tuple[np.ndarray, np.ndarray]]  # tag -> (steps, values), for TRAINING_TAGS and EVAL_TAGS
    seconds: np.ndarray  # wall-clock of the episodic-return events: running time since the run started
    total_steps: int  # last step of any scalar
    wall_clock: float  # running seconds at the last scalar event; nan when empty
    final_return: float  # nan when no return was logged in the window
    window: float  # steps averaged over for final_return; nan when empty
    short: bool  # the run was shorter than --window-steps
    failure: str = ""  # what went non-finite, where training diverged
    planned_steps: int | None = None  # the steps it was started (or last resumed) to train, where it logged them
    summary: dict = field(default_factory=dict)  # its summary.json, where it has one: how it ended
    status: str = INCLUDED  # or IN_PROGRESS (empty, behind the longest run of its group or its own plan), DIVERGED,
    # ENDED_SHORT, SHORTER
    eval_at_max: float = math.nan  # its eval return where its group's mean eval curve peaks
    final_success: float = math.nan  # the mean success rate in the final-return window, where the task reports one
    final_any_step_success: float = math.nan  # the same of the success rate at any step, where it was logged

    def logged(self, tag: str) -> bool:
        return len(self.curves[tag][0]) > 0

    @property
    def included(self) -> bool:
        """In the means and curves: neither in progress nor diverged."""
        return self.status == INCLUDED


class Final(NamedTuple):
    """What the comparison across tasks needs of one run, from its event files or a CSV row."""

    env_id: str
    exp_name: str
    seed: int
    final_return: float
    eval_at_max: float  # nan where the run has no eval data
    final_success: float = math.nan  # nan where the task reports no success
    final_any_step_success: float = math.nan
    diverged: bool = False  # scored by the comparison, left out of the means (--baseline's, --against's)


@dataclass
class ReportArgs:
    """The command line: `python report.py --help`."""

    runs_dir: tyro.conf.Positional[Path] = Path("runs")
    """directory of the run directories"""
    finals: tyro.conf.UseAppendAction[list[Path]] = field(default_factory=list)
    """compare the per-run finals of this CSV (columns env_id, exp_name, seed, final_return and optionally status,
    eval_at_max, final_success, final_any_step_success (for --metric), as in runs.csv) instead of reading RUNS_DIR; writes the comparison alone (a run, env id x exp name x
    seed, may be in one of them only)"""
    exp_name: tyro.conf.UseAppendAction[list[str]] = field(default_factory=list)
    """only runs of this exp name"""
    env_id: tyro.conf.UseAppendAction[list[str]] = field(default_factory=list)
    """only runs of this env id"""
    seed: tyro.conf.UseAppendAction[list[int]] = field(default_factory=list)
    """only runs of this seed"""
    out_dir: Path = Path("report")
    """where to write the report, the PNGs and the CSVs"""
    markdown: str = "benchmark.md"
    """file name of the report in --out-dir"""
    window_steps: int = 100_000
    """final return: average over the last this many steps"""
    short_run_fraction: float = 0.1
    """final return of a run shorter than --window-steps: average over this last fraction of it"""
    grid_points: int = 200
    """points of the common grid the seeds' curves are interpolated on"""
    metric: Literal["return", "success", "any-step-success"] = "return"
    """what the comparison across tasks scores: the final return (normalised by --reference or --baseline, and the
    eval at max beside it), or the final success rate at the episodes' last step or at any step (not normalised)"""
    reference: Literal["cleanrl", "suite", "tianshou", "cleanrl-dmc-8m", "rpo-dmc-8m"] = "tianshou"
    """published figures each task's scores are normalised by (suite: the 15 tasks the defaults are chosen on, a
    random policy scoring 0)"""
    baseline: str | None = None
    """divide each task's scores by this experiment's mean final return there, instead of --reference"""
    against: str | None = None
    """also compare every task's mean final return with this experiment's, in its standard errors"""
    bootstrap_reps: int = 2000
    """bootstrap resamples behind each confidence interval"""
    bootstrap_seed: int = 0
    """seed of the bootstrap's random numbers"""
    plots: bool = True
    """write the PNGs (--no-plots: the Markdown and the CSVs alone)"""


EXAMPLES = """
examples:
  uv run python report.py runs --exp-name mine --exp-name theirs
  -> report/benchmark.md, report/<env_id>_return_vs_steps.png, report/<env_id>_return_vs_time.png,
     report/<env_id>_eval_vs_steps.png when the runs logged eval/episodic_return,
     report/curves.csv, report/runs.csv and report/performance_profile.png
  uv run python report.py --finals docs/defaults-choice-finals.csv --out-dir report/defaults
"""


def parse_args(argv=None) -> ReportArgs:
    args = tyro.cli(ReportArgs, args=argv, description=__doc__ + EXAMPLES)
    refusals = [
        (args.window_steps <= 0, f"--window-steps must be positive, got {args.window_steps}"),
        (
            not 0 < args.short_run_fraction <= 1,
            f"--short-run-fraction must be in (0, 1], got {args.short_run_fraction}",
        ),
        (args.grid_points < 2, f"--grid-points must be at least 2, got {args.grid_points}"),
        (args.bootstrap_reps < 1, f"--bootstrap-reps must be positive, got {args.bootstrap_reps}"),
        (
            not 0 <= args.bootstrap_seed < 2**32,
            f"--bootstrap-seed must be in [0, 2**32 - 1] (NumPy's seeds), got {args.bootstrap_seed}",
        ),
        *((not path.is_file(), f"finals CSV not found: {path}") for path in args.finals),
        (not args.finals and not args.runs_dir.is_dir(), f"runs directory not found: {args.runs_dir}"),
        (args.out_dir.exists() and not args.out_dir.is_dir(), f"--out-dir {args.out_dir} is a file, not a directory"),
        (
            args.markdown in ("", ".", "..") or "/" in args.markdown,
            f"--markdown takes a file name in --out-dir, got {args.markdown!r}",
        ),
        (
            args.markdown in ("runs.csv", "curves.csv") or args.markdown.endswith(".png"),
            f"--markdown {args.markdown} is a file report.py writes itself; give another name",
        ),
        (
            args.baseline is not None and args.metric != "return",
            f"--baseline divides final returns; --metric {args.metric} compares success rates as they are",
        ),
    ]
    for refused, message in refusals:
        if refused:  # one line on stderr, like the training script
            sys.exit(f"report.py: error: {message}")
    return args


# ---------------------------------------------------------------------------------------------------
# Reading runs
# ---------------------------------------------------------------------------------------------------


def selected(info: dict, args: ReportArgs) -> bool:
    """Whether a run (a dict with env_id, exp_name and seed) passes the --exp-name, --env-id and --seed filters."""
    # A run directory names a task with a family prefix (MetaWorld/Reach-v3) with "-" for "/"; --env-id takes either.
    env_ids = [env_id.replace("/", "-") for env_id in args.env_id]
    filters = [
        (args.exp_name, info["exp_name"]),
        (env_ids, info["env_id"].replace("/", "-")),
        (args.seed, info["seed"]),
    ]
    return all(not wanted or value in wanted for wanted, value in filters)


def find_run_dirs(runs_dir: Path, args: ReportArgs) -> list[tuple[dict, Path]]:
    """Run directories with event files, the latest one of each (env id, exp name, seed).

    Plain files and the `logs` folder are passed over silently; any other directory that is not a run gets one line
    on stderr, so that a misnamed run does not vanish from the report unnoticed.
    """
    latest: dict[tuple, tuple[dict, Path]] = {}
    for path in sorted(runs_dir.iterdir()):
        if not path.is_dir() or path.name == SWEEP_LOGS:
            continue
        match = RUN_DIR.match(path.name)
        if not match:
            print(f"report.py: skipping {path}: not a run directory {RUN_DIR_TEXT}", file=sys.stderr)
            continue
        info = match.groupdict()
        summary_path = path / "summary.json"
        try:
            info["summary"] = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
        except ValueError as error:  # written by the training script as a whole file: damaged since
            raise BadInput(f"{summary_path} cannot be read ({error}); remove it, or the run") from None
        if not isinstance(info["summary"], dict):
            raise BadInput(f"{summary_path} holds no JSON object")
        # A run refused before it began has a summary without its task, name or seed: the directory's then.
        info["exp_name"] = info["summary"].get("exp_name") or info["exp_name"]
        info["seed"] = int(info["summary"].get("seed") or info["seed"])
        if not selected(info, args):
            continue
        opened = [int(m[1]) for file in path.iterdir() if (m := EVENT_FILE.match(file.name))]
        if not opened:
            print(f"report.py: skipping {path}: no event file events.out.tfevents.*", file=sys.stderr)
            continue
        info["time"] = int(info["time"] or min(opened))
        key = (info["env_id"], info["exp_name"], info["seed"])
        if key in latest:
            older, newer = sorted([latest[key], (info, path)], key=lambda item: item[0]["time"])
            print(
                f"report.py: {key[0]} {key[1]} seed {key[2]} ran twice; using {newer[1].name}, not {older[1].name}",
                file=sys.stderr,
            )
            latest[key] = newer
        else:
            latest[key] = (info, path)
    return [latest[key] for key in sorted(latest)]


def final_return_window(total_steps: int, window_steps: int, short_run_fraction: float) -> tuple[float, bool]:
    """The number of last steps the final return averages over, and whether the run counts as short."""
    if total_steps < window_steps:
        return short_run_fraction * total_steps, True
    return float(window_steps), False


def running_time(path: Path, kept_times: np.ndarray):
    """The function from an event's wall time to the seconds the run had been running then. Each attempt (the
    start and each resume, an event file of its own) counts from its file's header to its last event kept (`kept_times`:
    a resumed run supersedes what the attempt before it logged after its checkpoint); the pauses do not count."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    # A run that has just started may have an event file without even the header: it has no attempt yet.
    headers = (
        itertools.islice(EventFileLoader(str(file)).Load(), 1) for file in path.iterdir() if EVENT_FILE.match(file.name)
    )
    starts = np.sort([event.wall_time for header in headers for event in header])
    # The attempt an event belongs to: the last one started at or before it.
    attempt_of_kept = np.searchsorted(starts, kept_times, side="right") - 1
    ran = [kept_times[attempt_of_kept == k].max(initial=start) - start for k, start in enumerate(starts)]
    before = np.concatenate([[0.0], np.cumsum(ran)])  # running seconds at the start of each attempt

    def seconds(wall_times: np.ndarray) -> np.ndarray:
        attempt = np.searchsorted(starts, wall_times, side="right") - 1
        return before[attempt] + wall_times - starts[attempt]

    return seconds


def planned_steps(hyperparameters: str) -> int | None:
    """The steps a run's flags plan for, from the training script's hyperparameters table (|name|value| rows): its
    iterations of a batch each. None where the table has no such rows (another script's runs)."""
    table = dict(re.findall(r"^\|([^|]+)\|([^|]*)\|$", hyperparameters, re.MULTILINE))
    try:
        return int(table["num_iterations"]) * int(table["batch_size"])
    except (KeyError, ValueError):
        return None


def load_run(info: dict, path: Path, window_steps: int, short_run_fraction: float) -> Run:
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(str(path), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    failures = acc.Tensors(FAILURE_TAG) if FAILURE_TAG in acc.Tags()["tensors"] else []
    hyperparameters = acc.Tensors(HYPERPARAMETERS_TAG) if HYPERPARAMETERS_TAG in acc.Tags()["tensors"] else []
    scalar_events = [event for tag in tags for event in acc.Scalars(tag)]
    empty = not scalar_events
    total_steps = max((event.step for event in scalar_events), default=0)
    wall_times = np.array([event.wall_time for event in scalar_events], dtype=np.float64)
    running_seconds = running_time(path, wall_times)

    def series(tag):
        events = acc.Scalars(tag) if tag in tags else []
        steps = np.array([event.step for event in events], dtype=np.int64)
        values = np.array([event.value for event in events], dtype=np.float64)
        seconds = running_seconds(np.array([event.wall_time for event in events], dtype=np.float64))
        return steps, values, seconds

    steps, values, seconds = series(RETURN_TAG)
    curves = {tag: series(tag)[:2] for tag in TRAINING_TAGS + EVAL_TAGS}

    def window_mean(steps, values):
        in_window = steps > total_steps - window
        return float(values[in_window].mean()) if in_window.any() else math.nan

    if empty:
        window, short, final, final_success, final_any_step_success = math.nan, False, math.nan, math.nan, math.nan
    else:
        window, short = final_return_window(total_steps, window_steps, short_run_fraction)
        final, final_success = window_mean(steps, values), window_mean(*curves[SUCCESS_TAG])
        final_any_step_success = window_mean(*curves[ANY_STEP_SUCCESS_TAG])
    return Run(
        env_id=info["env_id"],
        exp_name=info["exp_name"],
        seed=info["seed"],
        start_time=info["time"],
        path=path,
        empty=empty,
        curves=curves,
        seconds=seconds,
        total_steps=int(total_steps),
        wall_clock=math.nan if empty else float(running_seconds(wall_times).max()),
        final_return=final,
        window=window,
        short=short,
        final_success=final_success,
        final_any_step_success=final_any_step_success,
        failure=failures[-1].tensor_proto.string_val[0].decode() if failures else "",
        planned_steps=planned_steps(hyperparameters[-1].tensor_proto.string_val[0].decode())
        if hyperparameters
        else None,
        summary=info["summary"],
    )


# ---------------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------------


def mean_std(values) -> tuple[float, float, int]:
    """Mean and population std of the finite values, and how many there were."""
    finite = np.array([v for v in values if math.isfinite(v)], dtype=np.float64)
    if not len(finite):
        return math.nan, math.nan, 0
    return float(finite.mean()), float(finite.std()), len(finite)


def format_mean_std(values, digits: int) -> str:
    mean, std, n = mean_std(values)
    if n == 0:
        return "n/a"
    text = f"{mean:.{digits}f}" if len(values) == 1 else f"{mean:.{digits}f} ± {std:.{digits}f}"
    if n < len(values):
        text += f" ({n}/{len(values)} seeds)"
    return text


def markdown_table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]

    def line(cells):
        return (
            "| "
            + " | ".join(
                str(c).rjust(w) if i in right else str(c).ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
            )
            + " |"
        )

    rule = "|" + "|".join(("-" * (w + 1) + ":") if i in right else ("-" * (w + 2)) for i, w in enumerate(widths)) + "|"
    return [line(header), rule] + [line(row) for row in rows]


def steps_cell(runs: list[Run]) -> str:
    steps = sorted({run.total_steps for run in runs})
    if not steps:
        return "n/a"
    return f"{steps[0]}" if len(steps) == 1 else f"{steps[0]}–{steps[-1]}"


def seeds_cell(runs: list[Run]) -> str:
    """How many seeds the means are over, and how many more are listed: in progress, diverged, failed, interrupted,
    shorter."""
    others = [
        (sum(run.status == status for run in runs), status) for status in (IN_PROGRESS, DIVERGED, *ENDED_SHORT, SHORTER)
    ]
    listed = ", ".join(f"+{count} {status}" for count, status in others if count)
    return f"{sum(run.included for run in runs)}" + (f" ({listed})" if listed else "")


def max_eval_cell(runs: list[Run]) -> str:
    """The best mean eval return over seeds and its step, e.g. "5123.40 @ 950272"."""
    curve = common_step_curve(runs, EVAL_TAG)
    if curve is None:
        return "n/a (no common step)" if any(run.logged(EVAL_TAG) for run in runs) else "n/a"
    steps, mean, _, n = curve
    best = int(np.argmax(mean))
    text = f"{mean[best]:.2f} @ {steps[best]}"
    if n < len(runs):
        text += f" ({n}/{len(runs)} seeds)"
    return text


def filters_text(args: ReportArgs) -> str:
    """ ", exp name `a`, `b`, seed 1, 2" for the filters given; "" for none."""
    filters = [("exp name", args.exp_name), ("env id", args.env_id), ("seed", args.seed)]
    return "".join(f", {label} {', '.join(f'`{value}`' for value in values)}" for label, values in filters if values)


def render_comparison(args: ReportArgs, comparison: list[str]) -> str:
    """The report of --finals: the comparison across tasks alone."""
    read = ", ".join(f"`{path}`" for path in args.finals)
    lines = ["# Comparison across tasks", "", f"Per-run finals read from {read}{filters_text(args)}.", ""]
    lines += comparison[2:] if comparison else ["No task to compare: see stderr."]  # [2:]: no second heading
    return "\n".join(lines).rstrip() + "\n"


def render_markdown(
    groups: dict[tuple[str, str], list[Run]], args, plots: dict[str, list[str]], comparison: list[str]
) -> str:
    any_short = any(run.short for runs in groups.values() for run in runs)
    with_success = any(run.logged(SUCCESS_TAG) for runs in groups.values() for run in runs)
    with_any_step = any(run.logged(ANY_STEP_SUCCESS_TAG) for runs in groups.values() for run in runs)
    window = f"{args.window_steps:,}"
    lines = [
        "# Benchmark",
        "",
        f"Runs read from `{args.runs_dir}`{filters_text(args)}.",
        "",
        f"**Final return**: per run, the mean of `{RETURN_TAG}` over the last {window} environment steps"
        + (
            f"; runs shorter than {window} steps (marked †) use the last {args.short_run_fraction:.0%} of the run instead"
            if any_short
            else ""
        )
        + f". **Max eval return**: the highest mean over seeds of `{EVAL_TAG}` (the mean action's return), "
        "taken over the steps every seed evaluated, @ that step. "
        "**Wall-clock**: last event minus first event of the run, in seconds; of a resumed run, the time its "
        "attempts ran (the pauses between them left out). "
        + (
            f"**Final success**: the mean of `{SUCCESS_TAG}` over the same window (tasks that report success): "
            "an episode succeeded if its last step did"
            + (
                f"; **any step**: the same of `{ANY_STEP_SUCCESS_TAG}`, if one of its steps did. "
                if with_any_step
                else ". "
            )
            if with_success
            else ""
        )
        + "Mean ± std (population, ddof=0) over seeds; one seed: its value.",
        "",
    ]
    rows = []
    for (env_id, exp_name), runs in sorted(groups.items()):
        logged = [run for run in runs if run.included]
        mark = " †" if any(run.short for run in logged) else ""
        successes = [run.final_success for run in logged if not math.isnan(run.final_success)]
        any_step = [run.final_any_step_success for run in logged if not math.isnan(run.final_any_step_success)]
        row = [env_id, exp_name, seeds_cell(runs), steps_cell(logged)]
        row += [format_mean_std([run.final_return for run in logged], 2) + mark]
        row += [format_mean_std(successes, 2) if successes else "-"] if with_success else []
        row += [format_mean_std(any_step, 2) if any_step else "-"] if with_any_step else []
        row += [max_eval_cell(logged), format_mean_std([run.wall_clock for run in logged], 1)]
        rows.append(row)
    header = ["Environment", "Experiment", "Seeds", "Steps", "Final return"]
    header += ["Final success"] if with_success else []
    header += ["Any step"] if with_any_step else []
    header += ["Max eval return", "Wall-clock [s]"]
    lines += markdown_table(header, rows, right=set(range(2, len(header))))
    if comparison:
        lines += ["", *comparison]

    lines += [
        "",
        "## Runs",
        "",
        (
            f"**Status**: `{INCLUDED}` in the means above, or `{IN_PROGRESS}`: fewer steps than the longest run "
            f"of its experiment or than its flags plan (or none yet), left out, or `{DIVERGED}`: stopped at a non-finite value, left out "
            "(the comparison across tasks scores it by the policy it kept), "
            "or `failed` or `interrupted`: how its summary.json says it stopped early, left out, "
            f"or `{SHORTER}`: it ended with fewer steps than the longest run of its experiment, left out. "
            f"**Last eval**: the run's last `{EVAL_TAG}`. The same rows, with each run's eval at max, are in "
            "`runs.csv`."
        ),
        "",
    ]
    rows = []
    for (env_id, exp_name), runs in sorted(groups.items()):
        for run in runs:
            if run.empty:
                numbers = ["-"] * 5
            else:
                numbers = [
                    str(run.total_steps),
                    f"{run.window:g}",
                    "n/a" if math.isnan(run.final_return) else f"{run.final_return:.2f}",
                    f"{run.curves[EVAL_TAG][1][-1]:.2f}" if run.logged(EVAL_TAG) else "n/a",
                    f"{run.wall_clock:.1f}",
                ]
            rows.append([env_id, exp_name, str(run.seed), run.status, *numbers, f"`{run.path.name}`"])
    header = ["Environment", "Experiment", "Seed", "Status", "Steps", "Window [steps]", "Final return", "Last eval"]
    header += ["Wall-clock [s]", "Run"]
    lines += markdown_table(header, rows, right={2, 4, 5, 6, 7, 8})

    if plots:
        lines += ["", "## Learning curves", "", "The numbers behind them: `curves.csv`.", ""]
        for env_id, files in sorted(plots.items()):
            for file in files:  # alt text from the file name: "Hopper-v4: return vs steps", ..., "eval vs steps"
                lines.append(f"![{env_id}: {file[len(env_id) + 1 : -len('.png')].replace('_', ' ')}]({file})")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------------------------------------------
# Learning curves
# ---------------------------------------------------------------------------------------------------


def mean_curve(xs: list[np.ndarray], ys: list[np.ndarray], points: int):
    """Interpolate each seed's curve onto a common grid over the x range all seeds cover; mean and std."""
    curves = [(x, y) for x, y in zip(xs, ys) if len(x)]
    if not curves:
        return None
    lo = max(x[0] for x, _ in curves)
    hi = min(x[-1] for x, _ in curves)
    grid = np.linspace(lo, hi, points) if hi > lo else np.array([hi])
    values = np.stack([np.interp(grid, x, y) for x, y in curves])
    return grid, values.mean(axis=0), values.std(axis=0), len(curves)


def common_step_curve(runs: list[Run], tag: str):
    """Mean and std over the seeds that logged `tag` at the steps all of them logged it; None if there are none.

    Every seed of a configuration evaluates at the same steps, so no interpolation is needed; a step that some
    seed has not reached yet (a sweep in progress) is left out rather than averaged over fewer seeds.
    """
    evaluated = [run for run in runs if run.logged(tag)]
    if not evaluated:
        return None
    steps = sorted(set.intersection(*(set(run.curves[tag][0].tolist()) for run in evaluated)))
    if not steps:
        return None
    by_step = [dict(zip(*(array.tolist() for array in run.curves[tag]))) for run in evaluated]
    values = np.array([[returns[step] for step in steps] for returns in by_step])  # (seeds, steps)
    return np.array(steps), values.mean(axis=0), values.std(axis=0), len(evaluated)


def training_curve(runs: list[Run], tag: str, grid_points: int):
    """Mean and std over seeds of `tag` against environment steps, on the common grid; None if none logged it."""
    steps = [run.curves[tag][0].astype(np.float64) for run in runs]
    return mean_curve(steps, [run.curves[tag][1] for run in runs], grid_points)


def group_curves(runs: list[Run], grid_points: int) -> dict[str, tuple]:
    """Every curve the group logged: tag -> (steps, mean, std, seeds), as plotted and as written to curves.csv."""
    curves = {tag: training_curve(runs, tag, grid_points) for tag in TRAINING_TAGS}
    curves |= {tag: common_step_curve(runs, tag) for tag in EVAL_TAGS}
    return {tag: curve for tag, curve in curves.items() if curve is not None}


def time_unit(max_seconds: float) -> tuple[float, str]:
    if max_seconds >= 2 * 3600:
        return 3600.0, "h"
    if max_seconds >= 2 * 60:
        return 60.0, "min"
    return 1.0, "s"


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    with open(path, "rb") as f:
        header = f.read(24)
    if header[:8] != b"\x89PNG\r\n\x1a\n" or header[12:16] != b"IHDR":
        raise ValueError(f"{path} is not a PNG")
    return struct.unpack(">II", header[16:24])


def pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, also where there is no display
    import matplotlib.pyplot as plt

    return plt


def new_figure(plt):
    return plt.subplots(figsize=(PNG_SIZE[0] / 100, PNG_SIZE[1] / 100), dpi=100)


def save_figure(plt, fig, ax, title: str, path: Path) -> str:
    """The house look (small type, a light grid, a legend), saved at PNG_SIZE; returns the file name."""
    ax.set_title(title, fontsize=10)
    ax.xaxis.label.set_fontsize(8)
    ax.yaxis.label.set_fontsize(8)
    ax.tick_params(labelsize=7)
    ax.xaxis.get_offset_text().set_fontsize(7)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=100)  # no bbox_inches="tight": it would change the size
    plt.close(fig)
    if png_size(path) != PNG_SIZE:
        raise RuntimeError(f"{path} is {png_size(path)} pixels, expected {PNG_SIZE}")
    return path.name


def plot_env(env_id: str, groups: dict[str, list[Run]], out_dir: Path, grid_points: int) -> list[str]:
    """The PNGs of one env id, from the runs that logged something; returns their file names."""
    plt = pyplot()
    scale, unit = time_unit(
        max((run.seconds[-1] for runs in groups.values() for run in runs if len(run.seconds)), default=0.0)
    )

    def return_vs_steps(runs):
        return training_curve(runs, RETURN_TAG, grid_points)

    def return_vs_time(runs):
        return mean_curve(
            [run.seconds / scale for run in runs], [run.curves[RETURN_TAG][1] for run in runs], grid_points
        )

    def eval_vs_steps(runs):
        return common_step_curve(runs, EVAL_TAG)

    # (file name suffix, x label, y label, per exp name's runs -> (x, mean, std, seeds) or None)
    plots = [
        ("return_vs_steps", "environment steps", "episodic return", return_vs_steps),
        ("return_vs_time", f"wall-clock time [{unit}]", "episodic return", return_vs_time),
    ]
    if any(run.logged(EVAL_TAG) for runs in groups.values() for run in runs):
        plots.append(("eval_vs_steps", "environment steps", "eval episodic return (mean action)", eval_vs_steps))

    files = []
    for suffix, xlabel, ylabel, curve_of in plots:
        fig, ax = new_figure(plt)
        for exp_name, runs in sorted(groups.items()):
            curve = curve_of(runs)
            if curve is None:
                continue
            grid, mean, std, n = curve
            (line,) = ax.plot(
                grid,
                mean,
                lw=1.5,
                marker="o" if len(grid) == 1 else None,
                label=f"{exp_name} ({n} seed{'s' * (n != 1)})",
            )
            ax.fill_between(grid, mean - std, mean + std, color=line.get_color(), alpha=0.25, lw=0)
        ax.set_xlim(left=0)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        files.append(save_figure(plt, fig, ax, env_id, out_dir / f"{env_id}_{suffix}.png"))
    return files


# ---------------------------------------------------------------------------------------------------
# CSV: the numbers behind the tables and the curves
# ---------------------------------------------------------------------------------------------------


def csv_cell(value) -> str:
    """Floats at full precision (a reader gets the numbers the report computed with), nan as an empty cell."""
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return str(value)


def write_csv(path: Path, header: list[str], rows) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows([csv_cell(value) for value in row] for row in rows)


def runs_csv_rows(groups: dict[tuple[str, str], list[Run]]):
    """The per-run table, one row per run in RUNS_CSV_COLUMNS, with each run's eval at max."""
    for (env_id, exp_name), runs in sorted(groups.items()):
        for run in runs:
            last_eval = float(run.curves[EVAL_TAG][1][-1]) if run.logged(EVAL_TAG) else math.nan
            yield [
                env_id,
                exp_name,
                run.seed,
                run.status,
                run.total_steps,
                run.window,
                run.final_return,
                run.eval_at_max,
                last_eval,
                run.final_success,
                run.final_any_step_success,
                run.wall_clock,
                run.path.name,
            ]


def curves_csv_rows(groups: dict[tuple[str, str], list[Run]], grid_points: int):
    """Every point of every group's curves: env id, exp name, tag, step, mean, std, seeds."""
    for (env_id, exp_name), runs in sorted(groups.items()):
        logged = [run for run in runs if run.included]
        for tag, (steps, mean, std, seeds) in group_curves(logged, grid_points).items():
            for step, m, s in zip(steps, mean, std):
                yield [env_id, exp_name, tag, step.item(), float(m), float(s), seeds]


def number(cell: str) -> float:
    return float(cell) if cell.strip() else math.nan


def read_finals(path: Path, args: ReportArgs) -> list[Final]:
    """The runs of a per-run CSV that the comparison scores (status included or ok, or none, and diverged: with a
    line on stderr) and that pass the filters; rows of another `status` are skipped, of an unknown one refused."""
    required = ["env_id", "exp_name", "seed", "final_return"]
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [column for column in required if column not in (reader.fieldnames or [])]
            if missing:
                raise BadInput(f"{path} has no column {', '.join(missing)}")
            rows = list(reader)
    except UnicodeDecodeError:
        raise BadInput(f"{path} is not a text CSV (not UTF-8)") from None
    finals = []
    for line, row in enumerate(rows, start=2):  # line 1 is the header
        if any(row[column] is None for column in required):  # DictReader fills a short row's cells with None
            raise BadInput(f"{path}, line {line}: fewer cells than the header has columns")
        status = row.get("status") or INCLUDED
        status = INCLUDED if status == "ok" else status  # summary.json's word for a run that ended
        if status not in (INCLUDED, DIVERGED, IN_PROGRESS, *ENDED_SHORT, SHORTER):
            statuses = ", ".join((INCLUDED, "ok", DIVERGED, IN_PROGRESS, *ENDED_SHORT, SHORTER))
            raise BadInput(f"{path}, line {line}: status {status!r} is none of {statuses}")
        if status not in (INCLUDED, DIVERGED):
            continue
        try:
            final = Final(
                env_id=row["env_id"],
                exp_name=row["exp_name"],
                seed=int(row["seed"]),
                final_return=number(row["final_return"]),
                eval_at_max=number(row.get("eval_at_max") or ""),
                final_success=number(row.get("final_success") or ""),
                final_any_step_success=number(row.get("final_any_step_success") or ""),
                diverged=status == DIVERGED,
            )
        except ValueError as error:
            raise BadInput(f"{path}, line {line}: {error}") from None
        if not selected(final._asdict(), args):
            continue
        if status == DIVERGED:
            where = f"{final.env_id} `{final.exp_name}` seed {final.seed} ({path}, line {line})"
            print(f"report.py: {where} diverged: scored by what it logged before", file=sys.stderr)
        finals.append(final)
    return finals


def read_all_finals(paths: list[Path], args: ReportArgs) -> list[Final]:
    """read_finals of each CSV; a run found twice (in two files, or twice in one) is an error, as it would
    count twice."""
    finals, where = [], {}
    for path in paths:
        for final in read_finals(path, args):
            key = (final.env_id, final.exp_name, final.seed)
            if key in where:
                twice = f"twice in {path}" if where[key] == path else f"in both {where[key]} and {path}"
                raise BadInput(f"{final.env_id} `{final.exp_name}` seed {final.seed} is {twice}")
            where[key] = path
            finals.append(final)
    return finals


# ---------------------------------------------------------------------------------------------------
# Comparison across tasks
# ---------------------------------------------------------------------------------------------------


class BadInput(Exception):
    """Input the report cannot use: one line on stderr, exit status 1."""


def note(message: str) -> None:
    print(f"report.py: {message}", file=sys.stderr)


def reference_figures(finals: list[Final], args: ReportArgs) -> Reference:
    """What each task's scores are normalised by, with a description of it for the report."""
    if args.metric != "return":
        return Reference("1, a success rate as it is", {final.env_id: 1.0 for final in finals}, {})
    if args.baseline is None:
        return REFERENCES[args.reference]
    returns = defaultdict(list)
    for final in finals:
        if final.exp_name == args.baseline and math.isfinite(final.final_return) and not final.diverged:
            returns[final.env_id].append(final.final_return)
    if not returns:
        raise BadInput(f"--baseline {args.baseline}: no final return of that exp name")
    means = {task: float(np.mean(v)) for task, v in returns.items()}
    return Reference(f"the mean final return of `{args.baseline}`", means, {})


def compared_tasks(finals: list[Final], experiments: list[str], reference: Reference, score: str) -> list[str]:
    """The tasks with a reference figure above their zero that every experiment has a `score` on."""
    tasks = []
    for task in sorted({final.env_id for final in finals}):
        ran = {final.exp_name for final in finals if final.env_id == task and math.isfinite(getattr(final, score))}
        missing = [exp_name for exp_name in experiments if exp_name not in ran]
        zero = reference.zeros.get(task, 0.0)
        if task not in reference.figures:
            note(f"the comparison across tasks leaves out {task}: no reference figure")
        elif not reference.figures[task] > zero:
            # Dividing by a figure at or below the zero would rank the worse runs higher (or divide by zero).
            note(
                f"the comparison across tasks leaves out {task}: its reference {reference.figures[task]:g} is not "
                f"above its zero {zero:g}, so its scores would rank runs backwards"
            )
        elif missing:
            note(f"the comparison across tasks leaves out {task}: no {score.replace('_', ' ')} of {', '.join(missing)}")
        else:
            tasks.append(task)
    return tasks


def seed_ranges(seeds: list[int]) -> str:
    """[1, 2, 3, 5, 7, 8] -> "1-3, 5, 7-8"."""
    ranges: list[list[int]] = []
    for seed in sorted(seeds):
        if ranges and seed == ranges[-1][1] + 1:
            ranges[-1][1] = seed
        else:
            ranges.append([seed, seed])
    return ", ".join(f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in ranges)


def score_matrix(finals, exp_name, tasks, score, label, reference: Reference) -> tuple[np.ndarray, list[int]] | None:
    """Normalised scores (runs, tasks) of one experiment over the seeds with a value on every task; None if none.

    The stratified bootstrap resamples each task's runs, so it needs as many on each: a seed missing on some task
    is left out everywhere, with a line on stderr.
    """
    values = {}
    for final in finals:
        value = getattr(final, score)
        if final.exp_name == exp_name and final.env_id in tasks and math.isfinite(value):
            values[(final.env_id, final.seed)] = value
    seeds_of = {task: {seed for env_id, seed in values if env_id == task} for task in tasks}
    seeds = sorted(set.intersection(*seeds_of.values()))
    left_out = [f"{task} seeds {seed_ranges(sorted(seeds_of[task] - set(seeds)))}" for task in tasks]
    left_out = [text for text, task in zip(left_out, tasks) if seeds_of[task] - set(seeds)]
    if left_out:
        note(f"{exp_name}, {label}: the comparison uses the seeds on every task; leaves out {'; '.join(left_out)}")
    if not seeds:
        return None
    zero = {task: reference.zeros.get(task, 0.0) for task in tasks}
    scores = [
        [(values[(task, seed)] - zero[task]) / (reference.figures[task] - zero[task]) for task in tasks]
        for seed in seeds
    ]
    return np.array(scores), seeds


def bootstrap(scores, statistic, args: ReportArgs) -> tuple[np.ndarray, np.ndarray]:
    """rliable's point estimate of statistic(scores) and its 95% percentile stratified-bootstrap interval.

    `scores` is one (runs, tasks) array, or a list of two, resampled independently, for a statistic of two
    experiments. The random numbers start afresh from --bootstrap-seed on every call, so an experiment's figures
    do not change when another one joins the report.
    """
    from rliable import library

    # rliable 1.2.0 draws its resampling indices from NumPy's global generator, whatever random_state it is
    # given: seeding that is what makes a report repeat. The caller's global state is put back afterwards.
    state = np.random.get_state()
    np.random.seed(args.bootstrap_seed)
    try:
        points, intervals = library.get_interval_estimates({"scores": scores}, statistic, reps=args.bootstrap_reps)
    finally:
        np.random.set_state(state)
    return np.atleast_1d(points["scores"]), intervals["scores"].reshape(2, -1)  # (statistics,), (low/high, statistics)


def iqm_and_mean(scores: np.ndarray) -> np.ndarray:
    from rliable import metrics

    return np.array([metrics.aggregate_iqm(scores), metrics.aggregate_mean(scores)])


def probability_of_improvement(scores_x: np.ndarray, scores_y: np.ndarray) -> np.ndarray:
    from rliable import metrics

    return np.array([metrics.probability_of_improvement(scores_x, scores_y)])


def ci_cell(point: float, interval: np.ndarray) -> str:
    return f"{point:.2f} [{interval[0]:.2f}, {interval[1]:.2f}]"


def against_control(finals: list[Final], control: str) -> list[str]:
    """The Markdown of --against: per task, each experiment's mean final return minus the control's, in standard
    errors of the control's mean (its population std / sqrt(seeds)), and the tasks where it is more than one below."""
    returns: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)  # a seed once, as in the comparison
    for final in finals:
        if math.isfinite(final.final_return) and not final.diverged:  # the means of the per-task tables
            returns[(final.env_id, final.exp_name)][final.seed] = final.final_return
    tasks = sorted({task for task, exp_name in returns if exp_name == control})
    if not tasks:
        raise BadInput(f"--against {control}: no final return of that exp name")
    others = sorted({final.exp_name for final in finals} - {control})  # one whose every run diverged: n/a
    for task in sorted({task for task, _ in returns} - set(tasks)):
        note(f"--against {control} leaves out {task}: no final return of {control}")
    rows, below, measured = [], defaultdict(list), defaultdict(int)
    for task in tasks:
        mean, std, n = mean_std(returns[(task, control)].values())
        se = std / math.sqrt(n)
        row = [task, f"{mean:.2f} ± {se:.2f} ({n})"]
        for exp_name in others:
            values = list(returns.get((task, exp_name), {}).values())
            if not values:
                row.append("n/a")
                continue
            other = float(np.mean(values))
            difference = other - mean
            # Seeds that agree can leave a std of rounding error (np.std([5.4] * 3) is 8.9e-16), not a scale.
            if se > 1e-9 * max(1.0, abs(mean)):
                in_se = f"{round(difference / se, 1) + 0.0:+.1f} SE"  # + 0.0: no "-0.0"
                measured[exp_name] += 1
                if difference < -se:
                    below[exp_name].append(task)
            else:  # one seed, or seeds that agree: no standard error to measure by
                in_se = f"{round(difference, 2) + 0.0:+.2f}, no SE"
            row.append(f"{other:.2f} ({in_se}, {len(values)})")
        rows.append(row)
    lines = [
        "",
        (
            f"**Against `{control}`**: per task, the mean final return over seeds (in brackets: minus `{control}`'s "
            f"mean, in standard errors of that mean, its population std / sqrt(seeds); and the seeds), all tasks, "
            "with or without a reference figure."
        ),
        "",
    ]
    lines += markdown_table(
        ["Task", f"{control}: mean ± SE (seeds)", *others], rows, right=set(range(1, len(others) + 2))
    )
    lines.append("")
    for exp_name in others:
        tasks_below = f": {', '.join(below[exp_name])}" if below[exp_name] else ""
        lines.append(
            f"- `{exp_name}`: more than one SE below `{control}` on {len(below[exp_name])} of the "
            f"{measured[exp_name]} tasks with an SE{tasks_below}"
        )
    return lines


def compare(finals: list[Final], args: ReportArgs) -> tuple[list[str], dict[str, np.ndarray]]:
    """The Markdown of the comparison across tasks, and each experiment's scores (runs, tasks) of the first of
    --metric's scores (the normalised final returns, or the final success rates).

    Empty when no task can be compared.
    """
    scores_of = SCORES[args.metric]
    first = next(iter(scores_of))
    reference = reference_figures(finals, args)
    experiments = sorted({final.exp_name for final in finals})
    against = against_control(finals, args.against) if args.against else []
    tasks = compared_tasks(finals, experiments, reference, first)
    if not tasks:
        return (["## Across tasks", *against] if against else []), {}
    matrices: dict[str, dict[str, np.ndarray]] = {score: {} for score in scores_of}
    iqms: dict[str, dict[str, float]] = {score: {} for score in scores_of}
    rows = []
    for score, label in scores_of.items():
        for exp_name in experiments:
            found = score_matrix(finals, exp_name, tasks, score, label, reference)
            if found is None:
                continue
            scores, seeds = found
            point, interval = bootstrap(scores, iqm_and_mean, args)
            matrices[score][exp_name], iqms[score][exp_name] = scores, point[0]
            cells = [ci_cell(point[i], interval[:, i]) for i in range(2)]
            rows.append([exp_name, label, seed_ranges(seeds), *cells])
    pairs = []
    for score, label in scores_of.items():
        for a, b in combinations(sorted(matrices[score]), 2):
            x, y = (a, b) if iqms[score][a] >= iqms[score][b] else (b, a)
            point, interval = bootstrap([matrices[score][x], matrices[score][y]], probability_of_improvement, args)
            pairs.append([x, y, label, ci_cell(point[0], interval[:, 0])])

    figures = ", ".join(
        f"{task} {reference.zeros[task]:g} to {reference.figures[task]:g}"
        if task in reference.zeros
        else f"{task} {reference.figures[task]:g}"
        for task in tasks
    )
    eval_part = (
        "; **eval at max**: the same for the run's eval return at the step where its experiment's mean eval curve peaks"
        if matrices.get("eval_at_max")
        else ""
    )
    if args.metric == "return":
        score_text = (
            f"**Normalised score**: per run, (final return - zero) / (reference - zero) on its task, the reference "
            f"being {reference.description} ({figures}; zero is 0 where only the reference is given){eval_part}."
        )
    else:
        at = "at any step of the episode" if args.metric == "any-step-success" else "at the episode's last step"
        score_text = (
            f"**Score**: per run, its {scores_of[first]} rate (success {at}), not normalised ({', '.join(tasks)})."
        )
    lines = [
        "## Across tasks",
        "",
        (
            f"{score_text} Per experiment, over the seeds it has on every one of these tasks: the **IQM** "
            "(interquartile mean, the mean of the middle 50% of all run x task scores) and the mean, each with its "
            f"95% confidence interval [low, high] (percentile stratified bootstrap, {args.bootstrap_reps} resamples "
            f"of the runs within each task, seed {args.bootstrap_seed}; `rliable`, after Agarwal et al., NeurIPS "
            "2021)."
            + (
                " **One seed**: with one run a task, resampling the runs changes nothing, so these intervals have no "
                "width: they say nothing of the spread between seeds."
                if any(len(scores) == 1 for by_exp in matrices.values() for scores in by_exp.values())
                else ""
            )
        ),
        "",
    ]
    lines += markdown_table(["Experiment", "Score", "Seeds", "IQM [95% CI]", "Mean [95% CI]"], rows, right={3, 4})
    if pairs:
        lines += [
            "",
            (
                "**P(X > Y)**: the probability of improvement, the chance that a run of X scores above a run of Y on "
                "the same task (ties count half), averaged over the tasks, with its 95% CI; each pair once, the one "
                "with the higher IQM as X."
            ),
            "",
        ]
        lines += markdown_table(["X", "Y", "Score", "P(X > Y) [95% CI]"], pairs, right={3})
    return lines + against, matrices[first]


def plot_profile(matrices: dict[str, np.ndarray], out_dir: Path, args: ReportArgs) -> str:
    """The performance profile of the scores (the normalised final returns, or the final success rates), with
    95% CI bands; returns its file name."""
    plt = pyplot()
    from rliable import library, plot_utils

    score = "normalised final return" if args.metric == "return" else next(iter(SCORES[args.metric].values()))
    everything = np.concatenate([scores.ravel() for scores in matrices.values()])
    taus = np.linspace(min(0.0, everything.min()), max(1.0, everything.max()), 101)
    profiles, bands = {}, {}
    for exp_name, scores in sorted(matrices.items()):
        profiles[exp_name], bands[exp_name] = bootstrap(scores, lambda s: library.score_distributions(s, taus), args)
    fig, ax = new_figure(plt)
    plot_utils.plot_performance_profiles(
        profiles,
        taus,
        performance_profile_cis=bands,
        ax=ax,
        xlabel=f"{score} τ",
        ylabel="fraction of runs above τ",
    )
    return save_figure(plt, fig, ax, "performance profile", out_dir / "performance_profile.png")


# ---------------------------------------------------------------------------------------------------


def training_now(path: Path) -> bool:
    """A training process holds the run directory's lock (--run-dir, as benchmark.sh runs it): the run is in
    progress, even where it is the only run of its group, so that no longer run shows it behind."""
    try:
        with open(path / ".lock", "rb") as lock:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)  # released on closing
    except FileNotFoundError:
        return False
    except BlockingIOError:
        return True
    return False


def load_groups(args: ReportArgs) -> dict[tuple[str, str], list[Run]]:
    """The runs of RUNS_DIR by (env id, exp name), with their status and eval at max."""
    found = find_run_dirs(args.runs_dir, args)
    if not found:
        filters = " matching the filters" if filters_text(args) else ""
        raise BadInput(f"no run directories {RUN_DIR_TEXT} with event files{filters} in {args.runs_dir}")
    groups: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for info, path in found:
        run = load_run(info, path, args.window_steps, args.short_run_fraction)
        groups[(run.env_id, run.exp_name)].append(run)
    for runs in groups.values():
        longest = max(run.total_steps for run in runs)
        for run in runs:
            ended = run.summary.get("status")  # how the run ended, where it says so; else from its events
            if training_now(run.path):  # whatever an earlier attempt's summary says
                run.status = IN_PROGRESS
            elif ended in ENDED_SHORT + (DIVERGED,) or (run.failure and not ended):
                run.status = ended or DIVERGED
                why = run.failure or run.summary.get("detail")
                print(f"report.py: {run.path} {run.status} ({why}): left out of the means", file=sys.stderr)
            elif ended == "ok" and run.total_steps < longest:
                run.status = SHORTER
                print(
                    f"report.py: {run.path} ended at {run.total_steps} steps, below its group's {longest} (another "
                    "--total-timesteps under the same exp name?): left out of the means",
                    file=sys.stderr,
                )
            elif run.empty or run.total_steps < longest:
                run.status = IN_PROGRESS
            elif not ended and run.planned_steps and run.total_steps < run.planned_steps:
                # Killed (SIGKILL, out of memory, a lost node) before its end, with no summary: not a result yet,
                # though no other run of its group is longer. benchmark.sh resumes it.
                run.status = IN_PROGRESS
        logged = [run for run in runs if run.included]
        curve = common_step_curve(logged, EVAL_TAG)
        best_step = None if curve is None else curve[0][np.argmax(curve[1])]
        for run in logged:
            steps, values = run.curves[EVAL_TAG]
            run.eval_at_max = float(values[steps == best_step][0]) if best_step in steps else math.nan
        for run in runs:  # a diverged run: the policy it kept, evaluated at the best step or, short of it, last
            steps, values = run.curves[EVAL_TAG]
            if run.status == DIVERGED and len(steps):
                run.eval_at_max = float(values[steps == best_step][0] if best_step in steps else values[-1])
            returns = run.curves[RETURN_TAG][1]
            if run.status == DIVERGED and math.isnan(run.final_return) and len(returns):
                run.final_return = float(returns[-1])  # no episode ended in its window: its last one
    return groups


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        if not args.finals:
            groups = load_groups(args)
            finals = [
                Final(
                    run.env_id,
                    run.exp_name,
                    run.seed,
                    run.final_return,
                    run.eval_at_max,
                    run.final_success,
                    run.final_any_step_success,
                    diverged=run.status == DIVERGED,
                )
                for runs in groups.values()
                for run in runs
                if run.included or run.status == DIVERGED  # a diverged run is scored by the policy it kept
            ]
        else:
            finals = read_all_finals(args.finals, args)
            if not finals:
                files = ", ".join(map(str, args.finals))
                raise BadInput(f"no included run{' matching the filters' if filters_text(args) else ''} in {files}")
        comparison, matrices = compare(finals, args)
    except BadInput as error:
        print(f"report.py: error: {error}", file=sys.stderr)
        return 1

    args.out_dir.mkdir(parents=True, exist_ok=True)
    written = [args.markdown]
    if matrices and args.plots:
        profile = plot_profile(matrices, args.out_dir, args)
        comparison += [
            "",
            f"![performance profile: the fraction of runs above each score]({profile})",
        ]
        written.append(profile)
    if not args.finals:
        plots: dict[str, list[str]] = {}
        if args.plots:
            by_env: dict[str, dict[str, list[Run]]] = defaultdict(dict)
            for (env_id, exp_name), runs in groups.items():
                logged = [run for run in runs if run.included]
                if logged:  # an env id whose runs are all still empty gets no (empty) plots
                    by_env[env_id][exp_name] = logged
            for env_id, env_groups in sorted(by_env.items()):
                plots[env_id] = plot_env(env_id, env_groups, args.out_dir, args.grid_points)
        write_csv(args.out_dir / "runs.csv", RUNS_CSV_COLUMNS, runs_csv_rows(groups))
        curves_header = ["env_id", "exp_name", "tag", "step", "mean", "std", "seeds"]
        write_csv(args.out_dir / "curves.csv", curves_header, curves_csv_rows(groups, args.grid_points))
        markdown = render_markdown(groups, args, plots, comparison)
        written += [file for files in plots.values() for file in files] + ["runs.csv", "curves.csv"]
    else:
        markdown = render_comparison(args, comparison)
    (args.out_dir / args.markdown).write_text(markdown)
    print(markdown, end="")
    print(f"\nreport.py: wrote {', '.join(str(args.out_dir / name) for name in written)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        try:
            status = main()
        finally:
            sys.stdout.flush()  # now, not at exit: a reader that has gone (`report.py runs | head`) is caught below
    except BrokenPipeError:  # end quietly, as Unix tools do; stdout to devnull, else the flush at exit fails again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 128 + signal.SIGPIPE
    sys.exit(status)
