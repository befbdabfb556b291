"""Resident memory an EnvPool environment holds, for each MuJoCo Playground task.

Each count of environments is made in a fresh process: its resident memory after `envpool.make` and a reset,
less that before. One environment's share is the difference between 16 and 8 environments, over 8, so that
what a pool holds once (the model, the threads) drops out. From the repository root:
    uv run python docs/families-screen/playground-memory/mem.py
"""

import os
import subprocess
import sys

import envpool


def resident_mib() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


if len(sys.argv) == 3:  # one measurement: env id, number of environments
    env_id, num_envs = sys.argv[1], int(sys.argv[2])
    before = resident_mib()
    envs = envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, num_threads=1, seed=0)
    envs.reset()
    print(resident_mib() - before)  # while envs still holds the pool
else:
    sys.path.insert(0, os.getcwd())
    from ppo_continuous_envpool_jax import family_name

    tasks = [env_id for env_id in envpool.list_all_envs() if family_name(env_id) == "playground" and "/" not in env_id]
    print("task | MiB an environment | MiB the pool holds once | GiB for 64 | GiB for 256")
    for env_id in tasks:
        small, large = (
            float(
                subprocess.run(
                    [sys.executable, __file__, env_id, str(n)], capture_output=True, text=True, check=True
                ).stdout
            )
            for n in (8, 16)
        )
        each = (large - small) / 8
        print(f"{env_id} | {each:.0f} | {small - 8 * each:.0f} | {64 * each / 1024:.1f} | {256 * each / 1024:.1f}")
