"""Evaluation: the compiled loop against EnvPool's NumPy API, its schedule during training, --evaluate, video."""

import re
from dataclasses import replace

import envpool
import imageio.v2 as imageio
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ppo_continuous_envpool_jax as ppo
from tests.support import HOPPER, MODEL_NAME, SMALL, gymnasium_flattened, run_script, scalars, train_recorded


def saved_policy(run_dir, **overrides):
    checkpoint = ppo.load_checkpoint(str(run_dir / MODEL_NAME))
    params, obs_rms = checkpoint["train_state"]["params"], checkpoint["obs_rms"]
    return replace(checkpoint["args"], **overrides), params, obs_rms


def numpy_evaluation(args, params, obs_rms, success_key=None, pool_seed=None):
    """The evaluation as it was before it was compiled: EnvPool's NumPy API, one jitted mean action a step; with
    `success_key`, also each episode's success flag at its last step and the number of its steps that had it set.
    EnvPool's seed is the evaluation's unless `pool_seed` says otherwise."""
    seed = ppo.evaluation_seed(args.seed) if pool_seed is None else pool_seed
    envs = envpool.make(args.env_id, env_type="gymnasium", num_envs=args.eval_episodes, seed=seed)
    network = ppo.make_network(args, envs)
    low, high = envs.action_space.low.astype(np.float32), envs.action_space.high.astype(np.float32)

    @jax.jit
    def policy(obs):
        mean = network.apply(params, ppo.standardize(obs_rms, obs.astype(jnp.float32)))[0]
        return ppo.to_env_action(mean, low, high, args.clip_action)

    obs, _ = envs.reset()
    returns, lengths = np.zeros(args.eval_episodes), np.zeros(args.eval_episodes, int)
    done, successes = np.zeros(args.eval_episodes, bool), np.zeros(args.eval_episodes, bool)
    success_steps = np.zeros(args.eval_episodes, int)
    while not done.all():
        action = np.asarray(policy(gymnasium_flattened(envs.observation_space, obs)), envs.action_space.dtype)
        obs, reward, terminated, truncated, info = envs.step(action)
        returns += np.where(done, 0.0, reward)
        lengths += ~done
        ends = ~done & (terminated | truncated)
        if success_key:
            successes[ends] = info[success_key][ends] > 0
            success_steps += ~done & (info[success_key] > 0)
        done |= ends
    return returns, lengths, successes, success_steps


def test_the_compiled_evaluation_plays_the_episodes_of_the_numpy_loop(saved_run):
    run_dir, _ = saved_run
    args, params, obs_rms = saved_policy(run_dir, eval_episodes=6)
    evaluation = ppo.evaluate(args, params, obs_rms)
    returns, lengths, _, _ = numpy_evaluation(args, params, obs_rms)
    np.testing.assert_array_equal(evaluation.lengths, lengths)
    assert evaluation.successes is None  # Hopper reports no success
    # The same episodes; the mean action, computed in another compiled program, can differ in its last bits.
    np.testing.assert_allclose(evaluation.returns, returns, rtol=1e-6)
    assert len(set(lengths)) > 1  # Hopper falls: the episodes end at different steps


def test_every_evaluation_starts_from_the_same_states_and_the_seed_chooses_them(saved_run):
    run_dir, _ = saved_run
    args, params, obs_rms = saved_policy(run_dir, eval_episodes=4)
    first, second = ppo.evaluate(args, params, obs_rms), ppo.evaluate(args, params, obs_rms)
    np.testing.assert_array_equal(first.returns, second.returns)
    other_seed = ppo.evaluate(replace(args, seed=args.seed + 100), params, obs_rms)
    assert not np.array_equal(first.returns, other_seed.returns)
    # A shorter evaluation plays the first episodes of a longer one: the same lengths, and the same returns but
    # for the last bits (a batch of 2 is another compiled program than a batch of 4; on AMD EPYC they differ).
    shorter = ppo.evaluate(replace(args, eval_episodes=2), params, obs_rms)
    np.testing.assert_array_equal(shorter.lengths, first.lengths[:2])
    np.testing.assert_allclose(shorter.returns, first.returns[:2], rtol=1e-6)


