"""What the tests share: running the script as a user would, reading its TensorBoard logs, training in-process
with the scalars kept in memory, and the NumPy and gymnasium references for observations, rollouts and advantages."""

import os
import re
import select
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import ppo_continuous_envpool_jax as ppo

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "ppo_continuous_envpool_jax.py"
BENCHMARK = REPO / "benchmark.sh"
REPORT = REPO / "report.py"
USABLE_CPUS = sorted(os.sched_getaffinity(0))
SWEEP_ENVS = ["InvertedPendulum-v4", "Hopper-v4"]  # the real sweep of tests/conftest.py
# Small and quick: 512 steps an iteration.
SMALL = ["--num-envs", "8", "--num-steps", "64", "--num-minibatches", "4", "--update-epochs", "2"]
HOPPER = ["--env-id", "Hopper-v4", *SMALL]
MODEL_NAME = "ppo_continuous_envpool_jax.model"  # {exp_name}.model with the default --exp-name

# The processes under test get SIGINT and SIGTERM as a terminal gives them, whatever this test run inherited:
# under `nohup ... &` SIGINT is ignored, an ignored signal stays ignored across exec, and bash cannot trap a
# signal that was ignored on entry. A handled one is reset to the default in a child, so this process handles
# them (resetting them in each child instead would run Python between fork and exec, which JAX warns about).
for _signum, _handler in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
    if signal.getsignal(_signum) == signal.SIG_IGN:
        signal.signal(_signum, _handler)


def script_command(*cli_args):
    return [sys.executable, str(SCRIPT), *cli_args]


def run_script(*cli_args, cwd, env=None):
    return subprocess.run(
        script_command(*cli_args), cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def wait_for_line(process, prefix: str, timeout=120.0) -> str:
    """Read the process's stdout until a line starts with `prefix`; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([process.stdout], [], [], left)
        if not ready:
            break
        line = process.stdout.readline()
        if not line:
            raise AssertionError(f"the process ended before printing {prefix!r}: {process.stderr.read()}")
        if line.startswith(prefix):
            return line
    process.kill()
    raise AssertionError(f"no line {prefix!r} within {timeout} s")


def only_run_dir(cwd: Path) -> Path:
    (run_dir,) = (cwd / "runs").iterdir()
    return run_dir


def scalars(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    events = EventAccumulator(str(run_dir))
    events.Reload()
    return [(event.step, event.value) for event in events.Scalars(tag)]


class RecordingWriter:
    """Stands in for TensorBoard's writer: keeps every scalar in memory."""

    def __init__(self):
        self.scalars = {}

    def add_scalar(self, tag, value, step):
        self.scalars.setdefault(tag, []).append((step, float(value)))

    def flush(self):
        pass


def train_recorded(args, **train_kwargs):
    """`ppo.train` in this process with the scalars kept in memory: (result, scalars by tag), progress lines quiet."""
    writer = RecordingWriter()
    result = ppo.train(args, ppo.IterationLogger(args, writer, report=lambda step, line: None), **train_kwargs)
    return result, writer.scalars


def random_rollout(rng, num_steps, num_envs):
    """Rewards, values and episode ends with EnvPool's structure: every end is followed by a reset step."""
    terminated = np.zeros((num_steps, num_envs), bool)
    truncated = np.zeros((num_steps, num_envs), bool)
    is_reset = np.zeros((num_steps, num_envs), bool)
    is_reset[0] = rng.random(num_envs) < 0.3  # the previous rollout may have ended an episode
    for t in range(num_steps):
        if t > 0:
            is_reset[t] = terminated[t - 1] | truncated[t - 1]
        end = ~is_reset[t] & (rng.random(num_envs) < 0.2)
        kind = rng.random(num_envs) < 0.5
        terminated[t] = end & kind
        truncated[t] = end & ~kind
    reward = np.where(is_reset, 0.0, rng.normal(size=(num_steps, num_envs))).astype(np.float32)
    value = rng.normal(size=(num_steps, num_envs)).astype(np.float32)
    last_value = rng.normal(size=num_envs).astype(np.float32)
    return reward, value, last_value, terminated, truncated, is_reset


def rollout_transitions(obs, value, reward, terminated, truncated, is_reset) -> ppo.Transition:
    """NumPy arrays (T, N, ...) as the rollout's Transition; actions and log-probabilities do not matter here."""
    num_steps, num_envs = reward.shape
    return ppo.Transition(
        obs=jnp.asarray(obs),
        action=jnp.zeros((num_steps, num_envs, 2)),
        log_prob=jnp.zeros((num_steps, num_envs)),
        value=jnp.asarray(value),
        reward=jnp.asarray(reward),
        terminated=jnp.asarray(terminated),
        truncated=jnp.asarray(truncated),
        is_reset=jnp.asarray(is_reset),
    )


def numpy_gae(reward, value, last_value, terminated, truncated, gamma, lam):
    num_steps, num_envs = reward.shape
    advantages = np.zeros((num_steps, num_envs))
    for env in range(num_envs):
        next_advantage = 0.0
        for t in reversed(range(num_steps)):
            next_value = last_value[env] if t == num_steps - 1 else value[t + 1, env]
            delta = reward[t, env] + gamma * (0.0 if terminated[t, env] else next_value) - value[t, env]
            done = terminated[t, env] or truncated[t, env]
            next_advantage = delta + (0.0 if done else gamma * lam * next_advantage)
            advantages[t, env] = next_advantage
    return advantages, advantages + value


def benchmark(*args, cwd=None, timeout=300, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BENCHMARK), *map(str, args)],
        cwd=cwd,
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


