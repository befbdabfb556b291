"""PPO for continuous control with EnvPool's MuJoCo step compiled into JAX.

One file, read top to bottom in the order data flows: arguments, environment (EnvPool's XLA step and
pure wrappers), actor-critic, rollout (`lax.scan`), advantages (reverse `lax.scan`), loss and update,
training loop. Run `python ppo_continuous_envpool_jax.py --help` for the flags.
"""

import difflib
import os
import sys
import time
from dataclasses import asdict, dataclass
from functools import partial
from typing import NamedTuple, Optional

import envpool
import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from flax.training.train_state import TrainState

# JAX runs on the CPU. EnvPool's XLA step is a host-side FFI call: on a GPU backend the seed prototype of
# this script trained silently wrong (the return never rose, no error), and for 64x64 MLPs the CPU is as
# fast anyway. Until a closed-loop check on a GPU proves otherwise, we do not offer that path.
jax.config.update("jax_platforms", "cpu")


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment (JAX keys and EnvPool's environments)"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases"""
    wandb_project_name: str = "ppo-continuous-envpool-jax"
    """the wandb's project name"""
    wandb_entity: Optional[str] = None
    """the entity (team) of wandb's project"""
    save_model: bool = False
    """whether to save the model (parameters and observation statistics) into `runs/{run_name}`"""

    env_id: str = "HalfCheetah-v4"
    """the id of an EnvPool MuJoCo task"""
    total_timesteps: int = 1_000_000
    """total environment steps of the experiment"""
    learning_rate: float = 3e-4
    """the learning rate of the optimizer"""
    num_envs: int = 64
    """the number of parallel environments"""
    num_threads: int = 0
    """EnvPool's worker threads (0: one per environment, at most one per core)"""
    num_steps: int = 32
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """toggle learning rate annealing (linearly to 0 over all gradient steps)"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 32
    """the number of mini-batches"""
    update_epochs: int = 10
    """the K epochs to update the policy"""
    norm_adv: bool = False
    """toggles advantages normalization (per minibatch)"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = False
    """toggles whether or not to use a clipped loss for the value function, as per the paper"""
    ent_coef: float = 0.0
    """coefficient of the entropy"""
    vf_coef: float = 0.25
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: Optional[float] = None
    """the target KL divergence threshold (stops the epochs of an iteration early)"""
    norm_obs: bool = True
    """toggles observation normalization by running mean and variance"""
    scale_reward: bool = True
    """toggles reward scaling by the running std of the discounted return"""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """the hidden layer sizes of the actor and of the critic"""

    # filled in at runtime
    batch_size: int = 0
    """the batch size (computed in runtime)"""
    minibatch_size: int = 0
    """the mini-batch size (computed in runtime)"""
    num_iterations: int = 0
    """the number of iterations (computed in runtime)"""


def mujoco_env_ids() -> list[str]:
    specs = envpool.registration.registry.specs
    return sorted(env_id for env_id, spec in specs.items() if spec[0] == "envpool.mujoco.gym")


def check_args(args: Args) -> Optional[str]:
    """Return a one-line description of what is wrong with `args`, or None."""
    for name in ("total_timesteps", "learning_rate", "num_envs", "num_steps", "num_minibatches", "update_epochs"):
        if getattr(args, name) <= 0:
            return f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}"
    if args.num_threads < 0:
        return f"--num-threads must be 0 (automatic) or positive, got {args.num_threads}"
    if not args.hidden_sizes or min(args.hidden_sizes) <= 0:
        return f"--hidden-sizes must be positive integers, got {args.hidden_sizes}"
    batch_size = args.num_envs * args.num_steps
    if batch_size % args.num_minibatches:
        return (
            f"--num-minibatches {args.num_minibatches} does not divide the batch of "
            f"--num-envs {args.num_envs} x --num-steps {args.num_steps} = {batch_size}"
        )
    if args.total_timesteps < batch_size:
        return f"--total-timesteps {args.total_timesteps} is less than one batch ({batch_size} steps)"
    mujoco_ids = mujoco_env_ids()
    if args.env_id not in envpool.list_all_envs():
        close = difflib.get_close_matches(args.env_id, mujoco_ids, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; MuJoCo tasks: {', '.join(mujoco_ids)}"
        return f"unknown --env-id {args.env_id!r}{hint}"
    if not hasattr(envpool.make_spec(args.env_id).action_space, "low"):
        return f"--env-id {args.env_id} has discrete actions; this PPO needs continuous actions (e.g. HalfCheetah-v4)"
    if args.env_id not in mujoco_ids:
        return f"--env-id {args.env_id} is not an EnvPool MuJoCo task; choose one of {', '.join(mujoco_ids)}"
    return None


def parse_args(cli_args: Optional[list[str]] = None) -> Args:
    args = tyro.cli(Args, args=cli_args)
    error = check_args(args)
    if error:
        sys.exit(f"error: {error}")
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = args.total_timesteps // args.batch_size
    return args


# ---------------------------------------------------------------------------------------------------
# Environment: EnvPool's XLA step behind one float64 boundary, and pure wrappers with explicit state.
# ---------------------------------------------------------------------------------------------------


def make_envs(args: Args):
    """EnvPool's MuJoCo batch plus its jit-able XLA step function."""
    envs = envpool.make(
        args.env_id, env_type="gymnasium", num_envs=args.num_envs, num_threads=args.num_threads, seed=args.seed
    )
    # The FFI buffers are declared with x64 on: MuJoCo observations and actions are float64.
    with jax.enable_x64(True):
        handle, _recv, _send, xla_step = envs.xla()
    return envs, handle, xla_step


def env_step(xla_step, handle, action):
    """The float64 boundary: float32 actions in, float32 observations out, x64 only for the call itself."""
    with jax.enable_x64(True):
        handle, (obs, reward, terminated, truncated, _info) = xla_step(handle, action.astype(jnp.float64))
        obs = obs.astype(jnp.float32)
    return handle, obs, reward.astype(jnp.float32), terminated, truncated


class RunningMeanStd(NamedTuple):
    mean: jax.Array
    var: jax.Array
    count: jax.Array


def rms_init(shape) -> RunningMeanStd:
    # The tiny prior count is gymnasium's: it keeps the first merge well defined.
    return RunningMeanStd(jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32), jnp.float32(1e-4))


