"""Watching a run: the progress bar on a terminal, W&B tracking offline and without a login."""

import os
import pty
import subprocess

from tests.support import HOPPER, MODEL_NAME, only_run_dir, run_script, script_command


def test_progress_bar_on_a_terminal(tmp_path):
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        script_command(*HOPPER, "--total-timesteps", "2048"), cwd=tmp_path, stdout=terminal, stderr=terminal
    )
    os.close(terminal)
    output = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # the terminal closed: the process is gone
            break
        if not chunk:
            break
        output += chunk
    assert process.wait(timeout=300) == 0
    text = output.decode(errors="replace")
    assert "━" in text and "2048/2048" in text  # rich's bar and its step counter
    assert "iteration=4/4" in text


def wandb_files(cwd):
    (run_file,) = (cwd / "wandb").glob("offline-run-*/run-*.wandb")
    return run_file.read_bytes()


def test_track_with_wandb_offline_syncs_the_tensorboard_metrics(tmp_path):
    env = {**os.environ, "WANDB_MODE": "offline"}
    result = run_script(*HOPPER, "--total-timesteps", "2048", "--track", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert b"losses/value_loss" in wandb_files(tmp_path)


def test_track_without_a_wandb_login_runs_offline_instead_of_prompting(tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("WANDB_")}
    env.update(HOME=str(tmp_path), NETRC=str(tmp_path / "no-netrc"))
    result = run_script(*HOPPER, "--total-timesteps", "2048", "--track", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert "W&B: no login found, tracking offline" in result.stderr
    assert b"losses/value_loss" in wandb_files(tmp_path)


def test_a_resumed_run_logs_on_to_the_w_and_b_run_of_its_first_attempt(tmp_path):
    env = {**os.environ, "WANDB_MODE": "offline"}
    first = run_script(*HOPPER, "--total-timesteps", "1024", "--track", "--save-model", cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr
    model_path = only_run_dir(tmp_path) / MODEL_NAME
    resumed = run_script("--resume", str(model_path), "--total-timesteps", "2048", "--track", cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr
    # An offline run's folder and file are named by its run id; each attempt has a folder of its own.
    run_files = sorted((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(run_files) == 2
    assert run_files[0].name == run_files[1].name
    # And a run started afresh gets a W&B run of its own.
    (tmp_path / "other").mkdir()
    other = run_script(*HOPPER, "--total-timesteps", "1024", "--track", cwd=tmp_path / "other", env=env)
    assert other.returncode == 0, other.stderr
    (other_file,) = (tmp_path / "other" / "wandb").glob("offline-run-*/run-*.wandb")
    assert other_file.name != run_files[0].name
