"""The compiled rollout against EnvPool's NumPy API, on gym, DMC and float32-action tasks, and the float64 boundary."""

from functools import partial

import envpool
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ppo_continuous_envpool_jax as ppo
from tests.support import gymnasium_flattened

NUM_ENVS, NUM_STEPS = 8, 300


def collect_once(cli_args):
    args, _ = ppo.parse_args(cli_args)
    envs, handle, xla_step = ppo.make_envs(args.env_id, args.num_envs, args.num_threads, args.seed)
    programs = ppo.make_programs(args, envs, xla_step)
    env_state, train_state = programs.init_states(handle, ppo.reset_start(envs), {})
    # Waited for: EnvPool must outlive the rollout, and JAX returns before the computation is done.
    env_state, _transitions, batch, stats = jax.block_until_ready(
        programs.collect(train_state.params, env_state, jax.random.PRNGKey(1))
    )
    return args, envs, train_state.params, env_state, batch, stats


def small_args(*extra, env_id="Hopper-v4", num_steps=NUM_STEPS):
    # Hopper and Humanoid terminate often under a random policy, so the rollout holds many late resets.
    size = ["--num-envs", str(NUM_ENVS), "--num-steps", str(num_steps), "--num-minibatches", "1"]
    return ["--env-id", env_id, "--seed", "3", *size, "--total-timesteps", str(NUM_ENVS * num_steps), *extra]


@pytest.mark.parametrize(
    ("env_id", "clip", "num_steps"),
    [
        ("Hopper-v4", True, NUM_STEPS),  # action bounds +-1
        ("Humanoid-v4", True, NUM_STEPS),  # +-0.4
        ("Hopper-v4", False, NUM_STEPS),
        ("WalkerWalk-v1", True, 1001),  # DMC: a dict with a scalar; the 1,000-step limit and its reset step
        ("FetchReachDense-v4", True, NUM_STEPS),  # float32 actions, a goal dict, 50-step episodes, is_success
        ("myoElbowPose1D6MRandom-v0", True, NUM_STEPS),  # float32 actions, 100-step episodes, solved
    ],
)
def test_closed_loop_rollout_replays_exactly_through_the_numpy_api(env_id, clip, num_steps):
    """Each action was computed from the observation just received; replaying the recorded actions through
    EnvPool's NumPy API from the same seed must give the same observations (dicts flattened as gymnasium's
    FlattenObservation does), episode ends, returns and successes.

    The returns also check what is sent: the sample clipped to [-1, 1] (or not, with --no-clip-action) and
    scaled to the bounds. MuJoCo clamps the controls itself, so Hopper's observations would agree either
    way, but EnvPool's control cost is charged on the action as sent; Humanoid's would not agree without
    the scaling."""
    clip_flag = "--clip-action" if clip else "--no-clip-action"
    args, _envs, _params, _env_state, batch, stats = collect_once(
        small_args("--no-norm-obs", "--reward-norm", "none", clip_flag, env_id=env_id, num_steps=num_steps)
    )
    obs_seen = np.asarray(batch.obs).reshape(num_steps, NUM_ENVS, -1)
    actions = np.asarray(batch.action).reshape(num_steps, NUM_ENVS, -1)
    valid = np.asarray(batch.valid).reshape(num_steps, NUM_ENVS)
    assert np.abs(actions).max() > 1.5  # the stored samples are unclipped, so their log-probs are exact

    replay = envpool.make(args.env_id, env_type="gymnasium", num_envs=NUM_ENVS, seed=args.seed)
    obs, _ = replay.reset()
    bound = replay.action_space.high
    np.testing.assert_array_equal(replay.action_space.low, -bound)  # symmetric, as for every MuJoCo task
    previous_done = np.zeros(NUM_ENVS, bool)
    episode_return = np.zeros(NUM_ENVS)
    finished_returns, finished_lengths, episode_length = [], [], np.zeros(NUM_ENVS, int)
    # The task's success flag (Fetch's is_success, MyoSuite's solved) and the steps of each episode it was set on:
    # MyoSuite's own evaluate_success counts an episode solved on more than 5 steps, Meta-World's and Fetch's on one.
    finished_successes, finished_success_steps, success_steps = [], [], np.zeros(NUM_ENVS, int)
    for t in range(num_steps):
        expected_obs = gymnasium_flattened(replay.observation_space, obs)
        np.testing.assert_array_equal(obs_seen[t], expected_obs, err_msg=f"step {t}")
        np.testing.assert_array_equal(valid[t], ~previous_done, err_msg=f"step {t}")
        sent = np.clip(actions[t], -1.0, 1.0) if clip else actions[t]
        action = (sent * bound.astype(np.float32)).astype(replay.action_space.dtype)
        obs, reward, terminated, truncated, info = replay.step(action)
        episode_return = np.where(previous_done, 0.0, episode_return + reward)
        episode_length = np.where(previous_done, 0, episode_length + 1)
        previous_done = terminated | truncated
        finished_returns.extend(episode_return[previous_done])
        finished_lengths.extend(episode_length[previous_done])
        success = info.get("is_success", info.get("solved", np.zeros(NUM_ENVS))) > 0
        success_steps = np.where(episode_length == 0, 0, success_steps + success)  # the reset step is no step
        finished_successes.extend(success[previous_done])
        finished_success_steps.extend(success_steps[previous_done])

    assert int(stats["num_episodes"]) == len(finished_returns) >= NUM_ENVS
    np.testing.assert_allclose(stats["episodic_return"], np.mean(finished_returns), rtol=1e-5)
    np.testing.assert_allclose(stats["episodic_length"], np.mean(finished_lengths), rtol=1e-6)
    if "is_success" in info or "solved" in info:
        needed = 6 if "solved" in info else 1
        any_step = np.array(finished_success_steps) >= needed
        np.testing.assert_allclose(stats["success_rate"], np.mean(finished_successes), rtol=1e-6)
        np.testing.assert_allclose(stats["any_step_success_rate"], np.mean(any_step), rtol=1e-6)
        assert np.mean(any_step) > np.mean(finished_successes)  # the two counts differ here
        # and on MyoSuite, more than 5 steps differs from one
        assert needed == 1 or np.mean(any_step) < np.mean(np.array(finished_success_steps) >= 1)
    else:
        assert "success_rate" not in stats and "any_step_success_rate" not in stats


