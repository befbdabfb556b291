"""End-to-end: the command line, its logs, learning on an easy task, determinism and bad input."""

import os
import subprocess
import sys
from functools import partial

import envpool
import jax
import numpy as np
import pytest
from flax.training.train_state import TrainState
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import ppo_continuous_envpool_jax as ppo
from tests.support import SCRIPT, SMALL, only_run_dir, run_script, scalars

METRICS = [
    "charts/episodic_return",
    "charts/episodic_length",
    "charts/SPS",
    "charts/learning_rate",
    "losses/value_loss",
    "losses/policy_loss",
    "losses/entropy",
    "losses/approx_kl",
    "losses/old_approx_kl",
    "losses/clipfrac",
    "losses/explained_variance",
]


def test_cli_run_logs_every_metric(tmp_path):
    result = run_script("--env-id", "Hopper-v4", "--total-timesteps", "4096", *SMALL, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    # Not a terminal: one plain progress line per iteration, no progress bar.
    assert [line.split()[0] for line in result.stdout.splitlines()] == [f"iteration={i}/8" for i in range(1, 9)]
    run_dir = only_run_dir(tmp_path)
    assert run_dir.name.startswith("Hopper-v4__ppo_continuous_envpool_jax__1__")
    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert set(METRICS) <= set(events.Tags()["scalars"])
    assert [event.step for event in events.Scalars("charts/SPS")] == [512 * i for i in range(1, 9)]
    assert "hyperparameters/text_summary" in events.Tags()["tensors"]


class RecordingWriter:
    """Stands in for TensorBoard's writer: keeps every scalar in memory."""

    def __init__(self):
        self.scalars = {}

    def add_scalar(self, tag, value, step):
        self.scalars.setdefault(tag, []).append((step, float(value)))


def random_policy_return(env_id, num_envs=16, steps=500):
    envs = envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, seed=0)
    envs.reset()
    rng = np.random.default_rng(0)
    returns, running = [], np.zeros(num_envs)
    for _ in range(steps):
        _, reward, terminated, truncated, _info = envs.step(rng.uniform(-1, 1, (num_envs, 1)))
        running += reward
        done = terminated | truncated
        returns.extend(running[done])
        running[done] = 0.0
    return float(np.mean(returns))


@pytest.mark.parametrize(
    "recipe",
    [[], ["--reward-norm", "return", "--no-norm-adv", "--no-clip-vloss", "--init-log-std", "-0.5"]],
    ids=["defaults", "tianshou"],
)
def test_inverted_pendulum_return_rises_far_above_the_random_policy(recipe):
    args, _ = ppo.parse_args(
        ["--env-id", "InvertedPendulum-v4", "--total-timesteps", "40960", "--num-envs", "16", "--num-steps", "64"]
        + recipe
    )
    writer = RecordingWriter()
    ppo.train(args, writer)
    final_return = writer.scalars["charts/episodic_return"][-1][1]
    random_return = random_policy_return("InvertedPendulum-v4")
    assert random_return < 20
    assert final_return > 20 * random_return


def test_same_seed_gives_identical_metrics():
    cli_args = ["--env-id", "Hopper-v4", "--total-timesteps", "2048", "--seed", "7", *SMALL]
    first, second = RecordingWriter(), RecordingWriter()
    ppo.train(ppo.parse_args(cli_args)[0], first)
    ppo.train(ppo.parse_args(cli_args)[0], second)
    del first.scalars["charts/SPS"], second.scalars["charts/SPS"]
    assert first.scalars == second.scalars
    assert len(first.scalars["losses/value_loss"]) == 4


