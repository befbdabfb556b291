"""Trace one episode per env: per-step success, hand pos, object pos, obj_to_target (diagnosis for findings.md)."""

import os
import sys
import warnings

import numpy as np

warnings.filterwarnings("ignore")
import envpool
import metaworld
from metaworld.policies import ENV_POLICY_MAP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scripted import official_name

task, seed = sys.argv[1], int(sys.argv[2])
every = [int(x) for x in sys.argv[3].split(",")] if len(sys.argv) > 3 else [0, 25, 50, 75, 100, 150, 200, 300, 400, 499]
name = official_name(task)


def ep():
    env = envpool.make(task, env_type="gymnasium", num_envs=1, num_threads=1, seed=seed, partially_observable=False)
    o, i = env.reset()
    o = o[0]
    yield o, {k: v[0] for k, v in i.items() if k != "players"}, 0.0
    pol = ENV_POLICY_MAP[name]()
    for t in range(500):
        a = np.clip(pol.get_action(o), -1, 1).astype(np.float32)
        o, r, _te, _tr, i = env.step(a[None], np.array([0], np.int32))
        o = o[0]
        yield o, {k: v[0] for k, v in i.items() if k != "players"}, float(r[0])


def mw():
    mt1 = metaworld.MT1(name, seed=seed)
    env = mt1.train_classes[name]()
    env.set_task(mt1.train_tasks[0])
    env._partially_observable = False
    o, i = env.reset()
    yield o, i, 0.0
    pol = ENV_POLICY_MAP[name]()
    for t in range(500):
        a = np.clip(pol.get_action(o), -1, 1)
        o, r, _te, _tr, i = env.step(a)
        yield o, i, float(r)


for label, gen in (("envpool", ep()), ("metaworld", mw())):
    print("==", label, task, seed)
    for t, (o, i, r) in enumerate(gen):
        if t in every:
            print(
                f"t={t:3d} hand={np.round(o[0:3], 3)} grip={o[3]:.2f} obj={np.round(o[4:7], 3)} q={np.round(o[7:11], 2)} obj2={np.round(o[11:14], 3)} goal={np.round(o[36:39], 3)} r={r:.2f} succ={float(i.get('success', 0)):.0f} o2t={float(i.get('obj_to_target', np.nan)):.3f} near={float(i.get('near_object', np.nan)):.2f}"
            )