# ---------------------------------------------------------------------------------------------------
# An independent reader of the event files
# ---------------------------------------------------------------------------------------------------


def read_events(run_dir: Path):
    """All events of a run, parsed from the TFRecord framing with TensorBoard's own protobuf."""
    from tensorboard.compat.proto import event_pb2

    events = []
    for path in sorted(run_dir.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos : pos + 8])
            pos += 12  # length, masked CRC of the length
            events.append(event_pb2.Event.FromString(data[pos : pos + length]))
            pos += length + 4  # data, masked CRC of the data
    return events


def parsed_scalars(events, tag: str) -> list[tuple[int, float, float]]:
    """(step, value, wall_time) of one scalar tag."""
    return [(e.step, v.simple_value, e.wall_time) for e in events for v in e.summary.value if v.tag == tag]


def as_tensorboard_shows(events):
    """The events left after TensorBoard's restart markers: a SessionLog START at step s drops every earlier
    event at or after s (written by a resumed run, or a run started again in its run directory)."""
    from tensorboard.compat.proto import event_pb2

    kept = []
    for event in events:
        if event.HasField("session_log") and event.session_log.status == event_pb2.SessionLog.START:
            kept = [earlier for earlier in kept if earlier.step < event.step]
        kept.append(event)
    return kept


def hyperparameters(events) -> dict[str, str]:
    for event in events:
        for value in event.summary.value:
            if value.tag.startswith("hyperparameters"):
                table = value.tensor.string_val[0].decode()
                return dict(row.strip("|").split("|", 1) for row in table.splitlines()[2:])
    raise AssertionError("no hyperparameters text in the event file")


def reference_run(run_dir: Path, window_steps=100_000, short_fraction=0.1) -> dict:
    events = as_tensorboard_shows(read_events(run_dir))
    all_scalars = [
        (e.step, e.wall_time) for e in events if e.summary.value and e.summary.value[0].HasField("simple_value")
    ]
    total_steps = max(step for step, _ in all_scalars)
    window = window_steps if total_steps >= window_steps else short_fraction * total_steps

    def window_mean(tag):
        values = [value for step, value, _ in parsed_scalars(events, tag) if step > total_steps - window]
        return float(np.mean(values)) if values else None

    wall_times = [e.wall_time for e in events]
    return {
        "total_steps": total_steps,
        "final_return": window_mean("charts/episodic_return"),
        "final_success": window_mean("charts/success_rate"),
        "final_any_step_success": window_mean("charts/any_step_success_rate"),
        "wall_clock": max(wall_times) - min(wall_times),
        "last_return": parsed_scalars(events, "charts/episodic_return")[-1][1],
        "eval_returns": parsed_scalars(events, "eval/episodic_return"),
        "hyperparameters": hyperparameters(events),
    }


def parse_markdown_table(text: str, first_columns: list[str]) -> list[dict[str, str]]:
    """The rows of the Markdown table whose header starts with `first_columns`."""

    def cells(line):
        return [cell.strip() for cell in line.strip().strip("|").split("|")]

    lines = text.splitlines()
    start = next(
        i for i, line in enumerate(lines) if line.startswith("|") and cells(line)[: len(first_columns)] == first_columns
    )
    header = cells(lines[start])
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, cells(line))))
    return rows


def parse_mean_std(cell: str) -> tuple[float, float]:
    match = re.fullmatch(r"(-?[\d.]+) ± ([\d.]+)(?: †)?", cell)
    assert match, f"not 'mean ± std': {cell!r}"
    return float(match[1]), float(match[2])


class _Observing(gymnasium.Env):
    """Just enough of an environment for gymnasium's observation wrappers."""

    def __init__(self, observation_space):
        self.observation_space = observation_space
        self.action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,))


def sorted_space(space):
    """The space rebuilt from plain dicts, whose keys gymnasium's Dict sorts (EnvPool keeps its own order)."""
    if isinstance(space, gymnasium.spaces.Dict):
        return gymnasium.spaces.Dict({key: sorted_space(sub) for key, sub in space.spaces.items()})
    return space


def gymnasium_flattened(space, batch, critic_only=("privileged_state",)) -> np.ndarray:
    """A batch of EnvPool observations (N, ...) through gymnasium's FlattenObservation, one environment at a time,
    as float32: the keys other than `critic_only` first, then those."""
    if not isinstance(space, gymnasium.spaces.Dict):
        return np.asarray(batch, np.float32)
    groups = [
        [key for key in space.spaces if key not in critic_only],
        [key for key in space.spaces if key in critic_only],
    ]
    parts = []
    for keys in filter(None, groups):
        wrapper = gymnasium.wrappers.FlattenObservation(
            _Observing(sorted_space(gymnasium.spaces.Dict({k: space[k] for k in keys})))
        )
        num_envs = len(jax.tree.leaves(batch)[0])
        parts.append(
            np.stack(
                [
                    wrapper.observation(jax.tree.map(lambda x, i=i: x[i], {k: batch[k] for k in keys}))
                    for i in range(num_envs)
                ]
            )
        )
    return np.concatenate(parts, axis=1).astype(np.float32)
