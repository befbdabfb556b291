"""PPO for continuous control with EnvPool's MuJoCo step compiled into JAX.

Read top to bottom, the file is PPO in the order data flows: hyperparameters, the environment boundary
(EnvPool's XLA step and pure wrappers), the actor-critic, the rollout (`lax.scan`), advantages (reverse
`lax.scan`), loss and update, and the training loop. After the banner "Running it" comes what a run needs
around the algorithm: checkpoints, evaluation and video, signals, progress and logging, W&B, the command
line. `python ppo_continuous_envpool_jax.py --help` lists the flags.

Output contract: the first line on stdout is `run_dir=<path>`, the directory the run logs to, the second
names the family defaults it applied, the third the devices of the rollout and of the learner; then, where
stdout is not a terminal (on one, a progress bar), one line per iteration, `iteration=I/N global_step=S
return=R SPS=X` (R is the mean return of the episodes that ended in the iteration, `-` where none did), with
` eval=E` where the policy was evaluated; the last line, however the run ends, is its summary (`summary:
status=ok steps=... final_return=...`), which the run directory also keeps as summary.json: what benchmark.sh
and report.py read about how a run ended.
"""

import argparse
import contextlib
import difflib
import fcntl
import glob
import importlib.machinery
import importlib.util
import json
import math
import os
import platform
import re
import signal
import sys
import textwrap
import time
import types
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Literal, NamedTuple

# XLA's CPU client gets 512-bit vectors and one thread, read when JAX starts (`parse_args` may give it more
# threads before: `xla_cpu_threads`). The environment overrides either (XLA_FLAGS, PJRT_NPROC).
THREADS_GIVEN = "PJRT_NPROC" in os.environ
os.environ.setdefault("PJRT_NPROC", "1")
if "--xla_cpu_prefer_vector_width" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_cpu_prefer_vector_width=512"

# `import envpool` registers every family EnvPool ships through `envpool.entry`, 1.5-3 s of start-up. An
# empty stand-in for that module skips it; EnvPool's eight MuJoCo families (six trainable, two refused) are
# registered by hand, and the others only to say why an id of theirs cannot be trained (`register_every_family`).
sys.modules.setdefault("envpool.entry", types.ModuleType("envpool.entry"))
import envpool
import envpool.mujoco.dmc.registration
import envpool.mujoco.gym.registration
import envpool.mujoco.locomotion.registration
import envpool.mujoco.metaworld.registration
import envpool.mujoco.mjlab.registration
import envpool.mujoco.myosuite.registration
import envpool.mujoco.playground.registration
import envpool.mujoco.robotics.registration
import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from flax.training.train_state import TrainState

# What is not placed elsewhere runs on the CPU: the rollout above all, whose EnvPool step is a host call (EnvPool
# has no TPU step, and on a GPU backend an early version of this script trained silently wrong:
# docs/how-it-works.md). The learner runs on --learner-device, where matrix products keep float32's precision (a
# TPU's default rounds their inputs to bfloat16; the CPU computes float32 either way).
jax.config.update("jax_default_device", "cpu")
jax.config.update("jax_default_matmul_precision", "highest")
# Compiled programs are kept on disk, so the next run with the same shapes loads its set-up and update
# instead of compiling them. JAX_COMPILATION_CACHE_DIR picks another folder, JAX_ENABLE_COMPILATION_CACHE=false
# turns it off.
if jax.config.jax_compilation_cache_dir is None:
    jax.config.update("jax_compilation_cache_dir", os.path.expanduser("~/.cache/ppo_continuous_envpool_jax"))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


@dataclass
class PPOArgs:
    # The defaults start from tianshou's MuJoCo PPO configuration (64 envs x 32 steps, 10 epochs of
    # minibatches of 64, value coefficient 0.25, advantages recomputed every epoch, initial log-std -0.5)
    # and differ from it in advantage normalisation, CleanRL's clipped value loss, reward scaling instead of
    # return normalisation, and Adam's epsilon. The value loss is CleanRL's 0.5 x squared error, so its term
    # weighs half of tianshou's; as Adam undoes a loss's scale, that acts only through the shared grad-norm
    # clip and Adam's epsilon. The defaults were chosen on five tasks at once: docs/ablations.md.
    env_id: str = "HalfCheetah-v4"
    """the id of an EnvPool MuJoCo task"""
    seed: int = 1
    """seed of the experiment (JAX keys and EnvPool's environments)"""
    num_threads: int = 0
    """EnvPool's worker threads (0: one per environment, at most one per core)"""
    learner_device: str = "auto"
    """where the advantages and update epochs run: auto (JAX's first GPU or TPU, else the CPU), cpu, or a device as
    platform[:index] (tpu, gpu:1, cpu:1); the rollout runs on the CPU"""
    total_timesteps: int = 1_000_000
    """total environment steps of the experiment (rounded down to whole batches of --num-envs x --num-steps)"""
    learning_rate: float = 3e-4
    """the learning rate of the optimizer"""
    adam_eps: float = 1e-5
    """the epsilon of Adam (CleanRL: 1e-5; tianshou, PyTorch's default: 1e-8)"""
    num_envs: int = 64
    """the number of parallel environments"""
    num_steps: int = 32
    """the number of steps to run in each environment per policy rollout"""
    stagger_episodes: bool = False
    """before training, step the environments with the mid-range action for one episode's length, resetting
    environment i of N after i/N of it: fixed-length episodes (DeepMind Control's 1,000 steps) then end at N
    different steps instead of all together (not trained on, not counted in the steps)"""
    anneal_lr: bool = True
    """toggle learning rate annealing (linearly to 0 over all gradient steps; --target-kl stops short of 0)"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the generalized advantage estimation"""
    num_minibatches: int = 32
    """the number of mini-batches"""
    update_epochs: int = 10
    """the K epochs to update the policy"""
    policy_lag: bool = False
    """collect each rollout with the parameters from before the previous iteration's update, so that the update runs
    beside the rollout (one update of policy lag, as in Sebulba and cleanba); learns less on Ant-v4: docs/speed.md"""
    norm_adv: bool = True
    """toggles advantages normalization (per minibatch; on, unlike tianshou: see docs/ablations.md)"""
    recompute_adv: bool = True
    """recompute advantages and value targets with the current critic before each epoch after the first
    (tianshou's default; measured against off in docs/ablations.md)"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """toggles a clipped loss for the value function (OpenAI baselines' and CleanRL's; not in the PPO paper;
    on, unlike tianshou: see docs/ablations.md)"""
    ent_coef: float = 0.0
    """coefficient of the entropy"""
    ent_max_log_std: float | None = None
    """the entropy bonus rewards each dimension's log-std only up to this value (None: without limit)"""
    rpo_alpha: float = 0.0
    """RPO: the update sees the policy's mean shifted by noise uniform in [-alpha, alpha] (0: off; CleanRL's: 0.5);
    as in CleanRL, approx_kl and clipfrac are then the shifted policy's"""
    vf_coef: float = 0.25
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: float | None = None
    """the target KL divergence threshold (stops the epochs of an iteration early)"""
    norm_obs: bool = True
    """toggles observation normalization by running mean and variance"""
    reward_norm: Literal["none", "scale", "return"] = "scale"
    """none: raw rewards. scale: rewards divided by the running std of the discounted return, clipped to
    +-10 (CleanRL's gym-era scaling: gym 0.23's NormalizeReward). return: tianshou's rew_norm, raw
    rewards and a critic that predicts returns divided by the running std of the lambda-returns"""
    clip_action: bool = True
    """clip the policy's sample to [-1, 1] before scaling it onto the task's bounds (off: scaled, not clipped;
    MuJoCo clamps the control, but EnvPool charges the control cost on the action as sent)"""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """the hidden layer sizes of the actor and of the critic"""
    init_log_std: float = -0.5
    """the initial log standard deviation of the policy's Gaussian, in the [-1, 1] action space (tianshou's; 0
    learns far less on HalfCheetah-v4: docs/ablations.md)"""

    # computed from the flags above, not flags themselves
    batch_size: tyro.conf.Suppress[int] = 0
    minibatch_size: tyro.conf.Suppress[int] = 0
    num_iterations: tyro.conf.Suppress[int] = 0


# Each family's defaults where they differ from those above (the gym tasks'); a flag given on the command line
# wins. Why each: docs/families.md.
# DeepMind Control's recipe: episodes of a fixed length (DeepMind Control's 1,000 steps, MetaWorld's 500),
# staggered so that they do not all end together; a wider start and an entropy bonus that rewards the log-std
# only up to 0 (its samples are clipped to the bounds). Chosen on DeepMind Control, then screened on MetaWorld.
DMC_RECIPE = dict(stagger_episodes=True, init_log_std=0.0, ent_coef=0.01, ent_max_log_std=0.0)
# DeepMind Control now: the recipe's staggered episodes and wider start, with CleanRL's RPO (the update sees the
# policy's mean shifted by uniform noise in [-0.5, 0.5]) in place of the entropy bonus. Over the README's twelve
# DeepMind Control tasks at 8M steps it beats the recipe, most where exploring is the task: HumanoidWalk gets up
# in some seeds, where the recipe never did; the swing-ups and WalkerStand rise too.
DMC_RPO = dict(stagger_episodes=True, init_log_std=0.0, rpo_alpha=0.5)
# MyoSuite: a shorter horizon. Its tasks pay for reaching and holding a pose within episodes of 100-200 steps;
# a discount of 0.95 (a horizon of about 20 steps) reached NPG's success on HandReach at 1M steps, where 0.99 had
# barely begun, and lost nothing on the other three tasks (their returns level or higher).
# MuJoCo Playground: its own Brax PPO settings for PandaPickCubeCartesian (a 256-256 network, discount 0.97, 8
# epochs of 8 minibatches at 5e-4, an entropy bonus of 0.0075), its batch of 1,024 environments x 10 steps taken
# as 64 x 160: a Playground environment holds 18-260 MiB in EnvPool, so gym's 64 is what a 24 GiB machine holds
# on every task. They found Panda's cube in more seeds than gym's defaults, and earned more on Go1.
PLAYGROUND_BRAX = dict(num_steps=160, num_minibatches=8, update_epochs=8, learning_rate=5e-4, ent_coef=0.0075)
PLAYGROUND_BRAX |= dict(gamma=0.97, hidden_sizes=(256, 256), clip_coef=0.3, max_grad_norm=1.0)
# MetaWorld: DeepMind Control's recipe for its 500-step episodes, with the Brax settings above (their entropy
# coefficient in place of the recipe's): with them PPO pushes and picks MetaWorld's puck, which it rarely did.
FAMILY_DEFAULTS = {
    "dmc": DMC_RPO,
    "metaworld": DMC_RECIPE | PLAYGROUND_BRAX,
    "myosuite": dict(gamma=0.95),
    "playground": PLAYGROUND_BRAX,
}


# ---------------------------------------------------------------------------------------------------
# Environment: EnvPool's XLA step behind one float64 boundary, and pure wrappers with explicit state.
# ---------------------------------------------------------------------------------------------------


# EnvPool's options for a family's tasks, where its defaults are not the single-task setting. MetaWorld's
# hide the goal (zeros in obs[36:39]), as its meta-learning benchmarks do, while a new goal is drawn every
# episode: a policy that cannot see it reaches Reach-v3's goal about one time in nine.
ENV_OPTIONS = {"metaworld": {"partially_observable": False}}


def make_envs(env_id: str, num_envs: int, num_threads: int, seed: int):
    """EnvPool's MuJoCo batch plus its jit-able XLA step function."""
    options = ENV_OPTIONS.get(family_name(env_id), {})
    envs = envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, num_threads=num_threads, seed=seed, **options)
    # The FFI buffers are declared with x64 on: MuJoCo observations, and most tasks' actions, are float64.
    with jax.enable_x64(True):
        handle, _recv, _send, xla_step = envs.xla()
    return envs, handle, xla_step


# MuJoCo Playground's privileged_state holds what a real robot cannot measure: it is for the critic alone.
CRITIC_ONLY_KEYS = ("privileged_state",)
# MetaWorld, Adroit, the mazes and four Playground tasks report `success`; Fetch and the Shadow hand
# `is_success`; MyoSuite `solved`; Playground's Panda tasks only their reward's success term (for the cube
# tasks, the cube at its target, which ends the episode), which the Leap and Aero hands report beside `success`.
SUCCESS_KEYS = ("success", "is_success", "solved", "reward_success")
# The any-step success rate counts an episode whose task flagged success on at least this many of its steps:
# one, as Meta-World's own evaluation counts, except MyoSuite's `solved`, which its evaluate_success (and so its
# NPG baselines' figures) counts on more than 5 steps.
SUCCESS_STEPS = {"solved": 6}


