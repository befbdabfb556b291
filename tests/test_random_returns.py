"""random_returns.py, the zero of report.py's `--reference suite`, against the table report.py holds."""

import pytest

import random_returns
import report


@pytest.mark.parametrize("env_id", ["InvertedPendulum-v4", "Reacher-v4", "CartpoleSwingup-v1"])
def test_the_measured_random_return_is_reports_table(env_id):
    # the table's protocol (100 episodes, seed 0), measured again: a gym task that ends early, one of fixed
    # length, a DeepMind Control one
    returns = random_returns.random_episode_returns(env_id, episodes=100, seed=0)
    assert round(float(returns.mean()), 2) == report.RANDOM_RETURNS[env_id]


def test_the_table_covers_the_suite():
    suite = set(random_returns.SUITE)
    assert len(suite) == 15
    assert set(report.RANDOM_RETURNS) == suite == set(report.REFERENCES["suite"].figures)