def rms_update(rms: RunningMeanStd, batch: jax.Array, mask: Optional[jax.Array] = None) -> RunningMeanStd:
    """Merge the rows of `batch` (N, ...) where `mask` (N,) holds into the running moments (Chan et al.)."""
    weight = jnp.ones(batch.shape[0], jnp.float32) if mask is None else mask.astype(jnp.float32)
    weight = weight.reshape((-1,) + (1,) * (batch.ndim - 1))
    n = weight.sum(0)
    batch_mean = (weight * batch).sum(0) / jnp.maximum(n, 1.0)
    batch_var = (weight * (batch - batch_mean) ** 2).sum(0) / jnp.maximum(n, 1.0)
    total = rms.count + n
    delta = batch_mean - rms.mean
    mean = rms.mean + delta * n / total
    var = (rms.var * rms.count + batch_var * n + delta**2 * rms.count * n / total) / total
    return RunningMeanStd(mean, var, total.reshape(rms.count.shape))


def normalize_obs(obs_rms: RunningMeanStd, obs: jax.Array):
    """gymnasium's NormalizeObservation for a batch (N, obs_dim): merge it in, then standardise and clip."""
    obs_rms = rms_update(obs_rms, obs)
    return obs_rms, jnp.clip((obs - obs_rms.mean) / jnp.sqrt(obs_rms.var + 1e-8), -10.0, 10.0)


