"""EnvPool's MuJoCo families beyond gym: observations flattened as gymnasium flattens them, the critic-only keys,
the float32-action tasks, success, DMC's time limit, --list-tasks, MyoSuite on an old envpool, and each family's
defaults."""

import os
import re
import subprocess
import sys
from dataclasses import asdict

import envpool
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ppo_continuous_envpool_jax as ppo
from tests.support import (
    MODEL_NAME,
    SCRIPT,
    SMALL,
    gymnasium_flattened,
    hyperparameters,
    only_run_dir,
    read_events,
    run_script,
)


@pytest.mark.parametrize(
    "env_id",
    [
        "WalkerWalk-v1",  # DMC, with a scalar (`height`) among its arrays
        "FetchReachDense-v4",  # robotics' goal dict
        "FrankaKitchen-v1",  # nested dicts, keys with spaces
        "MuJoCoPlayground/Go1JoystickFlatTerrain-v1",  # state and privileged_state
        "Hopper-v4",  # a Box, as it is
    ],
)
def test_dict_observations_flatten_as_gymnasiums_flatten_observation(env_id):
    envs = envpool.make(env_id, env_type="gymnasium", num_envs=3, seed=1)
    obs, _ = envs.reset()
    flat = ppo.flatten_observation(obs, ppo.observation_layout(envs.observation_space).keys)
    np.testing.assert_array_equal(np.asarray(flat, np.float32), gymnasium_flattened(envs.observation_space, obs))


def test_the_policy_does_not_see_privileged_state_and_the_critic_does():
    envs = envpool.make("MuJoCoPlayground/Go1JoystickFlatTerrain-v1", env_type="gymnasium", num_envs=4, seed=1)
    space = envs.observation_space
    args, _ = ppo.parse_args(["--env-id", "MuJoCoPlayground/Go1JoystickFlatTerrain-v1"])
    network = ppo.make_network(args, envs)
    obs = jnp.asarray(ppo.reset_observation(envs))
    params = network.init(jax.random.PRNGKey(0), obs)
    state_dim = space["state"].shape[0]
    assert obs.shape == (4, state_dim + space["privileged_state"].shape[0])
    # Changing every privileged feature changes the value and leaves the action's mean exactly as it was.
    other = obs.at[:, state_dim:].add(1.0)
    mean, _, value = network.apply(params, obs)
    other_mean, _, other_value = network.apply(params, other)
    np.testing.assert_array_equal(mean, other_mean)
    assert np.all(np.abs(value - other_value) > 0)
    # And the state itself does reach the policy.
    assert not np.array_equal(mean, network.apply(params, obs.at[:, :state_dim].add(1.0))[0])


def test_the_xla_step_matches_the_numpy_api_on_a_float32_action_task_with_success_flags():
    """Pre-made random actions, sent as float32 (the task's dtype) through `env_step` in one scan: observations,
    rewards, episode ends and success flags as EnvPool's NumPy API gives them."""
    env_id, num_envs, num_steps = "PointMaze_OpenDense-v3", 8, 310  # 300-step episodes; success mid-episode
    envs, handle, xla_step = ppo.make_envs(env_id, num_envs, 0, seed=3)
    env = ppo.env_functions(envs, xla_step)
    assert env.action_dtype == np.float32 and env.success_key == "success"
    first_obs = ppo.reset_observation(envs)
    actions = np.random.default_rng(0).uniform(-1, 1, (num_steps, num_envs, 2)).astype(np.float32)

    @jax.jit
    def run(handle, actions):
        def step(handle, action):
            handle, *out = ppo.env_step(env, handle, action)
            return handle, out

        return jax.lax.scan(step, handle, actions)[1]

    obs, reward, terminated, truncated, success = jax.device_get(run(handle, actions))
    replay = envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, seed=3)
    replay_obs, _ = replay.reset()
    np.testing.assert_array_equal(first_obs, gymnasium_flattened(replay.observation_space, replay_obs))
    successes = 0
    for t in range(num_steps):
        replay_obs, replay_reward, replay_terminated, replay_truncated, info = replay.step(actions[t])
        np.testing.assert_array_equal(obs[t], gymnasium_flattened(replay.observation_space, replay_obs))
        np.testing.assert_array_equal(reward[t], replay_reward)
        np.testing.assert_array_equal(terminated[t] | truncated[t], replay_terminated | replay_truncated)
        np.testing.assert_array_equal(success[t], info["success"] > 0)
        successes += success[t].sum()
    assert successes > 0 and truncated.any()