class ObservationLayout(NamedTuple):
    """How a task's observation becomes one vector per environment.

    A Box stays as it is. A dict (DMC, robotics, Playground) becomes its arrays, each flattened per
    environment (a scalar has width 1), concatenated in sorted key order, nested dicts sorted too: the order
    of gymnasium's FlattenObservation on a Dict space made from them. The critic-only keys come after the
    others, so that the policy's input is the vector's first `policy_dim` features and the critic's all of it.
    """

    keys: tuple[tuple[str, ...], ...]  # key paths in the vector's order; () for a Box observation
    policy_dim: int


def observation_layout(space) -> ObservationLayout:
    if not isinstance(space, Mapping):
        return ObservationLayout((), math.prod(space.shape))

    def widths(space, prefix):
        for key in sorted(space):
            if isinstance(space[key], Mapping):
                yield from widths(space[key], (*prefix, key))
            else:
                yield (*prefix, key), math.prod(space[key].shape)

    policy, critic_only = [], []
    for path, width in widths(space, ()):
        (critic_only if path[0] in CRITIC_ONLY_KEYS else policy).append((path, width))
    return ObservationLayout(tuple(path for path, _ in policy + critic_only), sum(width for _, width in policy))


def flatten_observation(obs, keys: tuple[tuple[str, ...], ...]):
    """A batch of observations (a Box's (N, obs_dim) array, or a dict of (N, ...) arrays) as (N, obs_dim)."""
    if not keys:
        return obs
    parts = []
    for path in keys:
        part = obs
        for key in path:
            part = part[key]
        parts.append(part.reshape(part.shape[0], -1))
    return jnp.concatenate(parts, axis=1)


def layout_observation(envs, obs):
    """A batch of `envs`' observations as returned by EnvPool's NumPy API, laid out as `env_step` lays them out."""
    return flatten_observation(obs, observation_layout(envs.observation_space).keys)


def reset_observation(envs):
    """`envs.reset()`'s first observations, laid out as `env_step` lays out the others."""
    return layout_observation(envs, envs.reset()[0])


class Start(NamedTuple):
    """Where the environments stand when training starts."""

    obs: jax.Array | np.ndarray  # (N, obs_dim), laid out as env_step lays out observations
    episode_return: np.ndarray  # (N,) the raw return of each environment's episode so far
    episode_length: np.ndarray  # (N,)
    episode_success_steps: np.ndarray  # (N,) the steps of the episode so far on which the task flagged success
    is_reset: np.ndarray  # (N,) its last step ended an episode, so its next step is the late reset


def reset_start(envs) -> Start:
    obs = reset_observation(envs)
    num_envs = obs.shape[0]
    no_success, no_reset = np.zeros(num_envs, np.int32), np.zeros(num_envs, bool)
    return Start(obs, np.zeros(num_envs, np.float32), np.zeros(num_envs, np.int32), no_success, no_reset)


def staggered_start(envs) -> Start:
    """--stagger-episodes: a task whose episodes all last `max_episode_steps` (DeepMind Control: no terminations)
    would otherwise end every episode of the batch on the same step, so that each rollout of `num_steps` holds
    one window of the episode, the same in every environment, and the updates see its phases one at a time.
    Environment i is reset before step i * max_steps // N of one episode's length of mid-range actions, and has
    played max_steps - i * max_steps // N steps of its episode when training starts; that first episode's return
    and success count the steps played before, as they would in an episode that training found under way."""
    num_envs, max_steps = envs.config["num_envs"], envs.spec.config.max_episode_steps
    space = envs.action_space
    action = np.broadcast_to((space.low + space.high) / 2, (num_envs,) + space.shape).astype(space.dtype)
    reset_at = np.arange(num_envs) * max_steps // num_envs
    key = success_key(envs)
    envs.reset()
    episode_return, success_steps, done = np.zeros(num_envs), np.zeros(num_envs, np.int32), np.zeros(num_envs, bool)
    for t in range(max_steps):
        if (now := np.flatnonzero(reset_at == t)).size:
            envs.reset(now)
            episode_return[now], success_steps[now], done[now] = 0.0, 0, False
        obs, reward, terminated, truncated, info = envs.step(action)
        episode_return = np.where(done, 0.0, episode_return + reward)  # a late reset starts the next episode
        success_steps = np.where(done, 0, success_steps + (info[key] > 0 if key else 0))
        done = terminated | truncated
    obs = layout_observation(envs, obs)
    return Start(np.asarray(obs), episode_return, info["elapsed_step"].astype(np.int32), success_steps, done)


class EnvFunctions(NamedTuple):
    """What the compiled programs need of EnvPool: its step, the action bounds and dtype, how observations are
    flattened, and where the task reports success."""

    xla_step: object
    action_low: jax.Array  # (act_dim,)
    action_high: jax.Array
    action_dtype: np.dtype  # as the task declares: float32 for MetaWorld, robotics and MyoSuite
    obs_keys: tuple[tuple[str, ...], ...]  # ObservationLayout.keys
    success_key: str | None  # the key of `info` that flags success, for the tasks that report it
    success_steps: int  # the flagged steps an episode needs to count in the any-step rate (SUCCESS_STEPS)


def success_key(envs) -> str | None:
    info_keys = {key.removeprefix("info:") for key in envs.spec.state_array_spec if key.startswith("info:")}
    return next((key for key in SUCCESS_KEYS if key in info_keys), None)


def env_functions(envs, xla_step) -> EnvFunctions:
    space, key = envs.action_space, success_key(envs)
    return EnvFunctions(
        xla_step=xla_step,
        action_low=space.low.astype(np.float32),
        action_high=space.high.astype(np.float32),
        action_dtype=space.dtype,
        obs_keys=observation_layout(envs.observation_space).keys,
        success_key=key,
        success_steps=SUCCESS_STEPS.get(key, 1),
    )


def env_step(env: EnvFunctions, handle, action):
    """The float64 boundary: float32 actions in (sent in the task's dtype), float32 observations out, x64 only
    for the call itself; and each step's success flag (False where the task reports none)."""
    with jax.enable_x64(True):
        handle, (obs, reward, terminated, truncated, info) = env.xla_step(handle, action.astype(env.action_dtype))
        obs = flatten_observation(obs, env.obs_keys).astype(jnp.float32)
        success = info[env.success_key] > 0 if env.success_key else jnp.zeros_like(terminated)
    return handle, obs, reward.astype(jnp.float32), terminated, truncated, success


def to_env_action(action, low, high, clip: bool):
    """The policy acts in [-1, 1] in every dimension; clip there (with `clip`) and map onto the task's bounds.

    So its Gaussian starts with the same spread relative to the range on every task (Humanoid's bounds are
    +-0.4). EnvPool charges the control cost on the action as sent: clipped, out-of-bounds samples cost
    nothing extra. NaN becomes 0: when training diverges, the rollout already dispatched after it (see
    `train`) runs with NaN parameters and is thrown away, and MuJoCo would warn about every NaN control.
    """
    action = jnp.nan_to_num(action)
    if clip:
        action = jnp.clip(action, -1.0, 1.0)
    return (high + low) / 2 + (high - low) / 2 * action


class RunningMeanStd(NamedTuple):
    mean: jax.Array
    var: jax.Array
    count: jax.Array


def rms_init(shape) -> RunningMeanStd:
    # The tiny prior count is gymnasium's: it keeps the first merge well defined.
    return RunningMeanStd(jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32), jnp.float32(1e-4))


def rms_update(rms: RunningMeanStd, batch: jax.Array, mask: jax.Array | None = None) -> RunningMeanStd:
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


def standardize(obs_rms: RunningMeanStd, obs: jax.Array) -> jax.Array:
    return jnp.clip((obs - obs_rms.mean) / jnp.sqrt(obs_rms.var + 1e-8), -10.0, 10.0)


def normalize_obs(obs_rms: RunningMeanStd, obs: jax.Array):
    """CleanRL's observation normalisation for a batch (N, obs_dim): merge it in, standardize (gym's
    NormalizeObservation), clip to +-10 (CleanRL's TransformObservation)."""
    obs_rms = rms_update(obs_rms, obs)
    return obs_rms, standardize(obs_rms, obs)


def scale_reward(return_rms: RunningMeanStd, discounted_return, reward, is_reset, gamma: float):
    """CleanRL's reward scaling: divide rewards (N,) by the running std of the discounted return (gym 0.23's
    NormalizeReward, as in CleanRL's gym-era scripts), clip to +-10 (CleanRL's TransformReward).

    The discounted return restarts with each episode (gym 0.26's and gymnasium's NormalizeReward instead
    restart it at a termination's own step and carry it over a truncation). Reset steps (reward 0, not an
    experience) neither extend it nor count towards its statistics.
    """
    discounted_return = jnp.where(is_reset, 0.0, discounted_return * gamma + reward)
    return_rms = rms_update(return_rms, discounted_return, mask=~is_reset)
    scaled = jnp.clip(reward / jnp.sqrt(return_rms.var + 1e-8), -10.0, 10.0)
    return return_rms, discounted_return, scaled


@flax.struct.dataclass
class EnvState:
    handle: jax.Array  # EnvPool's handle, threaded through jit so the steps stay ordered
    obs: jax.Array  # (N, obs_dim) the next observation, normalised with --norm-obs
    is_reset: jax.Array  # (N,) the env ended an episode last step, so the next step is its late reset
    obs_rms: RunningMeanStd
    return_rms: RunningMeanStd  # of the discounted return (--reward-norm scale) or the lambda-return (return)
    discounted_return: jax.Array  # (N,)
    episode_return: jax.Array  # (N,) raw, unscaled
    episode_length: jax.Array  # (N,)
    episode_success_steps: jax.Array  # (N,) the steps of the episode so far on which the task flagged success


def init_env_state(handle, start: Start, norm_obs: bool, obs_rms=None, return_rms=None) -> EnvState:
    """The state before the first step; `obs_rms` and `return_rms` carry statistics over from a checkpoint."""
    num_envs, obs_dim = start.obs.shape
    obs = jnp.asarray(start.obs, jnp.float32)
    obs_rms = rms_init((obs_dim,)) if obs_rms is None else obs_rms
    if norm_obs:
        obs_rms, obs = normalize_obs(obs_rms, obs)
    return EnvState(
        handle=handle,
        obs=obs,
        is_reset=jnp.asarray(start.is_reset, bool),
        obs_rms=obs_rms,
        return_rms=rms_init(()) if return_rms is None else return_rms,
        discounted_return=jnp.zeros(num_envs, jnp.float32),
        episode_return=jnp.asarray(start.episode_return, jnp.float32),
        episode_length=jnp.asarray(start.episode_length, jnp.int32),
        episode_success_steps=jnp.asarray(start.episode_success_steps, jnp.int32),
    )


# ---------------------------------------------------------------------------------------------------
# Actor-critic
# ---------------------------------------------------------------------------------------------------


