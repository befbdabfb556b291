"""Training: what a run logs, learning on an easy task, determinism, the overlapped loop, the compilation cache."""

import os
from functools import partial

import envpool
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import ppo_continuous_envpool_jax as ppo
from tests.support import SMALL, RecordingWriter, only_run_dir, run_script, scalars, train_recorded

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
    # Not a terminal: the run directory, its family, its devices, one plain progress line per iteration (no
    # progress bar), the summary.
    run_dir = only_run_dir(tmp_path)
    first_line, family, devices, *progress, summary = result.stdout.splitlines()
    assert (first_line, family) == (f"run_dir=runs/{run_dir.name}", "family=gym (no family defaults)")
    assert devices == "devices: rollout cpu:0 (XLA threads: 1), learner cpu:0"
    assert [line.split()[0] for line in progress] == [f"iteration={i}/8" for i in range(1, 9)]
    assert summary.startswith("summary: status=ok steps=4096/4096 ")
    assert run_dir.name.startswith("Hopper-v4__ppo_continuous_envpool_jax__1__")
    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert set(METRICS) <= set(events.Tags()["scalars"])
    assert [event.step for event in events.Scalars("charts/SPS")] == [512 * i for i in range(1, 9)]
    assert "hyperparameters/text_summary" in events.Tags()["tensors"]


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
    _, logged = train_recorded(args)
    final_return = logged["charts/episodic_return"][-1][1]
    random_return = random_policy_return("InvertedPendulum-v4")
    assert random_return < 20
    assert final_return > 20 * random_return


def test_same_seed_gives_identical_metrics():
    cli_args = ["--env-id", "Hopper-v4", "--total-timesteps", "2048", "--seed", "7", *SMALL]
    _, first = train_recorded(ppo.parse_args(cli_args)[0])
    _, second = train_recorded(ppo.parse_args(cli_args)[0])
    del first["charts/SPS"], second["charts/SPS"]
    assert first == second
    assert len(first["losses/value_loss"]) == 4


@pytest.mark.parametrize(
    ("reward_norm", "policy_lag", "rpo_alpha"), [("scale", False, 0), ("return", False, 0), ("scale", True, 0.5)]
)
def test_the_overlapped_loop_logs_each_iteration_as_a_loop_that_waits_for_each_one(reward_norm, policy_lag, rpo_alpha):
    """train() dispatches an iteration before the previous one has run and logs that one afterwards. Run the
    same pieces one iteration at a time, waiting for each: the same figures must land at the same steps.
    With --reward-norm return, the return statistics also pass from each recomputation to the next. The rollout of
    iteration i acts with the parameters after i - 1 updates, with --policy-lag after i - 2 (the first two with the
    initial ones); each update starts from the newest. --rpo-alpha's noise is drawn after the epochs' shuffles."""
    cli_args = ["--env-id", "Hopper-v4", "--total-timesteps", "2048", "--seed", "4", "--reward-norm", reward_norm]
    cli_args += SMALL + (["--policy-lag"] if policy_lag else []) + ["--rpo-alpha", str(rpo_alpha)]
    _, logged = train_recorded(ppo.parse_args(cli_args)[0])

    args, _ = ppo.parse_args(cli_args)
    envs, handle, xla_step = ppo.make_envs(args.env_id, args.num_envs, args.num_threads, args.seed)
    programs = ppo.make_programs(args, envs, xla_step)
    env_state, train_state = programs.init_states(handle, ppo.reset_start(envs), {})
    learning_rate = ppo.make_optimizer(args)[1]
    # The loop's train_epoch program in its two pieces, each compiled on its own.
    recompute_batch = jax.jit(partial(ppo.recompute_batch, apply_fn=train_state.apply_fn, args=args))
    update_epoch = jax.jit(partial(ppo.update_epoch, args=args))
    expected = {
        "losses/value_loss": [],
        "losses/policy_loss": [],
        "losses/explained_variance": [],
        "charts/learning_rate": [],
        "charts/episodic_return": [],
    }
    params_after = [train_state.params]  # params_after[k]: after k updates
    for iteration in range(1, args.num_iterations + 1):
        key = jax.random.fold_in(jax.random.PRNGKey(args.seed), iteration)
        behaviour = params_after[max(iteration - 1 - policy_lag, 0)]
        env_state, transitions, batch, stats = jax.block_until_ready(programs.collect(behaviour, env_state, key))
        shuffler = np.random.default_rng((args.seed, iteration))
        permutations = [shuffler.permutation(args.batch_size) for _ in range(args.update_epochs)]
        noises = [shuffler.uniform(-rpo_alpha, rpo_alpha, (args.batch_size, 3)) for _ in permutations]  # Hopper: 3
        return_rms, first_step = env_state.return_rms, train_state.step
        for epoch in range(args.update_epochs):
            if epoch > 0:
                batch, return_rms = recompute_batch(train_state.params, transitions, env_state.obs, return_rms)
            noise = jnp.asarray(noises[epoch], jnp.float32) if rpo_alpha else None
            train_state, losses = jax.block_until_ready(update_epoch(train_state, batch, permutations[epoch], noise))
        env_state = env_state.replace(return_rms=return_rms)
        params_after.append(train_state.params)
        step = iteration * args.batch_size
        expected["losses/value_loss"].append((step, float(losses["value_loss"])))
        expected["losses/policy_loss"].append((step, float(losses["policy_loss"])))
        expected["losses/explained_variance"].append((step, float(stats["explained_variance"])))
        expected["charts/learning_rate"].append((step, float(learning_rate(first_step))))  # the iteration's rate
        if stats["num_episodes"] > 0:
            expected["charts/episodic_return"].append((step, float(stats["episodic_return"])))
    assert len(expected["charts/episodic_return"]) >= 2  # Hopper's random-ish policy falls within 64 steps
    assert {tag: logged[tag] for tag in expected} == expected


def test_an_iterations_speed_counts_the_steps_collected_by_the_time_it_is_logged():
    """The loop logs an iteration once the next iteration's rollout has ended: its charts/SPS counts that rollout's
    steps too (else the first iterations' figures would be one rollout's steps over two rollouts' time); the last
    iteration, logged after the loop, counts its own."""
    args = ppo.parse_args(["--env-id", "Hopper-v4", "--total-timesteps", "2048", *SMALL])[0]
    seen = []

    class Recording(ppo.IterationLogger):
        def log(self, iteration, state, figures, steps_done=None):
            seen.append((state.global_step, steps_done))
            return super().log(iteration, state, figures, steps_done)

    ppo.train(args, Recording(args, RecordingWriter(), report=lambda step, line: None))
    assert seen == [(512, 1024), (1024, 1536), (1536, 2048), (2048, None)]


def test_recompute_adv_changes_only_the_epochs_after_the_first():
    """--recompute-adv rebuilds the batch with the updated critic before epochs 2, 3, ...: with one epoch per
    iteration it must change nothing, with two it must change the losses."""

    def losses(*extra):
        cli_args = ["--env-id", "Hopper-v4", "--total-timesteps", "1024", "--seed", "3", *SMALL, *extra]
        _, logged = train_recorded(ppo.parse_args(cli_args)[0])
        return logged["losses/value_loss"], logged["losses/policy_loss"]

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
            assert "jit_train_epoch" in cached and "jit_init_states" in cached
        run_dir = only_run_dir(tmp_path / name)
        logged.append({tag: [value for _, value in scalars(run_dir, tag)] for tag in METRICS if tag != "charts/SPS"})
    assert logged[0] == logged[1]
    assert len(logged[0]["losses/value_loss"]) == 2
