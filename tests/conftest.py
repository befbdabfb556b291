"""Fixtures shared by the test files."""

import pytest

from tests.support import HOPPER, SWEEP_ENVS, benchmark, only_run_dir, run_script


@pytest.fixture(scope="session")
def saved_run(tmp_path_factory):
    """A short Hopper run with --save-model: its directory and its stdout. Seed 2: --evaluate must take it from
    the file to play the same episodes."""
    cwd = tmp_path_factory.mktemp("saved")
    result = run_script(
        *HOPPER, "--total-timesteps", "4096", "--seed", "2", "--save-model", "--eval-episodes", "4", cwd=cwd
    )
    assert result.returncode == 0, result.stderr
    return only_run_dir(cwd), result.stdout


@pytest.fixture(scope="session")
def sweep(tmp_path_factory):
    """2 env ids x 2 seeds, 2 runs at a time, trained for real (a few thousand steps each)."""
    workdir = tmp_path_factory.mktemp("sweep")
    result = benchmark(
        "--workdir", workdir, "--env-ids", " ".join(SWEEP_ENVS), "--seeds", 2, "--workers", 2,
        "--", "--total-timesteps", 4096, "--num-envs", 8, "--num-steps", 64, "--eval-every", 2048,
        "--eval-episodes", 2,
    )  # fmt: skip
    return workdir, result