def test_neighbouring_seeds_evaluate_on_starts_of_their_own(saved_run):
    """EnvPool seeds environment i with seed + i: evaluated from the run's seed itself, seed s + 1's episodes
    would be seed s's shifted by one (the second reference below), the same policy scoring the same returns."""
    run_dir, _ = saved_run
    args, params, obs_rms = saved_policy(run_dir, eval_episodes=4)
    first, neighbour = (ppo.evaluate(replace(args, seed=seed), params, obs_rms) for seed in (7, 8))
    assert not set(first.returns) & set(neighbour.returns)
    shifted = [numpy_evaluation(args, params, obs_rms, pool_seed=seed)[0] for seed in (7, 8)]
    np.testing.assert_array_equal(shifted[0][1:], shifted[1][:-1])


def test_the_first_episodes_actions_replay_it_exactly_on_one_environment(saved_run):
    """What the video relies on: the recorded actions, sent on a single environment of the same seed,
    give the evaluated first episode, to its last step."""
    run_dir, _ = saved_run
    args, params, obs_rms = saved_policy(run_dir, eval_episodes=3)
    evaluation = ppo.evaluate(args, params, obs_rms)
    replay = envpool.make(args.env_id, env_type="gymnasium", num_envs=1, seed=ppo.evaluation_seed(args.seed))
    replay.reset()
    episode_return, ends = 0.0, []
    for action in evaluation.first_actions[: evaluation.lengths[0]]:
        _, reward, terminated, truncated, _ = replay.step(np.asarray(action[None], np.float64))
        episode_return += float(reward[0])
        ends.append(bool(terminated[0] or truncated[0]))
    assert ends[-1] and not any(ends[:-1])
    assert episode_return == pytest.approx(evaluation.returns[0], rel=1e-12)


def test_eval_every_logs_at_each_multiple_crossed_and_at_the_end_and_leaves_training_unchanged():
    """Evaluation runs on environments of its own: the training figures of the seed are those of a run
    without it, and the evaluations are the seed's alone (the same twice)."""
    cli_args = ["--env-id", "Hopper-v4", "--total-timesteps", "4096", "--seed", "5", "--eval-episodes", "3", *SMALL]
    _, plain = train_recorded(ppo.parse_args(cli_args)[0])
    args, _ = ppo.parse_args([*cli_args, "--eval-every", "1500"])
    _, evaluated = train_recorded(args)
    _, again = train_recorded(args)

    eval_log = evaluated.pop("eval/episodic_return")
    # 512 steps an iteration: 1500 is crossed at 1536, 3000 at 3072; 4096 is the last iteration.
    assert [step for step, _ in eval_log] == [1536, 3072, 4096]
    assert len({value for _, value in eval_log}) == 3  # three different policies
    assert again["eval/episodic_return"] == eval_log
    del plain["charts/SPS"], evaluated["charts/SPS"]
    assert evaluated == plain


def test_the_evaluation_at_the_end_is_of_the_final_policy():
    cli_args = ["--env-id", "Hopper-v4", "--total-timesteps", "2048", "--seed", "5", "--eval-episodes", "3", *SMALL]
    args, _ = ppo.parse_args([*cli_args, "--eval-every", "1024"])
    result, logged = train_recorded(args)
    evaluation = ppo.evaluate(args, result.state.train_state.params, result.state.env_state.obs_rms)
    assert logged["eval/episodic_return"][-1] == (2048, pytest.approx(evaluation.returns.mean(), rel=1e-6))


def test_a_task_that_reports_success_logs_its_rate_in_training_and_evaluation():
    """FetchReachDense-v4 (float32 actions, a goal dict): the logged rates are those of the episodes' last steps,
    the evaluation's against the NumPy loop."""
    cli_args = ["--env-id", "FetchReachDense-v4", "--total-timesteps", "1024", "--eval-episodes", "6", *SMALL]
    args, _ = ppo.parse_args([*cli_args, "--eval-every", "1024"])
    result, logged = train_recorded(args)
    # 50-step episodes: 8 end in each 64-step iteration of 8 environments.
    assert [step for step, _ in logged["charts/success_rate"]] == [512, 1024]
    assert all(0 <= rate <= 1 for _, rate in logged["charts/success_rate"])
    evaluation = ppo.evaluate(args, result.state.train_state.params, result.state.env_state.obs_rms)
    returns, lengths, successes, success_steps = numpy_evaluation(
        args, result.state.train_state.params, result.state.env_state.obs_rms, "is_success"
    )
    any_successes = success_steps >= 1
    np.testing.assert_array_equal(evaluation.lengths, lengths)
    np.testing.assert_allclose(evaluation.returns, returns, rtol=1e-5)
    np.testing.assert_array_equal(evaluation.successes, successes)
    np.testing.assert_array_equal(evaluation.any_successes, any_successes)
    assert logged["eval/success_rate"] == [(1024, pytest.approx(successes.mean()))]
    assert logged["eval/any_step_success_rate"] == [(1024, pytest.approx(any_successes.mean()))]


