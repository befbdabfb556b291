"""report.py on synthetic event files: a sweep in progress, stray directories, evaluation curves.

The event files are written here with tensorboardX, scalar by scalar with explicit steps, so every number
the report prints can be checked against one worked out by hand. At the end, the report of a real sweep
against its event files read a second way (tests/support.py's parser of the TFRecord framing).
"""

from __future__ import annotations

import argparse
import csv
import fcntl
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread
from tensorboardX import SummaryWriter

import report
from tests.support import REPORT, SWEEP_ENVS, parse_markdown_table, parse_mean_std, reference_run

ENV = "Hopper-v4"


def write_run(runs_dir: Path, name: str, scalars: dict[str, list[tuple[int, float]]]) -> Path:
    """A run directory whose event file holds the header and these (step, value) scalars per tag."""
    writer = SummaryWriter(str(runs_dir / name))
    for tag, points in scalars.items():
        for step, value in points:
            writer.add_scalar(tag, value, step)
    writer.close()
    return runs_dir / name


def run_report(runs_dir: Path, out_dir: Path, capsys, *flags) -> tuple[int, str, str]:
    code = report.main([str(runs_dir), "--out-dir", str(out_dir), *flags])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def group_rows(markdown: str) -> dict[str, dict[str, str]]:
    return {row["Experiment"]: row for row in parse_markdown_table(markdown, ["Environment", "Experiment", "Seeds"])}


def run_rows(markdown: str) -> dict[str, dict[str, str]]:
    return {row["Run"].strip("`"): row for row in parse_markdown_table(markdown, ["Environment", "Experiment", "Seed"])}


# ---------------------------------------------------------------------------------------------------
# A sweep in progress
# ---------------------------------------------------------------------------------------------------


def test_runs_in_progress_are_listed_but_left_out_of_the_means(tmp_path, capsys):
    runs = tmp_path / "runs"
    write_run(runs, f"{ENV}__ppo__1__100", {"charts/episodic_return": [(100, 1.0), (200, 2.0), (300, 3.0), (400, 4.0)]})
    # seed 2 has just started: its event file exists but is still empty
    (runs / f"{ENV}__ppo__2__100").mkdir()
    (runs / f"{ENV}__ppo__2__100" / "events.out.tfevents.100.host").touch()
    # seed 3 got a little further: the header, no scalar yet
    write_run(runs, f"{ENV}__ppo__3__100", {})
    # seed 4 is halfway: its own last-window mean (10.0) must not enter the group's
    write_run(runs, f"{ENV}__ppo__4__100", {"charts/episodic_return": [(100, 10.0), (200, 10.0)]})

    code, markdown, _ = run_report(runs, tmp_path / "out", capsys, "--window-steps", "250")

    assert code == 0
    # the final return is seed 1's alone: steps > 400 - 250 hold the returns 2, 3, 4
    row = group_rows(markdown)["ppo"]
    assert row["Seeds"] == "1 (+3 in progress)"
    assert row["Steps"] == "400"
    assert row["Final return"] == "3.00"  # one seed: no ± and no "(1/3 seeds)"
    rows = run_rows(markdown)
    assert rows[f"{ENV}__ppo__1__100"]["Status"] == "included"
    for seed in (2, 3):
        empty = rows[f"{ENV}__ppo__{seed}__100"]
        assert empty["Status"] == "in progress"
        assert [empty[column] for column in ("Steps", "Final return", "Last eval", "Wall-clock [s]")] == ["-"] * 4
    halfway = rows[f"{ENV}__ppo__4__100"]
    assert halfway["Status"] == "in progress"
    assert (halfway["Steps"], halfway["Final return"]) == ("200", "10.00")  # what it has so far, shown