def scale_reward(return_rms: RunningMeanStd, discounted_return, reward, is_reset, gamma: float):
    """gym's NormalizeReward: divide rewards (N,) by the running std of the discounted return, clip to +-10.

    The discounted return restarts with each episode. Reset steps (reward 0, not an experience) neither
    extend it nor count towards its statistics.
    """
    discounted_return = jnp.where(is_reset, 0.0, discounted_return * gamma + reward)
    return_rms = rms_update(return_rms, discounted_return, mask=~is_reset)
    scaled = jnp.clip(reward / jnp.sqrt(return_rms.var + 1e-8), -10.0, 10.0)
    return return_rms, discounted_return, scaled


@flax.struct.dataclass
class EnvState:
    handle: jax.Array  # EnvPool's handle, threaded through jit so the steps stay ordered
    obs: jax.Array  # (N, obs_dim) the next observation, already normalised
    is_reset: jax.Array  # (N,) the env ended an episode last step, so the next step is its late reset
    obs_rms: RunningMeanStd
    return_rms: RunningMeanStd  # of the discounted return, for reward scaling
    discounted_return: jax.Array  # (N,)
    episode_return: jax.Array  # (N,) raw, unscaled
    episode_length: jax.Array  # (N,)


def init_env_state(handle, first_obs: np.ndarray, norm_obs: bool) -> EnvState:
    num_envs, obs_dim = first_obs.shape
    obs = jnp.asarray(first_obs, jnp.float32)
    obs_rms = rms_init((obs_dim,))
    if norm_obs:
        obs_rms, obs = normalize_obs(obs_rms, obs)
    zeros = jnp.zeros(num_envs, jnp.float32)
    return EnvState(
        handle=handle,
        obs=obs,
        is_reset=jnp.zeros(num_envs, bool),
        obs_rms=obs_rms,
        return_rms=rms_init(()),
        discounted_return=zeros,
        episode_return=zeros,
        episode_length=jnp.zeros(num_envs, jnp.int32),
    )


# ---------------------------------------------------------------------------------------------------
# Actor-critic
# ---------------------------------------------------------------------------------------------------


