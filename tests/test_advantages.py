"""GAE against a plain NumPy loop that follows ENVPOOL-FACTS' specification line by line."""

import jax
import jax.numpy as jnp
import numpy as np

import ppo_continuous_envpool_jax as ppo
from tests.support import numpy_gae, random_rollout, rollout_transitions


def test_gae_matches_numpy_loop_with_terminations_truncations_and_resets():
    rng = np.random.default_rng(0)
    reward, value, last_value, terminated, truncated, is_reset = random_rollout(rng, 64, 16)
    assert terminated.any() and truncated.any() and is_reset.any()
    transitions = ppo.Transition(
        obs=None,
        action=None,
        log_prob=None,
        value=jnp.asarray(value),
        reward=jnp.asarray(reward),
        terminated=jnp.asarray(terminated),
        truncated=jnp.asarray(truncated),
        is_reset=jnp.asarray(is_reset),
    )
    advantages, targets = ppo.compute_gae(transitions, jnp.asarray(last_value), 0.99, 0.95)
    expected_advantages, expected_targets = numpy_gae(reward, value, last_value, terminated, truncated, 0.99, 0.95)
    np.testing.assert_allclose(advantages, expected_advantages, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(targets, expected_targets, rtol=1e-5, atol=1e-5)


def test_truncation_bootstraps_from_the_final_observation_and_termination_does_not():
    # One env, three steps: step 0 is cut by the time limit, step 1 is EnvPool's reset, step 2 terminates.
    # values[1] is V(final observation of the truncated episode).
    value = jnp.array([[1.0], [10.0], [2.0]])
    transitions = ppo.Transition(
        obs=None,
        action=None,
        log_prob=None,
        value=value,
        reward=jnp.array([[1.0], [0.0], [1.0]]),
        terminated=jnp.array([[False], [False], [True]]),
        truncated=jnp.array([[True], [False], [False]]),
        is_reset=jnp.array([[False], [True], [False]]),
    )
    advantages, _ = ppo.compute_gae(transitions, jnp.array([100.0]), 0.5, 1.0)
    assert float(advantages[0, 0]) == 1.0 + 0.5 * 10.0 - 1.0  # truncated: bootstrap, trace cut
    assert float(advantages[2, 0]) == 1.0 - 2.0  # terminated: no bootstrap from the last value


def test_recomputed_batch_uses_the_current_critic():
    """recompute_batch: V from the given parameters, then GAE as in the NumPy loop, flattened time-major."""

    rng = np.random.default_rng(1)
    num_steps, num_envs, obs_dim = 16, 4, 3
    reward, _, _, terminated, truncated, is_reset = random_rollout(rng, num_steps, num_envs)
    obs = rng.normal(size=(num_steps, num_envs, obs_dim)).astype(np.float32)
    last_obs = rng.normal(size=(num_envs, obs_dim)).astype(np.float32)
    stale_value = np.full((num_steps, num_envs), 123.0, np.float32)  # what the rollout's critic said
    transitions = rollout_transitions(obs, stale_value, reward, terminated, truncated, is_reset)
    network = ppo.ActorCritic(action_dim=2, hidden_sizes=(64, 64), init_log_std=0.0)
    params = network.init(jax.random.PRNGKey(0), obs[0])
    args = ppo.Args(num_envs=num_envs, num_steps=num_steps, gamma=0.9, gae_lambda=0.8)

    return_rms = ppo.rms_init(())
    batch, _ = ppo.recompute_batch(
        params, transitions, jnp.asarray(last_obs), return_rms, apply_fn=network.apply, args=args
    )

    # The reference critic: the value head evaluated one observation at a time.
    critic = jax.jit(lambda o: network.apply(params, o[None])[2][0])
    value = np.array([[critic(obs[t, n]) for n in range(num_envs)] for t in range(num_steps)])
    last_value = np.array([critic(last_obs[n]) for n in range(num_envs)])
    advantages, targets = numpy_gae(reward, value, last_value, terminated, truncated, 0.9, 0.8)
    np.testing.assert_allclose(batch.value, value.reshape(-1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(batch.advantage, advantages.reshape(-1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(batch.target, targets.reshape(-1), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(batch.valid, (~is_reset).reshape(-1).astype(np.float32))
    np.testing.assert_array_equal(batch.obs, obs.reshape(-1, obs_dim))