class ActorCritic(nn.Module):
    action_dim: int
    hidden_sizes: tuple[int, ...]
    init_log_std: float
    policy_obs_dim: int | None = None  # the policy sees obs[..., :policy_obs_dim] (None: all), the critic all

    @nn.compact
    def __call__(self, obs):
        # CleanRL's orthogonal initialisation: gain sqrt(2) for the tanh layers; the policy head 0.01, so
        # the initial mean action is near 0 in every state; the value head 1.
        def mlp(x, out_dim, out_scale):
            for size in self.hidden_sizes:
                x = nn.tanh(nn.Dense(size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
            return nn.Dense(out_dim, kernel_init=nn.initializers.orthogonal(out_scale))(x)

        mean = mlp(obs[..., : self.policy_obs_dim], self.action_dim, 0.01)
        log_std = self.param("log_std", nn.initializers.constant(self.init_log_std), (self.action_dim,))
        value = mlp(obs, 1, 1.0).squeeze(-1)
        return mean, log_std, value


def make_network(args: PPOArgs, envs) -> ActorCritic:
    policy_obs_dim = observation_layout(envs.observation_space).policy_dim
    return ActorCritic(envs.action_space.shape[0], tuple(args.hidden_sizes), args.init_log_std, policy_obs_dim)


def gaussian_log_prob(mean, log_std, action):
    return (-0.5 * ((action - mean) / jnp.exp(log_std)) ** 2 - log_std - 0.5 * jnp.log(2 * jnp.pi)).sum(-1)


# ---------------------------------------------------------------------------------------------------
# Rollout: one lax.scan over num_steps, no Python per environment step.
# ---------------------------------------------------------------------------------------------------


class Transition(NamedTuple):
    obs: jax.Array  # (N, obs_dim) what the policy saw
    action: jax.Array  # (N, act_dim) the unclipped, unscaled sample, so its log-probability is exact
    log_prob: jax.Array  # (N,)
    value: jax.Array  # (N,)
    reward: jax.Array  # (N,) scaled with --reward-norm scale
    terminated: jax.Array  # (N,)
    truncated: jax.Array  # (N,)
    is_reset: jax.Array  # (N,) EnvPool's late reset: not an experience of the policy


class EpisodeEnd(NamedTuple):
    done: jax.Array  # (N,) an episode ended at this step
    episode_return: jax.Array  # (N,) its raw return where done
    episode_length: jax.Array  # (N,) where done
    success: jax.Array  # (N,) the task's success flag at this step (False where it reports none)
    success_steps: jax.Array  # (N,) the steps of the episode on which the flag was set, this one included


def rollout_step(params, env_state: EnvState, key, *, env: EnvFunctions, apply_fn, args: PPOArgs):
    mean, log_std, value = apply_fn(params, env_state.obs)
    # One array for the sample: XLA may otherwise compute it again inside each fusion that uses it, and on the
    # CPU backend of jax 0.12 those copies can differ in the last bit (one contracted to a fused multiply-add),
    # so that EnvPool would be sent another action than the one whose log-probability is stored.
    action = jax.lax.optimization_barrier(mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape))
    log_prob = gaussian_log_prob(mean, log_std, action)
    handle, next_obs, reward, terminated, truncated, success = env_step(
        env, env_state.handle, to_env_action(action, env.action_low, env.action_high, args.clip_action)
    )

    # On a reset step EnvPool ignored the action and returned reward 0: that reward counts towards no return
    # or episode statistic. Its observation, the new episode's first, is real and does update obs_rms.
    is_reset = env_state.is_reset
    obs_rms, return_rms, discounted_return = env_state.obs_rms, env_state.return_rms, env_state.discounted_return
    if args.norm_obs:
        obs_rms, next_obs = normalize_obs(obs_rms, next_obs)
    if args.reward_norm == "scale":
        return_rms, discounted_return, scaled_reward = scale_reward(
            return_rms, discounted_return, reward, is_reset, args.gamma
        )
    else:
        scaled_reward = reward
    episode_return = jnp.where(is_reset, 0.0, env_state.episode_return + reward)
    episode_length = jnp.where(is_reset, 0, env_state.episode_length + 1)
    episode_success_steps = jnp.where(is_reset, 0, env_state.episode_success_steps + success)
    done = terminated | truncated

    transition = Transition(env_state.obs, action, log_prob, value, scaled_reward, terminated, truncated, is_reset)
    env_state = EnvState(
        handle=handle,
        obs=next_obs,
        is_reset=done,
        obs_rms=obs_rms,
        return_rms=return_rms,
        discounted_return=discounted_return,
        episode_return=episode_return,
        episode_length=episode_length,
        episode_success_steps=episode_success_steps,
    )
    return env_state, (transition, EpisodeEnd(done, episode_return, episode_length, success, episode_success_steps))


def rollout(params, env_state: EnvState, key, *, env: EnvFunctions, apply_fn, args: PPOArgs):
    """Run the policy for `num_steps` in every environment: transitions and episode ends stacked (T, N)."""

    def step(env_state, key):
        return rollout_step(params, env_state, key, env=env, apply_fn=apply_fn, args=args)

    return jax.lax.scan(step, env_state, jax.random.split(key, args.num_steps))


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
        done = (terminated | truncated).astype(jnp.float32)
        delta = reward + gamma * (1.0 - terminated.astype(jnp.float32)) * next_value - value
        advantage = delta + gamma * gae_lambda * (1.0 - done) * next_advantage
        return advantage, advantage

    xs = (transitions.reward, transitions.value, next_values, transitions.terminated, transitions.truncated)
    _, advantages = jax.lax.scan(step, jnp.zeros_like(last_value), xs, reverse=True)
    return advantages, advantages + transitions.value


class Batch(NamedTuple):
    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array  # the critic's, at the rollout or (--recompute-adv) at the start of the epoch
    advantage: jax.Array
    target: jax.Array  # value target (the return)
    valid: jax.Array  # float 1.0 for experiences of the policy, 0.0 for reset transitions


def make_batch(transitions: Transition, values, last_value, return_rms: RunningMeanStd, args: PPOArgs):
    """Advantages and value targets from the critic's `values` (T, N) and `last_value` (N,), flattened into
    one batch of `num_steps * num_envs` experiences; and `return_rms`, updated with --reward-norm return."""
    valid = ~transitions.is_reset
    if args.reward_norm == "return":
        # tianshou's rew_norm: the critic predicts returns divided by the running std of the lambda-returns.
        # GAE runs in reward units, so the advantages keep the rewards' scale; the targets are divided by the
        # std as it was (no mean subtracted, as in OpenAI baselines), and then the std takes in these returns.
        std = jnp.sqrt(return_rms.var + 1e-8)
        advantages, returns = compute_gae(
            transitions._replace(value=values * std), last_value * std, args.gamma, args.gae_lambda
        )
        targets = returns / std
        return_rms = rms_update(return_rms, returns.reshape(-1), mask=valid.reshape(-1))
    else:
        advantages, targets = compute_gae(transitions._replace(value=values), last_value, args.gamma, args.gae_lambda)
    batch = Batch(
        obs=transitions.obs,
        action=transitions.action,
        log_prob=transitions.log_prob,
        value=values,
        advantage=advantages,
        target=targets,
        valid=valid.astype(jnp.float32),
    )
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), batch), return_rms


def collect(params, env_state: EnvState, key, *, env: EnvFunctions, apply_fn, args: PPOArgs):
    """Rollout and the first epoch's batch; the transitions (T, N) are returned too, for `recompute_batch`."""
    env_state, (transitions, episode_end) = rollout(params, env_state, key, env=env, apply_fn=apply_fn, args=args)
    _, _, last_value = apply_fn(params, env_state.obs)
    batch, return_rms = make_batch(transitions, transitions.value, last_value, env_state.return_rms, args)
    env_state = env_state.replace(return_rms=return_rms)
    stats = {  # over the episodes that ended in the rollout
        "num_episodes": episode_end.done.sum(),
        "episodic_return": weighted_mean(episode_end.episode_return, episode_end.done),
        "episodic_length": weighted_mean(episode_end.episode_length, episode_end.done),
        "explained_variance": explained_variance(batch.value, batch.target, batch.valid),
    }
    if env.success_key:
        stats["success_rate"], stats["any_step_success_rate"] = success_rates(episode_end, env.success_steps)
    return env_state, transitions, batch, stats


def success_rates(episode_end: EpisodeEnd, success_steps: int):
    """The fractions of the episodes ending in `episode_end` (T, N) that succeeded, counted two ways.

    The success rate counts an episode whose last step had the flag set: where the goal was reached and then
    lost, it was not (TD-MPC2's MetaWorld figures count so). The any-step rate counts one whose flag was set at
    some `success_steps` steps (Meta-World's own evaluation and garage count one step; MyoSuite more than 5).
    Before the first episode ends, 0 and 0.
    """
    done = episode_end.done
    return weighted_mean(episode_end.success, done), weighted_mean(episode_end.success_steps >= success_steps, done)


def recompute_batch(params, transitions: Transition, last_obs, return_rms, *, apply_fn, args: PPOArgs):
    """The batch again, with advantages and targets from the critic as it is now (tianshou's recompute_advantage);
    and `return_rms`, which with --reward-norm return takes in the recomputed returns too, as in tianshou.

    With 32-step rollouts much of each advantage is the critic's bootstrap, which each epoch improves.
    """
    values = apply_fn(params, transitions.obs)[2]
    last_value = apply_fn(params, last_obs)[2]
    return make_batch(transitions, values, last_value, return_rms, args)


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


def ppo_loss(params, apply_fn, batch: Batch, mean_noise=None, *, args: PPOArgs):
    """Clipped surrogate + value loss - entropy bonus, averaged over the valid experiences of `batch`; with
    --rpo-alpha, of the policy whose mean is shifted by `mean_noise` (RPO keeps it exploring where PPO narrows)."""
    mean, log_std, value = apply_fn(params, batch.obs)
    mean = mean if mean_noise is None else mean + mean_noise
    log_ratio = gaussian_log_prob(mean, log_std, batch.action) - batch.log_prob
    ratio = jnp.exp(log_ratio)

    advantage = batch.advantage
    if args.norm_adv:
        adv_mean = weighted_mean(advantage, batch.valid)
        adv_std = jnp.sqrt(weighted_mean((advantage - adv_mean) ** 2, batch.valid))
        advantage = (advantage - adv_mean) / (adv_std + 1e-8)
    clipped_ratio = jnp.clip(ratio, 1.0 - args.clip_coef, 1.0 + args.clip_coef)
    # The max of the negated objectives is the min of the clipped and unclipped ones: a pessimistic bound,
    # so moving the ratio beyond [1 - clip, 1 + clip] in the advantage's direction earns nothing.
    policy_loss = weighted_mean(jnp.maximum(-advantage * ratio, -advantage * clipped_ratio), batch.valid)

    value_error = (value - batch.target) ** 2
    if args.clip_vloss:
        # Around batch.value: with --recompute-adv the epoch's starting critic, as in tianshou (CleanRL, which
        # does not recompute, clips around the rollout's), so the critic may move clip_coef per epoch.
        clipped_value = batch.value + jnp.clip(value - batch.value, -args.clip_coef, args.clip_coef)
        value_error = jnp.maximum(value_error, (clipped_value - batch.target) ** 2)
    value_loss = 0.5 * weighted_mean(value_error, batch.valid)

    # The log-std is state-independent, so the Gaussian's entropy is the same for every observation.
    entropy = (0.5 + 0.5 * jnp.log(2 * jnp.pi) + log_std).sum()
    # Samples are clipped to the bounds, so past saturation a wider Gaussian costs nothing in the task and a
    # bonus alone would widen it without end (WalkerRun-v1 at --ent-coef 0.01): a cap stops that reward.
    bonus_log_std = log_std if args.ent_max_log_std is None else jnp.minimum(log_std, args.ent_max_log_std)
    bonus = (0.5 + 0.5 * jnp.log(2 * jnp.pi) + bonus_log_std).sum()
    loss = policy_loss - args.ent_coef * bonus + args.vf_coef * value_loss

    metrics = {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "old_approx_kl": weighted_mean(-log_ratio, batch.valid),
        "approx_kl": weighted_mean((ratio - 1.0) - log_ratio, batch.valid),  # KL(old || new): unbiased, >= 0
        "clipfrac": weighted_mean((jnp.abs(ratio - 1.0) > args.clip_coef).astype(jnp.float32), batch.valid),
    }
    return loss, metrics


def update_epoch(train_state: TrainState, batch: Batch, permutation, mean_noise=None, *, args: PPOArgs):
    """One pass over the batch in minibatches, in the order of `permutation`; returns the minibatch-mean metrics.
    `mean_noise` (batch_size, act_dim): RPO's shifts of the mean, one an experience (None without --rpo-alpha)."""
    minibatches = jax.tree.map(
        lambda x: x[permutation].reshape((args.num_minibatches, args.minibatch_size) + x.shape[1:]), (batch, mean_noise)
    )

    def update_minibatch(state, minibatch):  # minibatch: (batch, mean_noise)
        grads, metrics = jax.grad(ppo_loss, has_aux=True)(state.params, state.apply_fn, *minibatch, args=args)
        return state.apply_gradients(grads=grads), metrics

    train_state, metrics = jax.lax.scan(update_minibatch, train_state, minibatches)
    return train_state, jax.tree.map(jnp.mean, metrics)


