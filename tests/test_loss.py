"""The PPO loss on a tiny batch computed by hand."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

import ppo_continuous_envpool_jax as ppo


def fixed_policy(mean, log_std, value):
    """A stand-in for the network: the same outputs whatever the parameters and observations."""
    return lambda params, obs: (jnp.asarray(mean), jnp.asarray(log_std), jnp.asarray(value))


def batch(**overrides):
    # Three 1-D actions under N(0, 1): log pi(a) = -a^2/2 - log(2 pi)/2.
    # Old log-probs are chosen so that the ratios are 1.5, 0.5 and 1.0; the third sample is a reset step.
    new_log_prob = -0.5 * np.array([0.0, 1.0, 4.0]) - 0.5 * math.log(2 * math.pi)
    fields = dict(
        obs=jnp.zeros((3, 1)),
        action=jnp.array([[0.0], [1.0], [2.0]]),
        log_prob=jnp.asarray(new_log_prob - np.log([1.5, 0.5, 1.0]), jnp.float32),
        value=jnp.array([0.0, 1.0, 0.0]),
        advantage=jnp.array([1.0, -2.0, 100.0]),
        target=jnp.array([1.0, 3.0, 100.0]),
        valid=jnp.array([1.0, 1.0, 0.0]),
    )
    fields.update(overrides)
    return ppo.Batch(**fields)


def args(**overrides):
    defaults = dict(clip_coef=0.2, clip_vloss=False, ent_coef=0.01, vf_coef=0.25, norm_adv=False)
    return ppo.Args(**{**defaults, **overrides})


def test_ppo_loss_on_a_hand_computed_batch():
    apply_fn = fixed_policy(np.zeros((3, 1)), np.zeros(1), np.array([2.0, 2.0, 2.0]))
    loss, metrics = ppo.ppo_loss(None, apply_fn, batch(), args=args())

    # Surrogate per valid sample: max(-A r, -A clip(r, 0.8, 1.2))
    #   r=1.5, A=1:  max(-1.5, -1.2) = -1.2 ;  r=0.5, A=-2: max(1.0, 1.6) = 1.6  -> mean 0.2
    assert metrics["policy_loss"] == pytest.approx(0.2, abs=1e-6)
    # Value: 0.5 * mean((2-1)^2, (2-3)^2) = 0.5
    assert metrics["value_loss"] == pytest.approx(0.5, abs=1e-6)
    entropy = 0.5 + 0.5 * math.log(2 * math.pi)
    assert metrics["entropy"] == pytest.approx(entropy, abs=1e-6)
    assert loss == pytest.approx(0.2 - 0.01 * entropy + 0.25 * 0.5, abs=1e-6)
    # Both valid ratios lie outside [0.8, 1.2]; the reset step's ratio does not count.
    assert metrics["clipfrac"] == pytest.approx(1.0)
    # approx_kl = mean((r - 1) - log r), old_approx_kl = mean(-log r)
    assert metrics["approx_kl"] == pytest.approx(((0.5 - math.log(1.5)) + (-0.5 - math.log(0.5))) / 2, abs=1e-6)
    assert metrics["old_approx_kl"] == pytest.approx(-(math.log(1.5) + math.log(0.5)) / 2, abs=1e-6)


def test_clipped_value_loss_takes_the_larger_error():
    # Old values 0 and 1; the new value 2 moves by more than the clip 0.2, so the clipped values are 0.2 and 1.2.
    apply_fn = fixed_policy(np.zeros((3, 1)), np.zeros(1), np.array([2.0, 2.0, 2.0]))
    _, metrics = ppo.ppo_loss(None, apply_fn, batch(), args=args(clip_vloss=True))
    # max((2-1)^2, (0.2-1)^2) = 1 ; max((2-3)^2, (1.2-3)^2) = 3.24  -> 0.5 * mean = 1.06
    assert metrics["value_loss"] == pytest.approx(0.5 * (1.0 + 3.24) / 2, abs=1e-5)


def test_advantage_normalisation_uses_valid_samples_only():
    apply_fn = fixed_policy(np.zeros((3, 1)), np.zeros(1), np.zeros(3))
    _, metrics = ppo.ppo_loss(None, apply_fn, batch(), args=args(norm_adv=True))
    # Valid advantages 1 and -2 normalise to +1 and -1 (mean -0.5, std 1.5); the 100 of the reset is ignored.
    #   r=1.5, A=1: -1.2 ; r=0.5, A=-1: max(0.5, 0.8) = 0.8  -> mean -0.2
    assert metrics["policy_loss"] == pytest.approx(-0.2, abs=1e-5)


def test_entropy_bonus_stops_at_its_log_std_cap():
    # Two action dimensions, log-stds -1 and 1, capped at 0: the bonus counts -1 and 0, the logged entropy -1 and 1.
    apply_fn = fixed_policy(np.zeros((3, 2)), np.array([-1.0, 1.0]), np.array([2.0, 2.0, 2.0]))
    two_dims = batch(action=jnp.zeros((3, 2)), log_prob=jnp.zeros(3))
    capped, metrics = ppo.ppo_loss(None, apply_fn, two_dims, args=args(ent_max_log_std=0.0))
    uncapped, _ = ppo.ppo_loss(None, apply_fn, two_dims, args=args())
    per_dim = 0.5 + 0.5 * math.log(2 * math.pi)
    assert metrics["entropy"] == pytest.approx(2 * per_dim, abs=1e-6)
    assert capped - uncapped == pytest.approx(0.01 * ((2 * per_dim) - (2 * per_dim - 1.0)), abs=1e-6)


def test_rpo_noise_shifts_the_mean_that_the_loss_sees():
    """RPO: the loss of a policy with mean m under noise z is the loss of the policy whose mean is m + z."""
    noise = jnp.array([[0.5], [-0.3], [0.1]])
    shifted = fixed_policy(np.asarray(noise), np.zeros(1), np.array([2.0, 2.0, 2.0]))
    apply_fn = fixed_policy(np.zeros((3, 1)), np.zeros(1), np.array([2.0, 2.0, 2.0]))
    loss, metrics = ppo.ppo_loss(None, apply_fn, batch(), noise, args=args())
    expected_loss, expected = ppo.ppo_loss(None, shifted, batch(), args=args())
    assert loss == pytest.approx(float(expected_loss))
    assert {k: float(v) for k, v in metrics.items()} == pytest.approx({k: float(v) for k, v in expected.items()})
    # By hand for the first sample: log pi(0 | N(0.5, 1)) - log pi(0 | N(0, 1)) = -0.125, on the ratio 1.5.
    unshifted_kl = ppo.ppo_loss(None, apply_fn, batch(), args=args())[1]["approx_kl"]
    ratios = np.array([1.5 * math.exp(-0.125), 0.5 * math.exp(-0.5 * (1.3**2 - 1.0))])
    assert metrics["approx_kl"] == pytest.approx(np.mean(ratios - 1 - np.log(ratios)), abs=1e-6)
    assert metrics["approx_kl"] != pytest.approx(float(unshifted_kl))
