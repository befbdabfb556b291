"""The return of a uniformly random policy on each task: the zero of report.py's `--reference suite`.

    uv run python random_returns.py                        # the 15 tasks of the suite
    uv run python random_returns.py --env-ids Reacher-v4 --episodes 1000

Each of `--episodes` environments of one EnvPool (seed `--seed`) plays exactly one episode with actions drawn
uniformly within the task's bounds (NumPy's generator, the same seed); prints the mean and standard error of
the episode returns per task, and the Python line report.py's table holds. A normalised score is then
(return - random) / (reference - random): 0 for a random policy, 1 at the reference, on every task's scale
(Reacher-v4's returns are negative, so a plain ratio would rank a worse run higher).
"""

import argparse

import numpy as np

import ppo_continuous_envpool_jax as ppo
import report

SUITE = list(report.REFERENCES["suite"].figures)  # the 15 tasks the defaults are chosen on


def random_episode_returns(env_id: str, episodes: int, seed: int) -> np.ndarray:
    """The returns of the first episode of each of `episodes` environments under uniformly random actions."""
    envs, _handle, _xla_step = ppo.make_envs(env_id, episodes, num_threads=0, seed=seed)
    space = envs.action_space
    rng = np.random.default_rng(seed)
    envs.reset()
    returns = np.zeros(episodes)
    running = np.ones(episodes, bool)  # True until the environment's first episode has ended
    while running.any():
        action = rng.uniform(space.low, space.high, (episodes,) + space.shape).astype(space.dtype)
        _obs, reward, terminated, truncated, _info = envs.step(action)
        returns += np.where(running, reward, 0.0)
        running &= ~(terminated | truncated)
    envs.close()
    return returns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-ids", nargs="+", default=SUITE, help="the tasks (default: the suite of 15)")
    parser.add_argument("--episodes", type=int, default=100, help="episodes per task (default: 100)")
    parser.add_argument("--seed", type=int, default=0, help="EnvPool's and the actions' seed (default: 0)")
    args = parser.parse_args()
    table = {}
    for env_id in args.env_ids:
        returns = random_episode_returns(env_id, args.episodes, args.seed)
        stderr = returns.std(ddof=1) / np.sqrt(len(returns))
        print(f"{env_id:28s} {returns.mean():10.2f} ± {stderr:.2f} (standard error, {len(returns)} episodes)")
        table[env_id] = round(float(returns.mean()), 2)
    print(table)


if __name__ == "__main__":
    main()
