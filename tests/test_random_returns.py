"""random_returns.py: the zero of report.py's `--reference suite`, against the table report.py holds, and the
floor under a success rate, against the geometry that defines success."""

import numpy as np
import pytest

import ppo_continuous_envpool_jax as ppo
import random_returns
import report


@pytest.mark.parametrize("env_id", ["InvertedPendulum-v4", "Reacher-v4", "CartpoleSwingup-v1"])
def test_the_measured_random_return_is_reports_table(env_id):
    # the table's protocol (100 episodes, seed 0), measured again: a gym task that ends early, one of fixed
    # length, a DeepMind Control one
    run = random_returns.baseline_episodes(env_id, episodes=100, seed=0)
    assert round(float(run.returns.mean()), 2) == report.RANDOM_RETURNS[env_id]
    assert run.success is None and run.any_success is None  # none of them reports success


def test_the_table_covers_the_suite():
    suite = set(random_returns.SUITE)
    assert len(suite) == 15
    assert set(report.RANDOM_RETURNS) == suite == set(report.REFERENCES["suite"].figures)


@pytest.mark.parametrize("policy", ["random", "zero"])
def test_fetch_reach_success_rates_against_the_goal_distance(policy):
    # FetchReach's success is the gripper within 5 cm of the goal: recomputed from the observations the same
    # actions produce (same seeds), a NumPy loop that never reads the task's flag; 50-step episodes.
    episodes, seed = 256, 0
    run = random_returns.baseline_episodes("FetchReach-v4", episodes, seed, policy)
    envs, _handle, _xla_step = ppo.make_envs("FetchReach-v4", episodes, num_threads=0, seed=seed)
    space, rng = envs.action_space, np.random.default_rng(seed)
    envs.reset()
    within = []
    for _ in range(50):
        if policy == "random":
            action = rng.uniform(space.low, space.high, (episodes,) + space.shape)
        else:
            action = np.zeros((episodes,) + space.shape)
        obs, _reward, terminated, truncated, _info = envs.step(action.astype(space.dtype))
        within.append(np.linalg.norm(obs["achieved_goal"] - obs["desired_goal"], axis=1) < 0.05)
    assert truncated.all() and not terminated.any()
    within = np.array(within)
    np.testing.assert_array_equal(run.success, within[-1])
    np.testing.assert_array_equal(run.any_success, within.any(axis=0))
    np.testing.assert_array_equal(run.returns, -(~within).sum(axis=0))  # the sparse reward: -1 a step outside
    assert run.success.sum() > 0  # the still arm succeeds where the goal is drawn within 5 cm of its start
    if policy == "random":
        assert (run.any_success & ~run.success).any()  # and a random one passes through goals it then leaves
