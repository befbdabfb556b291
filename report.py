"""Summarise a sweep of ppo_continuous_envpool_jax.py runs from their TensorBoard event files.

Reads every run directory `{env_id}__{exp_name}__{seed}__{unix_time}` directly under a runs directory,
groups the runs by (env id, exp name) over seeds, and writes

* a Markdown report (also printed): per (env id, exp name) the final return, the best evaluation return and
  the wall-clock time, mean ± std over seeds, plus a per-run table;
* learning curves, 500x300 PNGs per env id: return against environment steps and against wall-clock time,
  and, when some run of the env id logged `eval/episodic_return`, the evaluation return against environment
  steps; a mean line and a shaded ±std band over seeds per exp name.

A sweep may still be running: a run that has logged fewer steps than the longest run of its (env id,
exp name), or no scalar at all yet, is listed as "in progress" and counts nowhere else. Other directories
are skipped with a line on stderr, except `logs`, where benchmark.sh keeps the sweeps' logs.

Definitions
  final return  the mean of the `charts/episodic_return` values logged in the last `--window-steps`
                environment steps of a run (steps > last step - window); a run shorter than the window
                uses its last `--short-run-fraction` instead.
  eval return   `eval/episodic_return`: the training script's evaluation of the mean action, averaged over
                several episodes, logged at fixed steps (the same for every seed of a configuration).
  last eval     a run's last eval return.
  max eval return
                per (env id, exp name), the maximum over steps of the mean over seeds of the eval return,
                and the step where it is reached; only steps at which every seed with eval data has a value
                count, so the maximum is that of one curve, not a mix of each seed's best step.
  wall-clock    the wall time of a run's last scalar event minus that of its first event (the event
                file's header, written when the run starts).
  in progress   a run whose last step is below that of the longest run of its (env id, exp name), or
                with no scalar event yet (a run that has just started): listed with what it has logged so
                far, and left out of the means, of the seed counts behind them and of the curves.
  std           population standard deviation over seeds (numpy's default, ddof=0).
  curves        each seed's curve is linearly interpolated onto a common grid spanning the x range
                that all seeds cover; the line is the mean over seeds, the band mean ± std. The eval curve
                needs no interpolation: it is the mean and std at the steps every seed evaluated.

This tool reads the event files only; it does not import the training script.
"""

from __future__ import annotations

import argparse
import math
import re
import struct
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

RETURN_TAG = "charts/episodic_return"
EVAL_TAG = "eval/episodic_return"
PNG_SIZE = (500, 300)  # pixels: figsize (5, 3) at dpi 100
RUN_DIR = re.compile(r"^(?P<env_id>[^_].*?)__(?P<exp_name>.+)__(?P<seed>\d+)__(?P<time>\d+)$")
SWEEP_LOGS = "logs"  # benchmark.sh's runs/logs/<sweep>/: not a run, skipped without a word
IN_PROGRESS = "in progress"