def train_epoch(train_state, batch, transitions, last_obs, return_rms, permutations, noises, epoch, *, apply_fn, args):
    """Epoch `epoch`: `recompute_batch` from the second on with --recompute-adv, then `update_epoch`; one program for
    every epoch (`epoch` is traced), as each costs an accelerator a dispatch. Returns all that the epoch changed."""
    if args.recompute_adv:
        batch, return_rms = jax.lax.cond(
            epoch > 0,
            lambda: recompute_batch(
                train_state.params, transitions, last_obs, return_rms, apply_fn=apply_fn, args=args
            ),
            lambda: (batch, return_rms),
        )
    mean_noise = None if noises is None else noises[epoch]
    train_state, losses = update_epoch(train_state, batch, permutations[epoch], mean_noise, args=args)
    return train_state, losses, batch, return_rms


def make_optimizer(args: PPOArgs):
    """Adam after a global grad-norm clip; with --anneal-lr the learning rate decays linearly to 0 over all
    gradient steps."""
    if args.anneal_lr:
        num_updates = args.num_iterations * args.update_epochs * args.num_minibatches
        learning_rate = optax.linear_schedule(args.learning_rate, 0.0, num_updates)
    else:
        learning_rate = optax.constant_schedule(args.learning_rate)
    optimizer = optax.chain(optax.clip_by_global_norm(args.max_grad_norm), optax.adam(learning_rate, eps=args.adam_eps))
    # On one concatenated vector, not one small array per weight and bias: the same arithmetic, few XLA kernels.
    return optax.flatten(optimizer), learning_rate


# ---------------------------------------------------------------------------------------------------
# Training loop: rollout -> epochs -> log, one iteration at a time.
# ---------------------------------------------------------------------------------------------------


class RunState(NamedTuple):
    train_state: TrainState  # parameters, optimizer state, gradient-step count: on the learner
    env_state: EnvState  # on the CPU, with the rollout
    global_step: int


class TrainResult(NamedTuple):
    state: RunState  # the last one with finite parameters and losses
    failure: str | None  # what went non-finite, if anything


def train(args: PPOArgs, logger: "IterationLogger", stop: "StopRequest | None" = None, checkpoint=None) -> TrainResult:
    """PPO from `args`, or from `checkpoint` on, until --total-timesteps, a non-finite value, or `stop`."""
    envs, handle, xla_step = make_envs(args.env_id, args.num_envs, args.num_threads, args.seed)
    programs = make_programs(args, envs, xla_step)
    start = staggered_start(envs) if args.stagger_episodes else reset_start(envs)
    state = initial_state(programs, handle, start, checkpoint)
    logger.start(state.global_step)

    # Each iteration updates on its rollout and dispatches the next one, which the CPU runs while Python logs the
    # iteration before: the devices do not wait for Python's dispatching and logging (only for an --eval-every
    # evaluation that outlasts the epochs), and on the CPU Python logs while the epochs run, not during a rollout.
    # --target-kl waits for each epoch, which undoes it. Every return comes after the last rollout dispatched has
    # ended, so EnvPool can be freed.
    first = state.global_step // args.batch_size + 1
    collected = collect_rollout(programs, state.train_state.params, state.env_state, first, args)
    logged, failure = state, None  # the newest state whose iteration was logged as finite
    pending = None  # (iteration, state, figures) dispatched and not logged yet
    try:
        for iteration in range(first, args.num_iterations + 1):
            state, figures, collected = run_iteration(programs, state, collected, iteration, args)
            jax.block_until_ready(state.env_state.obs)  # the iteration's rollout has ended, the epochs run on
            if pending is not None:  # its speed counts this iteration's steps too, collected by now
                if failure := logger.log(*pending, steps_done=state.global_step):
                    break
                logged = pending[1]
            pending = (iteration, state, figures)
            if stop is not None and stop.signum is not None:
                break
    finally:  # however the loop ends (a checkpoint that cannot be written exits from it)
        jax.block_until_ready(collected)  # a rollout dispatched beyond the last iteration logged, thrown away
    if pending is not None and failure is None:
        failure = logger.log(*pending)
        logged = logged if failure else pending[1]
    return TrainResult(logged, failure)


def collect_rollout(programs: "Programs", params, env_state: EnvState, iteration: int, args: PPOArgs):
    """Dispatch the rollout of `iteration` (None past the last), with `params` brought to the CPU."""
    if iteration > args.num_iterations:
        return None
    # Keys derive from the iteration, so a resumed run samples its policy noise as the original would.
    key = jax.random.fold_in(jax.random.PRNGKey(args.seed), iteration)
    return programs.collect(params_on_actor(programs, params), env_state, key)


def params_on_actor(programs: "Programs", params):
    """`params` brought from the learner to the actor (the CPU) as one array: where a transfer's latency costs more
    than its bytes (a TPU under gVisor), each of the network's arrays (13 with two hidden layers) would pay it."""
    if programs.learner == programs.actor:
        return params
    leaves, treedef = jax.tree.flatten(params)
    flat = jax.device_put(concatenate_leaves(leaves), programs.actor)
    return jax.tree.unflatten(treedef, split_leaves(flat, tuple(leaf.shape for leaf in leaves)))


concatenate_leaves = jax.jit(lambda leaves: jnp.concatenate([leaf.ravel() for leaf in leaves]))


@partial(jax.jit, static_argnames="shapes")
def split_leaves(flat, shapes):
    parts = jnp.split(flat, np.cumsum([math.prod(shape) for shape in shapes])[:-1])
    return [part.reshape(shape) for part, shape in zip(parts, shapes)]


def run_iteration(programs: "Programs", state: RunState, collected, iteration: int, args: PPOArgs):
    """The update on `collected`, the rollout of `iteration` (dispatched, perhaps still running), and the next
    rollout, dispatched: before the update with --policy-lag, acting with the parameters the update starts from, so
    that on an accelerator the two run side by side; else after it, with its parameters. Returns the new state, the
    iteration's figures for the log (both still on their devices) and the next rollout."""
    env_state, transitions, batch, stats = collected
    if args.policy_lag:
        next_collected = collect_rollout(programs, state.train_state.params, env_state, iteration + 1, args)
    # Minibatches are shuffled on the host: NumPy's shuffle costs next to nothing, XLA's CPU sort a good part of
    # an epoch (docs/speed.md).
    shuffler = np.random.default_rng((args.seed, iteration))
    permutations = np.stack([shuffler.permutation(args.batch_size) for _ in range(args.update_epochs)])
    alpha, shape = args.rpo_alpha, (args.batch_size, *batch.action.shape[1:])  # RPO's noise, drawn with the shuffles
    noises = None
    if alpha:
        noises = np.stack([shuffler.uniform(-alpha, alpha, shape).astype(np.float32) for _ in permutations])
    # The rollout's batch and the epochs' shuffles cross to the learner once the rollout has ended, the parameters
    # back for the next rollout (the shuffles, the parameters one array each: each array pays a transfer's latency).
    transitions, batch, last_obs, return_rms, permutations, noises = jax.device_put(
        (transitions, batch, env_state.obs, env_state.return_rms, permutations, noises), programs.learner
    )
    train_state = state.train_state
    for epoch in programs.epochs:
        train_state, losses, batch, return_rms = programs.train_epoch(
            train_state, batch, transitions, last_obs, return_rms, permutations, noises, epoch
        )
        if args.target_kl is not None and float(losses["approx_kl"]) > args.target_kl:
            break
    if args.reward_norm == "return":  # the recomputations refined the return statistics, for the next batch
        env_state = env_state.replace(return_rms=jax.device_put(return_rms, programs.actor))
    if not args.policy_lag:
        next_collected = collect_rollout(programs, train_state.params, env_state, iteration + 1, args)
    figures = (stats, losses, programs.summarize(train_state, state.train_state.step))
    for figure in jax.tree.leaves(figures):  # on their way to the host now: the log will wait for no transfer
        figure.copy_to_host_async()
    return RunState(train_state, env_state, state.global_step + args.batch_size), figures, next_collected


class Programs(NamedTuple):
    """The compiled pieces of an iteration, each jitted once per run, and the devices they run on: the actor (the
    CPU) collects, the learner recomputes advantages and updates (each program runs where its inputs are)."""

    init_states: Callable  # (handle, start, statistics) -> (env_state, train_state)
    collect: Callable  # (params, env_state, key) -> (env_state, transitions, batch, stats)
    train_epoch: Callable  # (train_state, batch, transitions, last_obs, return_rms, permutations, noises, epoch)
    summarize: Callable  # (train_state, first_step) -> (which parameters are finite, the rate at first_step)
    epochs: list  # the epoch indices 0, 1, ..., on the learner once: a Python int would cross to it at every call
    actor: jax.Device
    learner: jax.Device


def make_programs(args: PPOArgs, envs, xla_step) -> Programs:
    """Compile the pieces of an iteration once, bound to this EnvPool's XLA step. Keep `envs` alive until
    the programs' results are ready: JAX returns before a rollout ends, and a rollout whose EnvPool was freed
    waits for it forever (`train` holds `envs` to the end)."""
    network = make_network(args, envs)
    optimizer, learning_rate = make_optimizer(args)
    env = env_functions(envs, xla_step)

    # Compiled as one program although it runs once: every op run eagerly would be compiled on its own.
    def init_states(handle, start, statistics):
        env_state = init_env_state(handle, start, args.norm_obs, **statistics)
        params = network.init(jax.random.PRNGKey(args.seed), env_state.obs)
        return env_state, TrainState.create(apply_fn=network.apply, params=params, tx=optimizer)

    def summarize(train_state, first_step):
        # The rate of the iteration's first gradient step, as CleanRL logs the rate its iteration used.
        return jax.tree.map(lambda x: jnp.isfinite(x).all(), train_state.params), learning_rate(first_step)

    learner = learner_device(args.learner_device)
    return Programs(
        init_states=jax.jit(init_states),
        collect=jax.jit(partial(collect, env=env, apply_fn=network.apply, args=args)),
        train_epoch=jax.jit(partial(train_epoch, apply_fn=network.apply, args=args)),
        summarize=jax.jit(summarize),
        epochs=jax.device_put(list(range(args.update_epochs)), learner),
        actor=jax.devices("cpu")[0],
        learner=learner,
    )


def learner_device(name: str) -> jax.Device:
    """--learner-device as a JAX device (its form is checked by `check_args`); `auto`: a GPU or TPU where JAX has one.
    JAX raises where it cannot open a backend (a TPU that another process holds; JAX_PLATFORMS naming one)."""
    platform, _, index = name.partition(":")
    try:
        return jax.devices(None if name == "auto" else platform)[int(index or 0)]
    except (RuntimeError, IndexError) as error:
        reason = "no such device" if isinstance(error, IndexError) else f"{error}; --learner-device cpu runs without it"
        sys.exit(f"error: --learner-device {name}: {reason}")


# ===================================================================================================
# Running it: checkpoints, evaluation and video, signals, progress and logging, W&B, the command line.
# ===================================================================================================


@dataclass
class Args(PPOArgs):
    """PPO on EnvPool's MuJoCo tasks: PPO's hyperparameters, then the flags of running it."""

    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases"""
    wandb_project_name: str = "ppo-continuous-envpool-jax"
    """the wandb's project name"""
    wandb_entity: str | None = None
    """the entity (team) of wandb's project"""
    save_model: bool = False
    """keep the model (parameters, optimizer and normalisation state) in `runs/{run_name}/{exp_name}.model`
    at the end (resumed: the file resumed; a kept one stays kept); also on Ctrl-C/SIGTERM, and the last
    finite state on divergence"""
    checkpoint_every_seconds: float = 60.0
    """write the run's resumable state to `runs/{run_name}/{exp_name}.model` after the first iteration that
    ends this many seconds after the start or the last checkpoint (0: off), and on every early stop; removed
    at the end unless --save-model"""
    eval_every: int = 0
    """evaluate the policy every this many environment steps and after the last iteration, logged as
    eval/episodic_return (0: off); on environments of its own, not counted in global_step"""
    eval_episodes: int = 10
    """episodes of each evaluation (mean action, environments of its own): --eval-every, the one that ends
    training with --save-model or --capture-video, and --evaluate"""
    capture_video: bool = False
    """record the first episode of the final evaluation to `videos/{run_name}/eval.mp4` (needs OpenGL: EGL or
    OSMesa)"""
    evaluate: str | None = None
    """evaluate the model saved at this path (or in this Hub repository, OWNER/NAME) instead of training (task and
    network come from the file)"""
    list_tasks: bool = False
    """print the --env-id values this script accepts, by family, and exit"""
    resume: str | None = None
    """continue the run whose model or checkpoint is at this path (the .model file or its run directory; a Hub
    repository, OWNER/NAME, downloaded to runs/NAME/): its flags are the defaults, flags given now override them
    (not --env-id, --hidden-sizes, --norm-obs, --reward-norm, --num-envs, --num-steps, --num-minibatches,
    --update-epochs; --init-log-std has no effect); a new --total-timesteps reshapes the lr schedule"""
    upload_model: bool = False
    """at the end of a run that ends ok, push it to the Hugging Face Hub, `{hf_entity}/{env_id}-{exp_name}-seed{seed}`
    (hub.py); implies --save-model: the model is what is uploaded, and stays kept where the upload fails"""
    hf_entity: str | None = None
    """the Hub user or organisation that --upload-model uploads to"""
    run_dir: str | None = None
    """train in this run directory, which the run then owns (a sweep's runs: benchmark.sh): start it, resume it
    from its checkpoint, or, where it has finished, print its summary and exit; one process at a time"""