def test_actions_are_clipped_to_the_unit_box_then_mapped_onto_asymmetric_bounds():
    low, high = np.array([0.0, -2.0], np.float32), np.array([1.0, 4.0], np.float32)
    # By hand: [-1, 1] -> [low, high] linearly; -1 -> low, 0 -> the middle, 1 -> high, beyond 1 -> high;
    # NaN (a diverged policy) -> the middle, so MuJoCo never gets a NaN control.
    samples = np.array([[-3.0, 0.5], [0.0, 1.0], [0.5, -1.0], [7.0, 0.0], [np.nan, -np.inf]], np.float32)
    expected = np.array([[0.0, 2.5], [0.5, 4.0], [0.75, -2.0], [1.0, 1.0], [0.5, -2.0]], np.float32)
    np.testing.assert_array_equal(ppo.to_env_action(samples, low, high, clip=True), expected)


def test_unclipped_actions_are_mapped_onto_the_bounds_linearly_beyond_them():
    low, high = np.array([0.0, -2.0], np.float32), np.array([1.0, 4.0], np.float32)
    # By hand: the same line as above, extended: -3 -> 0.5 - 3 * 0.5 = -1.0; 7 -> 0.5 + 7 * 0.5 = 4.0;
    # 1.5 -> 1 + 1.5 * 3 = 5.5; NaN still -> the middle.
    samples = np.array([[-3.0, 1.5], [7.0, np.nan], [0.5, -1.0]], np.float32)
    expected = np.array([[-1.0, 5.5], [4.0, 1.0], [0.75, -2.0]], np.float32)
    np.testing.assert_array_equal(ppo.to_env_action(samples, low, high, clip=False), expected)


def all_arrays(tree):
    return [leaf for leaf in jax.tree.leaves(tree) if hasattr(leaf, "dtype")]


def test_nothing_float64_leaves_the_env_boundary():
    # Keep `envs` bound: EnvPool must outlive every computation that holds its handle.
    args, _envs, params, env_state, batch, stats = collect_once(small_args())
    floats = [a for a in all_arrays((params, env_state, batch, stats)) if jnp.issubdtype(a.dtype, jnp.floating)]
    assert floats and all(a.dtype == jnp.float32 for a in floats)
    optimizer, _ = ppo.make_optimizer(args)
    opt_state = optimizer.init(params)
    assert all(a.dtype != jnp.float64 for a in all_arrays(opt_state))
    # x64 stayed scoped to the env call: JAX's defaults are still 32-bit afterwards.
    assert jnp.zeros(2).dtype == jnp.float32 and jax.random.normal(jax.random.PRNGKey(0), ()).dtype == jnp.float32