def test_a_run_whose_training_process_holds_its_lock_is_in_progress_even_alone(tmp_path, capsys):
    runs = tmp_path / "runs"
    write_run(runs, f"{ENV}__ppo__1", {"charts/episodic_return": [(100, 5.0)]})
    (runs / f"{ENV}__ppo__1" / "summary.json").write_text(json.dumps({"status": "interrupted"}))  # an earlier attempt
    with open(runs / f"{ENV}__ppo__1" / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as the training script holds it while it lives
        code, out, _ = run_report(runs, tmp_path / "out", capsys, "--no-plots")
    assert code == 0 and run_rows(out)[f"{ENV}__ppo__1"]["Status"] == "in progress"
    # once the process has gone, its summary.json says how it ended
    code, out, err = run_report(runs, tmp_path / "out", capsys, "--no-plots")
    assert run_rows(out)[f"{ENV}__ppo__1"]["Status"] == "interrupted" and "interrupted" in err


def test_a_diverged_run_is_listed_and_counted_but_left_out_of_the_means(tmp_path, capsys):
    """The training script logs a `failure` text where it stops at a non-finite value (tensorboardX's
    add_text writes the same tag); a run resumed from before it purges it, as TensorBoard would."""
    failure = "training diverged: non-finite losses/v_loss = nan at iteration 3 (global_step 300)"
    runs = tmp_path / "runs"
    write_run(runs, f"{ENV}__ppo__1__100", {"charts/episodic_return": [(100, 1.0), (200, 2.0), (300, 3.0), (400, 4.0)]})
    diverged = runs / f"{ENV}__ppo__2__100"
    writer = SummaryWriter(str(diverged))
    writer.add_scalar("charts/episodic_return", 50.0, 200)
    writer.add_text("failure", failure, 300)
    writer.close()
    write_run(runs, f"{ENV}__ppo__3__100", {"charts/episodic_return": [(100, 7.0), (200, 7.0)]})  # still running
    resumed = runs / f"{ENV}__ppo__4__100"  # diverged at 300, then resumed by hand from its step-200 state
    writer = SummaryWriter(str(resumed))
    writer.add_scalar("charts/episodic_return", 5.0, 200)
    writer.add_text("failure", failure, 300)
    writer.close()
    writer = SummaryWriter(str(resumed), purge_step=201)
    for step in (300, 400):
        writer.add_scalar("charts/episodic_return", 5.0, step)
    writer.close()

    code, markdown, err = run_report(runs, tmp_path / "out", capsys, "--window-steps", "250")

    assert code == 0
    row = group_rows(markdown)["ppo"]
    assert row["Seeds"] == "2 (+1 in progress, +1 diverged)"
    assert row["Final return"] == "4.00 ± 1.00"  # seeds 1 (2, 3, 4) and 4 (5, 5, 5): not seed 2's 50
    statuses = {name: row["Status"] for name, row in run_rows(markdown).items()}
    assert statuses == {
        f"{ENV}__ppo__1__100": "included", f"{ENV}__ppo__2__100": "diverged",
        f"{ENV}__ppo__3__100": "in progress", f"{ENV}__ppo__4__100": "included",
    }  # fmt: skip
    (line,) = [line for line in err.splitlines() if " diverged (" in line]  # seed 2's alone
    assert line == f"report.py: {diverged} diverged ({failure}): left out of the means"
    with open(tmp_path / "out" / "runs.csv", newline="") as f:
        assert {row["seed"]: row["status"] for row in csv.DictReader(f)} == {
            "1": "included", "2": "diverged", "3": "in progress", "4": "included",
        }  # fmt: skip
    # Its runs.csv, read back, says so too.
    assert report.main(["--finals", str(tmp_path / "out" / "runs.csv"), "--out-dir", str(tmp_path / "cmp")]) == 0
    assert (
        f"{ENV} `ppo` seed 2 ({tmp_path / 'out' / 'runs.csv'}, line 3) diverged: scored by" in capsys.readouterr().err
    )


def test_the_wall_clock_of_a_resumed_run_leaves_out_its_pause_and_what_it_superseded(tmp_path, capsys, monkeypatch):
    """Attempt 1 opens its event file at T and logs steps 100, 200, 300 at T+10, T+20, T+30; killed, it is resumed
    from its step-200 checkpoint at T+5000 (a pause) and logs 300 and 400 at 10 and 20 s from then. By hand: attempt
    1 ran 20 s to its last event kept (step 200; its step 300 is superseded), so the return events are at 10, 20,
    30 and 40 s of running time and the wall-clock is 40 s, as summary.json counts it; not 5020 s."""
    start = 1_700_000_000.0
    clock = [start]  # the event files' headers take the time the writer opens them
    monkeypatch.setattr(time, "time", lambda: clock[0])
    run_dir = tmp_path / "runs" / f"{ENV}__ppo__1"
    writer = SummaryWriter(str(run_dir))
    for step, after in ((100, 10), (200, 20), (300, 30)):
        writer.add_scalar("charts/episodic_return", 1.0, step, walltime=start + after)
    writer.close()
    clock[0] = start + 5000
    writer = SummaryWriter(str(run_dir), purge_step=201)
    for step, after in ((300, 10), (400, 20)):
        writer.add_scalar("charts/episodic_return", 2.0, step, walltime=start + 5000 + after)
    writer.close()
    monkeypatch.undo()

    info = {"env_id": ENV, "exp_name": "ppo", "seed": 1, "time": int(start), "summary": {}}
    run = report.load_run(info, run_dir, window_steps=250, short_run_fraction=0.1)
    assert run.curves["charts/episodic_return"][0].tolist() == [100, 200, 300, 400]
    assert run.seconds.tolist() == [10.0, 20.0, 30.0, 40.0]
    assert run.wall_clock == 40.0
    code, markdown, _ = run_report(tmp_path / "runs", tmp_path / "out", capsys, "--window-steps", "250")
    assert code == 0 and group_rows(markdown)["ppo"]["Wall-clock [s]"] == "40.0"


def test_a_refused_run_and_a_task_with_a_family_prefix_are_read(tmp_path, capsys):
    """A run refused before it began has a summary.json without exp name or seed, and no event file: it is passed
    over with a line, not a crash. MetaWorld/Reach-v3's runs sit in MetaWorld-Reach-v3__... directories, and
    --env-id finds them by either name."""
    runs = tmp_path / "runs"
    write_run(runs, "MetaWorld-Reach-v3__ppo__1", {"charts/episodic_return": [(100, 1.0), (200, 3.0)]})
    refused = runs / f"{ENV}__ppo__2"
    refused.mkdir()
    (refused / "summary.json").write_text(
        json.dumps({"status": "failed", "env_id": None, "exp_name": None, "seed": None, "detail": "error: bad"})
    )
    for env_id in ("MetaWorld/Reach-v3", "MetaWorld-Reach-v3"):
        code, markdown, err = run_report(runs, tmp_path / "out", capsys, "--env-id", env_id)
        assert code == 0
        assert [row["Seed"] for row in run_rows(markdown).values()] == ["1"]
    code, markdown, err = run_report(runs, tmp_path / "out", capsys)
    assert code == 0 and f"skipping {refused}: no event file" in err


def test_a_run_killed_before_its_end_is_not_a_result_though_no_run_of_its_group_is_longer(tmp_path, capsys):
    """Both runs planned 4 iterations of 100 steps (the training script's hyperparameters table); `killed` logged 2
    of them and has no summary.json (SIGKILL, out of memory), so it is in progress; `whole` logged all 4."""
    runs = tmp_path / "runs"
    hyperparameters = "|param|value|\n|-|-|\n|total_timesteps|400|\n|num_iterations|4|\n|batch_size|100|"
    for name, steps in (("killed", (100, 200)), ("whole", (100, 200, 300, 400))):
        writer = SummaryWriter(str(runs / f"{ENV}__{name}__1"))
        writer.add_text("hyperparameters", hyperparameters, 0)
        for step in steps:
            writer.add_scalar("charts/episodic_return", 1.0, step)
        writer.close()

    code, markdown, _ = run_report(runs, tmp_path / "out", capsys)

    assert code == 0
    statuses = {name: row["Status"] for name, row in run_rows(markdown).items()}
    assert statuses == {f"{ENV}__killed__1": "in progress", f"{ENV}__whole__1": "included"}
    assert report.planned_steps(hyperparameters) == 400 and report.planned_steps("|param|value|") is None


def test_only_empty_runs_still_give_a_report(tmp_path, capsys):
    runs = tmp_path / "runs"
    (runs / f"{ENV}__ppo__1__100").mkdir(parents=True)
    (runs / f"{ENV}__ppo__1__100" / "events.out.tfevents.100.host").touch()

    code, markdown, _ = run_report(runs, tmp_path / "out", capsys)

    assert code == 0
    row = group_rows(markdown)["ppo"]
    assert row["Seeds"] == "0 (+1 in progress)"
    assert row["Final return"] == row["Max eval return"] == row["Wall-clock [s]"] == "n/a"
    assert not list((tmp_path / "out").glob("*.png"))  # no curve to draw


def write_summary(run_dir: Path, status: str, exp_name: str, seed: int, detail: str | None = None) -> None:
    """The fields of the training script's summary.json that report.py reads."""
    (run_dir / "summary.json").write_text(
        json.dumps({"status": status, "exp_name": exp_name, "seed": seed, "detail": detail})
    )


def test_runs_of_benchmark_sh_and_of_old_sweeps_read_together_with_summary_json_saying_how_each_ended(tmp_path, capsys):
    """benchmark.sh's run directories have no time in their name; older ones do. Where summary.json says how a run
    ended, that is its status: an interrupted or failed run is left out whatever it logged."""
    runs = tmp_path / "runs"
    returns = {"charts/episodic_return": [(100, 1.0), (200, 2.0), (300, 3.0), (400, 4.0)]}
    write_summary(write_run(runs, f"{ENV}__ppo__1", returns), "ok", "ppo", 1)
    write_run(runs, f"{ENV}__ppo__2__100", {"charts/episodic_return": [(400, 6.0)]})  # an older sweep's run
    write_summary(write_run(runs, f"{ENV}__ppo__3", returns), "interrupted", "ppo", 3, "SIGINT")
    write_summary(write_run(runs, f"{ENV}__ppo__4", returns), "failed", "ppo", 4, "OSError: disk full")
    write_summary(write_run(runs, f"{ENV}__ppo__5", returns), "diverged", "ppo", 5, "non-finite losses/v_loss")
    # An exp name that ends in "__<digits>" reads as an older run's name; its summary.json says what it is.
    write_summary(write_run(runs, f"{ENV}__lr__3__7", returns), "ok", "lr__3", 7)
    (runs / "logs").mkdir()  # Slurm's logs of a sweep: not a run, passed over without a word

    code, markdown, err = run_report(runs, tmp_path / "out", capsys, "--window-steps", "250")

    assert code == 0
    statuses = {name: row["Status"] for name, row in run_rows(markdown).items()}
    assert statuses == {
        f"{ENV}__ppo__1": "included", f"{ENV}__ppo__2__100": "included", f"{ENV}__ppo__3": "interrupted",
        f"{ENV}__ppo__4": "failed", f"{ENV}__ppo__5": "diverged", f"{ENV}__lr__3__7": "included",
    }  # fmt: skip
    rows = group_rows(markdown)
    assert rows["ppo"]["Seeds"] == "2 (+1 diverged, +1 failed, +1 interrupted)"
    assert rows["ppo"]["Final return"] == "4.50 ± 1.50"  # seeds 1 (2, 3, 4) and 2 (6)
    assert (rows["lr__3"]["Seeds"], rows["lr__3"]["Final return"]) == ("1", "3.00")
    assert {int(row["Seed"]) for row in parse_markdown_table(markdown, ["Environment", "Experiment", "Seed"])} == {
        1, 2, 3, 4, 5, 7,
    }  # fmt: skip
    assert f"report.py: {runs / f'{ENV}__ppo__4'} failed (OSError: disk full): left out of the means" in err
    assert f"report.py: {runs / f'{ENV}__ppo__5'} diverged (non-finite losses/v_loss): left out of the means" in err
    assert "logs" not in err


def test_a_run_that_ended_with_fewer_steps_than_its_group_is_shorter_not_in_progress(tmp_path, capsys):
    """Seed 2 ended (ok) at 200 steps where seed 1 ended at 400: another budget under the same exp name, which no
    waiting will change; seed 3 is still on its way at 200 steps (no summary)."""
    runs = tmp_path / "runs"
    write_summary(
        write_run(runs, f"{ENV}__ppo__1", {"charts/episodic_return": [(200, 1.0), (400, 2.0)]}), "ok", "ppo", 1
    )
    write_summary(write_run(runs, f"{ENV}__ppo__2", {"charts/episodic_return": [(200, 5.0)]}), "ok", "ppo", 2)
    write_run(runs, f"{ENV}__ppo__3", {"charts/episodic_return": [(200, 5.0)]})

    code, markdown, err = run_report(runs, tmp_path / "out", capsys)

    assert code == 0
    statuses = {name: row["Status"] for name, row in run_rows(markdown).items()}
    assert statuses == {f"{ENV}__ppo__1": "included", f"{ENV}__ppo__2": "shorter", f"{ENV}__ppo__3": "in progress"}
    assert group_rows(markdown)["ppo"]["Seeds"] == "1 (+1 in progress, +1 shorter)"
    assert f"report.py: {runs / f'{ENV}__ppo__2'} ended at 200 steps, below its group's 400 (another" in err


def test_stray_directories_get_one_line_each_and_logs_none(tmp_path, capsys):
    runs = tmp_path / "runs"
    write_run(runs, f"{ENV}__ppo__1__100", {"charts/episodic_return": [(100, 1.0)]})
    (runs / "notes").mkdir()
    (runs / f"{ENV}__ppo__2__100").mkdir()  # a run's name, but no event file
    (runs / "logs" / "20250101-120000").mkdir(parents=True)  # benchmark.sh's sweep logs
    (runs / "logs" / "20250101-120000" / f"{ENV}__1.log").write_text("iteration=1/1\n")
    (runs / "README.txt").write_text("a plain file\n")

    code, markdown, err = run_report(runs, tmp_path / "out", capsys)

    assert code == 0
    lines = err.splitlines()
    for name, reason in [("notes", "not a run directory"), (f"{ENV}__ppo__2__100", "no event file")]:
        named = [line for line in lines if f"{runs / name}:" in line]
        assert len(named) == 1 and reason in named[0], err
    assert not [line for line in lines if str(runs / "logs") in line or "README.txt" in line], err
    assert set(run_rows(markdown)) == {f"{ENV}__ppo__1__100"}


# ---------------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------------


def test_max_eval_return_is_the_max_of_the_mean_over_seeds(tmp_path, capsys):
    runs = tmp_path / "runs"
    returns = [(1000, 1.0), (2000, 2.0), (3000, 3.0)]
    # seed 1 peaks at step 2000, seed 2 at step 1000; their mean (25, 20, 32) peaks at step 3000, where the
    # best of either seed alone (40 @ 1000) or the mean of their bests (35) would be wrong
    evals = {1: [(1000, 10.0), (2000, 30.0), (3000, 28.0)], 2: [(1000, 40.0), (2000, 10.0), (3000, 36.0)]}
    for seed in (1, 2):
        scalars = {"charts/episodic_return": returns, "eval/episodic_return": evals[seed]}
        write_run(runs, f"{ENV}__ppo__{seed}__100", scalars)
    write_run(runs, f"{ENV}__noeval__1__100", {"charts/episodic_return": returns})

    code, markdown, _ = run_report(runs, tmp_path / "out", capsys)

    assert code == 0
    rows = group_rows(markdown)
    assert rows["ppo"]["Max eval return"] == "32.00 @ 3000"
    assert rows["noeval"]["Max eval return"] == "n/a"
    rows = run_rows(markdown)
    assert rows[f"{ENV}__ppo__1__100"]["Last eval"] == "28.00"
    assert rows[f"{ENV}__ppo__2__100"]["Last eval"] == "36.00"
    assert rows[f"{ENV}__noeval__1__100"]["Last eval"] == "n/a"

    png = tmp_path / "out" / f"{ENV}_eval_vs_steps.png"
    assert imread(png).shape[:2] == (300, 500)  # height, width
    assert f"]({png.name})" in markdown


def test_max_eval_return_skips_steps_not_every_seed_has_reached(tmp_path, capsys):
    runs = tmp_path / "runs"
    # both ran to step 2000, but seed 2 evaluated only at 1000: seed 1's eval at 2000 has no partner, so the
    # mean is over step 1000 only
    write_run(runs, f"{ENV}__ppo__1__100", {"eval/episodic_return": [(1000, 10.0), (2000, 90.0)]})
    write_run(
        runs,
        f"{ENV}__ppo__2__100",
        {"eval/episodic_return": [(1000, 20.0)], "charts/episodic_return": [(2000, 5.0)]},
    )

    code, markdown, _ = run_report(runs, tmp_path / "out", capsys, "--no-plots")

    assert code == 0
    assert group_rows(markdown)["ppo"]["Max eval return"] == "15.00 @ 1000"


def test_no_eval_plot_without_eval_data(tmp_path, capsys):
    runs = tmp_path / "runs"
    write_run(runs, f"{ENV}__ppo__1__100", {"charts/episodic_return": [(1000, 1.0), (2000, 2.0)]})

    code, markdown, _ = run_report(runs, tmp_path / "out", capsys)

    assert code == 0
    assert sorted(path.name for path in (tmp_path / "out").glob(f"{ENV}_*.png")) == [
        f"{ENV}_return_vs_steps.png",
        f"{ENV}_return_vs_time.png",
    ]
    assert "eval_vs_steps" not in markdown


@pytest.mark.parametrize("seeds_with_eval", [1, 2])
def test_max_eval_return_counts_only_seeds_with_eval_data(tmp_path, capsys, seeds_with_eval):
    runs = tmp_path / "runs"
    evals = {1: [(1000, 10.0)], 2: [(1000, 30.0)]}
    for seed in (1, 2):
        scalars = {"charts/episodic_return": [(1000, 1.0)]}
        if seed <= seeds_with_eval:
            scalars["eval/episodic_return"] = evals[seed]
        write_run(runs, f"{ENV}__ppo__{seed}__100", scalars)

    code, markdown, _ = run_report(runs, tmp_path / "out", capsys, "--no-plots")

    assert code == 0
    expected = {1: "10.00 @ 1000 (1/2 seeds)", 2: "20.00 @ 1000"}[seeds_with_eval]
    assert group_rows(markdown)["ppo"]["Max eval return"] == expected


# ---------------------------------------------------------------------------------------------------
# The CSVs: curves and per-run finals
# ---------------------------------------------------------------------------------------------------


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_csvs_match_the_event_files(tmp_path, capsys):
    runs = tmp_path / "runs"
    training_steps, eval_steps = (100, 200, 300, 400), (200, 400)
    # per seed: the values of charts/episodic_return, eval/episodic_return, charts/success_rate, eval/success_rate
    # and charts/any_step_success_rate
    logged = {
        1: ([1, 2, 3, 4], [10, 30], [0, 0.5, 1, 1], [0, 1], [0.5, 1, 1, 1]),
        2: ([3, 4, 5, 8], [20, 10], [0, 0, 0.5, 1], [0.5, 0.5], [0.5, 0.5, 1, 1]),
    }
    for seed, (returns, evals, successes, eval_successes, any_step) in logged.items():
        scalars = {
            "charts/episodic_return": list(zip(training_steps, returns)),
            "eval/episodic_return": list(zip(eval_steps, evals)),
            "charts/success_rate": list(zip(training_steps, successes)),
            "eval/success_rate": list(zip(eval_steps, eval_successes)),
            "charts/any_step_success_rate": list(zip(training_steps, any_step)),
        }
        write_run(runs, f"{ENV}__ppo__{seed}__100", scalars)
    write_run(runs, f"{ENV}__ppo__3__100", {"charts/episodic_return": [(100, 7.0)]})  # in progress

    # 4 grid points over steps 100-400 are the logged steps themselves: no interpolation to redo here
    code, out, _ = run_report(runs, tmp_path / "out", capsys, "--window-steps", "250", "--grid-points", "4")

    assert code == 0
    curves = {}
    for row in read_csv(tmp_path / "out" / "curves.csv"):
        assert (row["env_id"], row["exp_name"], row["seeds"]) == (ENV, "ppo", "2")  # seed 3 is in no curve
        curves.setdefault(row["tag"], []).append(tuple(float(row[key]) for key in ("step", "mean", "std")))
    # mean and population std of the two seeds, step by step
    assert curves == {
        "charts/episodic_return": [(100, 2.0, 1.0), (200, 3.0, 1.0), (300, 4.0, 1.0), (400, 6.0, 2.0)],
        "charts/success_rate": [(100, 0.0, 0.0), (200, 0.25, 0.25), (300, 0.75, 0.25), (400, 1.0, 0.0)],
        "charts/any_step_success_rate": [(100, 0.5, 0.0), (200, 0.75, 0.25), (300, 1.0, 0.0), (400, 1.0, 0.0)],
        "eval/episodic_return": [(200, 15.0, 5.0), (400, 20.0, 10.0)],
        "eval/success_rate": [(200, 0.25, 0.25), (400, 0.75, 0.25)],
    }

    rows = {int(row["seed"]): row for row in read_csv(tmp_path / "out" / "runs.csv")}
    # the final return averages steps > 400 - 250; the mean eval curve (15, 20) peaks at step 400
    # and the final success the success rates in that window, (0.5 + 1 + 1) / 3 and (0 + 0.5 + 1) / 3; at any
    # step (1 + 1 + 1) / 3 and (0.5 + 1 + 1) / 3
    expected = {
        1: ("included", 3.0, 30.0, 30.0, 2.5 / 3, 1.0),
        2: ("included", 17 / 3, 10.0, 10.0, 0.5, 2.5 / 3),
        3: ("in progress", 7.0, None, None, None, None),  # 100 steps < the window: its last 10%, the return at 100
    }
    for seed, (status, final, eval_at_max, last_eval, final_success, any_step) in expected.items():
        row = rows[seed]
        assert row["status"] == status and row["run"] == f"{ENV}__ppo__{seed}__100"
        assert float(row["final_return"]) == pytest.approx(final)
        assert (float(row["eval_at_max"]) if row["eval_at_max"] else None) == eval_at_max
        assert (float(row["last_eval"]) if row["last_eval"] else None) == last_eval
        assert (float(row["final_success"]) if row["final_success"] else None) == pytest.approx(final_success)
        assert (float(row["final_any_step_success"]) if row["final_any_step_success"] else None) == pytest.approx(
            any_step
        )
    # the table: mean and population std over the included seeds, (2.5 / 3 + 0.5) / 2 and 1 / 6; at any step
    # (1 + 2.5 / 3) / 2 and 1 / 12
    assert group_rows(out)["ppo"]["Final success"] == "0.67 ± 0.17"
    assert group_rows(out)["ppo"]["Any step"] == "0.92 ± 0.08"


def test_the_default_out_dir_is_report_not_docs(tmp_path, capsys, monkeypatch):
    write_run(tmp_path / "runs", f"{ENV}__ppo__1__100", {"charts/episodic_return": [(100, 1.0)]})
    monkeypatch.chdir(tmp_path)

    assert report.main(["runs", "--no-plots", "--bootstrap-reps", "10"]) == 0
    capsys.readouterr()

    assert sorted(path.name for path in (tmp_path / "report").iterdir()) == ["benchmark.md", "curves.csv", "runs.csv"]
    assert not (tmp_path / "docs").exists()


# ---------------------------------------------------------------------------------------------------
# Comparison across tasks
# ---------------------------------------------------------------------------------------------------

TIANSHOU = {"Hopper-v4": 2609.3, "Walker2d-v4": 3588.5}  # tianshou's 1M figures, as published
REPS = ["--bootstrap-reps", "200"]


def write_finals(path: Path, finals: list[tuple[str, str, int, float]]) -> Path:
    """A per-run CSV with the columns --finals needs: env id, exp name, seed, final return."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["env_id", "exp_name", "seed", "final_return"])
        writer.writerows(finals)
    return path


def estimate(cell: str) -> tuple[float, float, float]:
    """ "1.02 [0.93, 1.11]" -> (1.02, 0.93, 1.11)"""
    match = re.fullmatch(r"(-?[\d.]+) \[(-?[\d.]+), (-?[\d.]+)\]", cell)
    assert match, cell
    return tuple(float(group) for group in match.groups())


def comparison_tables(markdown: str) -> tuple[dict, dict]:
    """The comparison's two tables, by experiment and by pair, with (point, low, high) triples."""
    aggregates = {
        (row["Experiment"], row["Score"]): (row["Seeds"], estimate(row["IQM [95% CI]"]), estimate(row["Mean [95% CI]"]))
        for row in parse_markdown_table(markdown, ["Experiment", "Score", "Seeds"])
    }
    if "| X " not in markdown:  # one experiment: no pair
        return aggregates, {}
    pairs = {
        (row["X"], row["Y"], row["Score"]): estimate(row["P(X > Y) [95% CI]"])
        for row in parse_markdown_table(markdown, ["X", "Y", "Score"])
    }
    return aggregates, pairs


def compare(finals_csv: Path, out_dir: Path, capsys, *flags) -> tuple[dict, dict, str]:
    """report.py --finals: its two tables and its stderr."""
    code = report.main(["--finals", str(finals_csv), "--out-dir", str(out_dir), *REPS, *flags])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return *comparison_tables(captured.out), captured.err


def test_iqm_and_mean_of_scores_normalised_by_tianshous_figures(tmp_path, capsys):
    # normalised, Hopper-v4's four seeds score 0, 1, 2, 99 and Walker2d-v4's 3, 4, 5, 6: pooled and sorted,
    # 0 1 | 2 3 4 5 | 6 99, so the IQM is the mean of the middle four, 3.5, and the mean 120 / 8
    scores = {"Hopper-v4": [0, 1, 2, 99], "Walker2d-v4": [3, 4, 5, 6]}
    finals = [(task, "ppo", seed, k * TIANSHOU[task]) for task, ks in scores.items() for seed, k in enumerate(ks, 1)]
    finals.append(("Pusher-v4", "ppo", 1, -30.0))  # no published figure: left out, with a line
    path = write_finals(tmp_path / "finals.csv", finals)

    aggregates, pairs, err = compare(path, tmp_path / "out", capsys)

    seeds, iqm, mean = aggregates[("ppo", "final return")]
    assert seeds == "1-4"
    assert (iqm[0], mean[0]) == (3.5, 15.0)
    assert not pairs  # one experiment: nothing to compare it with
    assert "leaves out Pusher-v4: no reference figure" in err
    assert "**One seed**" not in (tmp_path / "out" / "benchmark.md").read_text()


def test_the_suite_scores_a_random_policy_0_and_the_reference_1(tmp_path, capsys):
    # Reacher-v4: random -43.47 (random_returns.py), tianshou -4.1, so -23.785 is halfway; a plain ratio would
    # score the random policy's -43.47 above tianshou's -4.1. CheetahRun-v1: random 4.17, CleanRL 432.56.
    finals = [("Reacher-v4", "ppo", 1, -43.47), ("Reacher-v4", "ppo", 2, -4.1), ("Reacher-v4", "ppo", 3, -23.785)]
    finals += [("CheetahRun-v1", "ppo", seed, 4.17 + k * (432.56 - 4.17)) for seed, k in ((1, 0.1), (2, 1.0), (3, 2.0))]
    path = write_finals(tmp_path / "finals.csv", finals)

    aggregates, _, _ = compare(path, tmp_path / "out", capsys, "--reference", "suite")

    # pooled and sorted: 0 0.1 | 0.5 1 1 | 2 -> rliable's IQM (trim_mean 0.25, one cut from each end of six)
    # is the mean of 0.1, 0.5, 1, 1: 0.65; the mean 4.6 / 6
    _, iqm, mean = aggregates[("ppo", "final return")]
    assert (iqm[0], mean[0]) == (0.65, 0.77)


def test_a_reference_at_or_below_zero_is_left_out_not_ranked_backwards(tmp_path, capsys):
    # Reacher-v4's tianshou figure is -4.1 with no zero given: the ratio return / -4.1 would score `bad`'s -40
    # (9.8) far above `good`'s -4 (0.98). Hopper-v4 ranks the two by a plain ratio: good 1.0, bad 0.5.
    finals = [("Reacher-v4", "good", s, -4.0) for s in (1, 2)] + [("Reacher-v4", "bad", s, -40.0) for s in (1, 2)]
    finals += [("Hopper-v4", "good", s, TIANSHOU["Hopper-v4"]) for s in (1, 2)]
    finals += [("Hopper-v4", "bad", s, TIANSHOU["Hopper-v4"] / 2) for s in (1, 2)]
    path = write_finals(tmp_path / "finals.csv", finals)

    aggregates, pairs, err = compare(path, tmp_path / "out", capsys)

    assert "leaves out Reacher-v4: its reference -4.1 is not above its zero 0" in err
    assert (aggregates[("good", "final return")][2][0], aggregates[("bad", "final return")][2][0]) == (1.0, 0.5)
    assert pairs[("good", "bad", "final return")][0] == 1.0

    # a --baseline whose mean is 0 on a task: left out the same way, not a division by zero
    finals = [(ENV, "base", 1, -5.0), (ENV, "base", 2, 5.0), (ENV, "new", 1, 7.0), (ENV, "new", 2, 9.0)]
    finals += [("Walker2d-v4", "base", s, 100.0) for s in (1, 2)] + [("Walker2d-v4", "new", s, 150.0) for s in (1, 2)]
    path = write_finals(tmp_path / "baseline.csv", finals)
    aggregates, _, err = compare(path, tmp_path / "out2", capsys, "--baseline", "base")

    assert f"leaves out {ENV}: its reference 0 is not above its zero 0" in err
    assert aggregates[("new", "final return")][2][0] == 1.5


def test_baseline_normalises_by_that_experiments_mean(tmp_path, capsys):
    # the baseline's Hopper-v4 mean is 200: its own runs score 0.5 and 1.5, every run of `new` 2.0
    finals = [(ENV, "base", 1, 100.0), (ENV, "base", 2, 300.0), (ENV, "new", 1, 400.0), (ENV, "new", 2, 400.0)]
    path = write_finals(tmp_path / "finals.csv", finals)

    aggregates, _, _ = compare(path, tmp_path / "out", capsys, "--baseline", "base")

    assert aggregates[("new", "final return")][1:] == ((2.0, 2.0, 2.0), (2.0, 2.0, 2.0))  # no spread, no interval
    assert aggregates[("base", "final return")][2][0] == 1.0


def test_against_measures_each_task_in_the_controls_standard_errors(tmp_path, capsys):
    # Hopper-v4: control 100, 300 -> mean 200, population std 100, SE 100 / sqrt(2) = 70.71; `up` 400, 400 is
    # 200 above, +2.83 SE; `down` 100, 140 is 80 below, -1.13 SE. Pusher-v4 (no reference figure, in the table all
    # the same): control -30, -34, SE 2 / sqrt(2) = 1.41; `up` -31 is +1 (+0.7 SE), `down` -33 -1 (-0.7 SE).
    # InvertedPendulum-v4: every run 5.4, no SE to measure by (though NumPy's std of three 5.4s is 8.9e-16).
    # Swimmer-v4 only `up` ran: left out, with a line on stderr; Reacher-v4 only the control: n/a for the others.
    finals = [(ENV, "control", 1, 100.0), (ENV, "control", 2, 300.0), (ENV, "up", 1, 400.0), (ENV, "up", 2, 400.0)]
    finals += [(ENV, "down", 1, 100.0), (ENV, "down", 2, 140.0)]
    finals += [("Pusher-v4", name, seed, value) for name, seed, value in [("control", 1, -30.0), ("control", 2, -34.0)]]
    finals += [("Pusher-v4", "up", 1, -31.0), ("Pusher-v4", "down", 1, -33.0)]
    finals += [("InvertedPendulum-v4", name, seed, 5.4) for name in ("control", "up", "down") for seed in (1, 2, 3)]
    finals += [("Swimmer-v4", "up", 1, 40.0), ("Reacher-v4", "control", 1, -5.0), ("Reacher-v4", "control", 2, -4.0)]
    path = write_finals(tmp_path / "finals.csv", finals)

    *_, err = compare(path, tmp_path / "out", capsys, "--against", "control")
    markdown = (tmp_path / "out" / "benchmark.md").read_text()

    rows = {row["Task"]: row for row in parse_markdown_table(markdown, ["Task"])}
    assert rows[ENV] == {
        "Task": ENV,
        "control: mean ± SE (seeds)": "200.00 ± 70.71 (2)",
        "down": "120.00 (-1.1 SE, 2)",
        "up": "400.00 (+2.8 SE, 2)",
    }
    assert (rows["Pusher-v4"]["up"], rows["Pusher-v4"]["down"]) == ("-31.00 (+0.7 SE, 1)", "-33.00 (-0.7 SE, 1)")
    assert rows["InvertedPendulum-v4"]["up"] == "5.40 (+0.00, no SE, 3)"
    assert "Swimmer-v4" not in rows
    assert (rows["Reacher-v4"]["up"], rows["Reacher-v4"]["down"]) == ("n/a", "n/a")
    assert "--against control leaves out Swimmer-v4: no final return of control" in err
    assert "- `down`: more than one SE below `control` on 1 of the 2 tasks with an SE: Hopper-v4" in markdown
    assert "- `up`: more than one SE below `control` on 0 of the 2 tasks with an SE\n" in markdown


def test_finals_of_several_csvs_compare_as_one_csv_of_them_all(tmp_path, capsys):
    # two sweeps' runs.csv, read together, against the same rows in one file
    rng = np.random.default_rng(0)
    rows = [
        (task, name, seed, rng.normal(1.0, 0.2) * figure)
        for name in ("base", "new")
        for task, figure in TIANSHOU.items()
        for seed in (1, 2, 3)
    ]
    first = write_finals(tmp_path / "first.csv", rows[:5])
    second = write_finals(tmp_path / "second.csv", rows[5:])
    whole = write_finals(tmp_path / "whole.csv", rows)

    code = report.main(["--finals", str(first), "--finals", str(second), "--out-dir", str(tmp_path / "a"), *REPS])
    split = capsys.readouterr()
    assert code == 0, split.err
    assert f"Per-run finals read from `{first}`, `{second}`." in split.out
    assert comparison_tables(split.out) == compare(whole, tmp_path / "b", capsys)[:2]

    code = report.main(["--finals", str(first), "--finals", str(whole), "--out-dir", str(tmp_path / "c")])
    assert code == 1
    assert capsys.readouterr().err == f"report.py: error: Hopper-v4 `base` seed 1 is in both {first} and {whole}\n"
    doubled = write_finals(tmp_path / "doubled.csv", rows[:1] * 2)
    assert report.main(["--finals", str(doubled), "--out-dir", str(tmp_path / "d")]) == 1
    assert capsys.readouterr().err == f"report.py: error: Hopper-v4 `base` seed 1 is twice in {doubled}\n"


def test_finals_count_ok_as_included_and_refuse_a_status_they_do_not_know(tmp_path, capsys):
    """summary.json's "ok" is a result, as report.py's "included" is (and an empty cell); a run in progress or
    stopped short is skipped; a misspelt status is an error, not a row skipped without a word."""
    results = [(task, name, seed, (1 + seed / 10 + (name == "b")) * figure) for task, figure in TIANSHOU.items()
               for name in ("a", "b") for seed in (1, 2)]  # fmt: skip
    statuses = ["ok", "included", ""] * 3
    short = [(task, "a", 3, 1e9, status) for task, status in zip(TIANSHOU, ["in progress", "shorter"])]
    path = tmp_path / "finals.csv"
    with open(path, "w", newline="") as f:
        rows = [(*result, status) for result, status in zip(results, statuses)] + short
        csv.writer(f).writerows([["env_id", "exp_name", "seed", "final_return", "status"], *rows])
    assert (
        compare(path, tmp_path / "a", capsys)[:2]
        == compare(write_finals(tmp_path / "b.csv", results), tmp_path / "b", capsys)[:2]
    )

    with open(path, "a", newline="") as f:
        csv.writer(f).writerow([ENV, "a", 4, 1.0, "okay"])
    assert report.main(["--finals", str(path), "--out-dir", str(tmp_path / "c")]) == 1
    expected = "status 'okay' is none of included, ok, diverged, in progress, failed, interrupted, shorter"
    assert capsys.readouterr().err == f"report.py: error: {path}, line 12: {expected}\n"


@pytest.mark.parametrize(
    "text, why", [('{"status": "o', "cannot be read (Unterminated string"), ("[]", "holds no JSON")]
)
def test_a_damaged_summary_json_is_one_line(tmp_path, capsys, text, why):
    run_dir = tmp_path / "runs" / f"{ENV}__ppo__1"
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(text)
    assert report.main([str(tmp_path / "runs"), "--out-dir", str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err.startswith(f"report.py: error: {run_dir / 'summary.json'} {why}")


def test_against_an_experiment_that_did_not_run_is_an_error(tmp_path, capsys):
    path = write_finals(tmp_path / "finals.csv", [(ENV, "ppo", 1, 100.0)])

    code = report.main(["--finals", str(path), "--out-dir", str(tmp_path / "out"), "--against", "typo"])

    assert code == 1
    assert capsys.readouterr().err == "report.py: error: --against typo: no final return of that exp name\n"


def test_one_seed_a_task_is_said_to_give_intervals_without_width(tmp_path, capsys):
    finals = [
        (task, exp_name, 1, k * figure) for task, figure in TIANSHOU.items() for exp_name, k in (("a", 1), ("b", 2))
    ]
    aggregates, pairs, _ = compare(write_finals(tmp_path / "finals.csv", finals), tmp_path / "out", capsys)

    assert pairs[("b", "a", "final return")] == (1.0, 1.0, 1.0)
    assert aggregates[("b", "final return")][1] == (2.0, 2.0, 2.0)  # one draw: the estimate is its own interval
    assert "**One seed**" in (tmp_path / "out" / "benchmark.md").read_text()


def test_probability_of_improvement_is_one_when_every_run_is_better(tmp_path, capsys):
    # on each task, every run of `good` scores above every run of `bad`, so every resample keeps P = 1
    finals = []
    for task, figure in TIANSHOU.items():
        for seed in (1, 2, 3):
            finals += [
                (task, "good", seed, (1.0 + seed / 10) * figure),
                (task, "bad", seed, (0.5 + seed / 10) * figure),
            ]
    path = write_finals(tmp_path / "finals.csv", finals)

    _, pairs, _ = compare(path, tmp_path / "out", capsys)

    assert pairs == {("good", "bad", "final return"): (1.0, 1.0, 1.0)}
    bad = [[0.5 + seed / 10] * 2 for seed in (1, 2, 3)]
    good = [[1.0 + seed / 10] * 2 for seed in (1, 2, 3)]
    args = argparse.Namespace(bootstrap_reps=50, bootstrap_seed=0)
    point, interval = report.bootstrap([np.array(bad), np.array(good)], report.probability_of_improvement, args)
    assert point[0] == 0.0 and list(interval[:, 0]) == [0.0, 0.0]  # the other way round


def test_interval_holds_the_estimate_and_narrows_with_more_runs(tmp_path, capsys):
    rng = np.random.default_rng(1)
    finals = []
    for exp_name, seeds in (("few", 3), ("many", 30)):  # one distribution, two sample sizes
        for task, figure in TIANSHOU.items():
            finals += [(task, exp_name, seed, rng.normal(1.0, 0.3) * figure) for seed in range(1, seeds + 1)]
    path = write_finals(tmp_path / "finals.csv", finals)

    aggregates, _, _ = compare(path, tmp_path / "out", capsys)

    widths = {}
    for exp_name in ("few", "many"):
        _, iqm, mean = aggregates[(exp_name, "final return")]
        for point, low, high in (iqm, mean):
            assert low < point < high
        widths[exp_name] = mean[2] - mean[1]
    assert widths["many"] < widths["few"] / 2  # ~1/sqrt(10) of it in theory


def test_the_bootstrap_repeats_for_a_seed(tmp_path, capsys):
    rng = np.random.default_rng(2)
    finals = [(task, "ppo", seed, rng.normal(1.0, 0.3) * f) for task, f in TIANSHOU.items() for seed in (1, 2, 3)]
    path = write_finals(tmp_path / "finals.csv", finals)

    first, second, other = (compare(path, tmp_path / "out", capsys, "--bootstrap-seed", s)[0] for s in "110")

    assert first == second
    assert first != other  # the seed is what fixes it


def test_a_seed_missing_on_one_task_is_left_out_everywhere(tmp_path, capsys):
    finals = [(task, "ppo", seed, float(TIANSHOU[task])) for task in TIANSHOU for seed in (1, 2)]
    finals.append(("Hopper-v4", "ppo", 3, 0.0))  # would pull the mean down if it counted
    path = write_finals(tmp_path / "finals.csv", finals)

    aggregates, _, err = compare(path, tmp_path / "out", capsys)

    seeds, _, mean = aggregates[("ppo", "final return")]
    assert (seeds, mean[0]) == ("1-2", 1.0)
    assert "leaves out Hopper-v4 seeds 3" in err


def test_the_comparison_from_runs_csv_is_the_one_from_the_event_files(tmp_path, capsys):
    runs = tmp_path / "runs"
    for exp_name, offset in (("a", 0.0), ("b", 500.0)):
        for seed in (1, 2, 3):
            scalars = {
                "charts/episodic_return": [(1000, offset + 100.0 * seed)],
                "eval/episodic_return": [(500, 50.0 * seed), (1000, offset + 200.0 * seed)],
            }
            write_run(runs, f"{ENV}__{exp_name}__{seed}__100", scalars)
    code, from_runs, _ = run_report(runs, tmp_path / "out", capsys, *REPS)
    assert code == 0

    aggregates, pairs, _ = compare(tmp_path / "out" / "runs.csv", tmp_path / "again", capsys)

    assert (aggregates, pairs) == comparison_tables(from_runs)
    # the mean eval curves peak at step 1000, so eval at max is each run's eval there: `b` ahead on every run
    assert aggregates[("b", "eval at max")][0] == "1-3"
    assert pairs[("b", "a", "eval at max")] == (1.0, 1.0, 1.0)


def write_stable_runs(runs: Path) -> None:
    """Experiment `stable`: seeds 1-3 end at 1001-1003, training and evaluation alike."""
    for seed in (1, 2, 3):
        write_run(runs, f"{ENV}__stable__{seed}__100", {
            "charts/episodic_return": [(500, 500.0), (1000, 1000.0 + seed)],
            "eval/episodic_return": [(500, 500.0), (1000, 1000.0 + seed)],
        })  # fmt: skip


def test_a_diverged_run_counts_in_the_comparison_by_the_policy_it_kept(tmp_path, capsys):
    """`fragile` diverged at step 500 in seeds 2 and 3, having reached 20 (its last eval 30); its seed 1 reached 3000.
    Left out, the two would leave fragile's seed 1 alone to rank it above `stable` (P = 1); counted by what they
    logged before, fragile wins one seed in three on either score, exactly as the same finals marked included do."""
    runs = tmp_path / "runs"
    write_stable_runs(runs)
    write_run(runs, f"{ENV}__fragile__1__100", {
        "charts/episodic_return": [(500, 10.0), (1000, 3000.0)], "eval/episodic_return": [(500, 10.0), (1000, 3000.0)],
    })  # fmt: skip
    for seed in (2, 3):
        writer = SummaryWriter(str(runs / f"{ENV}__fragile__{seed}__100"))
        writer.add_scalar("charts/episodic_return", 20.0, 500)
        writer.add_scalar("eval/episodic_return", 30.0, 500)
        writer.add_text("failure", "training diverged: non-finite losses/v_loss = nan at iteration 6", 600)
        writer.close()

    code, from_runs, _ = run_report(runs, tmp_path / "out", capsys, *REPS)

    assert code == 0
    aggregates, pairs = comparison_tables(from_runs)
    assert aggregates[("fragile", "final return")][0] == aggregates[("fragile", "eval at max")][0] == "1-3"
    assert pairs[("fragile", "stable", "final return")][0] == pairs[("fragile", "stable", "eval at max")][0] == 0.33
    rows = [(ENV, "stable", seed, 1000.0 + seed, 1000.0 + seed) for seed in (1, 2, 3)]
    rows += [(ENV, "fragile", 1, 3000.0, 3000.0), (ENV, "fragile", 2, 20.0, 30.0), (ENV, "fragile", 3, 20.0, 30.0)]
    with open(tmp_path / "included.csv", "w", newline="") as f:
        csv.writer(f).writerows([["env_id", "exp_name", "seed", "final_return", "eval_at_max"], *rows])
    assert compare(tmp_path / "included.csv", tmp_path / "a", capsys)[:2] == (aggregates, pairs)
    # runs.csv keeps them as diverged, with what they are scored by
    again = compare(tmp_path / "out" / "runs.csv", tmp_path / "b", capsys)
    assert again[:2] == (aggregates, pairs)
    assert f"{ENV} `fragile` seed 2 ({tmp_path / 'out' / 'runs.csv'}, line " in again[2]


def test_an_experiment_whose_every_run_diverged_is_scored_by_what_they_logged(tmp_path, capsys):
    """Every seed of `broken` diverged: none is in the means, so its group has no eval curve, and seed 3 ended no
    episode in its final window. Each is still scored (its last eval; seed 3 its last return), and --against
    and --baseline take their means over runs that did not diverge."""
    runs = tmp_path / "runs"
    write_stable_runs(runs)
    for seed in (1, 2, 3):
        writer = SummaryWriter(str(runs / f"{ENV}__broken__{seed}__100"))
        writer.add_scalar("charts/episodic_return", 10.0 * seed, 100)
        writer.add_scalar("eval/episodic_return", 20.0 * seed, 400 if seed == 3 else 100)
        writer.add_text("failure", "training diverged: non-finite losses/v_loss = nan", 500)
        writer.close()

    code, from_runs, _ = run_report(runs, tmp_path / "out", capsys, *REPS, "--window-steps", "200")

    assert code == 0
    rows = [(ENV, "stable", seed, 1000.0 + seed, 1000.0 + seed) for seed in (1, 2, 3)]
    rows += [(ENV, "broken", seed, 10.0 * seed, 20.0 * seed) for seed in (1, 2, 3)]
    with open(tmp_path / "included.csv", "w", newline="") as f:
        csv.writer(f).writerows([["env_id", "exp_name", "seed", "final_return", "eval_at_max"], *rows])
    assert comparison_tables(from_runs) == compare(tmp_path / "included.csv", tmp_path / "a", capsys)[:2]
    # --against and --baseline: the means without the diverged runs (here: none of broken's)
    assert report.main(["--finals", str(tmp_path / "out" / "runs.csv"), "--against", "stable", "--out-dir",
                        str(tmp_path / "b"), *REPS]) == 0  # fmt: skip
    table = parse_markdown_table(capsys.readouterr().out, ["Task"])
    assert [row["stable: mean ± SE (seeds)"] for row in table] == ["1002.00 ± 0.47 (3)"]
    assert [row["broken"] for row in table] == ["n/a"]
    assert report.main(["--finals", str(tmp_path / "out" / "runs.csv"), "--baseline", "broken", "--out-dir",
                        str(tmp_path / "c"), *REPS]) == 1  # fmt: skip
    assert "--baseline broken: no final return of that exp name" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("metric", "label", "a", "b", "aggregates_a", "aggregates_b", "p_b_over_a"),
    [
        # by hand, pooled over the two tasks: a's 0, 0.2, 0.4, 1 (IQM the middle two, 0.3; mean 0.4), b's 0.4,
        # 0.5, 0.5, 0.6 (0.5, 0.5); P(b > a) on TaskA (0.6 and 0.4 against 0.2 and 0.4: 1, 1, 1, a tie) 3.5 / 4,
        # on TaskB (0.5 twice against 0 and 1) 2 / 4: the mean 0.6875
        ("success", "final success", [[0.2, 0.4], [0.0, 1.0]], [[0.6, 0.4], [0.5, 0.5]], (0.3, 0.4), (0.5, 0.5), 0.69),
        # a's 0.5, 0.5, 0.5, 1 (0.5, 0.625), b's all 1; P(b > a): TaskA 1, TaskB (1 against 0.5 and 1) 3 / 4
        (
            "any-step-success",
            "final success, any step",
            [[0.5, 0.5], [0.5, 1.0]],
            [[1, 1], [1, 1]],
            (0.5, 0.62),
            (1, 1),
            0.88,
        ),
    ],
)
def test_success_rates_compare_across_tasks_unnormalised(
    tmp_path, capsys, metric, label, a, b, aggregates_a, aggregates_b, p_b_over_a
):
    runs = tmp_path / "runs"
    tag = {"success": "charts/success_rate", "any-step-success": "charts/any_step_success_rate"}[metric]
    for exp_name, rates in (("a", a), ("b", b)):
        for task, task_rates in zip(("TaskA-v1", "TaskB-v1"), rates):
            for seed, rate in enumerate(task_rates, 1):
                scalars = {"charts/episodic_return": [(1000, 100.0 * seed)], tag: [(1000, rate)]}
                write_run(runs, f"{task}__{exp_name}__{seed}__100", scalars)
    write_run(runs, "Hopper-v4__a__1__100", {"charts/episodic_return": [(1000, 1.0)]})  # reports no success
    code, markdown, err = run_report(runs, tmp_path / "out", capsys, *REPS, "--metric", metric)
    assert code == 0, err

    aggregates, pairs = comparison_tables(markdown)
    for exp_name, (iqm, mean) in (("a", aggregates_a), ("b", aggregates_b)):
        seeds, iqm_cell, mean_cell = aggregates[(exp_name, label)]
        assert (seeds, iqm_cell[0], mean_cell[0]) == ("1-2", iqm, mean)
    assert set(aggregates) == {("a", label), ("b", label)}  # no return, no eval at max
    assert pairs[("b", "a", label)][0] == p_b_over_a
    column = {"success": "final success", "any-step-success": "final any step success"}[metric]
    assert f"leaves out Hopper-v4: no {column} of a, b" in err
    # the same comparison again from the runs.csv it wrote
    again, again_pairs, _ = compare(tmp_path / "out" / "runs.csv", tmp_path / "again", capsys, "--metric", metric)
    assert (again, again_pairs) == (aggregates, pairs)


# ---------------------------------------------------------------------------------------------------
# report.py on the real sweep of tests/conftest.py, against the event files read a second way
# ---------------------------------------------------------------------------------------------------


def test_report_matches_event_files(sweep, tmp_path):
    workdir, result = sweep
    assert result.returncode == 0
    out_dir = tmp_path / "docs"
    report = subprocess.run(
        [sys.executable, str(REPORT), str(workdir / "runs"), "--out-dir", str(out_dir)],
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    assert str(workdir / "runs" / "logs") not in report.stderr  # benchmark.sh's own folder: passed over silently
    markdown = (out_dir / "benchmark.md").read_text()
    assert markdown == report.stdout
    assert "use the last 10% of the run" in markdown  # 4096 steps < the 100k window: the caption says so

    rows = {row["Environment"]: row for row in parse_markdown_table(markdown, ["Environment", "Experiment", "Seeds"])}
    assert set(rows) == set(SWEEP_ENVS)
    for env_id in SWEEP_ENVS:
        refs = [reference_run(d) for d in sorted((workdir / "runs").glob(f"{env_id}__*"))]
        finals = [ref["final_return"] for ref in refs]
        walls = [ref["wall_clock"] for ref in refs]
        row = rows[env_id]
        assert row["Seeds"] == "2" and row["Steps"] == "4096"
        mean, std = parse_mean_std(row["Final return"])
        assert mean == pytest.approx(np.mean(finals), abs=0.006)
        assert std == pytest.approx(np.std(finals), abs=0.006)
        mean, std = parse_mean_std(row["Wall-clock [s]"])
        assert mean == pytest.approx(np.mean(walls), abs=0.06)
        assert std == pytest.approx(np.std(walls), abs=0.06)
        # --eval-every 2048: both seeds evaluated at 2048 and 4096; the best of the mean over seeds
        evals = [{step: value for step, value, _ in ref["eval_returns"]} for ref in refs]
        assert all(sorted(e) == [2048, 4096] for e in evals)
        mean_curve = {step: np.mean([e[step] for e in evals]) for step in (2048, 4096)}
        best_step = max(mean_curve, key=mean_curve.get)
        value, step = row["Max eval return"].split(" @ ")
        assert (float(value), int(step)) == (pytest.approx(mean_curve[best_step], abs=0.006), best_step)
        assert imread(out_dir / f"{env_id}_eval_vs_steps.png").shape[:2] == (300, 500)

        for axis in ("steps", "time"):
            png = out_dir / f"{env_id}_return_vs_{axis}.png"
            assert imread(png).shape[:2] == (300, 500)  # height, width
            assert f"]({png.name})" in markdown


def test_report_window_flag_and_filter(sweep, tmp_path):
    """--window-steps above the run length keeps the 10% rule; below it the window is in steps."""
    workdir, _ = sweep
    report = subprocess.run(
        [sys.executable, str(REPORT), str(workdir / "runs"), "--out-dir", str(tmp_path), "--no-plots",
         "--env-id", "Hopper-v4", "--window-steps", "2048"],
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    rows = parse_markdown_table(report.stdout, ["Environment", "Experiment", "Seed"])
    assert {row["Environment"] for row in rows} == {"Hopper-v4"}
    for row in rows:
        (run_dir,) = (workdir / "runs").glob(row["Run"].strip("`"))
        ref = reference_run(run_dir, window_steps=2048)
        assert float(row["Final return"]) == pytest.approx(ref["final_return"], abs=0.006)
        assert row["Window [steps]"] == "2048"
    assert "†" not in report.stdout and not list(tmp_path.glob("*.png"))


def test_report_rejects_bad_input(tmp_path):
    (tmp_path / "a-file").write_text("")
    (tmp_path / "latin1.csv").write_bytes(
        "env_id,exp_name,seed,final_return\nHopper-v4,caf\xe9,1,2.0\n".encode("latin-1")
    )
    (tmp_path / "short.csv").write_text("env_id,exp_name,seed,final_return\nHopper-v4,a,1\n")
    for args, message in [
        ([str(tmp_path / "missing")], "runs directory not found"),
        ([str(tmp_path), "--window-steps", "0"], "--window-steps must be positive"),
        ([str(tmp_path), "--bootstrap-seed", "4294967296"], "--bootstrap-seed must be in [0, 2**32 - 1]"),
        ([str(tmp_path), "--bootstrap-seed", "-1"], "--bootstrap-seed must be in [0, 2**32 - 1]"),
        ([str(tmp_path)], "no run directories"),
        ([str(tmp_path), "--out-dir", str(tmp_path / "a-file")], "is a file, not a directory"),
        ([str(tmp_path), "--markdown", "sub/x.md"], "--markdown takes a file name in --out-dir"),
        ([str(tmp_path), "--markdown", "runs.csv"], "--markdown runs.csv is a file report.py writes itself"),
        ([str(tmp_path), "--metric", "success", "--baseline", "a"], "--baseline divides final returns"),
        (["--finals", str(tmp_path / "latin1.csv")], "is not a text CSV (not UTF-8)"),
        (["--finals", str(tmp_path / "short.csv")], "line 2: fewer cells than the header has columns"),
    ]:
        result = subprocess.run(
            [sys.executable, str(REPORT), "--out-dir", str(tmp_path / "out"), *args],
            check=False,
            capture_output=True,
            text=True,
        )
        assert result.returncode != 0
        assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr
