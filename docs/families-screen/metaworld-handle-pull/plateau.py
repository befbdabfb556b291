"""MetaWorld/HandlePull-v3 (issue 57): what PPO's plateau of ~1,890 with success 0 is. Two hand-written policies, 500
steps, seeds 0-2, in EnvPool's environment and (where metaworld is installed) in Meta-World's own:

- scripted: Meta-World 3.1.1's SawyerHandlePullV3Policy (hand 4 cm in front of the handle, gripper closed, then up);
- hold: the open hand held at the handle and pushed up (0.1 above it), which earns the reward's bonus of
  1 + 5 in_place for an open gripper within 3.5 cm of the handle, whether or not the handle rises.

    venv/bin/python plateau.py --mw    # a venv with envpool, metaworld 3.1.1 and packaging; --mw: Meta-World's too
"""

import sys

import envpool
import metaworld
import numpy as np
from metaworld.policies import SawyerHandlePullV3Policy

SCRIPTED = SawyerHandlePullV3Policy()


def action(obs, policy):
    if policy == "scripted":
        return np.clip(SCRIPTED.get_action(obs), -1, 1).astype(np.float32)
    hand, handle = obs[:3], obs[4:7]
    target = handle.copy()
    if np.linalg.norm(hand[:2] - target[:2]) < 0.02 and abs(hand[2] - target[2]) < 0.02:
        target = target + np.array([0, 0, 0.1])
    return np.append(np.clip(25.0 * (target - hand), -1, 1), -1.0).astype(np.float32)  # gripper open


def episode(step, obs):
    rewards, first_success = [], None
    for t in range(500):
        obs, reward, success = step(action(obs, policy))
        rewards.append(reward)
        if success and first_success is None:
            first_success = t
    return rewards, first_success, obs[6]


def envpool_episode(seed):
    env = envpool.make(
        "MetaWorld/HandlePull-v3",
        env_type="gymnasium",
        num_envs=1,
        num_threads=1,
        seed=seed,
        partially_observable=False,
    )

    def step(a):
        obs, reward, _, _, info = env.step(a[None], np.array([0], np.int32))
        return obs[0], float(reward[0]), bool(info["success"][0])

    return episode(step, env.reset()[0][0])


def metaworld_episode(seed):
    mt1 = metaworld.MT1("handle-pull-v3", seed=seed)
    env = mt1.train_classes["handle-pull-v3"]()
    env.set_task(mt1.train_tasks[0])
    env._partially_observable = False

    def step(a):
        obs, reward, _, _, info = env.step(a)
        return obs, float(reward), bool(info["success"])

    return episode(step, env.reset()[0])


for name, make in [("EnvPool", envpool_episode)] + ([("Meta-World", metaworld_episode)] if "--mw" in sys.argv else []):
    for policy in ("scripted", "hold"):
        for seed in range(3):
            rewards, first, handle_z = make(seed)
            before = rewards[20 : first if first is not None else 500]
            # The discounted return from step 20 (the hand at the handle), the episode's end bootstrapped with its last
            # reward forever, as a truncated episode is: what PPO's value and advantages see at each discount.
            values = [
                sum(r * gamma**t for t, r in enumerate(rewards[20:])) + rewards[-1] * gamma**480 / (1 - gamma)
                for gamma in (0.97, 0.99, 0.995)
            ]
            print(
                f"{name:10s} {policy:8s} seed {seed}: return {sum(rewards):7.1f}, first success at step {first}, "
                f"reward a step from 20 to then {np.mean(before):.2f}, last 100 steps {np.mean(rewards[-100:]):.2f}, "
                f"handle z at the end {handle_z:.3f}, discounted from step 20 at 0.97 / 0.99 / 0.995: "
                f"{values[0]:.0f} / {values[1]:.0f} / {values[2]:.0f}"
            )
