"""What a policy that has learned nothing scores on each task: the zero of report.py's `--reference suite`,
and the floor under a success rate.

    uv run python random_returns.py                        # the 15 tasks of the suite
    uv run python random_returns.py --env-ids Reacher-v4 --episodes 1000
    uv run python random_returns.py --env-ids FetchPushDense-v4 --policy zero --episodes 256

Each of `--episodes` environments of one EnvPool (seed `--seed`) plays exactly one episode, with actions drawn
uniformly within the task's bounds (NumPy's generator, the same seed) or, with `--policy zero`, the middle of
the bounds every step (the zero action: on the robots, doing nothing). Prints the mean and standard error of
the episode returns per task and, for a task that reports success, the two success rates the training script
logs (the flag at the episode's last step, and on SUCCESS_STEPS of its steps); then, for random actions, the
Python line report.py's table holds. A normalised score is (return - random) / (reference - random): 0 for a random
policy, 1 at the reference, on every task's scale (Reacher-v4's returns are negative, so a plain ratio would
rank a worse run higher). A success rate is worth citing only above what doing nothing scores: where a Fetch
task's goal is drawn near the object's start, a still arm succeeds.
"""

import argparse
from typing import NamedTuple

import numpy as np

import ppo_continuous_envpool_jax as ppo
import report

SUITE = list(report.REFERENCES["suite"].figures)  # the 15 tasks the defaults are chosen on


class Episodes(NamedTuple):
    returns: np.ndarray  # (episodes,)
    success: np.ndarray | None  # (episodes,) bool, the flag at the last step; None where the task reports none
    any_success: np.ndarray | None  # (episodes,) bool, the flag on at least SUCCESS_STEPS of the steps


def baseline_episodes(env_id: str, episodes: int, seed: int, policy: str = "random") -> Episodes:
    """The first episode of each of `episodes` environments under uniformly random actions or the zero action."""
    envs, _handle, _xla_step = ppo.make_envs(env_id, episodes, num_threads=0, seed=seed)
    space, key = envs.action_space, ppo.success_key(envs)
    rng = np.random.default_rng(seed)
    envs.reset()
    returns = np.zeros(episodes)
    success = np.zeros(episodes, bool)
    flagged_steps = np.zeros(episodes, int)
    running = np.ones(episodes, bool)  # True until the environment's first episode has ended
    while running.any():
        if policy == "random":
            action = rng.uniform(space.low, space.high, (episodes,) + space.shape)
        else:
            action = np.broadcast_to((space.low + space.high) / 2, (episodes,) + space.shape)
        _obs, reward, terminated, truncated, info = envs.step(action.astype(space.dtype))
        returns += np.where(running, reward, 0.0)
        if key:
            flag = info[key] > 0
            flagged_steps += running & flag
            success = np.where(running, flag, success)  # the last step's flag stays once the episode ends
        running &= ~(terminated | truncated)
    envs.close()
    if not key:
        return Episodes(returns, None, None)
    return Episodes(returns, success, flagged_steps >= ppo.SUCCESS_STEPS.get(key, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-ids", nargs="+", default=SUITE, help="the tasks (default: the suite of 15)")
    parser.add_argument("--episodes", type=int, default=100, help="episodes per task (default: 100)")
    parser.add_argument("--seed", type=int, default=0, help="EnvPool's and the actions' seed (default: 0)")
    parser.add_argument("--policy", choices=("random", "zero"), default="random", help="(default: random)")
    args = parser.parse_args()
    table = {}
    for env_id in args.env_ids:
        run = baseline_episodes(env_id, args.episodes, args.seed, args.policy)
        stderr = run.returns.std(ddof=1) / np.sqrt(len(run.returns))
        line = f"{env_id:28s} {run.returns.mean():10.2f} ± {stderr:.2f} (standard error, {len(run.returns)} episodes)"
        if run.success is not None:
            line += f"; success {run.success.mean():.3f}, any-step {run.any_success.mean():.3f}"
        print(line)
        table[env_id] = round(float(run.returns.mean()), 2)
    if args.policy == "random":  # report.py's zero is the random policy's return, never the zero action's
        print(table)


if __name__ == "__main__":
    main()