@dataclass
class Run:
    env_id: str
    exp_name: str
    seed: int
    start_time: int  # from the directory name
    path: Path
    empty: bool  # no scalar logged yet: the run has just started
    steps: np.ndarray  # of the episodic-return events
    returns: np.ndarray
    seconds: np.ndarray  # wall-clock of the episodic-return events, from the run's first event
    eval_steps: np.ndarray  # of the eval-return events; empty when the run logged none
    eval_returns: np.ndarray
    total_steps: int  # last step of any scalar
    wall_clock: float  # seconds, last scalar event minus first event; nan when empty
    final_return: float  # nan when no return was logged in the window
    window: float  # steps averaged over for final_return; nan when empty
    short: bool  # the run was shorter than --window-steps
    in_progress: bool = False  # empty, or behind the longest run of its group: in no mean and no curve


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line on stderr, like the training script
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse_args(argv=None) -> argparse.Namespace:
    parser = Parser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "example:\n"
            "  uv run python report.py runs --exp-name ppo_continuous_envpool_jax --out-dir docs\n"
            "  -> docs/benchmark.md, docs/<env_id>_return_vs_steps.png, docs/<env_id>_return_vs_time.png\n"
            "     and, when the runs logged eval/episodic_return, docs/<env_id>_eval_vs_steps.png"
        ),
    )
    parser.add_argument(
        "runs_dir",
        nargs="?",
        default="runs",
        type=Path,
        metavar="RUNS_DIR",
        help="directory of the run directories (default: runs)",
    )
    parser.add_argument("--exp-name", action="append", metavar="NAME", help="only runs of this exp name (repeatable)")
    parser.add_argument("--env-id", action="append", metavar="ID", help="only runs of this env id (repeatable)")
    parser.add_argument(
        "--out-dir",
        type=Path,
        metavar="DIR",
        default=Path("docs"),
        help="where to write the report and the PNGs (default: docs)",
    )
    parser.add_argument(
        "--markdown",
        default="benchmark.md",
        metavar="NAME",
        help="file name of the report in --out-dir (default: benchmark.md)",
    )
    parser.add_argument(
        "--window-steps",
        type=int,
        default=100_000,
        metavar="STEPS",
        help="final return: average over the last this many steps (default: 100000)",
    )
    parser.add_argument(
        "--short-run-fraction",
        type=float,
        default=0.1,
        metavar="FRACTION",
        help="final return of a run shorter than --window-steps: average over this last fraction of it (default: 0.1)",
    )
    parser.add_argument(
        "--grid-points",
        type=int,
        default=200,
        metavar="N",
        help="points of the common grid the seeds' curves are interpolated on (default: 200)",
    )
    parser.add_argument("--no-plots", action="store_true", help="write the Markdown report only")
    args = parser.parse_args(argv)
    if args.window_steps <= 0:
        parser.error(f"--window-steps must be positive, got {args.window_steps}")
    if not 0 < args.short_run_fraction <= 1:
        parser.error(f"--short-run-fraction must be in (0, 1], got {args.short_run_fraction}")
    if args.grid_points < 2:
        parser.error(f"--grid-points must be at least 2, got {args.grid_points}")
    if not args.runs_dir.is_dir():
        parser.error(f"runs directory not found: {args.runs_dir}")
    return args


# ---------------------------------------------------------------------------------------------------
# Reading runs
# ---------------------------------------------------------------------------------------------------


def find_run_dirs(runs_dir: Path, exp_names=None, env_ids=None) -> list[tuple[dict, Path]]:
    """Run directories with event files, the latest one of each (env id, exp name, seed).

    Plain files and benchmark.sh's `logs` folder are passed over silently; any other directory that is not a
    run gets one line on stderr, so that a misnamed run does not vanish from the report unnoticed.
    """
    latest: dict[tuple, tuple[dict, Path]] = {}
    for path in sorted(runs_dir.iterdir()):
        if not path.is_dir() or path.name == SWEEP_LOGS:
            continue
        match = RUN_DIR.match(path.name)
        if not match:
            print(
                f"report.py: skipping {path}: not a run directory {{env_id}}__{{exp_name}}__{{seed}}__{{time}}",
                file=sys.stderr,
            )
            continue
        info = match.groupdict()
        info["seed"], info["time"] = int(info["seed"]), int(info["time"])
        if (exp_names and info["exp_name"] not in exp_names) or (env_ids and info["env_id"] not in env_ids):
            continue
        if not any(path.glob("events.out.tfevents.*")):
            print(f"report.py: skipping {path}: no event file events.out.tfevents.*", file=sys.stderr)
            continue
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