def write_atomically(path: str, data: bytes):
    """Write beside the destination, sync and rename: a kill at any moment (of the process or of the machine)
    leaves the previous file intact, and no .tmp behind."""
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(f"{path}.tmp", "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # else a crash soon after the rename can leave an empty file in its place
        os.replace(f"{path}.tmp", path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(f"{path}.tmp")
        raise


def save_checkpoint(path: str, args: Args, state: RunState, record: "RunRecord | None" = None):
    """Everything needed to evaluate the policy or resume training, in flax's msgpack format.

    Without the observation statistics the policy is useless, so they travel with the parameters; and so
    does the run's record, so that a resumed run's summary covers all of it.
    """
    checkpoint = {
        "args": json.dumps(asdict(args)),
        "global_step": state.global_step,
        "train_state": state.train_state,
        "obs_rms": state.env_state.obs_rms,
        "return_rms": state.env_state.return_rms,
        "record": json.dumps((record or RunRecord()).saved()),
    }
    data = flax.serialization.msgpack_serialize(flax.serialization.to_state_dict(jax.device_get(checkpoint)))
    try:
        write_atomically(path, data)
    except OSError as error:
        sys.exit(f"error: cannot write the checkpoint {path}: {error} (the previous one, if any, is kept)")


def checkpoint_path(path: str) -> str:
    """The .model file at `path`, or the one in the run directory `path`."""
    if not os.path.isdir(path):
        return path
    models = glob.glob(os.path.join(glob.escape(path), "*.model"))
    if len(models) != 1:
        found = "no .model file" if not models else f"{len(models)} .model files"
        sys.exit(f"error: {path} holds {found}; name the model file to use")
    return models[0]


def initial_state(programs: Programs, handle, start: Start, checkpoint: dict | None) -> RunState:
    """A new run's state, or the state a checkpoint saved (on environments that start afresh), each part placed
    for good on the device that uses it: each program then runs where its inputs are, compiled once."""
    statistics = {} if checkpoint is None else {name: checkpoint[name] for name in ("obs_rms", "return_rms")}
    env_state, train_state = programs.init_states(handle, start, statistics)
    global_step = 0
    if checkpoint is not None:
        train_state = flax.serialization.from_state_dict(train_state, checkpoint["train_state"])
        global_step = int(checkpoint["global_step"])
    return RunState(
        jax.device_put(train_state, programs.learner), jax.device_put(env_state, programs.actor), global_step
    )


def load_checkpoint(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            checkpoint = flax.serialization.msgpack_restore(f.read())
        # What save_checkpoint writes; another msgpack file would fail later, with a traceback.
        missing = [
            key for key in ("args", "global_step", "train_state", "obs_rms", "return_rms") if key not in checkpoint
        ]
        if missing:
            raise ValueError(f"it has no {', '.join(missing)}")
        for name in ("obs_rms", "return_rms"):
            checkpoint[name] = RunningMeanStd(**checkpoint[name])
        saved = json.loads(checkpoint["args"])
        saved["hidden_sizes"] = tuple(saved["hidden_sizes"])
        if "scale_reward" in saved:  # saved before --reward-norm replaced --scale-reward
            saved["reward_norm"] = "scale" if saved.pop("scale_reward") else "none"
        saved.setdefault("init_log_std", 0.0)  # saved before --init-log-std, when it was fixed at 0
        saved.setdefault("recompute_adv", False)  # saved before --recompute-adv: advantages computed once
        checkpoint["args"] = Args(**saved)
        # Saved before the run record: its summary covers the steps from the resume on.
        checkpoint["record"] = RunRecord(**json.loads(checkpoint.get("record", "{}")))
    except (OSError, ValueError, KeyError, TypeError) as error:
        sys.exit(f"error: cannot read a model from {path}: {error}")
    return checkpoint


class Evaluation(NamedTuple):
    returns: np.ndarray  # (--eval-episodes,)
    lengths: np.ndarray  # (--eval-episodes,)
    first_actions: np.ndarray  # (max episode steps, act_dim) as sent in the first episode, for its video
    successes: np.ndarray | None  # (--eval-episodes,) bool, where the task reports success (see success_rates)
    any_successes: np.ndarray | None  # (--eval-episodes,) bool, success flagged on enough steps (SUCCESS_STEPS)


class EvalCarry(NamedTuple):
    handle: jax.Array
    obs: jax.Array  # (E, obs_dim)
    t: jax.Array  # steps so far
    done: jax.Array  # (E,) the environment's episode has ended
    lengths: jax.Array  # (E,)
    successes: jax.Array  # (E,) the success flag of the episode's latest step, so of its last once done
    success_steps: jax.Array  # (E,) the steps of the episode so far on which the flag was set
    rewards: jax.Array  # (max episode steps, E), 0 after the episode's end
    first_actions: jax.Array  # (max episode steps, act_dim)


def evaluation_seed(seed: int) -> int:
    """The seed of the evaluation's EnvPool, drawn from the run's seed.

    EnvPool seeds its environment i with seed + i, so pools made from neighbouring seeds share all but one
    environment: evaluated from their own seeds, runs 1, 2 and 3 would play 8 of the same 10 starts (on
    FingerTurnHard-v1, where about one start in eleven begins on the target, all three read exactly 300). Drawn
    seeds put each run's starts in a block of its own (two blocks of 10 meet with odds of about one in 50 million),
    the same whatever --eval-episodes, whose first episodes are those of a longer evaluation. Below 2^30, the
    pool's seeds + i stay in EnvPool's int32.
    """
    return int(np.random.SeedSequence(seed).generate_state(1)[0] >> 2)


def evaluate(args: Args, params, obs_rms: RunningMeanStd) -> Evaluation:
    """--eval-episodes episodes of the mean action, one per environment, as one compiled loop over EnvPool's
    XLA step.

    The environments are made anew from the run's evaluation seed each time: the training environments are never
    stepped, and every evaluation of a run starts from the same states, so its curve compares policies, not
    starts (new starts each time add their own noise: docs/how-it-works.md). The program is bound to
    the EnvPool it steps, so each evaluation compiles it: without LLVM's optimisations, which take longer
    than they save on a loop that mostly waits for the environments (docs/speed.md).
    """
    envs, handle, xla_step = make_envs(args.env_id, args.eval_episodes, args.num_threads, evaluation_seed(args.seed))
    network, env = make_network(args, envs), env_functions(envs, xla_step)
    num_episodes, max_steps = args.eval_episodes, envs.spec.config.max_episode_steps

    @partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0})
    def play(params, obs_rms, handle, obs):
        def unfinished(carry):
            return ~carry.done.all()

        def step(carry: EvalCarry):
            mean = network.apply(params, standardize(obs_rms, carry.obs) if args.norm_obs else carry.obs)[0]
            action = to_env_action(mean, env.action_low, env.action_high, args.clip_action)
            handle, obs, reward, terminated, truncated, success = env_step(env, carry.handle, action)
            # A finished environment goes on stepping (EnvPool steps them all); what it does is not counted.
            return EvalCarry(
                handle=handle,
                obs=obs,
                t=carry.t + 1,
                done=carry.done | terminated | truncated,
                lengths=carry.lengths + ~carry.done,
                successes=jnp.where(carry.done, carry.successes, success),
                success_steps=carry.success_steps + (~carry.done & success),
                rewards=carry.rewards.at[carry.t].set(jnp.where(carry.done, 0.0, reward)),
                first_actions=carry.first_actions.at[carry.t].set(action[0]),
            )

        carry = EvalCarry(
            handle=handle,
            obs=obs,
            t=0,
            done=jnp.zeros(num_episodes, bool),
            lengths=jnp.zeros(num_episodes, jnp.int32),
            successes=jnp.zeros(num_episodes, bool),
            success_steps=jnp.zeros(num_episodes, jnp.int32),
            rewards=jnp.zeros((max_steps, num_episodes)),
            first_actions=jnp.zeros((max_steps, env.action_low.shape[0])),
        )
        return jax.lax.while_loop(unfinished, step, carry)

    first_obs = jnp.asarray(reset_observation(envs), jnp.float32)
    # The policy acts beside EnvPool, on the CPU, wherever the learner left its parameters.
    carry = jax.device_get(play(jax.device_put(params, jax.devices("cpu")[0]), obs_rms, handle, first_obs))
    successes, any_successes = (
        (carry.successes, carry.success_steps >= env.success_steps) if env.success_key else (None, None)
    )
    # Each return is the float64 sum of EnvPool's float32 rewards, summed on the host.
    returns = carry.rewards.astype(np.float64).sum(0)
    return Evaluation(returns, carry.lengths, carry.first_actions, successes, any_successes)


VIDEO_SIZE = (320, 240)  # width, height
VIDEO_FPS = 30


def record_video(args: Args, evaluation: Evaluation, path: str):
    """Replays the first episode of `evaluation` on a rendering EnvPool to an MP4, one frame per step and the first.

    Its environment is the evaluation's first (same task and EnvPool seed, so the same start), and MuJoCo is
    deterministic: the replayed actions give the evaluated episode exactly.
    """
    render = {"render_mode": "rgb_array", "render_width": VIDEO_SIZE[0], "render_height": VIDEO_SIZE[1]}
    options = {**render, **ENV_OPTIONS.get(family_name(args.env_id), {})}
    envs = envpool.make(
        args.env_id, env_type="gymnasium", num_envs=1, num_threads=1, seed=evaluation_seed(args.seed), **options
    )
    envs.reset()
    frames = [envs.render()[0]]
    for action in evaluation.first_actions[: evaluation.lengths[0]]:
        envs.step(np.asarray(action[None], envs.action_space.dtype))
        frames.append(envs.render()[0])
    import imageio.v3 as iio

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with warnings.catch_warnings():  # JAX warns of any fork; ffmpeg's is followed at once by exec
        warnings.filterwarnings("ignore", "os.fork", RuntimeWarning)
        iio.imwrite(path, np.stack(frames), fps=VIDEO_FPS, codec="libx264")


def open_gl_context(width: int, height: int):
    """MuJoCo's offscreen OpenGL context, current on this thread, for EnvPool's renderer.

    EGL needs a GPU; on CPU machines OSMesa renders in software (Debian: apt-get install libosmesa6).
    """
    gpu = os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/dri/renderD128")
    os.environ.setdefault("MUJOCO_GL", "egl" if gpu else "osmesa")
    os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
    try:
        import mujoco

        context = mujoco.GLContext(width, height)
        context.make_current()
    except Exception as error:  # noqa: BLE001 (each GL backend fails in its own way)
        sys.exit(
            f"error: --capture-video needs OpenGL for MuJoCo ({os.environ['MUJOCO_GL']}: {error}); "
            "on a CPU machine: apt-get install libosmesa6"
        )
    return context


class StopRequest:
    """Signal handler for SIGINT and SIGTERM: the training loop stops at the end of the iteration.

    Once it is stopping, a SIGINT (Ctrl-C again) aborts; a further SIGTERM is ignored, here and while the run
    saves its state (`run_training`): benchmark.sh passes its SIGTERM on to its runs, so one sent to the sweep's
    whole process group can reach a run twice, and whoever sends SIGTERM follows it with SIGKILL to abort
    (Slurm, systemd, docker).
    """

    def __init__(self):
        self.signum = None

    def __call__(self, signum, _frame):
        name = signal.Signals(signum).name
        if self.signum is not None and signum == signal.SIGTERM:
            return
        if self.signum is not None:
            # Not by an exception: one raised while a rollout is in flight would tear EnvPool down under it.
            # What is on disk stays: the last checkpoint, the flushed log.
            print(f"\n{name} again: aborting without saving", file=sys.stderr, flush=True)
            os._exit(128 + signum)
        self.signum = signum
        print(f"\n{name}: stopping after this iteration (a Ctrl-C now aborts without saving)", file=sys.stderr)


def print_progress(_step: int, line: str):
    print(line, flush=True)


@contextlib.contextmanager
def progress_reporter(total_steps: int, start_step: int):
    """A progress bar with steps/s and ETA on a terminal; plain lines in logs."""
    if not sys.stdout.isatty():
        yield print_progress
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[line]}"), TimeRemainingColumn())
    with Progress(*columns) as bar:
        task = bar.add_task("training", total=total_steps, completed=start_step, line="")
        yield lambda step, line: bar.update(task, completed=step, line=line)