class ActorCritic(nn.Module):
    action_dim: int
    hidden_sizes: tuple[int, ...] = (64, 64)

    @nn.compact
    def __call__(self, obs):
        def mlp(x, out_dim, out_scale):
            for size in self.hidden_sizes:
                x = nn.tanh(nn.Dense(size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
            return nn.Dense(out_dim, kernel_init=nn.initializers.orthogonal(out_scale))(x)

        mean = mlp(obs, self.action_dim, 0.01)
        log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
        value = mlp(obs, 1, 1.0).squeeze(-1)
        return mean, log_std, value


def gaussian_log_prob(mean, log_std, action):
    return (-0.5 * ((action - mean) / jnp.exp(log_std)) ** 2 - log_std - 0.5 * jnp.log(2 * jnp.pi)).sum(-1)


# ---------------------------------------------------------------------------------------------------
# Rollout: one lax.scan over num_steps, no Python per environment step.
# ---------------------------------------------------------------------------------------------------


class Transition(NamedTuple):
    obs: jax.Array  # (N, obs_dim) what the policy saw
    action: jax.Array  # (N, act_dim) the unclipped sample, so its log-probability is exact
    log_prob: jax.Array  # (N,)
    value: jax.Array  # (N,)
    reward: jax.Array  # (N,) scaled when --scale-reward
    terminated: jax.Array  # (N,)
    truncated: jax.Array  # (N,)
    is_reset: jax.Array  # (N,) EnvPool's late reset: not an experience of the policy


class EpisodeEnd(NamedTuple):
    done: jax.Array  # (N,) an episode ended at this step
    episode_return: jax.Array  # (N,) its raw return where done
    episode_length: jax.Array  # (N,)


def rollout_step(params, env_state: EnvState, key, *, apply_fn, xla_step, action_low, action_high, args: Args):
    mean, log_std, value = apply_fn(params, env_state.obs)
    action = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
    log_prob = gaussian_log_prob(mean, log_std, action)
    # EnvPool charges the control cost on the action as sent, so out-of-bounds samples are clipped first.
    handle, next_obs, reward, terminated, truncated = env_step(
        xla_step, env_state.handle, jnp.clip(action, action_low, action_high)
    )

    # On a reset step EnvPool ignored the action and returned reward 0: it counts towards no statistic.
    is_reset = env_state.is_reset
    obs_rms, return_rms, discounted_return = env_state.obs_rms, env_state.return_rms, env_state.discounted_return
    if args.norm_obs:
        obs_rms, next_obs = normalize_obs(obs_rms, next_obs)
    if args.scale_reward:
        return_rms, discounted_return, scaled_reward = scale_reward(
            return_rms, discounted_return, reward, is_reset, args.gamma
        )
    else:
        scaled_reward = reward
    episode_return = jnp.where(is_reset, 0.0, env_state.episode_return + reward)
    episode_length = jnp.where(is_reset, 0, env_state.episode_length + 1)
    done = terminated | truncated

    transition = Transition(
        env_state.obs, action, log_prob, value, scaled_reward, terminated, truncated, is_reset
    )
    env_state = EnvState(
        handle, next_obs, done, obs_rms, return_rms, discounted_return, episode_return, episode_length
    )
    return env_state, (transition, EpisodeEnd(done, episode_return, episode_length))


def rollout(params, env_state: EnvState, key, *, num_steps: int, **step_kwargs):
    """Run the policy for `num_steps` in every environment: transitions and episode ends stacked (T, N)."""

    def step(env_state, key):
        return rollout_step(params, env_state, key, **step_kwargs)

    return jax.lax.scan(step, env_state, jax.random.split(key, num_steps))


# ---------------------------------------------------------------------------------------------------
# Advantages: GAE as a reverse lax.scan.
# ---------------------------------------------------------------------------------------------------


def compute_gae(transitions: Transition, last_value, gamma: float, gae_lambda: float):
    """Advantages and value targets, (T, N) each.

    With EnvPool's late reset, the observation after a truncated step is the episode's true final
    observation, so `next_value` bootstraps truncation exactly; termination bootstraps from nothing. The
    trace is cut at every episode end, so the reset step after it (whose advantage is meaningless and
    masked out of every loss) never leaks into the episode before.
    """
    next_values = jnp.concatenate([transitions.value[1:], last_value[None]], axis=0)

    def step(next_advantage, xs):
        reward, value, next_value, terminated, truncated = xs
        delta = reward + gamma * (1.0 - terminated) * next_value - value
        advantage = delta + gamma * gae_lambda * (1.0 - (terminated | truncated)) * next_advantage
        return advantage, advantage

    xs = (transitions.reward, transitions.value, next_values, transitions.terminated, transitions.truncated)
    _, advantages = jax.lax.scan(step, jnp.zeros_like(last_value), xs, reverse=True)
    return advantages, advantages + transitions.value


class Batch(NamedTuple):
    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    advantage: jax.Array
    target: jax.Array  # value target (the return)
    valid: jax.Array  # float 1.0 for experiences of the policy, 0.0 for reset transitions


def collect(params, env_state: EnvState, key, *, apply_fn, args: Args, **step_kwargs):
    """Rollout and advantages, flattened into one batch of `num_steps * num_envs` experiences."""
    env_state, (transitions, episode_end) = rollout(
        params, env_state, key, num_steps=args.num_steps, apply_fn=apply_fn, args=args, **step_kwargs
    )
    _, _, last_value = apply_fn(params, env_state.obs)
    advantages, targets = compute_gae(transitions, last_value, args.gamma, args.gae_lambda)
    batch = Batch(
        transitions.obs,
        transitions.action,
        transitions.log_prob,
        transitions.value,
        advantages,
        targets,
        (~transitions.is_reset).astype(jnp.float32),
    )
    batch = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), batch)
    num_episodes = episode_end.done.sum()
    stats = {
        "num_episodes": num_episodes,
        "episodic_return": jnp.where(episode_end.done, episode_end.episode_return, 0.0).sum()
        / jnp.maximum(num_episodes, 1),
        "episodic_length": jnp.where(episode_end.done, episode_end.episode_length, 0).sum()
        / jnp.maximum(num_episodes, 1),
        "explained_variance": explained_variance(batch.value, batch.target, batch.valid),
    }
    return env_state, batch, stats


