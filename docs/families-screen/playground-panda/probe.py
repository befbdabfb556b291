"""What a saved PandaPickCubeCartesian-v1 policy does: 64 episodes of its mean action, with the reward's terms.

    uv run python docs/families-screen/playground-panda/probe.py runs/<run>/<exp>.model [...]

Prints the return, the episodes that succeed, each reward term's mean a step, and the gripper's action (the last
of the three) on the steps where the cube is lifted, where the gripper is near it (gripper_box > 0.7) but it is not
lifted, and where the gripper is far from it.
"""

import sys
from pathlib import Path

import envpool
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import ppo_continuous_envpool_jax as ppo

TERMS = ["gripper_box", "box_target", "lifted", "success", "no_floor_collision", "robot_target_qpos"]
EPISODES = 64

for path in sys.argv[1:]:
    checkpoint = ppo.load_checkpoint(path)
    args, params, obs_rms = checkpoint["args"], checkpoint["train_state"]["params"], checkpoint["obs_rms"]
    envs = envpool.make(args.env_id, env_type="gymnasium", num_envs=EPISODES, num_threads=1, seed=12345)
    network = ppo.make_network(args, envs)
    low, high = (bound.astype(np.float32) for bound in (envs.action_space.low, envs.action_space.high))
    obs, _ = envs.reset()
    done = np.zeros(EPISODES, bool)
    returns, lengths, sums = np.zeros(EPISODES), np.zeros(EPISODES), {term: np.zeros(EPISODES) for term in TERMS}
    grip, near, lifted = [], [], []
    while not done.all():
        mean = network.apply(params, ppo.standardize(obs_rms, obs.astype(np.float32)))[0]
        action = np.asarray(ppo.to_env_action(mean, low, high, args.clip_action), envs.action_space.dtype)
        obs, reward, terminated, truncated, info = envs.step(action)
        live = ~done
        for term in TERMS:
            sums[term] += np.where(live, info[f"reward_{term}"], 0.0)
        returns += np.where(live, reward, 0.0)
        lengths += live
        grip.append(action[live, -1])
        near.append(info["reward_gripper_box"][live] > 0.7)
        lifted.append(info["reward_lifted"][live] > 0)
        done |= terminated | truncated
    grip, near, lifted = (np.concatenate(x) for x in (grip, near, lifted))
    print(
        f"{path}: return {returns.mean():.2f}, length {lengths.mean():.0f}, succeed {(sums['success'] > 0).mean():.2f}"
    )
    print("  a step:", ", ".join(f"{term} {(sums[term] / lengths).mean():.3f}" for term in TERMS))
    for name, steps in [("lifted", lifted), ("near, not lifted", near & ~lifted), ("far", ~near & ~lifted)]:
        if steps.any():
            print(f"  gripper action, {name}: {grip[steps].mean():+.2f} over {steps.sum()} steps")
