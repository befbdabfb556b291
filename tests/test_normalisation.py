"""Observation normalisation and reward scaling against NumPy over the whole concatenated stream."""

import jax
import jax.numpy as jnp
import numpy as np

import ppo_continuous_envpool_jax as ppo
from tests.support import numpy_gae, random_rollout, rollout_transitions

PRIOR = 1e-4  # gymnasium's prior count: mean 0, variance 1 with this weight


def numpy_moments_with_prior(stream):
    """Mean and variance of all rows seen so far, merged with the prior (mean 0, var 1, count 1e-4)."""
    n = stream.shape[0]
    mean = stream.mean(0)
    var = stream.var(0)
    total = PRIOR + n
    merged_mean = mean * n / total
    merged_var = (PRIOR * 1.0 + n * var + mean**2 * PRIOR * n / total) / total
    return merged_mean, merged_var


def test_observation_normaliser_matches_numpy_over_the_concatenated_stream():
    rng = np.random.default_rng(1)
    batches = [rng.normal(3.0, 5.0, size=(32, 4)).astype(np.float32) * [1, 2, 0.1, 10] for _ in range(20)]
    rms = ppo.rms_init((4,))
    for i, batch in enumerate(batches):
        rms, normalized = ppo.normalize_obs(rms, jnp.asarray(batch))
        mean, var = numpy_moments_with_prior(np.concatenate(batches[: i + 1]).astype(np.float64))
        np.testing.assert_allclose(rms.mean, mean, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(rms.var, var, rtol=1e-4)
        expected = np.clip((batch - mean) / np.sqrt(var + 1e-8), -10, 10)
        np.testing.assert_allclose(normalized, expected, rtol=1e-4, atol=1e-4)


def test_observation_normaliser_clips_at_ten():
    rms = ppo.rms_init((1,))
    rms, _ = ppo.normalize_obs(rms, jnp.zeros((1000, 1)))
    _, normalized = ppo.normalize_obs(rms, jnp.array([[1e6], [-1e6]]))
    np.testing.assert_array_equal(normalized, [[10.0], [-10.0]])


def test_reward_scaler_matches_numpy_discounted_return_stream():
    rng = np.random.default_rng(2)
    num_steps, num_envs, gamma = 200, 8, 0.9
    is_reset = np.zeros((num_steps, num_envs), bool)
    for t in range(1, num_steps):
        is_reset[t] = ~is_reset[t - 1] & (rng.random(num_envs) < 0.05)  # a reset follows an episode end
    reward = np.where(is_reset, 0.0, rng.normal(1.0, 2.0, (num_steps, num_envs))).astype(np.float32)

    # Reference: per env, the discounted return of the current episode; statistics over every real step.
    returns_seen = []
    running = np.zeros(num_envs)
    expected = np.zeros((num_steps, num_envs))
    for t in range(num_steps):
        running = np.where(is_reset[t], 0.0, running * gamma + reward[t])
        returns_seen.extend(running[~is_reset[t]])
        _, var = numpy_moments_with_prior(np.array(returns_seen)[:, None])
        expected[t] = np.clip(reward[t] / np.sqrt(var[0] + 1e-8), -10, 10)

    def step(carry, xs):
        rms, discounted = carry
        rms, discounted, scaled = ppo.scale_reward(rms, discounted, xs[0], xs[1], gamma)
        return (rms, discounted), scaled

    _, scaled = jax.lax.scan(
        step, (ppo.rms_init(()), jnp.zeros(num_envs)), (jnp.asarray(reward), jnp.asarray(is_reset))
    )
    np.testing.assert_allclose(scaled, expected, rtol=1e-4, atol=1e-5)
    assert np.all(np.asarray(scaled)[is_reset] == 0.0)


def test_return_normaliser_matches_a_numpy_loop_over_batches_and_recomputations():
    """--reward-norm return (tianshou's rew_norm), batch after batch: the critic's outputs are multiplied by the
    std of all lambda-returns seen before, GAE runs in reward units, the targets are the returns divided by
    that std, and then the std takes in the new returns of the valid steps."""
    rng = np.random.default_rng(3)
    num_steps, num_envs, gamma, lam = 16, 4, 0.9, 0.8
    args = ppo.Args(num_envs=num_envs, num_steps=num_steps, gamma=gamma, gae_lambda=lam, reward_norm="return")
    return_rms = ppo.rms_init(())
    returns_seen = []
    for _ in range(5):  # a rollout, then the same transitions with another critic, as a recomputation does
        reward, _, _, terminated, truncated, is_reset = random_rollout(rng, num_steps, num_envs)
        reward = reward * 50.0  # returns in the hundreds, far from the prior's unit std
        for _ in range(2):
            value = rng.normal(size=(num_steps, num_envs)).astype(np.float32)  # in units of the std
            last_value = rng.normal(size=num_envs).astype(np.float32)
            std = (
                np.sqrt(numpy_moments_with_prior(np.array(returns_seen)[:, None])[1][0] + 1e-8) if returns_seen else 1.0
            )
            advantages, returns = numpy_gae(reward, value * std, last_value * std, terminated, truncated, gamma, lam)
            returns_seen.extend(returns[~is_reset])

            obs = np.zeros((num_steps, num_envs, 1), np.float32)
            transitions = rollout_transitions(obs, value, reward, terminated, truncated, is_reset)
            batch, return_rms = ppo.make_batch(
                transitions, jnp.asarray(value), jnp.asarray(last_value), return_rms, args
            )
            np.testing.assert_allclose(batch.advantage, advantages.reshape(-1), rtol=1e-4, atol=1e-3)
            np.testing.assert_allclose(batch.target, (returns / std).reshape(-1), rtol=1e-4, atol=1e-4)
            np.testing.assert_array_equal(batch.value, value.reshape(-1))  # what the value clipping compares with
            _, var = numpy_moments_with_prior(np.array(returns_seen)[:, None])
            np.testing.assert_allclose(return_rms.var, var[0], rtol=1e-4)
    assert np.sqrt(var[0]) > 20  # the std did move far from the prior's 1