@pytest.mark.parametrize(
    "env_id, key",
    [
        ("MetaWorld/Reach-v3", "success"),
        ("FetchReach-v4", "is_success"),
        ("myoHandReachRandom-v0", "solved"),
        ("PandaPickCubeCartesian-v1", "reward_success"),
        ("LeapCubeReorient-v1", "success"),  # reports reward_success too
        ("Go1JoystickFlatTerrain-v1", None),
        ("Hopper-v4", None),
    ],
)
def test_each_family_reports_success_under_its_own_key(env_id, key):
    envs = envpool.make(env_id, env_type="gymnasium", num_envs=1, seed=0)
    info_keys = {name.removeprefix("info:") for name in envs.spec.state_array_spec if name.startswith("info:")}
    assert key is None or key in info_keys
    assert ppo.success_key(envs) == key


def test_success_rates_count_the_flag_at_each_episodes_last_step_and_on_enough_steps():
    # By hand, 3 environments over 5 steps (the step after each end is EnvPool's reset step):
    #   env 0 ends at t=1 succeeding (1 step), then at t=4 failing (0)  -> last step 1 of 2; 1 step: 1 of 2
    #   env 1 succeeds at t=1 and t=2, fails at its end, t=3 (2 steps)  -> last step 0 of 1; 1 step or 2: 1 of 1
    #   env 2 succeeds at t=0 and t=4 but ends nowhere                   -> not counted
    done = np.array([[0, 0, 0], [1, 0, 0], [0, 0, 0], [0, 1, 0], [1, 0, 0]], bool)
    success = np.array([[0, 0, 1], [1, 1, 0], [0, 1, 0], [0, 0, 0], [0, 0, 1]], bool)
    # the flagged steps so far in each episode, as rollout_step counts them (env 0's reset step, t=2, restarts it)
    success_steps = np.array([[0, 0, 1], [1, 1, 1], [0, 2, 1], [0, 2, 1], [0, 0, 2]], np.int32)
    zeros = np.zeros(done.shape, np.float32)
    episode_end = ppo.EpisodeEnd(*map(jnp.asarray, (done, zeros, zeros, success, success_steps)))
    assert np.allclose(ppo.success_rates(episode_end, 1), (1 / 3, 2 / 3))
    assert np.allclose(ppo.success_rates(episode_end, 2), (1 / 3, 1 / 3))  # env 0's single step is not enough
    no_end = ppo.EpisodeEnd(jnp.zeros_like(done), zeros, zeros, jnp.ones_like(success), jnp.asarray(success_steps))
    assert tuple(map(float, ppo.success_rates(no_end, 1))) == (0.0, 0.0)


def test_dmc_episodes_end_truncated_at_1000_steps_and_bootstrap_from_the_final_observation():
    num_envs, num_steps = 4, 1001
    cli_args = ["--env-id", "CheetahRun-v1", "--num-envs", str(num_envs), "--num-steps", str(num_steps)]
    cli_args += ["--num-minibatches", "1", "--total-timesteps", str(num_envs * num_steps), "--reward-norm", "none"]
    args, _ = ppo.parse_args(cli_args)
    envs, handle, xla_step = ppo.make_envs(args.env_id, args.num_envs, args.num_threads, args.seed)
    programs = ppo.make_programs(args, envs, xla_step)
    env_state, train_state = programs.init_states(handle, ppo.reset_start(envs), {})
    _, transitions, batch, _ = jax.device_get(programs.collect(train_state.params, env_state, jax.random.PRNGKey(0)))
    assert not transitions.terminated.any()
    np.testing.assert_array_equal(transitions.truncated.any(1), np.arange(num_steps) == 999)
    assert transitions.truncated[999].all() and transitions.is_reset[1000].all()
    # The trace stops at the time limit, where the target is the last reward plus the discounted value of the
    # episode's true final observation (the one EnvPool returned with the truncation).
    targets = batch.target.reshape(num_steps, num_envs)
    expected = transitions.reward[999] + args.gamma * transitions.value[1000]
    np.testing.assert_allclose(targets[999], expected, rtol=1e-6)
    assert np.all(np.abs(transitions.value[1000]) > 0)


