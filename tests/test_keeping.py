"""Keep, watch and trust a run: saved models, evaluation, video, progress bar, signals, NaN guard, W&B offline.

Each test runs the real thing: the script in a subprocess on real EnvPool environments, real files,
real signals, MuJoCo's real renderer (OSMesa on CPU machines).
"""

import json
import os
import pty
import re
import signal
import subprocess
from dataclasses import replace

import flax
import imageio.v2 as imageio
import jax
import numpy as np
import pytest

import ppo_continuous_envpool_jax as ppo
from tests.support import SMALL, only_run_dir, run_script, scalars, script_command

HOPPER = ["--env-id", "Hopper-v4", *SMALL]


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A short Hopper run with --save-model: its directory and its stdout. Seed 2: --evaluate must take it from
    the file to play the same episodes."""
    cwd = tmp_path_factory.mktemp("saved")
    result = run_script(
        *HOPPER, "--total-timesteps", "4096", "--seed", "2", "--save-model", "--eval-episodes", "4", cwd=cwd
    )
    assert result.returncode == 0, result.stderr
    return only_run_dir(cwd), result.stdout


def test_saved_model_holds_parameters_optimizer_and_observation_statistics(saved_run):
    run_dir, stdout = saved_run
    model_path = run_dir / "ppo_continuous_envpool_jax.model"
    assert f"model saved to runs/{run_dir.name}/{model_path.name}" in stdout
    checkpoint = ppo.load_checkpoint(str(model_path))
    assert checkpoint["args"].env_id == "Hopper-v4" and checkpoint["global_step"] == 4096
    # Every observation EnvPool returned was merged: 8 first observations plus one per step.
    assert checkpoint["obs_rms"]["count"] == pytest.approx(1e-4 + 8 + 4096)
    # 8 iterations x 2 epochs x 4 minibatches of Adam steps.
    assert checkpoint["train_state"]["step"] == 64
    assert checkpoint["train_state"]["opt_state"]["1"]["0"]["count"] == 64
    assert checkpoint["train_state"]["params"]["params"]["log_std"].shape == (3,)


def test_evaluate_from_the_file_matches_the_in_memory_evaluation_logged_at_the_end(saved_run, tmp_path):
    run_dir, _ = saved_run
    ((step, logged),) = scalars(run_dir, "eval/episodic_return")
    assert step == 4096
    result = run_script("--evaluate", str(run_dir / "ppo_continuous_envpool_jax.model"), "--eval-episodes", "4",
                        cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    mean, std, episodes = re.search(r"eval/episodic_return (\S+) \+- (\S+) over (\d+) episodes", result.stdout).groups()
    assert int(episodes) == 4 and float(std) >= 0
    assert float(mean) == pytest.approx(logged, abs=0.051)  # printed with one decimal


# Reading the MP4 starts ffmpeg by fork and exec, which JAX (imported here) warns about; nothing runs in between.
@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")
def test_capture_video_records_the_evaluation_episode(saved_run, tmp_path):
    run_dir, _ = saved_run
    model_path = str(run_dir / "ppo_continuous_envpool_jax.model")
    result = run_script("--evaluate", model_path, "--eval-episodes", "1", "--capture-video", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    video = tmp_path / "videos" / run_dir.name / "eval.mp4"
    assert f"video saved to videos/{run_dir.name}/eval.mp4" in result.stdout
    reader = imageio.get_reader(video)
    frames = [frame for frame in reader]
    reader.close()
    # The episode's length comes from a second evaluation without rendering: one frame a step, plus the last.
    checkpoint = ppo.load_checkpoint(model_path)
    params, obs_rms = checkpoint["train_state"]["params"], ppo.RunningMeanStd(**checkpoint["obs_rms"])
    args = replace(checkpoint["args"], eval_episodes=1)
    _, lengths = ppo.evaluate(args, ppo.make_policy(args), params, obs_rms)
    assert len(frames) == lengths[0] + 1
    assert frames[0].shape == (ppo.VIDEO_SIZE[1], ppo.VIDEO_SIZE[0], 3)
    assert np.std(frames[0]) > 10  # a rendered scene, not a blank frame


def start_and_signal_after_first_iteration(cwd, signum, *cli_args):
    process = subprocess.Popen(
        script_command(*cli_args), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    for line in process.stdout:
        if line.startswith("iteration=1/"):
            process.send_signal(signum)
            break
    _stdout, stderr = process.communicate(timeout=300)
    return process.returncode, stderr


@pytest.mark.parametrize("signum, exit_code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_saves_the_model_flushes_the_logs_and_exits_with_128_plus_signal(tmp_path, signum, exit_code):
    returncode, stderr = start_and_signal_after_first_iteration(tmp_path, signum, *HOPPER, "--save-model")
    assert returncode == exit_code
    run_dir = only_run_dir(tmp_path)
    model_path = f"runs/{run_dir.name}/ppo_continuous_envpool_jax.model"
    stopped = re.search(rf"stopped by {signal.Signals(signum).name} at global_step (\d+); model saved to (\S+)", stderr)
    assert stopped and stopped.group(2) == model_path
    global_step = int(stopped.group(1))
    assert ppo.load_checkpoint(str(tmp_path / model_path))["global_step"] == global_step
    assert scalars(run_dir, "charts/SPS")[-1][0] == global_step


def test_resume_continues_steps_optimizer_and_learning_rate_schedule(tmp_path):
    returncode, _ = start_and_signal_after_first_iteration(tmp_path, signal.SIGTERM, *HOPPER, "--save-model")
    assert returncode == 143
    run_dir = only_run_dir(tmp_path)
    model_path = run_dir / "ppo_continuous_envpool_jax.model"
    saved_step = ppo.load_checkpoint(str(model_path))["global_step"]
    total = saved_step + 1024

    result = run_script("--resume", str(model_path), "--total-timesteps", str(total), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert only_run_dir(tmp_path) == run_dir  # the same run goes on
    resumed = [(step, lr) for step, lr in scalars(run_dir, "charts/learning_rate") if step > saved_step]
    assert [step for step, _ in resumed] == [saved_step + 512, saved_step + 1024]
    # Linear decay over all 8-per-iteration Adam steps: the count went on from the saved one.
    updates_per_iteration, num_updates = 2 * 4, (total // 512) * 2 * 4
    for step, lr in resumed:
        count = step // 512 * updates_per_iteration
        # float32 in the compiled schedule: the last value is 0 to within ~1e-11, not exactly.
        assert lr == pytest.approx(3e-4 * (1 - count / num_updates), rel=1e-5, abs=1e-9)
    checkpoint = ppo.load_checkpoint(str(model_path))
    assert checkpoint["global_step"] == total and checkpoint["train_state"]["step"] == total // 512 * 8


def test_resume_refuses_a_different_task(saved_run, tmp_path):
    run_dir, _ = saved_run
    result = run_script("--resume", str(run_dir / "ppo_continuous_envpool_jax.model"), "--env-id", "Ant-v4",
                        cwd=tmp_path)  # fmt: skip
    assert result.returncode != 0
    assert result.stderr.strip() == "error: --env-id Ant-v4 differs from the saved model's Hopper-v4"


def test_resume_refuses_another_reward_normalisation(saved_run):
    """The critic of a --reward-norm scale run predicts scaled returns; the statistics are of another return."""
    run_dir, _ = saved_run
    with pytest.raises(SystemExit) as exit_info:
        ppo.parse_args(["--resume", str(run_dir / "ppo_continuous_envpool_jax.model"), "--reward-norm", "return"])
    assert exit_info.value.code == "error: --reward-norm return differs from the saved model's scale"


@pytest.mark.parametrize(("scale_reward", "reward_norm"), [(True, "scale"), (False, "none")])
def test_a_model_saved_with_scale_reward_loads_as_the_matching_reward_norm(
    saved_run, tmp_path, scale_reward, reward_norm
):
    """Models saved before --reward-norm have --scale-reward in their flags."""
    run_dir, _ = saved_run
    state = flax.serialization.msgpack_restore((run_dir / "ppo_continuous_envpool_jax.model").read_bytes())
    old_args = json.loads(state["args"])
    for name in ("reward_norm", "clip_action", "adam_eps", "init_log_std", "eval_every"):
        del old_args[name]
    old_args["scale_reward"] = scale_reward
    state["args"] = json.dumps(old_args)
    old_model = tmp_path / "old.model"
    old_model.write_bytes(flax.serialization.msgpack_serialize(state))
    args = ppo.load_checkpoint(str(old_model))["args"]
    assert args.reward_norm == reward_norm and args.seed == 2 and args.clip_action
    assert args.init_log_std == 0.0  # what those models were initialised with, not today's default


def test_non_finite_loss_stops_with_the_iteration_and_quantity_and_keeps_the_last_finite_model(tmp_path):
    result = run_script(*HOPPER, "--learning-rate", "1e30", "--max-grad-norm", "1e30", "--save-model", cwd=tmp_path)
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert re.fullmatch(
        r"error: training diverged: non-finite (losses/\w+|parameter \S+).* at iteration \d+ \(global_step \d+\); "
        r"the last finite model is in runs/\S+\.model",
        line,
    )
    model_path = tmp_path / line.rsplit(" ", 1)[1]
    params = ppo.load_checkpoint(str(model_path))["train_state"]["params"]
    assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(params))
    # The rollout dispatched after the diverged iteration sent MuJoCo no NaN controls (it would log them).
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists() and "Nan" not in result.stdout


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