def load_run(info: dict, path: Path, window_steps: int, short_run_fraction: float) -> Run:
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(str(path), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    scalar_events = [event for tag in tags for event in acc.Scalars(tag)]
    empty = not scalar_events
    # A run that has just started may have an event file without even the header, where FirstEventTimestamp
    # raises; with no scalar there is no wall-clock to measure anyway.
    first_time = math.nan if empty else acc.FirstEventTimestamp()
    total_steps = max((event.step for event in scalar_events), default=0)
    last_time = max((event.wall_time for event in scalar_events), default=math.nan)

    def series(tag):
        events = acc.Scalars(tag) if tag in tags else []
        steps = np.array([event.step for event in events], dtype=np.int64)
        values = np.array([event.value for event in events], dtype=np.float64)
        seconds = np.array([event.wall_time - first_time for event in events], dtype=np.float64)
        return steps, values, seconds

    steps, values, seconds = series(RETURN_TAG)
    eval_steps, eval_values, _ = series(EVAL_TAG)

    if empty:
        window, short, final = math.nan, False, math.nan
    else:
        window, short = final_return_window(total_steps, window_steps, short_run_fraction)
        in_window = steps > total_steps - window
        final = float(values[in_window].mean()) if in_window.any() else math.nan
    return Run(
        env_id=info["env_id"],
        exp_name=info["exp_name"],
        seed=info["seed"],
        start_time=info["time"],
        path=path,
        empty=empty,
        steps=steps,
        returns=values,
        seconds=seconds,
        eval_steps=eval_steps,
        eval_returns=eval_values,
        total_steps=int(total_steps),
        wall_clock=float(last_time - first_time),
        final_return=final,
        window=window,
        short=short,
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
    """How many seeds the means are over, and how many more are listed but still in progress."""
    in_progress = sum(run.in_progress for run in runs)
    return f"{len(runs) - in_progress}" + (f" (+{in_progress} in progress)" if in_progress else "")


def max_eval_cell(runs: list[Run]) -> str:
    """The best mean eval return over seeds and its step, e.g. "5123.40 @ 950272"."""
    curve = eval_curve(runs)
    if curve is None:
        return "n/a (no common step)" if any(len(run.eval_steps) for run in runs) else "n/a"
    steps, mean, _, n = curve
    best = int(np.argmax(mean))
    text = f"{mean[best]:.2f} @ {steps[best]}"
    if n < len(runs):
        text += f" ({n}/{len(runs)} seeds)"
    return text


def render_markdown(groups: dict[tuple[str, str], list[Run]], args, plots: dict[str, list[str]]) -> str:
    any_short = any(run.short for runs in groups.values() for run in runs)
    window = f"{args.window_steps:,}"
    lines = [
        "# Benchmark",
        "",
        f"Runs read from `{args.runs_dir}`"
        + (f", exp name {', '.join(f'`{name}`' for name in args.exp_name)}" if args.exp_name else "")
        + ".",
        "",
        f"**Final return**: per run, the mean of `{RETURN_TAG}` over the last {window} environment steps"
        + (
            f"; runs shorter than {window} steps (marked †) use the last {args.short_run_fraction:.0%} of the run instead"
            if any_short
            else ""
        )
        + f". **Max eval return**: the highest mean over seeds of `{EVAL_TAG}` (the mean action's return), "
        "taken over the steps every seed evaluated, @ that step. "
        "**Wall-clock**: last event minus first event of the run, in seconds. "
        "Mean ± std (population, ddof=0) over seeds; one seed: its value.",
        "",
    ]
    rows = []
    for (env_id, exp_name), runs in sorted(groups.items()):
        logged = [run for run in runs if not run.in_progress]
        mark = " †" if any(run.short for run in logged) else ""
        rows.append(
            [
                env_id,
                exp_name,
                seeds_cell(runs),
                steps_cell(logged),
                format_mean_std([run.final_return for run in logged], 2) + mark,
                max_eval_cell(logged),
                format_mean_std([run.wall_clock for run in logged], 1),
            ]
        )
    header = ["Environment", "Experiment", "Seeds", "Steps", "Final return", "Max eval return", "Wall-clock [s]"]
    lines += markdown_table(header, rows, right={2, 3, 4, 5, 6})

    lines += [
        "",
        "## Runs",
        "",
        (
            f"**Status**: `included` in the means above, or `{IN_PROGRESS}`: fewer steps than the longest run "
            "of its experiment (or none yet), left out. "
            f"**Last eval**: the run's last `{EVAL_TAG}`."
        ),
        "",
    ]
    rows = []
    for (env_id, exp_name), runs in sorted(groups.items()):
        for run in runs:
            status = IN_PROGRESS if run.in_progress else "included"
            if run.empty:
                numbers = ["-"] * 5
            else:
                numbers = [
                    str(run.total_steps),
                    f"{run.window:g}",
                    "n/a" if math.isnan(run.final_return) else f"{run.final_return:.2f}",
                    f"{run.eval_returns[-1]:.2f}" if len(run.eval_returns) else "n/a",
                    f"{run.wall_clock:.1f}",
                ]
            rows.append([env_id, exp_name, str(run.seed), status, *numbers, f"`{run.path.name}`"])
    header = ["Environment", "Experiment", "Seed", "Status", "Steps", "Window [steps]", "Final return", "Last eval"]
    header += ["Wall-clock [s]", "Run"]
    lines += markdown_table(header, rows, right={2, 4, 5, 6, 7, 8})

    if plots:
        lines += ["", "## Learning curves", ""]
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


def eval_curve(runs: list[Run]):
    """Mean and std over the seeds with eval data at the steps all of them evaluated; None if there are none.

    Every seed of a configuration evaluates at the same steps, so no interpolation is needed; a step that some
    seed has not reached yet (a sweep in progress) is left out rather than averaged over fewer seeds.
    """
    evaluated = [run for run in runs if len(run.eval_steps)]
    if not evaluated:
        return None
    steps = sorted(set.intersection(*(set(run.eval_steps.tolist()) for run in evaluated)))
    if not steps:
        return None
    by_step = [dict(zip(run.eval_steps.tolist(), run.eval_returns)) for run in evaluated]
    values = np.array([[returns[step] for step in steps] for returns in by_step])  # (seeds, steps)
    return np.array(steps), values.mean(axis=0), values.std(axis=0), len(evaluated)


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


def plot_env(env_id: str, groups: dict[str, list[Run]], out_dir: Path, grid_points: int) -> list[str]:
    """The PNGs of one env id, from the runs that logged something; returns their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scale, unit = time_unit(
        max((run.seconds[-1] for runs in groups.values() for run in runs if len(run.seconds)), default=0.0)
    )

    def return_vs_steps(runs):
        return mean_curve([run.steps.astype(np.float64) for run in runs], [run.returns for run in runs], grid_points)

    def return_vs_time(runs):
        return mean_curve([run.seconds / scale for run in runs], [run.returns for run in runs], grid_points)

    # (file name suffix, x label, y label, per exp name's runs -> (x, mean, std, seeds) or None)
    plots = [
        ("return_vs_steps", "environment steps", "episodic return", return_vs_steps),
        ("return_vs_time", f"wall-clock time [{unit}]", "episodic return", return_vs_time),
    ]
    if any(len(run.eval_steps) for runs in groups.values() for run in runs):
        plots.append(("eval_vs_steps", "environment steps", "eval episodic return (mean action)", eval_curve))

    files = []
    for suffix, xlabel, ylabel, curve_of in plots:
        fig, ax = plt.subplots(figsize=(PNG_SIZE[0] / 100, PNG_SIZE[1] / 100), dpi=100)
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
        ax.set_title(env_id, fontsize=10)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.xaxis.get_offset_text().set_fontsize(7)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        name = f"{env_id}_{suffix}.png"
        fig.savefig(out_dir / name, dpi=100)  # no bbox_inches="tight": it would change the size
        plt.close(fig)
        if png_size(out_dir / name) != PNG_SIZE:
            raise RuntimeError(f"{out_dir / name} is {png_size(out_dir / name)} pixels, expected {PNG_SIZE}")
        files.append(name)
    return files


# ---------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    args = parse_args(argv)
    found = find_run_dirs(args.runs_dir, args.exp_name, args.env_id)
    if not found:
        filters = " matching the filters" if args.exp_name or args.env_id else ""
        print(
            f"report.py: error: no run directories {{env_id}}__{{exp_name}}__{{seed}}__{{time}} with event files{filters} in {args.runs_dir}",
            file=sys.stderr,
        )
        return 1
    groups: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for info, path in found:
        run = load_run(info, path, args.window_steps, args.short_run_fraction)
        groups[(run.env_id, run.exp_name)].append(run)
    for runs in groups.values():
        longest = max(run.total_steps for run in runs)
        for run in runs:
            run.in_progress = run.empty or run.total_steps < longest

    args.out_dir.mkdir(parents=True, exist_ok=True)
    plots: dict[str, list[str]] = {}
    if not args.no_plots:
        by_env: dict[str, dict[str, list[Run]]] = defaultdict(dict)
        for (env_id, exp_name), runs in groups.items():
            logged = [run for run in runs if not run.in_progress]
            if logged:  # an env id whose runs are all still empty gets no (empty) plots
                by_env[env_id][exp_name] = logged
        for env_id, env_groups in sorted(by_env.items()):
            plots[env_id] = plot_env(env_id, env_groups, args.out_dir, args.grid_points)

    markdown = render_markdown(groups, args, plots)
    (args.out_dir / args.markdown).write_text(markdown)
    print(markdown, end="")
    written = [args.markdown] + [file for files in plots.values() for file in files]
    print(f"\nreport.py: wrote {', '.join(str(args.out_dir / name) for name in written)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