def make_collect_fn(args: Args, envs, xla_step, apply_fn):
    """`collect` compiled for these environments: (params, env_state, key) -> (env_state, batch, stats)."""
    return jax.jit(
        partial(
            collect,
            apply_fn=apply_fn,
            args=args,
            xla_step=xla_step,
            action_low=jnp.asarray(envs.action_space.low, jnp.float32),
            action_high=jnp.asarray(envs.action_space.high, jnp.float32),
        )
    )


def weighted_mean(x, weight):
    return (weight * x).sum() / jnp.maximum(weight.sum(), 1.0)


def explained_variance(value, target, weight):
    target_var = weighted_mean((target - weighted_mean(target, weight)) ** 2, weight)
    error = target - value
    error_var = weighted_mean((error - weighted_mean(error, weight)) ** 2, weight)
    return jnp.where(target_var == 0, jnp.nan, 1.0 - error_var / target_var)


# ---------------------------------------------------------------------------------------------------
# Loss and update: a jitted epoch that shuffles and scans over minibatches.
# ---------------------------------------------------------------------------------------------------


def ppo_loss(params, apply_fn, batch: Batch, args: Args):
    """Clipped surrogate + value loss - entropy bonus, averaged over the valid experiences of `batch`."""
    mean, log_std, value = apply_fn(params, batch.obs)
    log_ratio = gaussian_log_prob(mean, log_std, batch.action) - batch.log_prob
    ratio = jnp.exp(log_ratio)

    advantage = batch.advantage
    if args.norm_adv:
        adv_mean = weighted_mean(advantage, batch.valid)
        adv_std = jnp.sqrt(weighted_mean((advantage - adv_mean) ** 2, batch.valid))
        advantage = (advantage - adv_mean) / (adv_std + 1e-8)
    clipped_ratio = jnp.clip(ratio, 1.0 - args.clip_coef, 1.0 + args.clip_coef)
    policy_loss = weighted_mean(jnp.maximum(-advantage * ratio, -advantage * clipped_ratio), batch.valid)

    value_error = (value - batch.target) ** 2
    if args.clip_vloss:
        clipped_value = batch.value + jnp.clip(value - batch.value, -args.clip_coef, args.clip_coef)
        value_error = jnp.maximum(value_error, (clipped_value - batch.target) ** 2)
    value_loss = 0.5 * weighted_mean(value_error, batch.valid)

    # The log-std is state-independent, so the Gaussian's entropy is the same for every observation.
    entropy = (0.5 + 0.5 * jnp.log(2 * jnp.pi) + log_std).sum()
    loss = policy_loss - args.ent_coef * entropy + args.vf_coef * value_loss

    metrics = {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "old_approx_kl": weighted_mean(-log_ratio, batch.valid),
        "approx_kl": weighted_mean((ratio - 1.0) - log_ratio, batch.valid),
        "clipfrac": weighted_mean((jnp.abs(ratio - 1.0) > args.clip_coef).astype(jnp.float32), batch.valid),
    }
    return loss, metrics


def update_epoch(train_state: TrainState, batch: Batch, key, *, args: Args):
    """One pass over the batch in shuffled minibatches; returns the minibatch-mean metrics."""
    permutation = jax.random.permutation(key, args.batch_size)
    minibatches = jax.tree.map(
        lambda x: x[permutation].reshape((args.num_minibatches, args.minibatch_size) + x.shape[1:]), batch
    )

    def update_minibatch(train_state, minibatch):
        grads, metrics = jax.grad(ppo_loss, has_aux=True)(train_state.params, train_state.apply_fn, minibatch, args)
        return train_state.apply_gradients(grads=grads), metrics

    train_state, metrics = jax.lax.scan(update_minibatch, train_state, minibatches)
    return train_state, jax.tree.map(jnp.mean, metrics)