def test_list_tasks_prints_every_accepted_mujoco_id_by_family():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--list-tasks"], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    listed, family = {}, None
    for line in result.stdout.splitlines():
        if not line.startswith(" "):
            family = line.split()[0]
            listed[family] = set()
        elif "refused" not in line:
            listed[family] |= set(line.split())
    registered = {}
    for env_id, spec in envpool.registration.registry.specs.items():
        if spec[0].startswith("envpool.mujoco."):
            registered.setdefault(spec[0].removeprefix("envpool.mujoco."), set()).add(env_id)
    # DeepMind Control's LQR tasks, the only ones with unbounded (+-1e10) actions, are refused.
    lqr = {env_id for env_id in registered["dmc"] if env_id.startswith("Lqr")}
    assert len(lqr) == 2 and f"dmc ({len(registered['dmc']) - 2} of {len(registered['dmc'])} ids)" in result.stdout
    assert "  2 refused, e.g. --env-id Lqr" in result.stdout and "has unbounded actions" in result.stdout
    registered["dmc"] -= lqr
    # Every task of envpool's dm_control locomotion and of mjlab is refused, each for what it has.
    for family in ("locomotion", "mjlab"):
        assert listed.pop(family) == set() and f"{family} (0 of {len(registered.pop(family))} ids)" in result.stdout
    for env_id, reason in (
        ("DmcCmuHumanoidRunWalls-v1", "has pixel observations"),
        ("DmcSoccerAnt-v1", "has 4 players"),
        ("DmcCmuHumanoidGoToTarget-v1", "has no time limit"),  # it ends only by falling
        ("Mjlab-Velocity-Flat-Unitree-Go1-v0", "has unbounded actions"),
        ("Mjlab-Tracking-Flat-Unitree-G1-v0", "cannot be made with EnvPool's default options: MJLab tracking"),
    ):
        assert reason in ppo.refusal(env_id)
    assert listed == registered
    assert {"CheetahRun-v1", "MetaWorld/Reach-v3", "FetchReachDense-v4", "HalfCheetah-v4"} <= set.union(
        *listed.values()
    )


def test_myosuite_random_tasks_start_each_episode_from_another_state():
    """Why the project needs envpool >= 1.2.7 (Python >= 3.12): 1.2.5 reset them to one state every episode."""
    envs = envpool.make("MyoSuite/myoElbowPose1D6MRandom-v0", env_type="gymnasium", num_envs=1, seed=1)
    first_observations = [envs.reset()[0][0]]
    actions = np.random.default_rng(0).uniform(-1, 1, (10_000, 1, *envs.action_space.shape))
    for action in actions.astype(envs.action_space.dtype):
        _, _, terminated, truncated, _ = envs.step(action)
        if terminated[0] or truncated[0]:
            first_observations.append(envs.step(action)[0][0])  # the late reset's observation
            if len(first_observations) == 3:
                break
    assert len(first_observations) == 3
    assert not np.array_equal(first_observations[1], first_observations[2])
    assert not np.array_equal(first_observations[0], first_observations[1])


# The DeepMind Control recipe of docs/families.md, written out here rather than read from the table: MetaWorld's
# base, and DeepMind Control's own with CleanRL's RPO in place of the entropy bonus.
DMC_RECIPE = {"stagger_episodes": True, "init_log_std": 0.0, "ent_coef": 0.01, "ent_max_log_std": 0.0}
DMC_DEFAULTS = {"stagger_episodes": True, "init_log_std": 0.0, "rpo_alpha": 0.5}
# MuJoCo Playground's Brax PPO settings for PandaPickCubeCartesian, from 64 environments (docs/families.md).
PLAYGROUND_FLAGS = (
    "--num-steps 160 --num-minibatches 8 --update-epochs 8 --learning-rate 0.0005 --ent-coef 0.0075 "
    "--gamma 0.97 --hidden-sizes 256 256 --clip-coef 0.3 --max-grad-norm 1.0"
)


@pytest.mark.parametrize(
    "env_id, family",
    [
        ("HalfCheetah-v4", "gym"),
        ("CheetahRun-v1", "dmc"),
        ("MetaWorld/Reach-v3", "metaworld"),
        ("FetchReach-v4", "robotics"),
        ("myoElbowPose1D6MRandom-v0", "myosuite"),
        ("Go1JoystickFlatTerrain-v1", "playground"),
    ],
)
def test_a_task_gets_its_familys_defaults_and_the_gym_defaults_elsewhere(env_id, family):
    args, _ = ppo.parse_args(["--env-id", env_id])
    expected = asdict(ppo.Args(env_id=env_id))
    if family in ("metaworld", "playground"):
        expected.update(asdict(ppo.parse_args(["--env-id", "Hopper-v4", *PLAYGROUND_FLAGS.split()])[0]))
        expected["env_id"] = env_id
    if family == "dmc":
        expected.update(DMC_DEFAULTS)
    if family == "metaworld":  # the recipe with the Brax settings' entropy coefficient
        expected.update({**DMC_RECIPE, "ent_coef": 0.0075})
    if family == "myosuite":
        expected["gamma"] = 0.95
    computed = ("batch_size", "minibatch_size", "num_iterations")
    assert {k: v for k, v in asdict(args).items() if k not in computed} == {
        k: v for k, v in expected.items() if k not in computed
    }
    assert ppo.family_name(env_id) == family