@pytest.mark.parametrize("reward_norm", ["scale", "return"])
def test_the_overlapped_loop_logs_each_iteration_as_a_loop_that_waits_for_each_one(reward_norm):
    """train() dispatches an iteration before the previous one has run and logs that one afterwards. Run the
    same pieces one iteration at a time, waiting for each: the same figures must land at the same steps.
    With --reward-norm return, the return statistics also pass from each recomputation to the next."""
    cli_args = ["--env-id", "Hopper-v4", "--total-timesteps", "2048", "--seed", "4", "--reward-norm", reward_norm]
    cli_args += SMALL
    writer = RecordingWriter()
    ppo.train(ppo.parse_args(cli_args)[0], writer)

    args, _ = ppo.parse_args(cli_args)
    envs, handle, xla_step = ppo.make_envs(args)
    first_obs, _ = envs.reset()
    network = ppo.ActorCritic(envs.action_space.shape[0], tuple(args.hidden_sizes), args.init_log_std)

    @jax.jit
    def init_states(handle, first_obs):
        env_state = ppo.init_env_state(handle, first_obs, args.norm_obs)
        params = network.init(jax.random.PRNGKey(args.seed), env_state.obs)
        return env_state, TrainState.create(apply_fn=network.apply, params=params, tx=ppo.make_optimizer(args)[0])

    env_state, train_state = init_states(handle, first_obs)
    collect = ppo.make_collect_fn(args, envs, xla_step, network.apply)
    recompute = jax.jit(partial(ppo.recompute_batch, apply_fn=network.apply, args=args))
    update = jax.jit(partial(ppo.update_epoch, args=args))
    learning_rate = ppo.make_optimizer(args)[1]
    expected = {
        "losses/value_loss": [],
        "losses/policy_loss": [],
        "losses/explained_variance": [],
        "charts/learning_rate": [],
        "charts/episodic_return": [],
    }
    for iteration in range(1, args.num_iterations + 1):
        key = jax.random.fold_in(jax.random.PRNGKey(args.seed), iteration)
        env_state, transitions, batch, stats = jax.block_until_ready(collect(train_state.params, env_state, key))
        shuffler = np.random.default_rng((args.seed, iteration))
        return_rms = env_state.return_rms
        for epoch in range(args.update_epochs):
            if epoch > 0:
                batch, return_rms = recompute(train_state.params, transitions, env_state.obs, return_rms)
            train_state, losses = jax.block_until_ready(
                update(train_state, batch, shuffler.permutation(args.batch_size))
            )
        env_state = env_state.replace(return_rms=return_rms)
        step = iteration * args.batch_size
        expected["losses/value_loss"].append((step, float(losses["value_loss"])))
        expected["losses/policy_loss"].append((step, float(losses["policy_loss"])))
        expected["losses/explained_variance"].append((step, float(stats["explained_variance"])))
        expected["charts/learning_rate"].append((step, float(learning_rate(train_state.step))))
        if stats["num_episodes"] > 0:
            expected["charts/episodic_return"].append((step, float(stats["episodic_return"])))
    assert len(expected["charts/episodic_return"]) >= 2  # Hopper's random-ish policy falls within 64 steps
    assert {tag: writer.scalars[tag] for tag in expected} == expected


def test_eval_every_logs_at_each_multiple_crossed_and_at_the_end_and_leaves_training_unchanged():
    """Evaluation runs on environments of its own: the training figures of the seed are those of a run
    without it, and the last evaluation is of the final policy."""
    cli_args = ["--env-id", "Hopper-v4", "--total-timesteps", "4096", "--seed", "5", "--eval-episodes", "3", *SMALL]
    plain, evaluated = RecordingWriter(), RecordingWriter()
    ppo.train(ppo.parse_args(cli_args)[0], plain)
    args, _ = ppo.parse_args([*cli_args, "--eval-every", "1500"])
    result = ppo.train(args, evaluated)

    eval_log = evaluated.scalars.pop("eval/episodic_return")
    # 512 steps an iteration: 1500 is crossed at 1536, 3000 at 3072; 4096 is the last iteration.
    assert [step for step, _ in eval_log] == [1536, 3072, 4096]
    del plain.scalars["charts/SPS"], evaluated.scalars["charts/SPS"]
    assert evaluated.scalars == plain.scalars
    returns, _ = ppo.evaluate(args, ppo.make_policy(args), result.train_state.params, result.env_state.obs_rms)
    assert eval_log[-1][1] == pytest.approx(returns.mean(), rel=1e-6)
    assert len({value for _, value in eval_log}) == 3  # three different policies