def test_myosuite_evaluation_counts_an_episode_solved_on_more_than_5_steps():
    """MyoSuite's own evaluate_success (and so its NPG baselines' figures) counts an episode solved on more than 5
    steps: the any-step rate counts so there, against the NumPy loop; here that differs from one step."""
    cli_args = ["--env-id", "myoElbowPose1D6MRandom-v0", "--total-timesteps", "512", "--eval-episodes", "16", *SMALL]
    args, _ = ppo.parse_args(cli_args)
    result, _ = train_recorded(args)
    params, obs_rms = result.state.train_state.params, result.state.env_state.obs_rms
    evaluation = ppo.evaluate(args, params, obs_rms)
    _, lengths, successes, success_steps = numpy_evaluation(args, params, obs_rms, "solved")
    np.testing.assert_array_equal(evaluation.lengths, lengths)
    np.testing.assert_array_equal(evaluation.successes, successes)
    np.testing.assert_array_equal(evaluation.any_successes, success_steps > 5)
    assert ((success_steps > 5) != (success_steps >= 1)).any()


def test_evaluate_from_the_file_matches_the_in_memory_evaluation_logged_at_the_end(saved_run, tmp_path):
    run_dir, _ = saved_run
    ((step, logged),) = scalars(run_dir, "eval/episodic_return")
    assert step == 4096
    # A training flag that would be refused for training (less than one batch) is no error when evaluating.
    result = run_script(
        "--evaluate", str(run_dir / MODEL_NAME), "--eval-episodes", "4", "--total-timesteps", "10", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    mean, std, episodes = re.search(r"eval/episodic_return (\S+) \+- (\S+) over (\d+) episodes", result.stdout).groups()
    assert int(episodes) == 4 and float(std) >= 0
    assert float(mean) == pytest.approx(logged, abs=0.051)  # printed with one decimal


def test_a_kept_model_holds_its_final_evaluation(saved_run):
    """The model is saved before the final evaluation (so that Ctrl-C there keeps it), and again after it."""
    run_dir, _ = saved_run
    ((step, logged),) = scalars(run_dir, "eval/episodic_return")
    last_eval = ppo.load_checkpoint(str(run_dir / MODEL_NAME))["record"].last_eval
    assert last_eval["global_step"] == step == 4096
    assert last_eval["return"] == pytest.approx(logged, rel=1e-6)


# Reading the MP4 starts ffmpeg by fork and exec, which JAX (imported here) warns about; nothing runs in between.
@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")
def test_capture_video_records_the_evaluation_episode(saved_run, tmp_path):
    run_dir, _ = saved_run
    result = run_script("--evaluate", str(run_dir), "--eval-episodes", "1", "--capture-video", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    video = tmp_path / "videos" / run_dir.name / "eval.mp4"
    assert f"video saved to videos/{run_dir.name}/eval.mp4" in result.stdout
    reader = imageio.get_reader(video)
    frames = [frame for frame in reader]
    reader.close()
    # The episode's length comes from a second evaluation without rendering: one frame a step, plus the first.
    args, params, obs_rms = saved_policy(run_dir, eval_episodes=1)
    lengths = ppo.evaluate(args, params, obs_rms).lengths
    assert len(frames) == lengths[0] + 1
    assert frames[0].shape == (ppo.VIDEO_SIZE[1], ppo.VIDEO_SIZE[0], 3)
    assert np.std(frames[0]) > 10  # a rendered scene, not a blank frame


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")
def test_capture_video_with_eval_every_records_the_final_evaluation_without_a_second_one(tmp_path, monkeypatch):
    evaluations = []

    def recorded(*args):
        evaluations.append(evaluate(*args))
        return evaluations[-1]

    evaluate = ppo.evaluate
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ppo, "evaluate", recorded)
    ppo.main([*HOPPER, "--total-timesteps", "2048", "--eval-every", "1024", "--eval-episodes", "1", "--capture-video"])
    assert len(evaluations) == 2  # at 1024 and at 2048, the end: the video's is the last one's
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert scalars(run_dir, "eval/episodic_return")[-1] == (2048, pytest.approx(evaluations[-1].returns.mean()))
    reader = imageio.get_reader(tmp_path / "videos" / run_dir.name / "eval.mp4")
    frames = sum(1 for _ in reader)
    reader.close()
    assert frames == evaluations[-1].lengths[0] + 1
