"""Where an iteration runs: the rollout on the CPU, the learner on --learner-device, XLA's CPU threads by the work.

CI has no accelerator. JAX's CPU backend split into two host devices stands in for one: the learner then runs on
the second, with the same crossings (the batch there, the parameters back) that a GPU or TPU learner has.
"""

import os

import pytest

import ppo_continuous_envpool_jax as ppo
from tests.support import SMALL, only_run_dir, run_script, scalars

TWO_HOST_DEVICES = "--xla_force_host_platform_device_count=2"
LOGGED = ["losses/value_loss", "losses/policy_loss", "losses/approx_kl", "losses/explained_variance"]


def test_the_learner_on_a_second_device_logs_what_one_device_logs(tmp_path):
    """Same seed, one device against the learner on the second of two: every logged scalar agrees, the
    evaluations too (the policy acts on the CPU, wherever its parameters were trained)."""
    cli_args = ["--env-id", "Hopper-v4", "--total-timesteps", "4096", "--seed", "6", "--eval-every", "2048", *SMALL]
    env = dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} {TWO_HOST_DEVICES}")
    logged, devices_lines = {}, {}
    for name, extra, run_env in (("one", [], None), ("two", ["--learner-device", "cpu:1"], env)):
        (tmp_path / name).mkdir()
        result = run_script(*cli_args, *extra, cwd=tmp_path / name, env=run_env)
        assert result.returncode == 0, result.stderr
        devices_lines[name] = result.stdout.splitlines()[2]
        run_dir = only_run_dir(tmp_path / name)
        logged[name] = {tag: scalars(run_dir, tag) for tag in [*LOGGED, "eval/episodic_return"]}
    assert devices_lines == {
        "one": "devices: rollout cpu:0 (XLA threads: 1), learner cpu:0",
        "two": "devices: rollout cpu:0 (XLA threads: 1), learner cpu:1",
    }
    assert len(logged["one"]["losses/value_loss"]) == 8 and len(logged["one"]["eval/episodic_return"]) == 2
    for tag, values in logged["one"].items():
        assert [step for step, _ in logged["two"][tag]] == [step for step, _ in values], tag
        assert [value for _, value in logged["two"][tag]] == pytest.approx([value for _, value in values], rel=1e-5)


PLAYGROUND_BATCH = ["--num-steps", "160", "--num-minibatches", "8", "--hidden-sizes", "256", "256"]


@pytest.mark.parametrize(
    ("flags", "threads"),
    [
        ([], 1),  # gym's defaults: 64 rows x 64^2 = 262,144
        (["--num-envs", "1024"], 1),  # 1,024 x 64^2 = 4.2M
        (["--num-envs", "4096"], 6),  # 4,096 x 64^2 = 2^24
        (PLAYGROUND_BATCH, 6),  # minibatches of 64 x 160 / 8 = 1,280 rows x 256^2 = 84M
        ([*PLAYGROUND_BATCH, "--num-minibatches", "160"], 1),  # 64-row minibatches: 64 x 256^2 = 2^22
    ],
)
def test_xla_gets_the_runs_cores_only_where_the_cpus_matrix_products_are_large(flags, threads):
    args = ppo.parse_args(["--num-threads", "6", *flags])[0]
    assert ppo.xla_cpu_threads(args) == threads


def test_a_run_takes_the_thread_count_of_its_products_unless_the_environment_gives_one(tmp_path):
    cli_args = ["--total-timesteps", "10240", "--num-envs", "64", *PLAYGROUND_BATCH, "--num-threads", "2"]
    env = {key: value for key, value in os.environ.items() if key != "PJRT_NPROC"}
    for run_env, threads in ((env, "2"), (dict(env, PJRT_NPROC="1"), "1")):
        result = run_script(*cli_args, "--update-epochs", "1", cwd=tmp_path, env=run_env)
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines()[2] == f"devices: rollout cpu:0 (XLA threads: {threads}), learner cpu:0"