def first_nonfinite(losses: dict, params_finite) -> str | None:
    """The name of the first non-finite loss or parameter (`params_finite`: a tree of bools), or None."""
    for name, value in losses.items():
        if not np.isfinite(value):
            return f"losses/{name} = {value}"
    for path, finite in jax.tree_util.tree_flatten_with_path(params_finite)[0]:
        if not finite:
            return f"parameter {jax.tree_util.keystr(path)}"
    return None


# The README's final return: the mean of charts/episodic_return over a run's last 100k steps (over its last
# tenth where it is shorter), as report.py computes it from the event files.
FINAL_RETURN_STEPS = 100_000


@dataclass
class RunRecord:
    """What a run's summary reports: the figures its final return averages, its last evaluation and its wall
    time. Checkpoints carry it, so that the summary of a resumed run covers every attempt."""

    # [global_step, episodic_return, success rate, any-step success rate], the rates None where not reported
    returns: list = field(default_factory=list)
    last_eval: dict | None = None  # {"global_step", "return", "success_rate", "any_step_success_rate"}
    earlier_seconds: float = 0.0  # the wall time of earlier attempts, up to their last checkpoint
    attempt_start: float = field(default_factory=time.time)
    wandb_id: str | None = None  # with --track, the W&B run that a resumed run goes on logging to

    def add_iteration(self, global_step: int, episodic_return: float, success_rates: tuple[float | None, float | None]):
        # Only the last FINAL_RETURN_STEPS can count, whatever the run's length.
        self.returns = [row for row in self.returns if row[0] > global_step - FINAL_RETURN_STEPS]
        self.returns.append([global_step, episodic_return, *success_rates])

    def wall_seconds(self) -> float:
        return self.earlier_seconds + time.time() - self.attempt_start

    def saved(self) -> dict:
        return {
            "returns": self.returns,
            "last_eval": self.last_eval,
            "earlier_seconds": self.wall_seconds(),
            "wandb_id": self.wandb_id,
        }

    def final(self, global_step: int) -> tuple[float | None, float | None, float | None]:
        """The final return, success rate and any-step success rate of a run that ends at `global_step` (None
        where nothing was logged)."""
        window = FINAL_RETURN_STEPS if global_step >= FINAL_RETURN_STEPS else 0.1 * global_step
        rows = [row for row in self.returns if global_step - window < row[0] <= global_step]
        columns = [[row[k] for row in rows if len(row) > k and row[k] is not None] for k in (1, 2, 3)]
        if any(len(row) < 4 for row in rows):  # rows of three, from a checkpoint from before the any-step rate:
            columns[2] = []  # its mean would cover part of the window only
        return tuple(float(np.mean(column)) if column else None for column in columns)