def test_a_flag_on_the_command_line_wins_over_its_familys_default():
    args, _ = ppo.parse_args(["--env_id", "WalkerWalk-v1", "--no-stagger-episodes", "--rpo-alpha", "0.0"])
    assert (args.stagger_episodes, args.rpo_alpha) == (False, 0.0)
    assert args.init_log_std == 0.0  # the other still the family's
    assert ppo.family_defaults_line(args) == "family=dmc defaults: --init-log-std 0.0"
    args, _ = ppo.parse_args(["--env-id", "PandaPickCubeCartesian-v1", "--num-steps", "40"])
    assert args.num_steps == 40
    others = PLAYGROUND_FLAGS.removeprefix("--num-steps 160 ")
    assert ppo.family_defaults_line(args) == f"family=playground defaults: {others}"


@pytest.mark.parametrize(
    "env_id, ent_coef, gamma, rpo_alpha",
    [
        ("CheetahRun-v1", "0.0", "0.99", "0.5"),
        ("MetaWorld/Reach-v3", "0.0075", "0.97", "0.0"),
        ("myoHandReachRandom-v0", "0.0", "0.95", "0.0"),
        ("Go1JoystickFlatTerrain-v1", "0.0075", "0.97", "0.0"),
        ("HalfCheetah-v4", "0.0", "0.99", "0.0"),
    ],
)
def test_help_shows_the_defaults_of_the_tasks_family(env_id, ent_coef, gamma, rpo_alpha):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--env-id", env_id, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stderr
    assert re.search(
        rf"--ent-coef FLOAT\s+coefficient of the entropy \(default: {re.escape(ent_coef)}\)", result.stdout
    )
    assert re.search(rf"--gamma FLOAT\s+the discount factor gamma \(default: {re.escape(gamma)}\)", result.stdout)
    # RPO's help runs over lines: its default closes the first "(default: ...)" after the flag
    assert re.search(r"--rpo-alpha FLOAT.*?\(default: ([^)]*)\)", result.stdout, re.DOTALL)[1] == rpo_alpha


def test_a_run_records_its_effective_values_and_a_resumed_run_keeps_them(tmp_path):
    cli_args = ["--env-id", "CartpoleSwingup-v1", *SMALL, "--total-timesteps", "1024", "--rpo-alpha", "0.2"]
    result = run_script(*cli_args, "--save-model", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    assert result.stdout.splitlines()[1] == (
        "family=dmc defaults: --stagger-episodes --init-log-std 0.0"
    )
    expected = {**DMC_DEFAULTS, "rpo_alpha": 0.2}
    logged = hyperparameters(read_events(run_dir))
    assert {name: logged[name] for name in expected} == {name: str(value) for name, value in expected.items()}
    saved = ppo.load_checkpoint(str(run_dir / MODEL_NAME))["args"]
    assert {name: getattr(saved, name) for name in expected} == expected
    resumed, _ = ppo.parse_args(["--resume", str(run_dir), "--total-timesteps", "2048"])
    assert {name: getattr(resumed, name) for name in expected} == expected


def test_metaworld_tasks_observe_their_goal():
    """EnvPool hides MetaWorld's goal by default (zeros) though each episode draws a new one; the script's
    environments show it, as the NumPy API does when asked for the fully observable task."""
    env_id = "MetaWorld/Reach-v3"
    hidden = envpool.make(env_id, env_type="gymnasium", num_envs=4, seed=5).reset()[0]
    assert not hidden[:, 36:39].any()
    envs, _handle, _step = ppo.make_envs(env_id, 4, 0, seed=5)
    shown = np.asarray(ppo.reset_observation(envs), np.float32)
    visible = envpool.make(env_id, env_type="gymnasium", num_envs=4, seed=5, partially_observable=False)
    np.testing.assert_array_equal(shown, visible.reset()[0].astype(np.float32))
    goals = shown[:, 36:39]
    assert np.all(np.abs(goals).sum(1) > 0) and len(np.unique(goals, axis=0)) == 4  # a goal per environment
