"""A run's last words and its run directory: the summary line and summary.json against the run's own event
files; --run-dir starting, resuming, restarting and declining to retrain a run; one process per run directory.

Each test runs the script in a subprocess on real environments, as benchmark.sh runs it.
"""

import json
import platform
import signal
import subprocess

import envpool
import pytest

import ppo_continuous_envpool_jax as ppo
from tests.support import (
    HOPPER,
    MODEL_NAME,
    SMALL,
    as_tensorboard_shows,
    parsed_scalars,
    read_events,
    reference_run,
    run_script,
    script_command,
    wait_for_line,
)


def summary_of(run_dir) -> dict:
    with open(run_dir / "summary.json") as f:
        return json.load(f)


def event_files(run_dir) -> dict:
    return {path.name: path.read_bytes() for path in run_dir.glob("events.out.tfevents.*")}


def test_the_summary_of_a_task_that_reports_success_has_both_success_rates_of_its_event_files(tmp_path):
    """FetchReachDense-v4's 50-step episodes end in every iteration: the final success rates are the means of
    the logged rates over the run's last tenth, at the last step and at any step; and the last evaluation's."""
    run_dir = tmp_path / "fetch"
    cli_args = ["--env-id", "FetchReachDense-v4", *SMALL, "--total-timesteps", "8192", "--eval-every", "8192"]
    result = run_script(*cli_args, "--eval-episodes", "4", "--run-dir", run_dir, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary, reference = summary_of(run_dir), reference_run(run_dir)
    events = as_tensorboard_shows(read_events(run_dir))
    for key in ("final_return", "final_success", "final_any_step_success"):
        assert summary[key] == pytest.approx(reference[key], rel=1e-6), key  # the events hold float32s
    assert summary["final_any_step_success"] >= summary["final_success"]
    for key in ("success_rate", "any_step_success_rate"):
        ((step, value, _),) = parsed_scalars(events, f"eval/{key}")
        assert (summary["last_eval"]["global_step"], summary["last_eval"][key]) == (step, pytest.approx(value))
    line = result.stdout.splitlines()[-1]
    assert (
        line == ppo.summary_line(summary) and f"final_any_step_success={summary['final_any_step_success']:.2f}" in line
    )


def test_a_run_ends_with_a_summary_line_and_a_summary_json_that_its_event_files_confirm(tmp_path):
    run_dir = tmp_path / "runs" / "hopper"
    cli_args = [*HOPPER, "--total-timesteps", "8192", "--eval-every", "4096", "--eval-episodes", "2"]
    result = run_script(*cli_args, "--run-dir", run_dir, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary, reference = summary_of(run_dir), reference_run(run_dir)
    assert summary["status"] == "ok" and summary["detail"] is None
    assert (summary["global_step"], summary["total_timesteps"]) == (8192, 8192)
    # The README's final return (here the run's last tenth, as report.py takes it for a short run).
    assert summary["final_return"] == pytest.approx(reference["final_return"], rel=1e-12)
    assert summary["final_success"] is None  # Hopper reports no success
    eval_step, eval_return, _ = reference["eval_returns"][-1]
    assert summary["last_eval"]["global_step"] == eval_step == 8192
    assert summary["last_eval"]["return"] == pytest.approx(eval_return, rel=1e-6)  # the event holds a float32
    assert summary["model"] is None and summary["run_dir"] == str(run_dir)
    assert summary["versions"] == {
        "python": platform.python_version(),
        "jax": ppo.jax.__version__,
        "envpool": envpool.__version__,
        "flax": ppo.flax.__version__,
        "numpy": ppo.np.__version__,
    }
    assert summary["family"] == "gym" and summary["command"][1:] == [*cli_args, "--run-dir", str(run_dir)]
    last_line = result.stdout.splitlines()[-1]
    assert last_line.startswith(
        f"summary: status=ok steps=8192/8192 final_return={reference['final_return']:.1f} "
        f"last_eval={summary['last_eval']['return']:.1f}@8192 wall="
    )
    assert last_line.endswith(f"run_dir={run_dir} model=-")

    # The same command again: the run has finished, so it prints the same line and trains nothing.
    files = event_files(run_dir)
    again = run_script(*cli_args, "--run-dir", run_dir, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [last_line]
    assert event_files(run_dir) == files


def test_a_stopped_run_dir_resumes_with_the_same_command_and_its_summary_covers_both_attempts(tmp_path):
    """SIGTERM inside the final-return window (the last 10% of 32 iterations): the resumed attempt's summary
    averages returns logged by both attempts, as TensorBoard shows the run."""
    run_dir = tmp_path / "run"
    cli_args = [*HOPPER, "--total-timesteps", "16384", "--run-dir", str(run_dir)]
    process = subprocess.Popen(script_command(*cli_args), cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    wait_for_line(process, "iteration=29/")
    process.send_signal(signal.SIGTERM)
    stdout, _ = process.communicate(timeout=120)
    assert process.returncode == 143
    stopped = summary_of(run_dir)
    assert (stopped["status"], stdout.splitlines()[-1]) == ("interrupted", ppo.summary_line(stopped))
    assert stopped["detail"] == "SIGTERM" and stopped["model"] == str(run_dir / MODEL_NAME)
    stopped_at = stopped["global_step"]
    assert 29 * 512 <= stopped_at < 16384

    result = run_script(*cli_args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    first_step = int(next(line for line in result.stdout.splitlines() if line.startswith("iteration=")).split()[1][12:])
    assert first_step == stopped_at + 512  # resumed, not started again
    summary = summary_of(run_dir)
    assert (summary["status"], summary["global_step"], summary["model"]) == ("ok", 16384, None)
    assert summary["wall_seconds"] > stopped["wall_seconds"]
    window = [step for step, _, _ in parsed_scalars(as_tensorboard_shows(read_events(run_dir)), "charts/SPS")]
    assert min(step for step in window if step > 16384 - 1638.4) <= stopped_at  # both attempts in the window
    assert summary["final_return"] == pytest.approx(reference_run(run_dir)["final_return"], rel=1e-12)


def test_a_run_dir_whose_attempt_left_no_checkpoint_starts_afresh_and_supersedes_that_attempts_events(tmp_path):
    cli_args = [*HOPPER, "--total-timesteps", "4096", "--checkpoint-every-seconds", "0"]
    process = subprocess.Popen(
        script_command(*cli_args, "--run-dir", tmp_path / "run"), cwd=tmp_path, stdout=subprocess.PIPE, text=True
    )
    wait_for_line(process, "iteration=3/")
    process.kill()
    process.communicate(timeout=60)
    assert not (tmp_path / "run" / "summary.json").exists()  # SIGKILL: no last words
    result = run_script(*cli_args, "--run-dir", tmp_path / "run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1] == "family=gym (no family defaults)" and lines[3].startswith("iteration=1/8 ")  # from step 1
    # What TensorBoard shows is the second attempt alone: as a run of the same seed in a fresh directory logs.
    clean = run_script(*cli_args, "--run-dir", tmp_path / "clean", cwd=tmp_path)
    assert clean.returncode == 0, clean.stderr
    shown, fresh = (as_tensorboard_shows(read_events(tmp_path / name)) for name in ("run", "clean"))
    for tag in ("losses/value_loss", "charts/episodic_return"):
        assert [(step, value) for step, value, _ in parsed_scalars(shown, tag)] == [
            (step, value) for step, value, _ in parsed_scalars(fresh, tag)
        ]
    assert len(read_events(tmp_path / "run")) > len(shown)  # the first attempt's events are still on disk


def test_two_launches_of_one_run_dir_train_it_once(tmp_path):
    cli_args = script_command(*HOPPER, "--total-timesteps", "4096", "--run-dir", tmp_path / "run")
    first, second = (
        subprocess.Popen(cli_args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    )
    outputs = [process.communicate(timeout=300) for process in (first, second)]
    assert [process.returncode for process in (first, second)] == [0, 0], outputs
    trained = [stdout for stdout, _ in outputs if "iteration=" in stdout]
    waited = [(stdout, stderr) for stdout, stderr in outputs if "iteration=" not in stdout]
    assert len(trained) == 1 and len(waited) == 1
    assert len(event_files(tmp_path / "run")) == 1
    # The one that waited printed the summary of the run the other trained.
    assert waited[0][0].splitlines() == [trained[0].splitlines()[-1]]
    assert "waiting for the process that trains" in waited[0][1]


def test_a_diverged_run_is_a_result_that_the_same_command_does_not_train_again(tmp_path):
    cli_args = [*HOPPER, "--learning-rate", "1e30", "--max-grad-norm", "1e30", "--run-dir", tmp_path / "run"]
    result = run_script(*cli_args, cwd=tmp_path)
    assert result.returncode == 1
    summary = summary_of(tmp_path / "run")
    assert summary["status"] == "diverged" and summary["detail"].startswith("non-finite ")
    assert summary["detail"] in result.stderr and result.stdout.splitlines()[-1] == ppo.summary_line(summary)
    files = event_files(tmp_path / "run")
    again = run_script(*cli_args, cwd=tmp_path)
    assert (again.returncode, again.stdout.splitlines()) == (1, [ppo.summary_line(summary)])
    assert event_files(tmp_path / "run") == files


@pytest.mark.parametrize("other", ["--resume", "--evaluate"])
def test_run_dir_excludes_resume_and_evaluate_in_one_line(tmp_path, other):
    result = run_script("--run-dir", tmp_path / "a", other, tmp_path / "b", cwd=tmp_path)
    assert (result.returncode, result.stderr.strip()) == (1, f"error: --run-dir excludes {other}")


def test_a_run_dir_whose_input_is_refused_ends_failed_saying_why(tmp_path):
    result = run_script("--run-dir", tmp_path / "run", "--gamma", "2", cwd=tmp_path)
    assert (result.returncode, result.stderr.strip()) == (1, "error: --gamma must be in (0, 1], got 2.0")
    summary = summary_of(tmp_path / "run")
    assert (summary["status"], summary["detail"]) == ("failed", "error: --gamma must be in (0, 1], got 2.0")
    assert result.stdout.splitlines() == [ppo.summary_line(summary)]


def test_a_record_from_a_checkpoint_written_before_the_any_step_rate_still_gives_its_finals():
    # By hand: a 200k-step run's window is its last 100k steps, (100k, 200k]: the rows at 150k and 200k.
    record = ppo.RunRecord(returns=[[100_000, 1.0, 0.0], [150_000, 2.0, 0.5], [200_000, 4.0, 1.0]])
    assert record.final(200_000) == (3.0, 0.75, None)
    record.add_iteration(250_000, 6.0, (0.0, 1.0))  # the resumed run adds rows of four
    assert record.final(250_000) == (5.0, 0.5, None)  # no any-step rate over half the window
    record.add_iteration(300_000, 8.0, (1.0, 1.0))
    assert record.final(300_000) == (7.0, 0.5, 1.0)
