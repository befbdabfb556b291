"""What the end-to-end tests share: running the script as a user would, and reading its TensorBoard logs."""

import subprocess
import sys
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

SCRIPT = Path(__file__).resolve().parents[1] / "ppo_continuous_envpool_jax.py"
# Small and quick: 512 steps an iteration.
SMALL = ["--num-envs", "8", "--num-steps", "64", "--num-minibatches", "4", "--update-epochs", "2"]


def script_command(*cli_args):
    return [sys.executable, str(SCRIPT), *cli_args]


def run_script(*cli_args, cwd, env=None):
    return subprocess.run(
        script_command(*cli_args), cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def only_run_dir(cwd: Path) -> Path:
    (run_dir,) = (cwd / "runs").iterdir()
    return run_dir


def scalars(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    events = EventAccumulator(str(run_dir))
    events.Reload()
    return [(event.step, event.value) for event in events.Scalars(tag)]