def test_recompute_adv_changes_only_the_epochs_after_the_first():
    """--recompute-adv rebuilds the batch with the updated critic before epochs 2, 3, ...: with one epoch per
    iteration it must change nothing, with two it must change the losses."""

    def losses(*extra):
        cli_args = ["--env-id", "Hopper-v4", "--total-timesteps", "1024", "--seed", "3", *SMALL, *extra]
        writer = RecordingWriter()
        ppo.train(ppo.parse_args(cli_args)[0], writer)
        return writer.scalars["losses/value_loss"], writer.scalars["losses/policy_loss"]

    assert losses("--update-epochs", "1", "--no-recompute-adv") == losses("--update-epochs", "1", "--recompute-adv")
    assert losses("--update-epochs", "2", "--no-recompute-adv") != losses("--update-epochs", "2", "--recompute-adv")


def test_a_run_from_the_compilation_cache_logs_what_the_compiling_run_did(tmp_path):
    """The second run loads its set-up and update programs from the persistent cache the first one filled."""
    cache = tmp_path / "cache"
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(cache))
    cli_args = ["--env-id", "Hopper-v4", "--total-timesteps", "1024", "--seed", "5", *SMALL]
    logged = []
    for name in ("cold", "warm"):
        (tmp_path / name).mkdir()
        result = run_script(*cli_args, cwd=tmp_path / name, env=env)
        assert result.returncode == 0, result.stderr
        if name == "cold":
            cached = sorted(path.name.split("-")[0] for path in cache.iterdir())
            assert "jit_update_epoch" in cached and "jit_init_states" in cached
        run_dir = only_run_dir(tmp_path / name)
        logged.append({tag: [value for _, value in scalars(run_dir, tag)] for tag in METRICS if tag != "charts/SPS"})
    assert logged[0] == logged[1]
    assert len(logged[0]["losses/value_loss"]) == 2


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
    assert full.endswith("True True") and "'HalfCheetah-v4'" in full
    assert quick == full.replace("True True", "False False")


@pytest.mark.parametrize(
    "cli_args, message",
    [
        (["--env-id", "HalfCheeta-v4"], "unknown --env-id 'HalfCheeta-v4'; did you mean HalfCheetah-v4"),
        (["--env-id", "CartPole-v1"], "--env-id CartPole-v1 has discrete actions"),
        (["--env-id", "Pendulum-v1"], "--env-id Pendulum-v1 is not an EnvPool MuJoCo task"),
        (["--num-minibatches", "3"], "--num-minibatches 3 does not divide the batch"),
        (["--num-envs", "0"], "--num-envs must be positive, got 0"),
        (["--num-steps", "-1"], "--num-steps must be positive, got -1"),
        (["--total-timesteps", "0"], "--total-timesteps must be positive, got 0"),
        (["--total-timesteps", "100"], "--total-timesteps 100 is less than one batch (2048 steps)"),
        (["--learning-rate", "nan"], "--learning-rate must be finite and positive, got nan"),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_a_nonzero_exit(tmp_path, cli_args, message):
    result = run_script(*cli_args, cwd=tmp_path)
    assert result.returncode != 0
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and message in line
    assert not (tmp_path / "runs").exists()


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
        ("--target-kl", "0", "positive where given"),
        ("--target-kl", "nan", "positive where given"),
        ("--adam-eps", "0", "finite and positive"),
        ("--init-log-std", "-inf", "finite"),
        ("--eval-every", "-1", "0 (off) or positive"),
        ("--eval-episodes", "0", "positive"),
        ("--num-threads", "-1", "0 (automatic) or positive"),
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
    ],
)
def test_the_edges_of_each_range_are_accepted(cli_args):
    ppo.parse_args(cli_args)