def reference_staggered_start(env_id: str, num_envs: int, seed: int):
    """--stagger-episodes as its docstring states it, one environment at a time on pools of one: environment i
    plays i * max_steps // num_envs steps of the mid-range action, is reset, plays the rest of max_steps, and
    stands there. EnvPool seeds environment i of a pool with seed + i, so a pool of one from that seed plays it
    alone. Returns each one's last observation, the return of its episode so far, its length, the steps of it on
    which the task flagged success (MyoSuite's `solved`) and whether its last step ended it."""
    obs, returns, lengths, success_steps, ended = [], [], [], [], []
    for i in range(num_envs):
        envs = envpool.make(env_id, env_type="gymnasium", num_envs=1, seed=seed + i)
        max_steps = envs.spec.config.max_episode_steps
        space = envs.action_space
        action = ((space.low + space.high) / 2).astype(space.dtype)[None]
        envs.reset()
        for _ in range(i * max_steps // num_envs):
            envs.step(action)
        envs.reset(np.array([0]))
        episode_return, length, success, done = 0.0, 0, 0, False
        for _ in range(max_steps - i * max_steps // num_envs):
            last, reward, terminated, truncated, info = envs.step(action)
            if done:
                episode_return, length, success = 0.0, 0, 0
            else:
                episode_return, length = episode_return + float(reward[0]), length + 1
                success += bool(info.get("solved", [False])[0])
            done = bool(terminated[0] or truncated[0])
        obs.append(gymnasium_flattened(envs.observation_space, last)[0])
        returns.append(episode_return)
        lengths.append(length)
        success_steps.append(success)
        ended.append(done)
    return tuple(map(np.array, (obs, returns, lengths, success_steps, ended)))


# no terminations; many; success mid-episode under the mid-range action
@pytest.mark.parametrize("env_id", ["CartpoleSwingup-v1", "Hopper-v4", "MyoSuite/myoElbowPose1D6MRandom-v0"])
def test_staggered_start_is_each_environment_played_alone(env_id):
    envs, _handle, _xla_step = ppo.make_envs(env_id, NUM_ENVS, 1, seed=5)
    start = ppo.staggered_start(envs)
    obs, returns, lengths, success_steps, ended = reference_staggered_start(env_id, NUM_ENVS, seed=5)

    np.testing.assert_allclose(start.obs, obs, rtol=1e-6)
    np.testing.assert_allclose(start.episode_return, returns, rtol=1e-9)
    np.testing.assert_array_equal(start.episode_length, lengths)
    np.testing.assert_array_equal(start.episode_success_steps, success_steps)
    np.testing.assert_array_equal(start.is_reset, ended)
    assert (success_steps > 1).any() == (env_id == "MyoSuite/myoElbowPose1D6MRandom-v0")
    if env_id == "CartpoleSwingup-v1":  # by hand: 1000 - 125 i steps; environment 0 has just hit the limit
        np.testing.assert_array_equal(start.episode_length, 1000 - 125 * np.arange(NUM_ENVS))
        np.testing.assert_array_equal(start.is_reset, np.arange(NUM_ENVS) == 0)


def test_training_starts_from_the_staggered_state():
    cli_args = small_args("--stagger-episodes", "--reward-norm", "none", env_id="CartpoleSwingup-v1", num_steps=200)
    args, _ = ppo.parse_args(cli_args)
    envs, handle, xla_step = ppo.make_envs(args.env_id, args.num_envs, args.num_threads, args.seed)
    programs = ppo.make_programs(args, envs, xla_step)
    start = ppo.staggered_start(envs)
    env_state, train_state = programs.init_states(handle, start, {})
    rollout = jax.jit(
        partial(ppo.rollout, env=ppo.env_functions(envs, xla_step), apply_fn=train_state.apply_fn, args=args)
    )
    _, (transitions, episode_end) = jax.block_until_ready(rollout(train_state.params, env_state, jax.random.PRNGKey(1)))

    # environment 0 has just hit the limit: its first step is the late reset, masked; environment 1, 875
    # steps in, ends 125 steps later, and logs a 1,000-step episode whose return counts the steps before training
    assert bool(transitions.is_reset[0, 0]) and not bool(transitions.is_reset[1:, 0].any())
    assert np.flatnonzero(episode_end.done[:, 1]).tolist() == [124]
    assert int(episode_end.episode_length[124, 1]) == 1000
    played = start.episode_return[1] + np.asarray(transitions.reward, np.float64)[:125, 1].sum()
    np.testing.assert_allclose(float(episode_end.episode_return[124, 1]), played, rtol=1e-5)
