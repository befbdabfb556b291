"""Keeping a run: the saved model, periodic checkpoints, signals, SIGKILL and --resume, the NaN guard.

Each test runs the real thing where it can: the script in a subprocess on real EnvPool environments, real
files, real signals. Every wait on a process is bounded.
"""

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import flax
import jax
import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import ppo_continuous_envpool_jax as ppo
import report
from tests.support import (
    HOPPER,
    MODEL_NAME,
    REPO,
    only_run_dir,
    parsed_scalars,
    read_events,
    run_script,
    scalars,
    script_command,
    wait_for_line,
)

EVERY_ITERATION = ["--checkpoint-every-seconds", "1e-9"]


def start(cwd, *cli_args):
    return subprocess.Popen(
        script_command(*cli_args), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def signal_after_first_iteration(cwd, signum, *cli_args):
    process = start(cwd, *cli_args)
    wait_for_line(process, "iteration=1/")
    process.send_signal(signum)
    _stdout, stderr = process.communicate(timeout=300)
    return process.returncode, stderr


def test_saved_model_holds_parameters_optimizer_and_observation_statistics(saved_run):
    run_dir, stdout = saved_run
    model_path = run_dir / MODEL_NAME
    assert f"model saved to runs/{run_dir.name}/{model_path.name}" in stdout
    checkpoint = ppo.load_checkpoint(str(model_path))
    assert checkpoint["args"].env_id == "Hopper-v4" and checkpoint["global_step"] == 4096
    # Every observation EnvPool returned was merged: 8 first observations plus one per step.
    assert checkpoint["obs_rms"].count == pytest.approx(1e-4 + 8 + 4096)
    # 8 iterations x 2 epochs x 4 minibatches of Adam steps.
    assert checkpoint["train_state"]["step"] == 64
    assert checkpoint["train_state"]["opt_state"]["1"]["0"]["count"] == 64
    assert checkpoint["train_state"]["params"]["params"]["log_std"].shape == (3,)


@pytest.mark.parametrize("signum, exit_code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_saves_the_model_flushes_the_logs_and_exits_with_128_plus_signal(tmp_path, signum, exit_code):
    returncode, stderr = signal_after_first_iteration(tmp_path, signum, *HOPPER, "--save-model")
    assert returncode == exit_code
    run_dir = only_run_dir(tmp_path)
    model_path = f"runs/{run_dir.name}/{MODEL_NAME}"
    stopped = re.search(
        rf"stopped by {signal.Signals(signum).name} at global_step (\d+); state saved to (\S+) "
        r"\(continue with --resume (\S+)\)",
        stderr,
    )
    assert stopped and stopped.group(2) == model_path and stopped.group(3) == f"runs/{run_dir.name}"
    global_step = int(stopped.group(1))
    assert ppo.load_checkpoint(str(tmp_path / model_path))["global_step"] == global_step
    assert scalars(run_dir, "charts/SPS")[-1][0] == global_step


@pytest.mark.parametrize("checkpoints, kept", [([], True), (["--checkpoint-every-seconds", "0"], False)])
def test_a_stopped_run_keeps_its_state_without_save_model_while_checkpoints_are_on(tmp_path, checkpoints, kept):
    returncode, stderr = signal_after_first_iteration(tmp_path, signal.SIGTERM, *HOPPER, *checkpoints)
    assert returncode == 143
    assert (only_run_dir(tmp_path) / MODEL_NAME).exists() == kept
    assert ("continue with --resume" in stderr) == kept


def test_a_checkpoint_is_removed_at_the_end_unless_save_model(tmp_path):
    for name, extra in (("plain", []), ("kept", ["--save-model"])):
        (tmp_path / name).mkdir()
        result = run_script(*HOPPER, "--total-timesteps", "2048", *EVERY_ITERATION, *extra, cwd=tmp_path / name)
        assert result.returncode == 0, result.stderr
    assert not (only_run_dir(tmp_path / "plain") / MODEL_NAME).exists()
    assert ppo.load_checkpoint(str(only_run_dir(tmp_path / "kept") / MODEL_NAME))["global_step"] == 2048


def test_resume_continues_steps_optimizer_and_learning_rate_schedule(tmp_path):
    returncode, _ = signal_after_first_iteration(tmp_path, signal.SIGTERM, *HOPPER, "--save-model")
    assert returncode == 143
    run_dir = only_run_dir(tmp_path)
    model_path = run_dir / MODEL_NAME
    saved_step = ppo.load_checkpoint(str(model_path))["global_step"]
    total = saved_step + 1024

    result = run_script("--resume", str(model_path), "--total-timesteps", str(total), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert only_run_dir(tmp_path) == run_dir  # the same run goes on
    resumed = [(step, lr) for step, lr in scalars(run_dir, "charts/learning_rate") if step > saved_step]
    assert [step for step, _ in resumed] == [saved_step + 512, saved_step + 1024]
    # Linear decay over all 8-per-iteration Adam steps: the count went on from the saved one. Each iteration
    # logs the rate of its first step.
    updates_per_iteration, num_updates = 2 * 4, (total // 512) * 2 * 4
    for step, lr in resumed:
        count = (step // 512 - 1) * updates_per_iteration
        # float32 in the compiled schedule: equal to within its rounding.
        assert lr == pytest.approx(3e-4 * (1 - count / num_updates), rel=1e-5, abs=1e-9)
    checkpoint = ppo.load_checkpoint(str(model_path))
    assert checkpoint["global_step"] == total and checkpoint["train_state"]["step"] == total // 512 * 8


def test_a_killed_run_resumes_from_its_checkpoint_and_supersedes_what_it_logged_after_it(tmp_path):
    """SIGKILL leaves no time to save: the run goes on from its last periodic checkpoint. Here that checkpoint
    is an older one put back (so the log certainly holds steps past it); the resumed run must end at the
    requested step with a model, and TensorBoard's view of the run must be one log, each step once, the
    steps after the checkpoint those of the resumed run."""
    process = start(tmp_path, *HOPPER, "--total-timesteps", "8192", *EVERY_ITERATION, "--save-model")
    run_dir = tmp_path / wait_for_line(process, "run_dir=").strip().split("=", 1)[1]
    model_path = run_dir / MODEL_NAME
    wait_for_line(process, "iteration=4/")
    shutil.copy(model_path, tmp_path / "older.model")  # the checkpoint of iteration 3 or 4
    wait_for_line(process, "iteration=9/")
    process.kill()
    process.communicate(timeout=60)
    # The killed run's log holds value losses past the checkpoint (read as written, nothing purged).
    killed = {step: value for step, value, _ in parsed_scalars(read_events(run_dir), "losses/value_loss")}
    shutil.copy(tmp_path / "older.model", model_path)
    saved_step = ppo.load_checkpoint(str(model_path))["global_step"]
    assert saved_step in (3 * 512, 4 * 512)

    result = run_script("--resume", str(run_dir), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"run_dir={run_dir}"
    assert ppo.load_checkpoint(str(model_path))["global_step"] == 8192
    assert max(killed) >= 8 * 512
    # TensorBoard shows every step once, in order, those after the checkpoint from the resumed run.
    logged = scalars(run_dir, "losses/value_loss")
    assert [step for step, _ in logged] == list(range(512, 8192 + 1, 512))
    assert [value for step, value in logged if step <= saved_step] == [
        pytest.approx(killed[step]) for step in range(512, saved_step + 1, 512)
    ]
    assert [value for step, value in logged if saved_step < step <= 8 * 512] != [
        pytest.approx(killed[step]) for step in range(saved_step + 512, 8 * 512 + 1, 512)
    ]  # the environments restarted: a resumed run sees other episodes than the killed one did
    # report.py reads it as one run of 8192 steps.
    assert report.main([str(tmp_path / "runs"), "--out-dir", str(tmp_path / "report"), "--no-plots"]) == 0
    with open(tmp_path / "report" / "runs.csv") as f:
        (row,) = csv.DictReader(f)
    assert (row["status"], row["steps"]) == ("included", "8192")


def flatten(tree) -> dict:
    return {jax.tree_util.keystr(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def test_the_restored_state_is_the_saved_one(saved_run):
    """Read a second way, straight from the msgpack file: the parameters, optimizer state and statistics that
    training starts from after --resume are the saved ones; the observation statistics then take in the
    first observations of the environments, which start afresh."""
    run_dir, _ = saved_run
    raw = flax.serialization.msgpack_restore((run_dir / MODEL_NAME).read_bytes())
    args, checkpoint = ppo.parse_args(["--resume", str(run_dir), "--total-timesteps", "8192"])
    envs, handle, xla_step = ppo.make_envs(args.env_id, args.num_envs, args.num_threads, args.seed)
    start = ppo.reset_start(envs)
    state = ppo.initial_state(ppo.make_programs(args, envs, xla_step), handle, start, checkpoint)
    restored = flatten(flax.serialization.to_state_dict(jax.device_get(state.train_state)))
    saved = flatten(raw["train_state"])
    assert restored.keys() == saved.keys() and len(saved) > 10
    for path, value in saved.items():
        np.testing.assert_array_equal(restored[path], value, err_msg=path)
    assert state.global_step == raw["global_step"] == 4096
    np.testing.assert_array_equal(state.env_state.return_rms.var, raw["return_rms"]["var"])
    # Chan's merge of the saved moments with the 8 first observations, in float64.
    saved_mean, saved_var, saved_count = (np.float64(raw["obs_rms"][key]) for key in ("mean", "var", "count"))
    batch = start.obs.astype(np.float64)
    count = saved_count + len(batch)
    delta = batch.mean(0) - saved_mean
    mean = saved_mean + delta * len(batch) / count
    var = (saved_var * saved_count + batch.var(0) * len(batch) + delta**2 * saved_count * len(batch) / count) / count
    np.testing.assert_allclose(state.env_state.obs_rms.mean, mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state.env_state.obs_rms.var, var, rtol=1e-4)
    assert float(state.env_state.obs_rms.count) == pytest.approx(count)


def block_the_next_checkpoint(tmp_file):
    """A directory where the next checkpoint is written, so that writing it fails. The script may be writing
    iteration 3's at this moment, the file existing for the milliseconds before its rename: try again until
    it is gone (bounded)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return tmp_file.mkdir()
        except FileExistsError:
            if time.monotonic() > deadline:
                raise


def test_an_unwritable_checkpoint_is_one_line_and_the_last_good_one_is_kept(tmp_path):
    process = start(tmp_path, *HOPPER, "--total-timesteps", "8192", *EVERY_ITERATION)
    run_dir = tmp_path / wait_for_line(process, "run_dir=").strip().split("=", 1)[1]
    wait_for_line(process, "iteration=3/")
    block_the_next_checkpoint(run_dir / f"{MODEL_NAME}.tmp")
    _stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 1
    last_line = stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"error: cannot write the checkpoint \S+: .* \(the previous one, if any, is kept\)", last_line)
    # Iteration 2's checkpoint was written before line 3 was printed; iteration 3's may have been too.
    assert ppo.load_checkpoint(str(run_dir / MODEL_NAME))["global_step"] in (2 * 512, 3 * 512)


def test_a_kept_model_resumed_without_save_model_stays_kept_and_ends_as_the_final_model(saved_run, tmp_path):
    """Checkpoints would overwrite the model file while the resumed run goes on: the model the user kept stays
    kept, and goes on to the final state, however often it is resumed."""
    run_dir = tmp_path / "runs" / saved_run[0].name
    shutil.copytree(saved_run[0], run_dir)
    no_checkpoint_before_the_end = ["--checkpoint-every-seconds", "1e9"]
    for total in (5120, 6144):
        result = run_script(
            "--resume", f"runs/{run_dir.name}", "--no-save-model", "--total-timesteps", str(total),
            *no_checkpoint_before_the_end, cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert f"model saved to runs/{run_dir.name}/{MODEL_NAME}" in result.stdout
        checkpoint = ppo.load_checkpoint(str(run_dir / MODEL_NAME))
        assert checkpoint["global_step"] == total and checkpoint["args"].save_model


@pytest.mark.parametrize("total", [4096, 4600])  # 4600: 504 steps more, less than a batch of 8 x 64
def test_a_run_stopped_after_its_last_iteration_resumes_to_its_end(saved_run, tmp_path, total):
    """A run killed in its final evaluation leaves its model at the last step and no result: the same command
    again ends it (no iteration, then the final evaluation and the summary)."""
    run_dir = tmp_path / "runs" / saved_run[0].name
    shutil.copytree(saved_run[0], run_dir)
    (run_dir / "summary.json").unlink()
    result = run_script("--resume", f"runs/{run_dir.name}", "--total-timesteps", str(total), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "iteration=" not in result.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    uninterrupted = json.loads((saved_run[0] / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["global_step"] == 4096
    assert summary["final_return"] == uninterrupted["final_return"]
    # The same policy on the same episodes; as at every resume, the restarted environments' first observations
    # update the observation statistics a little.
    assert summary["last_eval"]["return"] == pytest.approx(uninterrupted["last_eval"]["return"], rel=1e-2)


def test_resume_of_a_directory_without_a_model_is_one_line(tmp_path):
    result = run_script("--resume", str(tmp_path), cwd=tmp_path)
    assert result.returncode != 0
    assert result.stderr.strip() == f"error: {tmp_path} holds no .model file; name the model file to use"


def test_resume_refuses_a_different_task(saved_run, tmp_path):
    run_dir, _ = saved_run
    result = run_script("--resume", str(run_dir / MODEL_NAME), "--env-id", "Ant-v4", cwd=tmp_path)
    assert result.returncode != 0
    assert result.stderr.strip() == "error: --env-id Ant-v4 differs from the saved model's Hopper-v4"


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--num-envs", "16"], "--num-envs 16 differs from the saved model's 8"),
        (["--num-minibatches", "2"], "--num-minibatches 2 differs from the saved model's 4"),
        (["--total-timesteps", "4000"], "--total-timesteps 4000 is less than the saved run's 4096 steps"),
    ],
)
def test_resume_refuses_another_batch_and_a_total_already_passed(saved_run, flags, message):
    """The learning-rate schedule counts gradient steps and the iteration keys count batches: both must
    mean what they meant when the run was saved, and a run cannot go back."""
    run_dir, _ = saved_run
    with pytest.raises(SystemExit) as exit_info:
        ppo.parse_args(["--resume", str(run_dir), *flags])
    assert exit_info.value.code.startswith(f"error: {message}")


def test_a_second_signal_aborts_in_one_line_and_keeps_the_last_checkpoint(tmp_path):
    # iterations of 16,384 steps: the first signal's stop at the iteration's end is still ahead when the
    # second arrives; a checkpoint after every iteration, so one is on disk before the signals
    flags = ["--env-id", "Hopper-v4", "--num-envs", "8", "--num-steps", "2048", "--total-timesteps", "1000000"]
    process = start(tmp_path, *flags, "--checkpoint-every-seconds", "0.001")
    wait_for_line(process, "iteration=2/")  # iteration 1's checkpoint is written before iteration 2 starts
    process.send_signal(signal.SIGINT)
    while not (line := process.stderr.readline()).startswith("SIGINT: stopping after this iteration"):
        assert line, "the run ended before saying it would stop"  # lines before: the libraries' start-up
    process.send_signal(signal.SIGINT)
    _stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130
    assert stderr == "\nSIGINT again: aborting without saving\n"  # one line, no traceback
    checkpoint = ppo.load_checkpoint(str(only_run_dir(tmp_path) / MODEL_NAME))
    assert checkpoint["global_step"] in (16384, 2 * 16384)  # iteration 1's, or 2's if saved in between


def test_a_repeated_sigterm_is_ignored_and_the_run_saves_its_state(tmp_path):
    """A sweep forwards its SIGTERM to its runs; sent to the sweep's process group, each run gets two."""
    flags = ["--env-id", "Hopper-v4", "--num-envs", "8", "--num-steps", "2048", "--total-timesteps", "1000000"]
    process = start(tmp_path, *flags, "--checkpoint-every-seconds", "1e9")
    wait_for_line(process, "iteration=1/")
    process.send_signal(signal.SIGTERM)
    while not (line := process.stderr.readline()).startswith("SIGTERM: stopping after this iteration"):
        assert line, "the run ended before saying it would stop"
    process.send_signal(signal.SIGTERM)
    _stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 143
    assert "aborting" not in stderr
    summary = json.loads((only_run_dir(tmp_path) / "summary.json").read_text())
    assert (summary["status"], summary["detail"]) == ("interrupted", "SIGTERM")
    # the state at the iteration where it stopped, saved on the way out (no checkpoint was due before)
    assert ppo.load_checkpoint(str(only_run_dir(tmp_path) / MODEL_NAME))["global_step"] == summary["global_step"]


SIGTERM_DURING_THE_SAVE = """
import os, signal, sys
import ppo_continuous_envpool_jax as ppo
log, save = ppo.IterationLogger.log, ppo.save_checkpoint
def log_then_sigterm(self, *args, **kwargs):  # the run is told to stop in its first iteration
    os.kill(os.getpid(), signal.SIGTERM)
    return log(self, *args, **kwargs)
def sigterm_then_save(*args, **kwargs):  # and again as it saves its state
    os.kill(os.getpid(), signal.SIGTERM)
    return save(*args, **kwargs)
ppo.IterationLogger.log, ppo.save_checkpoint = log_then_sigterm, sigterm_then_save
ppo.main(sys.argv[1:])
"""


def test_a_sigterm_while_a_stopping_run_saves_its_state_is_ignored(tmp_path):
    cli_args = [*HOPPER, "--total-timesteps", "4096", "--checkpoint-every-seconds", "1e9"]
    result = subprocess.run(
        [sys.executable, "-c", SIGTERM_DURING_THE_SAVE, *cli_args],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert result.returncode == 143, result.stderr
    summary = json.loads((only_run_dir(tmp_path) / "summary.json").read_text())
    assert (summary["status"], summary["detail"]) == ("interrupted", "SIGTERM")
    assert ppo.load_checkpoint(str(only_run_dir(tmp_path) / MODEL_NAME))["global_step"] == summary["global_step"]


def test_a_resumed_run_stopped_early_keeps_the_checkpoint_it_resumed_from(tmp_path):
    returncode, _ = signal_after_first_iteration(tmp_path, signal.SIGTERM, *HOPPER, "--total-timesteps", "8192")
    assert returncode == 143
    run_dir = only_run_dir(tmp_path)
    saved_step = ppo.load_checkpoint(str(run_dir / MODEL_NAME))["global_step"]
    process = start(tmp_path, "--resume", str(run_dir), "--checkpoint-every-seconds", "0")
    wait_for_line(process, "iteration=")
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=300)
    assert process.returncode == 143
    assert ppo.load_checkpoint(str(run_dir / MODEL_NAME))["global_step"] >= saved_step


def test_resume_refuses_another_reward_normalisation(saved_run):
    """The critic of a --reward-norm scale run predicts scaled returns; the statistics are of another return."""
    run_dir, _ = saved_run
    with pytest.raises(SystemExit) as exit_info:
        ppo.parse_args(["--resume", str(run_dir / MODEL_NAME), "--reward-norm", "return"])
    assert exit_info.value.code == "error: --reward-norm return differs from the saved model's scale"


@pytest.mark.parametrize(("scale_reward", "reward_norm"), [(True, "scale"), (False, "none")])
def test_a_model_saved_with_scale_reward_loads_as_the_matching_reward_norm(
    saved_run, tmp_path, scale_reward, reward_norm
):
    """Models saved before --reward-norm have --scale-reward in their flags."""
    run_dir, _ = saved_run
    state = flax.serialization.msgpack_restore((run_dir / MODEL_NAME).read_bytes())
    old_args = json.loads(state["args"])
    added = ("reward_norm", "clip_action", "adam_eps", "init_log_std", "recompute_adv", "eval_every")
    for name in (*added, "checkpoint_every_seconds"):
        del old_args[name]
    old_args["scale_reward"] = scale_reward
    state["args"] = json.dumps(old_args)
    old_model = tmp_path / "old.model"
    old_model.write_bytes(flax.serialization.msgpack_serialize(state))
    args = ppo.load_checkpoint(str(old_model))["args"]
    assert args.reward_norm == reward_norm and args.seed == 2 and args.clip_action
    assert args.init_log_std == 0.0  # what those models were initialised with, not today's default
    assert not args.recompute_adv  # and trained with: resumed, they go on as they were trained


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("truncated", r".+"),  # msgpack's own words
        ("without obs_rms", r"it has no obs_rms"),
        ("statistics without count", r".*count.*"),
    ],
)
def test_a_damaged_model_file_is_one_line_naming_the_file(saved_run, tmp_path, damage, reason):
    """Whatever is wrong with the file, --evaluate and --resume get one line, not a traceback later."""
    run_dir, _ = saved_run
    data = (run_dir / MODEL_NAME).read_bytes()
    state = flax.serialization.msgpack_restore(data)
    if damage == "truncated":
        damaged = data[: len(data) // 2]
    elif damage == "without obs_rms":
        del state["obs_rms"]
        damaged = flax.serialization.msgpack_serialize(state)
    else:
        del state["return_rms"]["count"]
        damaged = flax.serialization.msgpack_serialize(state)
    path = tmp_path / "damaged.model"
    path.write_bytes(damaged)
    for flag in ("--evaluate", "--resume"):
        with pytest.raises(SystemExit) as exit_info:
            ppo.parse_args([flag, str(path)])
        assert re.fullmatch(rf"error: cannot read a model from {re.escape(str(path))}: {reason}", exit_info.value.code)


def test_non_finite_loss_stops_with_the_iteration_and_quantity_and_keeps_the_last_finite_model(tmp_path):
    result = run_script(*HOPPER, "--learning-rate", "1e30", "--max-grad-norm", "1e30", "--save-model", cwd=tmp_path)
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert re.fullmatch(
        r"error: training diverged: non-finite (losses/\w+|parameter \S+).* at iteration \d+ \(global_step \d+\); "
        r"the last finite state is in runs/\S+\.model",
        line,
    )
    model_path = tmp_path / line.rsplit(" ", 1)[1]
    params = ppo.load_checkpoint(str(model_path))["train_state"]["params"]
    assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(params))
    # The rollout dispatched after the diverged iteration sent MuJoCo no NaN controls (it would log them).
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists() and "Nan" not in result.stdout
    # The run says so in its log, at the diverged iteration's step, where report.py finds it: listed as
    # diverged, in no mean.
    diverged_step = int(re.search(r"\(global_step (\d+)\)", line)[1])
    acc = EventAccumulator(str(model_path.parent))
    acc.Reload()
    (failure,) = acc.Tensors(report.FAILURE_TAG)
    assert failure.step == diverged_step
    assert failure.tensor_proto.string_val[0].decode() in line  # the error line, without "error: " and the path
    assert report.main([str(tmp_path / "runs"), "--out-dir", str(tmp_path / "report"), "--no-plots"]) == 0
    with open(tmp_path / "report" / "runs.csv", newline="") as f:
        assert [row["status"] for row in csv.DictReader(f)] == ["diverged"]


def test_ctrl_c_in_the_final_evaluation_is_one_line_and_keeps_the_saved_model(tmp_path, monkeypatch, capsys):
    """After `train`, Ctrl-C is Python's KeyboardInterrupt again; main turns it into one line and exit 130."""

    def interrupted(*_args):
        raise KeyboardInterrupt

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ppo, "evaluate", interrupted)
    with pytest.raises(SystemExit) as exit_info:
        ppo.main([*HOPPER, "--total-timesteps", "1024", "--save-model"])  # evaluates the saved model at the end
    assert exit_info.value.code == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "SIGINT: interrupted (a model file being written keeps its previous version)"
    )
    # The model was saved before the evaluation, and holds the whole run; the run says it was interrupted.
    assert ppo.load_checkpoint(str(only_run_dir(tmp_path) / MODEL_NAME))["global_step"] == 1024
    with open(only_run_dir(tmp_path) / "summary.json") as f:
        assert {key: value for key, value in json.load(f).items() if key in ("status", "detail")} == {
            "status": "interrupted",
            "detail": "SIGINT",
        }
