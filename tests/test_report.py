"""report.py on synthetic event files: a sweep in progress, stray directories, evaluation curves.

The event files are written here with tensorboardX, scalar by scalar with explicit steps, so every number
the report prints can be checked against one worked out by hand. (tests/test_benchmark.py checks the
report against a real sweep.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.image import imread
from tensorboardX import SummaryWriter

import report
from tests.test_benchmark import parse_markdown_table

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
    assert sorted(path.name for path in (tmp_path / "out").glob("*.png")) == [
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
