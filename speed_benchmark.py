"""Training speed against the ceiling: raw EnvPool steps/s with random actions, measured in the same process.

    uv run python speed_benchmark.py                      # HalfCheetah-v4 with the script's defaults
    uv run python speed_benchmark.py --env-id Ant-v4 -- --num-envs 128

Prints the median raw EnvPool steps/s (NumPy API, same task, num_envs and threads, measured before and
after training so that both see the same machine load), the median training steps/s over iterations
after the first, and their ratio. Then the time from start to the end of the first iteration, as a user
sees it: the training script is started as a new process and timed until it prints its first progress
line, once with an empty compilation cache (cold: everything is compiled) and twice more with the cache
that run left (warm: only the rollout, which embeds the process's EnvPool, is compiled again). Flags
after `--` go to the training script.

With --phases it also times the parts of an iteration on their own (each waited for before the next
starts): the rollout with its first batch, its move to the learner, one update epoch, one advantage
recomputation, the parameters' move back. --no-start-up skips the new processes (on a machine whose
accelerator this process holds, they could not have it).
"""

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial

PROCESS_START = time.perf_counter()

import jax
import numpy as np

import ppo_continuous_envpool_jax as ppo

IMPORT_SECONDS = time.perf_counter() - PROCESS_START


def raw_envpool_steps_per_second(args: ppo.Args, num_chunks: int, steps_per_chunk: int) -> list[float]:
    # exactly the training's task, num_envs and threads
    envs, _handle, _xla_step = ppo.make_envs(args.env_id, args.num_envs, args.num_threads, args.seed)
    envs.reset()
    space = envs.action_space
    rng = np.random.default_rng(args.seed)
    actions = rng.uniform(space.low, space.high, (steps_per_chunk, args.num_envs) + space.shape).astype(space.dtype)
    rates = []
    for _ in range(num_chunks):
        start = time.perf_counter()
        for action in actions:
            envs.step(action)
        rates.append(steps_per_chunk * args.num_envs / (time.perf_counter() - start))
    return rates


def seconds_to_first_iteration(train_args: list[str], batch_size: int, cache_dir: str) -> float:
    """Wall-clock from starting the training script to its first progress line, with this compilation cache."""
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=cache_dir)
    command = [sys.executable, ppo.__file__, *train_args, "--total-timesteps", str(batch_size)]
    seconds = None
    with tempfile.TemporaryDirectory() as run_dir:  # its runs/ folder goes here
        start = time.perf_counter()
        with subprocess.Popen(command, cwd=run_dir, env=env, stdout=subprocess.PIPE, text=True) as process:
            for line in process.stdout:
                if line.startswith("iteration=1/"):
                    seconds = time.perf_counter() - start
            if process.wait() != 0 or seconds is None:
                sys.exit(f"error: {' '.join(command)} failed")
    return seconds


def phase_milliseconds(args: ppo.Args, iterations: int) -> dict[str, float]:
    """Median milliseconds of each part of an iteration, the training loop's parts timed one at a time."""
    envs, handle, xla_step = ppo.make_envs(args.env_id, args.num_envs, args.num_threads, args.seed)
    programs = ppo.make_programs(args, envs, xla_step)
    train_state, env_state, _ = ppo.initial_state(programs, handle, ppo.reset_start(envs), None)
    params = jax.device_put(train_state.params, programs.actor)
    # The two halves of the loop's train_epoch program, timed apart.
    recompute_batch = jax.jit(partial(ppo.recompute_batch, apply_fn=train_state.apply_fn, args=args))
    update_epoch = jax.jit(partial(ppo.update_epoch, args=args))
    shuffler = np.random.default_rng(args.seed)
    phases = ("rollout and first batch", "batch to the learner", "update epoch", "advantage recomputation")
    seconds = {phase: [] for phase in (*phases, "parameters back")}

    def timed(phase, function, *function_args):
        start = time.perf_counter()
        result = jax.block_until_ready(function(*function_args))
        seconds[phase].append(time.perf_counter() - start)
        return result

    for iteration in range(iterations):
        key = jax.random.PRNGKey(iteration)
        env_state, transitions, batch, _ = timed("rollout and first batch", programs.collect, params, env_state, key)
        transitions, batch, last_obs, return_rms = timed(
            "batch to the learner",
            jax.device_put,
            (transitions, batch, env_state.obs, env_state.return_rms),
            programs.learner,
        )
        for epoch in range(args.update_epochs):
            if epoch > 0 and args.recompute_adv:
                batch, return_rms = timed(
                    "advantage recomputation",
                    recompute_batch,
                    train_state.params,
                    transitions,
                    last_obs,
                    return_rms,
                )
            train_state, _ = timed(
                "update epoch", update_epoch, train_state, batch, shuffler.permutation(args.batch_size)
            )
        env_state = env_state.replace(return_rms=jax.device_put(return_rms, programs.actor))
        params = timed("parameters back", ppo.params_on_actor, programs, train_state.params)
    # The first call of each compiled it.
    return {phase: 1e3 * statistics.median(values[1:]) for phase, values in seconds.items() if len(values) > 1}