def make_optimizer(args: Args):
    """Adam after a global grad-norm clip; the learning rate decays linearly to 0 over all gradient steps."""
    if args.anneal_lr:
        num_updates = args.num_iterations * args.update_epochs * args.num_minibatches
        learning_rate = optax.linear_schedule(args.learning_rate, 0.0, num_updates)
    else:
        learning_rate = optax.constant_schedule(args.learning_rate)
    optimizer = optax.chain(optax.clip_by_global_norm(args.max_grad_norm), optax.adam(learning_rate, eps=1e-5))
    return optimizer, learning_rate


# ---------------------------------------------------------------------------------------------------
# Training loop
# ---------------------------------------------------------------------------------------------------


def train(args: Args, run_name: str, writer) -> TrainState:
    envs, handle, xla_step = make_envs(args)
    first_obs, _ = envs.reset()
    # Set-up runs once, but compiled it takes a fraction of the time that op-by-op dispatch would.
    env_state = jax.jit(init_env_state, static_argnums=2)(handle, first_obs, args.norm_obs)

    key = jax.random.PRNGKey(args.seed)
    key, init_key = jax.random.split(key)
    network = ActorCritic(action_dim=envs.action_space.shape[0], hidden_sizes=tuple(args.hidden_sizes))
    optimizer, learning_rate = make_optimizer(args)
    train_state = TrainState.create(
        apply_fn=network.apply, params=jax.jit(network.init)(init_key, env_state.obs), tx=optimizer
    )

    collect_fn = make_collect_fn(args, envs, xla_step, network.apply)
    update_epoch_fn = jax.jit(partial(update_epoch, args=args))

    start_time = time.time()
    global_step = 0
    for iteration in range(1, args.num_iterations + 1):
        key, collect_key = jax.random.split(key)
        env_state, batch, stats = collect_fn(train_state.params, env_state, collect_key)
        global_step += args.batch_size

        for _epoch in range(args.update_epochs):
            key, epoch_key = jax.random.split(key)
            train_state, losses = update_epoch_fn(train_state, batch, epoch_key)
            if args.target_kl is not None and float(losses["approx_kl"]) > args.target_kl:
                break

        stats, losses, step_count = jax.device_get((stats, losses, train_state.step))
        sps = int(global_step / (time.time() - start_time))
        if stats["num_episodes"] > 0:
            writer.add_scalar("charts/episodic_return", stats["episodic_return"], global_step)
            writer.add_scalar("charts/episodic_length", stats["episodic_length"], global_step)
        writer.add_scalar("charts/learning_rate", float(learning_rate(step_count)), global_step)
        for name, value in losses.items():
            writer.add_scalar(f"losses/{name}", value, global_step)
        writer.add_scalar("losses/explained_variance", stats["explained_variance"], global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        episodic = f"{stats['episodic_return']:.1f}" if stats["num_episodes"] else "-"
        print(f"iteration={iteration}/{args.num_iterations} global_step={global_step} return={episodic} SPS={sps}")

    if args.save_model:
        model_path = f"runs/{run_name}/{args.exp_name}.model"
        with open(model_path, "wb") as f:
            f.write(flax.serialization.to_bytes({"params": train_state.params, "obs_rms": env_state.obs_rms}))
        print(f"model saved to {model_path}")
    return train_state


def main(cli_args: Optional[list[str]] = None):
    args = parse_args(cli_args)
    run_name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    if args.track:
        import wandb

        wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            sync_tensorboard=True,
            config=asdict(args),
            name=run_name,
            save_code=True,
        )
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(f"runs/{run_name}")
    writer.add_text(
        "hyperparameters",
        "|param|value|\n|-|-|\n" + "\n".join(f"|{key}|{value}|" for key, value in asdict(args).items()),
    )
    try:
        train(args, run_name, writer)
    finally:
        writer.close()
        if args.track:
            wandb.finish()


if __name__ == "__main__":
    main()
