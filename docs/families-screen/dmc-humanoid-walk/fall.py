"""Issue 55, step 1: how long DeepMind Control's humanoid stays up under untrained actions.

EnvPool's HumanoidWalk-v1, one environment, 1,000 steps per seed, with zero actions and with Gaussian actions of
std 1 and 0.3 clipped to the bounds; prints each episode's return, the first step with the head below 1 m, and the
head's height at steps 0, 50, 200 and 999. Run from the project root: `uv run python docs/families-screen/dmc-humanoid-walk/fall.py`.
"""

import envpool
import numpy as np

for mode, std in (("zero", 0.0), ("gaussian, std 1", 1.0), ("gaussian, std 0.3", 0.3)):
    returns, falls, heights = [], [], []
    for seed in range(3):
        env = envpool.make("HumanoidWalk-v1", env_type="gymnasium", num_envs=1, seed=seed)
        obs, _ = env.reset()
        rng = np.random.default_rng(seed)
        episode_return, fall, head = 0.0, None, []
        for t in range(1000):
            action = np.clip(rng.normal(0.0, std, (1, 21)), -1.0, 1.0) if std else np.zeros((1, 21))
            obs, reward, _, _, _ = env.step(action.astype(np.float64), np.array([0]))
            episode_return += float(reward[0])
            head.append(float(obs["head_height"][0]))
            if fall is None and head[-1] < 1.0:
                fall = t
        returns.append(round(episode_return, 2))
        falls.append(fall)
        heights.append([round(head[t], 2) for t in (0, 50, 200, 999)])
    print(f"{mode}: returns {returns}, first step with the head below 1 m {falls}, head at 0/50/200/999 {heights}")