class IterationLogger:
    """What happens to each iteration that `train` hands over: its scalars and progress line, and on their
    schedules the evaluation (--eval-every) and the checkpoint (--checkpoint-every-seconds)."""

    def __init__(self, args: Args, writer, report=print_progress, checkpoint_path: str | None = None, record=None):
        self.args, self.writer, self.report, self.checkpoint_path = args, writer, report, checkpoint_path
        self.record = RunRecord() if record is None else record
        self.last_evaluation: Evaluation | None = None  # with --eval-every, the final step's once training ends

    def start(self, global_step: int):
        self.start_time, self.start_step = time.time(), global_step
        self.eval_seconds = 0.0  # spent in evaluations, which charts/SPS leaves out
        self.last_checkpoint_time = time.monotonic()

    def log(self, iteration: int, state: RunState, figures, steps_done: int | None = None) -> str | None:
        """Wait for an iteration's figures and log them; returns what went non-finite, if anything. `steps_done`:
        the environment steps collected by now (the next iteration's rollout may have ended), for the speed."""
        args, writer, global_step = self.args, self.writer, state.global_step
        stats, losses, (params_finite, lr) = jax.device_get(figures)
        if failure := first_nonfinite(losses, params_finite):
            return f"{failure} at iteration {iteration} (global_step {global_step})"
        steps_done = global_step if steps_done is None else steps_done
        sps = int((steps_done - self.start_step) / (time.time() - self.start_time - self.eval_seconds))
        has_episodes = stats["num_episodes"] > 0
        if has_episodes:
            writer.add_scalar("charts/episodic_return", stats["episodic_return"], global_step)
            writer.add_scalar("charts/episodic_length", stats["episodic_length"], global_step)
            success_rates = (None, None)
            if "success_rate" in stats:
                writer.add_scalar("charts/success_rate", stats["success_rate"], global_step)
                writer.add_scalar("charts/any_step_success_rate", stats["any_step_success_rate"], global_step)
                success_rates = (float(stats["success_rate"]), float(stats["any_step_success_rate"]))
            self.record.add_iteration(global_step, float(stats["episodic_return"]), success_rates)
        writer.add_scalar("charts/learning_rate", lr, global_step)
        for name, value in losses.items():
            writer.add_scalar(f"losses/{name}", value, global_step)
        writer.add_scalar("losses/explained_variance", stats["explained_variance"], global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        line = f"iteration={iteration}/{args.num_iterations} global_step={global_step} return="
        line += f"{stats['episodic_return']:.1f} SPS={sps}" if has_episodes else f"- SPS={sps}"
        # At each multiple of --eval-every that this iteration crossed, and after the last iteration.
        if args.eval_every and (
            global_step // args.eval_every > (global_step - args.batch_size) // args.eval_every
            or iteration == args.num_iterations
        ):
            eval_start = time.time()
            evaluation = evaluate(args, state.train_state.params, state.env_state.obs_rms)
            self.eval_seconds += time.time() - eval_start
            self.log_evaluation(evaluation, global_step)
            line += f" eval={evaluation.returns.mean():.1f}"
        self.report(global_step, line)
        # checkpoint_path is None with --checkpoint-every-seconds 0.
        if self.checkpoint_path and time.monotonic() - self.last_checkpoint_time >= args.checkpoint_every_seconds:
            writer.flush()  # the log up to the checkpoint is on disk before it, so a resumed run has no gap
            save_checkpoint(self.checkpoint_path, args, state, self.record)
            self.last_checkpoint_time = time.monotonic()
        return None

    def log_evaluation(self, evaluation: Evaluation, global_step: int):
        self.last_evaluation = evaluation
        success_rate, any_step_success_rate = None, None
        self.writer.add_scalar("eval/episodic_return", evaluation.returns.mean(), global_step)
        if evaluation.successes is not None:
            success_rate = float(evaluation.successes.mean())
            any_step_success_rate = float(evaluation.any_successes.mean())
            self.writer.add_scalar("eval/success_rate", success_rate, global_step)
            self.writer.add_scalar("eval/any_step_success_rate", any_step_success_rate, global_step)
        self.record.last_eval = {
            "global_step": global_step,
            "return": float(evaluation.returns.mean()),
            "success_rate": success_rate,
            "any_step_success_rate": any_step_success_rate,
            "return_std": float(evaluation.returns.std()),  # the Hub's mean_reward is mean +/- std
        }


class TensorBoardWriter:
    """CleanRL's `writer.add_scalar` and `add_text` on TensorBoard's own event-file writer, whose flush
    returns once every event added before it is on disk (tensorboardX's leaves queued ones behind), as the
    checkpoints need.

    With `purge_step`, the file begins with a restart marker: TensorBoard (and report.py, which reads
    through it) drops every event of an earlier file at or after that step, so a resumed run supersedes
    what the run logged after its checkpoint.
    """

    def __init__(self, logdir: str, purge_step: int | None = None):
        from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.proto = types.SimpleNamespace(event=event_pb2, summary=summary_pb2, tensor=tensor_pb2, types=types_pb2)
        self.events = EventFileWriter(logdir)
        if purge_step is not None:
            restart = event_pb2.SessionLog(status=event_pb2.SessionLog.START)
            self.events.add_event(event_pb2.Event(wall_time=time.time(), step=purge_step, session_log=restart))

    def add_summary(self, value, step: int):
        summary = self.proto.summary.Summary(value=[value])
        self.events.add_event(self.proto.event.Event(wall_time=time.time(), step=step, summary=summary))

    def add_scalar(self, tag: str, value, step: int):
        self.add_summary(self.proto.summary.Summary.Value(tag=tag, simple_value=float(value)), step)

    def add_text(self, tag: str, text: str, step: int):
        """Logged as `{tag}/text_summary`, the name tensorboardX and PyTorch give it."""
        plugin = self.proto.summary.SummaryMetadata.PluginData(plugin_name="text")
        tensor = self.proto.tensor.TensorProto(dtype=self.proto.types.DT_STRING, string_val=[text.encode()])
        metadata = self.proto.summary.SummaryMetadata(plugin_data=plugin)
        value = self.proto.summary.Summary.Value(tag=f"{tag}/text_summary", metadata=metadata, tensor=tensor)
        self.add_summary(value, step)

    def flush(self):
        self.events.flush()

    def close(self):
        self.events.close()


def start_wandb(args: Args, run_name: str, record: RunRecord):
    """W&B with TensorBoard sync. Without credentials it tracks offline instead of prompting for a login. A
    resumed run logs on to the W&B run of its first attempt, whose id its record keeps."""
    import wandb

    mode = os.environ.get("WANDB_MODE")
    if mode is None and not wandb.login(prompt=False, verify=False):
        print("W&B: no login found, tracking offline (upload later with `wandb sync wandb/`)", file=sys.stderr)
        mode = "offline"
    run = wandb.init(
        id=record.wandb_id,
        resume="allow",
        project=args.wandb_project_name,
        entity=args.wandb_entity,
        sync_tensorboard=True,
        config=asdict(args),
        name=run_name,
        save_code=True,
        mode=mode,
        settings=wandb.Settings(init_timeout=60),
    )
    record.wandb_id = run.id
    return wandb


def task_family(env_id: str) -> str:
    # EnvPool has no public "list by family"; the first field of a registry entry is the task's module.
    return envpool.registration.registry.specs[env_id][0]


def mujoco_env_ids() -> list[str]:
    return sorted(env_id for env_id in envpool.list_all_envs() if task_family(env_id).startswith("envpool.mujoco."))


def register_every_family():
    """Run EnvPool's own `envpool.entry`, which the stand-in replaced, so that every id EnvPool ships is known."""
    spec = importlib.machinery.PathFinder.find_spec("entry", envpool.__path__)
    # A family that cannot be imported here leaves its ids unknown, no more.
    with contextlib.suppress(ImportError, OSError):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


def unsupported_features(spec) -> list[str]:
    """What in a task's spec this PPO cannot handle."""
    with warnings.catch_warnings():  # gymnasium's, about the float64 bounds of some families' float32 Boxes
        warnings.simplefilter("ignore")
        obs_space, action_space = spec.observation_space, spec.action_space
    leaves = jax.tree.leaves(dict(obs_space)) if isinstance(obs_space, Mapping) else [obs_space]
    players = getattr(spec.config, "max_num_players", 1)
    continuous = hasattr(action_space, "low")
    # DeepMind Control's LQR tasks declare their unbounded actions as +-1e10: mapped onto that range (see
    # `to_env_action`), the policy's first actions would be about 1e9.
    unbounded = continuous and not np.all(np.abs([action_space.low, action_space.high]) < 1e6)
    # dm_control's locomotion tasks end only by falling (max_episode_steps 2**31 - 1): an evaluation's buffers
    # and --stagger-episodes are sized by the time limit.
    endless = getattr(spec.config, "max_episode_steps", 0) >= 2**31 - 1
    features = [
        "discrete actions" if not continuous else None,
        "unbounded actions" if unbounded else None,
        "pixel observations" if any(getattr(leaf, "dtype", None) == np.uint8 for leaf in leaves) else None,
        f"{players} players" if players > 1 else None,
        "no time limit" if endless else None,
    ]
    return [feature for feature in features if feature]


def refusal(env_id: str) -> str | None:
    """Why this script cannot train the registered task `env_id`, or None."""
    try:
        features = unsupported_features(envpool.make_spec(env_id))
    except (ImportError, RuntimeError):  # the specs of some other families need what is not installed (procgen: Qt)
        features = []
    except ValueError as error:  # mjlab's motion-tracking tasks need a motion file
        return f"--env-id {env_id} cannot be made with EnvPool's default options: {str(error).splitlines()[0]}"
    if features:
        return (
            f"--env-id {env_id} has {' and '.join(features)}; this PPO trains one player's bounded continuous "
            "actions from vector observations, in episodes with a time limit (--list-tasks lists the tasks it accepts)"
        )
    if not task_family(env_id).startswith("envpool.mujoco."):
        return f"--env-id {env_id} is not an EnvPool MuJoCo task (--list-tasks lists them)"
    return None


def task_listing() -> str:
    """The MuJoCo tasks by family: the ids this script accepts, or why it refuses a family."""
    families = {}
    for env_id in mujoco_env_ids():
        families.setdefault(task_family(env_id).removeprefix("envpool.mujoco."), []).append(env_id)
    lines = []
    for family, env_ids in sorted(families.items()):
        reasons = {env_id: refusal(env_id) for env_id in env_ids}  # one spec per id, made once
        accepted = [env_id for env_id, reason in reasons.items() if reason is None]
        refused = [reason for reason in reasons.values() if reason is not None]
        lines.append(f"{family} ({len(accepted)} of {len(env_ids)} ids):")
        if accepted:
            lines.append(textwrap.fill(" ".join(accepted), 120, initial_indent="  ", subsequent_indent="  "))
        if refused:
            lines.append(f"  {len(refused)} refused, e.g. {refused[0]}")
    return "\n".join(lines)


def check_args(args: Args) -> str | None:
    """Return a one-line description of what is wrong with `args`, or None."""
    # Written so that NaN fails every check: each comparison with NaN is False.
    positive = (lambda x: x > 0, "positive")
    ranges = {
        "seed": (lambda x: 0 <= x < 2**31, "in [0, 2**31 - 1] (EnvPool's seeds are int32)"),
        **dict.fromkeys(["total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs"], positive),
        "eval_episodes": positive,
        "num_threads": (lambda x: x >= 0, "0 (automatic) or positive"),
        "eval_every": (lambda x: x >= 0, "0 (off) or positive"),
        "checkpoint_every_seconds": (lambda x: 0 <= x < math.inf, "0 (off) or finite and positive"),
        **dict.fromkeys(["learning_rate", "adam_eps"], (lambda x: 0 < x < math.inf, "finite and positive")),
        "gamma": (lambda x: 0 < x <= 1, "in (0, 1]"),
        "gae_lambda": (lambda x: 0 <= x <= 1, "in [0, 1]"),
        **dict.fromkeys(["clip_coef", "max_grad_norm"], positive),
        **dict.fromkeys(["ent_coef", "vf_coef", "rpo_alpha"], (lambda x: 0 <= x < math.inf, "finite and non-negative")),
        "init_log_std": (lambda x: -math.inf < x < math.inf, "finite"),
    }
    for name, (valid, requirement) in ranges.items():
        if not valid(getattr(args, name)):
            return f"--{name.replace('_', '-')} must be {requirement}, got {getattr(args, name)}"
    if args.ent_max_log_std is not None and not math.isfinite(args.ent_max_log_std):
        return f"--ent-max-log-std must be finite where given, got {args.ent_max_log_std}"
    if args.target_kl is not None and not args.target_kl > 0:
        return f"--target-kl must be positive where given, got {args.target_kl}"
    if args.target_kl is not None and args.rpo_alpha > 0:  # it would stop at the noise's KL, not the update's
        return (  # RPO is on by default on DeepMind Control
            f"--target-kl excludes --rpo-alpha {args.rpo_alpha} (add --rpo-alpha 0): the KL it reads holds RPO's "
            "random shift of the mean"
        )
    # It names the run directory and the model file, which --resume and --evaluate find by a *.model glob.
    if not args.exp_name or "/" in args.exp_name or args.exp_name.startswith("."):
        return f"--exp-name must be a file name, not empty and without '/' or a leading '.', got {args.exp_name!r}"
    if not args.hidden_sizes or min(args.hidden_sizes) <= 0:
        return f"--hidden-sizes must be positive integers, got {args.hidden_sizes}"
    if args.policy_lag and args.reward_norm == "return":
        return "--policy-lag excludes --reward-norm return (each update refines the statistics of the next batch)"
    platform, colon, index = args.learner_device.partition(":")
    if args.learner_device != "auto" and not (platform in ("cpu", "gpu", "tpu") and (not colon or index.isdigit())):
        return f"--learner-device must be auto, cpu, gpu or tpu, with :index where given, got {args.learner_device!r}"
    if args.upload_model:  # hub.py is imported only where a Hub flag is given: the script copied alone trains
        import hub

        if error := hub.check_args(args):
            return error
    batch_size = args.num_envs * args.num_steps
    if batch_size % args.num_minibatches:
        return (
            f"--num-minibatches {args.num_minibatches} does not divide the batch of "
            f"--num-envs {args.num_envs} x --num-steps {args.num_steps} = {batch_size}"
        )
    if args.norm_adv and batch_size // args.num_minibatches < 2:  # a lone sample's normalised advantage is 0
        return f"--norm-adv needs minibatches of 2 or more samples: give fewer than {args.num_minibatches} minibatches"
    if args.total_timesteps < batch_size and not args.evaluate:  # evaluating trains nothing
        return f"--total-timesteps {args.total_timesteps} is less than one batch ({batch_size} steps)"
    if args.total_timesteps // batch_size * args.update_epochs * args.num_minibatches >= 2**31:
        return f"--total-timesteps {args.total_timesteps} needs 2**31 or more gradient steps (optax counts in int32)"
    if args.env_id not in envpool.list_all_envs():
        register_every_family()  # to say why another family's task cannot be trained
    if args.env_id not in envpool.list_all_envs():
        close = difflib.get_close_matches(args.env_id, mujoco_env_ids(), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        return f"unknown --env-id {args.env_id!r}; {hint}--list-tasks lists the MuJoCo tasks"
    return refusal(args.env_id)


def family_name(env_id: str) -> str | None:
    """gym, dmc, metaworld, robotics, myosuite, playground, locomotion or mjlab; None for an id that is no MuJoCo
    task here."""
    if env_id not in envpool.list_all_envs() or not task_family(env_id).startswith("envpool.mujoco."):
        return None
    return task_family(env_id).removeprefix("envpool.mujoco.")


def task_defaults(env_id: str) -> Args:
    """The defaults for `env_id`: PPOArgs' with its family's FAMILY_DEFAULTS applied."""
    return replace(Args(env_id=env_id), **FAMILY_DEFAULTS.get(family_name(env_id), {}))


def family_defaults_line(args: Args) -> str:
    """Which of its family's defaults the run has, as flags (a flag given otherwise overrode that default)."""
    family = family_name(args.env_id)
    if family not in FAMILY_DEFAULTS:
        return f"family={family} (no family defaults)"
    flags = []
    for name, value in FAMILY_DEFAULTS[family].items():
        flag = name.replace("_", "-")
        if getattr(args, name) != value:
            continue
        if isinstance(value, bool):
            flags.append(f"--{flag}" if value else f"--no-{flag}")
        else:
            flags.append(f"--{flag} {' '.join(map(str, value)) if isinstance(value, tuple) else value}")
    return f"family={family} defaults: {' '.join(flags) or 'none (each overridden)'}"


def read_path_flags(cli_args: list[str]) -> argparse.Namespace:
    """The flags that decide the defaults, read before tyro: a checkpoint to resume or evaluate, the run
    directory (which may hold one), the task (whose family has its defaults)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    # One line, as for other bad input: argparse's usage would list these four flags as if they were all.
    parser.error = lambda message: sys.exit(f"error: {message}")
    for flag in ("resume", "evaluate", "run-dir", "env-id"):  # tyro takes --env_id for --env-id too
        parser.add_argument(*dict.fromkeys([f"--{flag}", f"--{flag.replace('-', '_')}"]))
    return parser.parse_known_args(cli_args)[0]


def parse_args(cli_args: list[str] | None = None) -> tuple[Args, dict | None]:
    """Args and, with --resume or --evaluate, the saved checkpoint, whose arguments become the defaults."""
    cli_args = sys.argv[1:] if cli_args is None else cli_args
    saved = read_path_flags(cli_args)
    if saved.resume and saved.evaluate:
        sys.exit("error: --resume and --evaluate exclude each other")
    if saved.run_dir and (saved.resume or saved.evaluate):
        sys.exit(f"error: --run-dir excludes {'--resume' if saved.resume else '--evaluate'}")
    if saved.run_dir and glob.glob(os.path.join(glob.escape(saved.run_dir), "*.model")):
        saved.resume = saved.run_dir  # an earlier attempt's checkpoint: the run goes on from it
    path = saved.resume or saved.evaluate
    if path and not os.path.exists(path) and re.fullmatch(r"[\w.-]+/[\w.-]+", path):  # a Hub repository's model
        import hub

        path = hub.download_model(path, resume=bool(saved.resume))
    path = checkpoint_path(path) if path else None
    checkpoint = load_checkpoint(path) if path else None
    if checkpoint is None:
        default = task_defaults(saved.env_id or Args.env_id)
    elif saved.resume:  # the interrupted run goes on as it was started
        default = replace(checkpoint["args"], resume=None)
    else:  # evaluation needs only the task, the network, its observation normalisation and action mapping
        saved_args = checkpoint["args"]
        default = Args(
            env_id=saved_args.env_id,
            hidden_sizes=saved_args.hidden_sizes,
            norm_obs=saved_args.norm_obs,
            clip_action=saved_args.clip_action,
            seed=saved_args.seed,  # so that it plays the episodes of the evaluations during training
        )
    args = tyro.cli(Args, args=cli_args, default=default)
    if args.list_tasks:
        print(task_listing())
        sys.exit(0)
    error = check_args(args)
    if checkpoint is not None and error is None:
        saved_args = checkpoint["args"]
        # What the saved parameters and statistics were made for. Resuming also keeps the critic's units and
        # the batch: the learning-rate schedule counts gradient steps, and the iteration keys count batches.
        fixed = ("env_id", "hidden_sizes", "norm_obs")
        if saved.resume:
            fixed += ("reward_norm", "num_envs", "num_steps", "num_minibatches", "update_epochs")
        for name in fixed:
            given, kept = getattr(args, name), getattr(saved_args, name)
            if given != kept:
                error = f"--{name.replace('_', '-')} {given} differs from the saved model's {kept}"
        # Training runs whole batches. A run saved at its last step (stopped in its final evaluation) resumes to
        # end as it would have: no iteration, then the final save, evaluation and summary.
        batch_size, saved_step = args.num_envs * args.num_steps, checkpoint["global_step"]
        if saved.resume and error is None and args.total_timesteps // batch_size * batch_size < saved_step:
            error = (
                f"--total-timesteps {args.total_timesteps} is less than the saved run's {saved_step} steps "
                f"(in whole batches of {batch_size}); give {saved_step + batch_size} to continue it"
            )
    if error:
        sys.exit(f"error: {error}")
    if not THREADS_GIVEN:
        os.environ["PJRT_NPROC"] = str(xla_cpu_threads(args))
    if args.evaluate or args.learner_device.startswith("cpu"):
        # Before JAX starts: it then leaves an accelerator alone, to another process (a TPU takes one at a time).
        jax.config.update("jax_platforms", "cpu")
    if not args.evaluate:
        learner_device(args.learner_device)  # one that is missing is refused before the run starts
    if saved.resume:  # the model file, also where its run directory was named
        args.resume = path
        # A kept model stays kept: the run's checkpoints overwrite it, so at the end it holds the final state.
        args.save_model = args.save_model or checkpoint["args"].save_model
    elif saved.evaluate:
        args.evaluate = path
    args.save_model = args.save_model or args.upload_model
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = args.total_timesteps // args.batch_size
    return args, checkpoint


def xla_cpu_threads(args: Args) -> int:
    """XLA's CPU threads: one, unless the matrix products are large (the rollout's policy's, and the minibatches'
    on any learner: this is decided before JAX finds its devices), then as many as the run's cores (--num-threads,
    else the usable cores). Splitting a small product over cores costs more in hand-offs than it gains (gym's 64-64
    networks run slower on 2 or 12 threads); a 256-256 network's minibatches of 1,280 run twice as fast on 2
    (docs/speed.md). It decides the floats' rounding, so a run's numbers depend on it."""
    rows = max(args.num_envs, args.num_envs * args.num_steps // args.num_minibatches)
    if rows * max(args.hidden_sizes) ** 2 < 2**24:
        return 1
    return args.num_threads or len(os.sched_getaffinity(0))


def show_evaluation(args: Args, evaluation: Evaluation, run_name: str):
    """Print an evaluation and, with --capture-video, record its first episode."""
    returns, lengths = evaluation.returns, evaluation.lengths
    success = ""
    if evaluation.successes is not None:
        last, any_step = evaluation.successes.mean(), evaluation.any_successes.mean()
        success = f", success rate {last:.2f} at the last step, {any_step:.2f} at any"
    print(
        f"eval/episodic_return {returns.mean():.1f} +- {returns.std():.1f} over {len(returns)} episodes "
        f"(mean length {lengths.mean():.0f}{success})"
    )
    if args.capture_video:
        video_path = f"videos/{run_name}/eval.mp4"
        record_video(args, evaluation, video_path)
        print(f"video saved to {video_path}")


def run_training(args: Args, checkpoint: dict | None, command: list[str]):
    """Train with logging; keep the run's state on every way out (the end, Ctrl-C/SIGTERM, non-finite values,
    an error) and say how it ended: summary.json in the run directory, and the summary line last on stdout."""
    if args.resume:  # continue in the run directory of the checkpoint
        run_dir = os.path.dirname(args.resume) or "."
    elif args.run_dir:
        run_dir = args.run_dir
    else:
        # One directory for an id with a family prefix (MetaWorld/Reach-v3), where report.py looks for runs.
        run_dir = f"runs/{args.env_id.replace('/', '-')}__{args.exp_name}__{args.seed}__{int(time.time())}"
    run_name = os.path.basename(os.path.abspath(run_dir))
    model_path = args.resume or os.path.join(run_dir, f"{args.exp_name}.model")
    print(f"run_dir={run_dir}", flush=True)
    print(family_defaults_line(args), flush=True)
    learner = learner_device(args.learner_device)
    kind = f" ({learner.device_kind})" if learner.device_kind != learner.platform else ""
    threads = os.environ["PJRT_NPROC"]
    print(f"devices: rollout cpu:0 (XLA threads: {threads}), learner {learner.platform}:{learner.id}{kind}", flush=True)
    # The state is kept when the run stops early if it is kept at all: as a checkpoint or as the model.
    keep_state = args.save_model or args.checkpoint_every_seconds > 0
    start_step = int(checkpoint["global_step"]) if args.resume else 0
    record = checkpoint["record"] if args.resume else RunRecord()
    record.attempt_start = time.time()
    # A resumed run supersedes what it logged after its checkpoint; a run started afresh in a run directory
    # whose earlier attempt ended before its first checkpoint supersedes all of that attempt's events.
    earlier_events = glob.glob(os.path.join(glob.escape(run_dir), "events.out.tfevents.*"))
    purge_step = start_step + 1 if args.resume else (0 if earlier_events else None)
    stop, sigterm_handler = StopRequest(), signal.getsignal(signal.SIGTERM)
    status, detail, global_step, writer, wandb = "failed", None, start_step, None, None
    try:
        wandb = start_wandb(args, run_name, record) if args.track else None
        writer = TensorBoardWriter(run_dir, purge_step=purge_step)
        writer.add_text(
            "hyperparameters",
            "|param|value|\n|-|-|\n" + "\n".join(f"|{key}|{value}|" for key, value in asdict(args).items()),
            start_step,
        )
        handlers = {signum: signal.signal(signum, stop) for signum in (signal.SIGINT, signal.SIGTERM)}
        with progress_reporter(args.num_iterations * args.batch_size, start_step) as report:
            checkpoints = model_path if args.checkpoint_every_seconds else None
            logger = IterationLogger(args, writer, report, checkpoints, record)
            try:
                result = train(args, logger, stop, checkpoint)
            finally:
                # From here on, Ctrl-C interrupts the save and evaluation as usual (main makes it one line). A run
                # stopping on a signal ignores SIGTERM to its end: it is saving its state, and a sweep's SIGTERM
                # can follow its process group's.
                signal.signal(signal.SIGINT, handlers[signal.SIGINT])
                signal.signal(signal.SIGTERM, signal.SIG_IGN if stop.signum else handlers[signal.SIGTERM])
        state = result.state
        global_step = state.global_step
        # A signal in the last iteration still leaves a finished run.
        finished = result.failure is None and state.global_step >= args.num_iterations * args.batch_size
        if result.failure:  # at the step of the iteration that diverged, so resuming the run purges it
            writer.add_text(
                "failure", f"training diverged: non-finite {result.failure}", state.global_step + args.batch_size
            )
        if args.save_model or (keep_state and not finished):
            save_checkpoint(model_path, args, state, record)
            print(f"model saved to {model_path}")
        elif finished and os.path.exists(model_path):
            os.remove(model_path)  # the checkpoint of a run that finished without --save-model
        # The final policy is evaluated for a video and for a kept model, once: --eval-every has done it at the
        # last iteration. Else it is done here, after the model's save (Ctrl-C here keeps it), which is then
        # saved again with the evaluation in its record.
        if finished and (args.capture_video or args.save_model):
            evaluation = logger.last_evaluation
            if evaluation is None:
                evaluation = evaluate(args, state.train_state.params, state.env_state.obs_rms)
                logger.log_evaluation(evaluation, state.global_step)
                if args.save_model:
                    save_checkpoint(model_path, args, state, record)
            show_evaluation(args, evaluation, run_name)
        if result.failure:
            status, detail = "diverged", f"non-finite {result.failure}"
            kept = f"; the last finite state is in {model_path}" if keep_state else ""
            print(f"error: training diverged: {detail}{kept}", file=sys.stderr)
        elif not finished:
            status, detail = "interrupted", signal.Signals(stop.signum).name
            kept = f"; state saved to {model_path} (continue with --resume {run_dir})" if keep_state else ""
            print(f"stopped by {detail} at global_step {state.global_step}{kept}", file=sys.stderr)
        else:
            status = "ok"
    except KeyboardInterrupt:
        status, detail = "interrupted", "SIGINT"
        raise
    except BaseException as error:
        detail = str(error) if isinstance(error, SystemExit) else f"{type(error).__name__}: {error}"
        raise
    finally:
        if writer is not None:
            writer.close()
        if wandb is not None:
            wandb.finish()
        model = model_path if os.path.exists(model_path) else None
        end_run(run_dir, command, status, detail, args, record, global_step, model)
        signal.signal(signal.SIGTERM, sigterm_handler)
    if status == "ok" and args.upload_model:  # after summary.json, which it uploads; a failure leaves the run ok
        import hub

        hub.upload_finished_run(run_dir, args.hf_entity)
    if status == "diverged":
        sys.exit(1)
    if status == "interrupted":
        sys.exit(128 + stop.signum)


def end_run(run_dir, command, status, detail, args=None, record=None, global_step=0, model=None):
    """Say how the run ended: summary.json in its run directory and the summary line. Without `args` and
    `record`, the run's input was refused and it ended before it began."""
    final_return, final_success, final_any_step_success = record.final(global_step) if record else (None, None, None)
    summary = {
        "status": status,
        "env_id": args and args.env_id,
        "exp_name": args and args.exp_name,
        "seed": args and args.seed,
        "global_step": global_step,
        "total_timesteps": args and args.num_iterations * args.batch_size,
        "final_return": final_return,
        "final_success": final_success,
        "final_any_step_success": final_any_step_success,
        "last_eval": record and record.last_eval,
        "wall_seconds": record and record.wall_seconds(),
        "detail": detail,
        "run_dir": run_dir,
        "model": model,
        "command": command,
        "versions": {
            "python": platform.python_version(),
            **{module.__name__: module.__version__ for module in (jax, envpool, flax, np)},
        },
        "family": args and family_name(args.env_id),
    }
    write_atomically(os.path.join(run_dir, "summary.json"), json.dumps(summary, indent=1).encode())
    print(summary_line(summary), flush=True)


