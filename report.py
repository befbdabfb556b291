"""Summarise a sweep of ppo_continuous_envpool_jax.py runs from their TensorBoard event files.

Reads every run directory `{env_id}__{exp_name}__{seed}__{unix_time}` directly under a runs directory,
groups the runs by (env id, exp name) over seeds, and writes

* a Markdown report (also printed): per (env id, exp name) the final return and the wall-clock time,
  mean ± std over seeds, plus a per-run table;
* learning curves, two 500x300 PNGs per env id: return against environment steps and against
  wall-clock time, a mean line and a shaded ±std band over seeds per exp name.

Definitions
  final return  the mean of the `charts/episodic_return` values logged in the last `--window-steps`
                environment steps of a run (steps > last step - window); a run shorter than the window
                uses its last `--short-run-fraction` instead.
  wall-clock    the wall time of a run's last scalar event minus that of its first event (the event
                file's header, written when the run starts).
  std           population standard deviation over seeds (numpy's default, ddof=0).
  curves        each seed's curve is linearly interpolated onto a common grid spanning the x range
                that all seeds cover; the line is the mean over seeds, the band mean ± std.

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
PNG_SIZE = (500, 300)  # pixels: figsize (5, 3) at dpi 100
RUN_DIR = re.compile(r"^(?P<env_id>[^_].*?)__(?P<exp_name>.+)__(?P<seed>\d+)__(?P<time>\d+)$")


@dataclass
class Run:
    env_id: str
    exp_name: str
    seed: int
    start_time: int  # from the directory name
    path: Path
    steps: np.ndarray  # of the episodic-return events
    returns: np.ndarray
    seconds: np.ndarray  # wall-clock of the episodic-return events, from the run's first event
    total_steps: int  # last step of any scalar
    wall_clock: float  # seconds, last scalar event minus first event
    final_return: float  # nan when no return was logged in the window
    window: float  # steps averaged over for final_return
    short: bool  # the run was shorter than --window-steps


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
            "  -> docs/benchmark.md, docs/<env_id>_return_vs_steps.png, docs/<env_id>_return_vs_time.png"
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
    """Run directories with event files, the latest one of each (env id, exp name, seed)."""
    latest: dict[tuple, tuple[dict, Path]] = {}
    for path in sorted(runs_dir.iterdir()):
        match = RUN_DIR.match(path.name)
        if not path.is_dir() or not match or not any(path.glob("events.out.tfevents.*")):
            continue
        info = match.groupdict()
        info["seed"], info["time"] = int(info["seed"]), int(info["time"])
        if (exp_names and info["exp_name"] not in exp_names) or (env_ids and info["env_id"] not in env_ids):
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
    first_time = acc.FirstEventTimestamp()
    total_steps = max((event.step for event in scalar_events), default=0)
    last_time = max((event.wall_time for event in scalar_events), default=first_time)
    returns = acc.Scalars(RETURN_TAG) if RETURN_TAG in tags else []
    steps = np.array([event.step for event in returns], dtype=np.int64)
    values = np.array([event.value for event in returns], dtype=np.float64)
    seconds = np.array([event.wall_time - first_time for event in returns], dtype=np.float64)

    window, short = final_return_window(total_steps, window_steps, short_run_fraction)
    in_window = steps > total_steps - window
    final = float(values[in_window].mean()) if in_window.any() else math.nan
    return Run(
        env_id=info["env_id"],
        exp_name=info["exp_name"],
        seed=info["seed"],
        start_time=info["time"],
        path=path,
        steps=steps,
        returns=values,
        seconds=seconds,
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
    return f"{steps[0]}" if len(steps) == 1 else f"{steps[0]}–{steps[-1]}"


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
        + ". **Wall-clock**: last event minus first event of the run, in seconds. "
        "Mean ± std (population, ddof=0) over seeds; one seed: its value.",
        "",
    ]
    rows = []
    for (env_id, exp_name), runs in sorted(groups.items()):
        mark = " †" if any(run.short for run in runs) else ""
        rows.append(
            [
                env_id,
                exp_name,
                str(len(runs)),
                steps_cell(runs),
                format_mean_std([run.final_return for run in runs], 2) + mark,
                format_mean_std([run.wall_clock for run in runs], 1),
            ]
        )
    header = ["Environment", "Experiment", "Seeds", "Steps", "Final return", "Wall-clock [s]"]
    lines += markdown_table(header, rows, right={2, 3, 4, 5})

    lines += ["", "## Runs", ""]
    rows = []
    for (env_id, exp_name), runs in sorted(groups.items()):
        for run in runs:
            final = "n/a" if math.isnan(run.final_return) else f"{run.final_return:.2f}"
            rows.append(
                [
                    env_id,
                    exp_name,
                    str(run.seed),
                    str(run.total_steps),
                    f"{run.window:g}",
                    final,
                    f"{run.wall_clock:.1f}",
                    f"`{run.path.name}`",
                ]
            )
    header = ["Environment", "Experiment", "Seed", "Steps", "Window [steps]", "Final return", "Wall-clock [s]", "Run"]
    lines += markdown_table(header, rows, right={2, 3, 4, 5, 6})

    if plots:
        lines += ["", "## Learning curves", ""]
        for env_id, files in sorted(plots.items()):
            lines += [f"![{env_id}: return vs {Path(file).stem.rsplit('_', 1)[-1]}]({file})" for file in files] + [""]
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    for axis in ("steps", "time"):
        fig, ax = plt.subplots(figsize=(PNG_SIZE[0] / 100, PNG_SIZE[1] / 100), dpi=100)
        if axis == "time":
            scale, unit = time_unit(
                max((run.seconds[-1] for runs in groups.values() for run in runs if len(run.seconds)), default=0.0)
            )
        for exp_name, runs in sorted(groups.items()):
            if axis == "steps":
                xs = [run.steps.astype(np.float64) for run in runs]
            else:
                xs = [run.seconds / scale for run in runs]
            curve = mean_curve(xs, [run.returns for run in runs], grid_points)
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
        ax.set_xlabel("environment steps" if axis == "steps" else f"wall-clock time [{unit}]", fontsize=8)
        ax.set_ylabel("episodic return", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.xaxis.get_offset_text().set_fontsize(7)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        name = f"{env_id}_return_vs_{axis}.png"
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

    args.out_dir.mkdir(parents=True, exist_ok=True)
    plots: dict[str, list[str]] = {}
    if not args.no_plots:
        by_env: dict[str, dict[str, list[Run]]] = defaultdict(dict)
        for (env_id, exp_name), runs in groups.items():
            by_env[env_id][exp_name] = runs
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
