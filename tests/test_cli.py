"""The command line: bad input is one line and a non-zero exit, the ranges of the flags, the quick EnvPool import."""

import dataclasses
import os
import signal
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

import ppo_continuous_envpool_jax as ppo
from tests.support import REPORT, SCRIPT, run_script


def test_the_quick_envpool_import_registers_every_mujoco_task():
    """The script skips EnvPool's import of every family; its MuJoCo registry must still be complete."""

    def run(code):
        return subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=SCRIPT.parent
        ).stdout.strip()

    report = "print(ppo.mujoco_env_ids(), 'envpool.jumanji' in sys.modules, 'matplotlib' in sys.modules)"
    # Importing envpool first makes EnvPool register everything, as it does on its own.
    full = run(f"import sys, envpool, ppo_continuous_envpool_jax as ppo; {report}")
    quick = run(f"import sys, ppo_continuous_envpool_jax as ppo; {report}")
    assert full.endswith("True True") and "'HalfCheetah-v4'" in full and "'CheetahRun-v1'" in full
    assert quick == full.replace("True True", "False False")


@pytest.mark.parametrize(
    "cli_args, message",
    [
        (["--env-id", "HalfCheeta-v4"], "unknown --env-id 'HalfCheeta-v4'; did you mean HalfCheetah-v4"),
        (["--env-id", "CartPole-v1"], "--env-id CartPole-v1 has discrete actions"),
        (["--env-id", "Pendulum-v1"], "--env-id Pendulum-v1 is not an EnvPool MuJoCo task"),
        (["--env-id", "CheetahRunn-v1"], "unknown --env-id 'CheetahRunn-v1'; did you mean CheetahRun-v1"),
        (["--env-id", "metaworld/reach-v3"], "did you mean MetaWorld/Reach-v3"),
        (["--env-id", "CarRacing-v3"], "--env-id CarRacing-v3 has pixel observations; this PPO trains one player's"),
        (["--env-id", "Pong-v5"], "--env-id Pong-v5 has discrete actions and pixel observations;"),
        (["--env-id", "IntersectionMultiAgent-v0"], "IntersectionMultiAgent-v0 has discrete actions and 2 players;"),
        (["--env-id", "LqrLqr21-v1"], "--env-id LqrLqr21-v1 has unbounded actions; this PPO trains"),
        (["--exp-name", "sweep/a"], "--exp-name must be a file name, not empty and without '/' or a leading '.'"),
        (["--exp-name", ""], "--exp-name must be a file name"),
        (["--num-minibatches", "3"], "--num-minibatches 3 does not divide the batch"),
        (["--num-envs", "0"], "--num-envs must be positive, got 0"),
        (["--num-steps", "-1"], "--num-steps must be positive, got -1"),
        (["--total-timesteps", "0"], "--total-timesteps must be positive, got 0"),
        (["--total-timesteps", "100"], "--total-timesteps 100 is less than one batch (2048 steps)"),
        (["--learning-rate", "nan"], "--learning-rate must be finite and positive, got nan"),
        (["--learner-device", "xpu"], "--learner-device must be auto, cpu, gpu or tpu, with :index where given"),
        (["--learner-device", "tpu:first"], "--learner-device must be auto, cpu, gpu or tpu, with :index where given"),
        (["--learner-device", "cpu:7"], "--learner-device cpu:7: no such device"),
        (["--policy-lag", "--reward-norm", "return"], "--policy-lag excludes --reward-norm return"),
        (["--rpo-alpha", "-0.5"], "--rpo-alpha must be finite and non-negative, got -0.5"),
        (["--rpo-alpha", "0.5", "--target-kl", "0.01"], "--target-kl excludes --rpo-alpha"),
        # 1 x 32 steps in 32 minibatches: samples alone, each advantage normalised to 0
        (["--num-envs", "1"], "--norm-adv needs minibatches of 2 or more samples: give fewer than 32 minibatches"),
        # 9,765,625 iterations x 10 epochs x 32 minibatches of gym's defaults
        (["--total-timesteps", "20000000000"], "--total-timesteps 20000000000 needs 2**31 or more gradient steps"),
        (["--env-id"], "argument --env-id/--env_id: expected one argument"),  # read before tyro
        (["--seed", "1", "--resume"], "argument --resume: expected one argument"),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_a_nonzero_exit(tmp_path, cli_args, message):
    result = run_script(*cli_args, cwd=tmp_path)
    assert result.returncode != 0
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and message in line
    assert not (tmp_path / "runs").exists()


def test_a_backend_that_jax_cannot_open_is_one_line(tmp_path):
    """Where JAX_PLATFORMS names a backend that JAX cannot open (on the TPU machine: a chip that another process
    holds), JAX raises at its first device query, `auto`'s included: one line, before the run starts."""
    result = run_script(cwd=tmp_path, env={**os.environ, "JAX_PLATFORMS": "nosuch"})
    assert result.returncode != 0
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: --learner-device auto: Unable to initialize backend 'nosuch'")
    assert line.endswith("; --learner-device cpu runs without it")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "command", [[SCRIPT, "--list-tasks"], [SCRIPT, "--help"], [REPORT, "--help"]], ids=["list", "help", "report"]
)
def test_a_reader_that_has_gone_ends_the_output_quietly(command):
    """`--list-tasks | head`: the pipe's reader is gone before the writer is done. Unix tools end quietly, killed
    by SIGPIPE (status 141 in a shell); Python raises BrokenPipeError instead, whose traceback must not show."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first write: every write fails, as after `head` exits
    try:
        result = subprocess.run(
            [sys.executable, *command], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120, check=False
        )
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (128 + signal.SIGPIPE, "")


@pytest.mark.parametrize(
    "flag, value, requirement",
    [
        ("--gamma", "1.5", "in (0, 1]"),
        ("--gamma", "0", "in (0, 1]"),
        ("--gae-lambda", "-0.1", "in [0, 1]"),
        ("--gae-lambda", "1.01", "in [0, 1]"),
        ("--clip-coef", "-1", "positive"),
        ("--clip-coef", "0", "positive"),
        ("--max-grad-norm", "0", "positive"),
        ("--learning-rate", "inf", "finite and positive"),
        ("--learning-rate", "-3e-4", "finite and positive"),
        ("--ent-coef", "-0.01", "finite and non-negative"),
        ("--ent-coef", "nan", "finite and non-negative"),
        ("--vf-coef", "inf", "finite and non-negative"),
        ("--vf-coef", "-1", "finite and non-negative"),
        ("--ent-max-log-std", "inf", "finite where given"),
        ("--target-kl", "0", "positive where given"),
        ("--target-kl", "nan", "positive where given"),
        ("--adam-eps", "0", "finite and positive"),
        ("--init-log-std", "-inf", "finite"),
        ("--eval-every", "-1", "0 (off) or positive"),
        ("--eval-episodes", "0", "positive"),
        ("--num-threads", "-1", "0 (automatic) or positive"),
        ("--seed", "-1", "in [0, 2**31 - 1] (EnvPool's seeds are int32)"),
        ("--seed", "2147483648", "in [0, 2**31 - 1] (EnvPool's seeds are int32)"),
    ],
)
def test_out_of_range_hyperparameters_are_refused_with_the_allowed_range(flag, value, requirement):
    with pytest.raises(SystemExit) as exit_info:
        ppo.parse_args([flag, value])
    prefix = f"error: {flag} must be {requirement}, got "
    assert exit_info.value.code.startswith(prefix)
    np.testing.assert_equal(float(exit_info.value.code[len(prefix) :]), float(value))  # NaN equals NaN here


@pytest.mark.parametrize(
    "cli_args",
    [
        ["--gamma", "1", "--gae-lambda", "0"],
        ["--gae-lambda", "1", "--ent-coef", "0", "--vf-coef", "0", "--eval-every", "0"],
        ["--init-log-std", "-3", "--target-kl", "0.01", "--num-threads", "0"],
        ["--seed", "0"],
        ["--seed", "2147483647", "--exp-name", "a.b"],
        ["--num-envs", "1", "--no-norm-adv"],
    ],
)
def test_the_edges_of_each_range_are_accepted(cli_args):
    ppo.parse_args(cli_args)


def test_the_bound_on_gradient_steps_is_optaxs_int32():
    """--anneal-lr's schedule counts gradient steps in int32: the most iterations it holds (320 gradient steps
    each at 2 x 32 steps) are accepted and their schedule runs; one more is refused, and would fail in optax."""
    most = 2**31 // 320
    accepted, _ = ppo.parse_args(["--num-envs", "2", "--total-timesteps", str(most * 64)])
    assert accepted.num_iterations == most
    ppo.make_optimizer(accepted)[1](jnp.int32(0))
    with pytest.raises(SystemExit) as exit_info:
        ppo.parse_args(["--num-envs", "2", "--total-timesteps", str((most + 1) * 64)])
    assert "needs 2**31 or more gradient steps" in exit_info.value.code
    with pytest.raises(OverflowError):
        ppo.make_optimizer(dataclasses.replace(accepted, num_iterations=most + 1))[1](jnp.int32(0))