def checkpoint_milliseconds(args: ppo.Args, state: ppo.RunState) -> float:
    """Median milliseconds of writing the run's checkpoint (serialise, write beside, sync, rename)."""
    seconds = []
    with tempfile.TemporaryDirectory() as run_dir:
        for _ in range(20):
            start = time.perf_counter()
            ppo.save_checkpoint(os.path.join(run_dir, "checkpoint.model"), args, state)
            seconds.append(time.perf_counter() - start)
    return 1e3 * statistics.median(seconds)


class IterationClock:
    """A TensorBoard writer stand-in that notes when each iteration finished logging."""

    def __init__(self):
        self.times = []

    def add_scalar(self, tag, value, step):
        if tag == "charts/SPS":
            self.times.append(time.perf_counter())

    def flush(self):
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", default="HalfCheetah-v4")
    parser.add_argument("--iterations", type=int, default=60, help="training iterations to time")
    parser.add_argument("--phases", action="store_true", help="also time the parts of an iteration on their own")
    parser.add_argument("--no-start-up", action="store_true", help="skip timing new processes to the first iteration")
    parser.add_argument("train_args", nargs="*", help="flags for the training script, after --")
    options = parser.parse_args()
    if options.iterations < 2:  # the steps/s are timed between iterations
        parser.error(f"--iterations must be at least 2, got {options.iterations}")
    args, _ = ppo.parse_args(["--env-id", options.env_id, *options.train_args])
    args.num_iterations = options.iterations
    args.total_timesteps = options.iterations * args.batch_size

    raw = raw_envpool_steps_per_second(args, num_chunks=5, steps_per_chunk=200)
    clock = IterationClock()
    with contextlib.redirect_stdout(io.StringIO()):
        result = ppo.train(args, ppo.IterationLogger(args, clock))
    raw += raw_envpool_steps_per_second(args, num_chunks=5, steps_per_chunk=200)

    iteration_seconds = np.diff(clock.times)
    training = statistics.median(args.batch_size / iteration_seconds)
    raw_median = statistics.median(raw)
    learner = ppo.learner_device(args.learner_device)
    print(f"task {args.env_id}, num_envs {args.num_envs}, batch {args.batch_size}, {options.iterations} iterations")
    print(f"learner {learner.platform}:{learner.id}, XLA CPU threads (PJRT_NPROC) {os.environ['PJRT_NPROC']}")
    print(f"raw EnvPool steps/s (median of {len(raw)} chunks):       {raw_median:10.0f}")
    print(f"training steps/s (median of {len(iteration_seconds)} iterations):    {training:10.0f}")
    print(f"ratio training / raw:                            {training / raw_median:10.2f}")
    print(f"imports of the training script (jax, envpool, flax, ...): {IMPORT_SECONDS:5.2f} s")
    checkpoint_ms = checkpoint_milliseconds(args, result.state)
    run_seconds = args.total_timesteps / training
    every = args.checkpoint_every_seconds
    periodic = (
        f"every {every:.0f} s that is {100 * checkpoint_ms / 1e3 / every:.3f}% of a run"
        if every
        else "periodic checkpoints off"
    )
    print(
        f"one checkpoint (median of 20): {checkpoint_ms:.1f} ms; {periodic}, one per iteration "
        f"{100 * checkpoint_ms / 1e3 / (run_seconds / args.num_iterations):.1f}%"
    )
    if options.phases:
        phases = phase_milliseconds(args, options.iterations)
        raw_ms = 1e3 * args.batch_size / raw_median
        print(
            f"per iteration, each part timed alone (median ms; raw EnvPool for {args.batch_size} steps: {raw_ms:.1f}):"
        )
        for phase, milliseconds in phases.items():
            print(f"  {phase:30s} {milliseconds:8.2f}")

    if options.no_start_up:
        return
    train_args = ["--env-id", options.env_id, *options.train_args]
    with tempfile.TemporaryDirectory() as cache_dir:
        cold = seconds_to_first_iteration(train_args, args.batch_size, cache_dir)
        warm = [seconds_to_first_iteration(train_args, args.batch_size, cache_dir) for _ in range(2)]
    print("start to end of first iteration, new process:")
    print(f"  empty compilation cache (first run):          {cold:10.2f} s")
    print(f"  warm compilation cache (median of 2 runs):    {statistics.median(warm):10.2f} s")


if __name__ == "__main__":
    main()