def summary_line(summary: dict) -> str:
    """The last line on stdout of every run: how it ended, what it reached, where it is."""

    def figure(value, digits=1):
        return "-" if value is None else f"{value:.{digits}f}"

    last_eval, wall = summary["last_eval"], summary["wall_seconds"]
    parts = [
        f"summary: status={summary['status']}",
        f"steps={summary['global_step']}/{summary['total_timesteps'] or '-'}",
        f"final_return={figure(summary['final_return'])}",
    ]
    if summary["final_success"] is not None:
        parts.append(f"final_success={figure(summary['final_success'], 2)}")
    if summary.get("final_any_step_success") is not None:  # absent from summaries written before it
        parts.append(f"final_any_step_success={figure(summary['final_any_step_success'], 2)}")
    parts += [
        f"last_eval={figure(last_eval['return'])}@{last_eval['global_step']}" if last_eval else "last_eval=-",
        "wall=-" if wall is None else "wall={}m{:02d}s".format(*divmod(round(wall), 60)),
        f"run_dir={summary['run_dir']}",
        f"model={summary['model'] or '-'}",
    ]
    if summary["detail"]:
        parts.append(f"({summary['detail']})")
    return " ".join(parts)


@contextlib.contextmanager
def owned_run_dir(run_dir: str | None):
    """--run-dir: hold the directory's lock while this process runs, so that two processes never train one
    run; a second waits for the first. The lock is the operating system's (flock), so it goes with its process,
    however that ends (SIGKILL too)."""
    if run_dir is None:
        yield
        return
    try:  # a file of that name, or a path that cannot be made (/proc/x/run), is bad input like any other
        os.makedirs(run_dir, exist_ok=True)
        lock = open(os.path.join(run_dir, ".lock"), "w")  # noqa: SIM115 (the `with` below closes it)
    except OSError as error:
        sys.exit(f"error: --run-dir {run_dir} cannot be a run directory: {error.strerror}")
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for the process that trains {run_dir} to end", file=sys.stderr, flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def finished_summary(run_dir: str) -> dict | None:
    """The summary of the run in `run_dir` if it has ended as a result (ok or diverged), else None."""
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        sys.exit(f"error: cannot read {run_dir}/summary.json: {error} (remove it to train the run again)")
    return summary if summary.get("status") in ("ok", "diverged") else None


def main(cli_args: list[str] | None = None):
    cli_args = sys.argv[1:] if cli_args is None else cli_args
    gl_context = None
    try:
        run_dir = read_path_flags(cli_args).run_dir
        with owned_run_dir(run_dir):
            if run_dir and (summary := finished_summary(run_dir)):  # the run has ended: nothing to do
                print(summary_line(summary))
                sys.exit(0 if summary["status"] == "ok" else 1)
            try:
                args, checkpoint = parse_args(cli_args)
            except SystemExit as error:
                # Refused, the run has ended, failed, before it began. tyro exits 2 for a flag it cannot parse,
                # after its message; a sweep's summary then names the cause instead of "no summary".
                if run_dir and error.code:
                    detail = error.code if isinstance(error.code, str) else "the command line did not parse (exit 2)"
                    end_run(run_dir, [os.path.basename(__file__), *cli_args], "failed", detail)
                raise
            # Fail before training, not after it, when video cannot be rendered.
            gl_context = open_gl_context(*VIDEO_SIZE) if args.capture_video else None
            if args.evaluate:
                run_name = os.path.basename(os.path.dirname(os.path.abspath(args.evaluate)))
                params, obs_rms = checkpoint["train_state"]["params"], checkpoint["obs_rms"]
                show_evaluation(args, evaluate(args, params, obs_rms), run_name)
            else:
                run_training(args, checkpoint, [os.path.basename(__file__), *cli_args])
    except KeyboardInterrupt:  # Ctrl-C outside `train` (loading, the final save or evaluation) is Python's
        print("\nSIGINT: interrupted (a model file being written keeps its previous version)", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
    finally:
        if gl_context is not None:
            gl_context.free()


if __name__ == "__main__":
    try:
        try:
            main()
        finally:
            sys.stdout.flush()  # now, not at exit: a reader that has gone (`--list-tasks | head`) is caught below
    except BrokenPipeError:  # end quietly, as Unix tools do; stdout to devnull, else the flush at exit fails again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(128 + signal.SIGPIPE)
