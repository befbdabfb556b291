"""Fixtures shared by the test files."""

import pytest

from tests.support import HOPPER, only_run_dir, run_script


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
