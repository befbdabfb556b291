"""Tests of benchmark.sh (local and --slurm).

The real sweep (tests/conftest.py: 4 tiny runs, two at a time) and the three tests of the issue that made a sweep a
list of runs that finish themselves (a sweep killed with SIGKILL and run again, two launches of one sweep, the Slurm
array's commands) train for real or run the real commands; the orchestration tests (failures, pinning, Ctrl-C,
Slurm arrays) use a stub in place of Python that keeps the training script's side of the contract benchmark.sh relies
on (--run-dir, its lock, summary.json), so they take no training time. What the runs did is read back from their
event files with the independent reader of tests/support.py. The test against a real single-node Slurm is opt-in:
RUN_SLURM_TESTS=1.
"""

from __future__ import annotations

import json
import math
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import (
    BENCHMARK,
    REPO,
    REPORT,
    SMALL,
    SWEEP_ENVS,
    USABLE_CPUS,
    as_tensorboard_shows,
    benchmark,
    read_events,
    reference_run,
)

pytestmark = pytest.mark.skipif(len(USABLE_CPUS) < 2, reason="the sweeps run two at a time: needs 2 usable cores")

EXP = "ppo_continuous_envpool_jax"  # the training script's default --exp-name: the sweep's name when none is given


def start_process(*command, env=None) -> subprocess.Popen:
    """A command in the background, in a process group of its own, as a terminal starts a job."""
    return subprocess.Popen(
        [*map(str, command)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )


def wait_for(condition, timeout: float, what: str):
    """Polls `condition` every 10 ms until it is true (and returns it), for at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.01)
    return value


def summary_rows(stdout: str) -> dict[tuple[str, int], dict]:
    """The rows of benchmark.sh's summary table: (env, seed) -> its columns."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:3] == ["env", "seed", "status"])
    columns = ["env_id", "seed", "status", "steps", "ret", "success", "last_eval", "wall", "run_dir"]
    if "success(last/any)" not in lines[start]:  # the column is there only where some run reports success
        columns.remove("success")
    rows = {}
    for line in lines[start + 1 :]:
        if re.match(r"^\d+/\d+ runs ok\.$", line):
            return rows
        row = dict(zip(columns, line.split(maxsplit=len(columns) - 1)))
        rows[(row.pop("env_id"), int(row.pop("seed")))] = row
    raise AssertionError(f"no end to the summary table in {stdout!r}")


def not_ok_lines(stdout: str) -> dict[tuple[str, int], str]:
    """The summary's "Runs that are not ok" lines: (env, seed) -> the line."""
    lines = stdout.split("Runs that are not ok:\n", 1)[1].splitlines() if "Runs that are not ok:" in stdout else []
    named = {}
    for line in lines:
        if match := re.match(r"^  (\S+) seed (\d+): ", line):
            named[(match[1], int(match[2]))] = line.strip()
    return named


def started(stdout: str) -> list[str]:
    """The run directories the sweep started, in the order it started them."""
    return re.findall(r"^\[[\d:]+\] start (\S+)", stdout, re.MULTILINE)


def attempts(run_dir: Path) -> int:
    """How many times the training script (or the stub) set out to train in this run directory."""
    return len(re.findall(r"^run_dir=", (run_dir / "output.log").read_text(), re.MULTILINE))


def file_bytes(run_dir: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in run_dir.iterdir() if path.name != ".lock"}


# ---------------------------------------------------------------------------------------------------
# The real sweep
# ---------------------------------------------------------------------------------------------------


def test_sweep_runs_every_env_and_seed_in_the_run_directories_the_command_fixes(sweep):
    workdir, result = sweep
    assert result.returncode == 0, result.stdout + result.stderr
    expected = [(env_id, seed) for seed in (1, 2) for env_id in SWEEP_ENVS]
    assert sorted(started(result.stdout)) == sorted(f"runs/{env_id}__{EXP}__{seed}" for env_id, seed in expected)
    rows = summary_rows(result.stdout)
    assert list(rows) == expected  # seed-major
    cores_per_run = len(USABLE_CPUS) // 2
    for (env_id, seed), row in rows.items():
        run_dir = workdir / "runs" / f"{env_id}__{EXP}__{seed}"
        assert row["run_dir"] == f"runs/{run_dir.name}" and row["status"] == "ok"
        ref = reference_run(run_dir)
        # the flags reached the script: the sweep's env id, seed, thread share and pass-through flags
        hp = ref["hyperparameters"]
        assert (hp["env_id"], hp["seed"], hp["num_threads"]) == (env_id, str(seed), str(cores_per_run))
        assert (hp["total_timesteps"], hp["num_envs"], hp["num_steps"]) == ("4096", "8", "64")
        # the summary's figures are the run's, read from its event files
        eval_step, eval_return, _ = ref["eval_returns"][-1]
        assert (row["steps"], row["ret"]) == ("4096/4096", f"{ref['final_return']:.1f}")
        assert row["last_eval"] == f"{eval_return:.1f}@{eval_step}" and eval_step == 4096
        # its output.log holds the run's output, the summary line last
        log = (run_dir / "output.log").read_text().splitlines()
        assert log[0] == f"run_dir=runs/{run_dir.name}" and "iteration=8/8 global_step=4096" in log[-2]
        assert log[-1].startswith("summary: status=ok steps=4096/4096 ")
        assert not list(run_dir.glob("*.model"))  # removed at a normal end (no --save-model)


@pytest.mark.parametrize(
    "env_id, extra, reason",
    [
        ("NoSuchEnv-v0", ["--total-timesteps", "4096"], "unknown --env-id 'NoSuchEnv-v0'"),
        ("InvertedPendulum-v4", ["--total-timesteps", "-5"], "--total-timesteps must be positive"),
        ("InvertedPendulum-v4", ["--eval-evry", "5"], "the command line did not parse (exit 2)"),  # tyro's refusal
    ],
)
def test_a_refused_run_is_named_and_fails_the_sweep(tmp_path, env_id, extra, reason):
    """The script refuses such input before it trains, and its summary.json says so: failed, and why."""
    result = benchmark("--workdir", tmp_path, "--env-ids", env_id, "--seeds", 1, "--", *extra)
    assert result.returncode == 1, result.stdout + result.stderr
    row = summary_rows(result.stdout)[(env_id, 1)]
    assert (row["status"], row["steps"]) == ("failed", "0/-")  # refused before it planned any steps
    assert reason in not_ok_lines(result.stdout)[(env_id, 1)]
    assert "0/1 runs ok." in result.stdout


def test_a_sweep_killed_with_sigkill_and_run_again_with_the_same_command_completes(tmp_path):
    """Three tiny Hopper-v4 runs, one at a time, checkpointed after every iteration. The sweep's whole process group
    (benchmark.sh, xargs, the runs) is killed once seed 1 has finished and seed 2 has a checkpoint; the same command
    then leaves seed 1 as it was (its event files unchanged), resumes seed 2 and starts seed 3."""
    command = [
        "--workdir", tmp_path, "--env-ids", "Hopper-v4", "--seeds", 3, "--workers", 1,
        "--", *SMALL, "--total-timesteps", 4096, "--checkpoint-every-seconds", 1e-9,
    ]  # fmt: skip
    run_dirs = {seed: tmp_path / "runs" / f"Hopper-v4__{EXP}__{seed}" for seed in (1, 2, 3)}
    process = start_process(BENCHMARK, *command)

    def seed_2_checkpointed_or_ended():
        return (
            (run_dirs[2] / f"{EXP}.model").exists()
            or (run_dirs[2] / "summary.json").exists()
            or process.poll() is not None
        )

    try:
        wait_for(seed_2_checkpointed_or_ended, 300, "checkpoint of seed 2")
    finally:
        os.killpg(process.pid, signal.SIGKILL)
    process.communicate(timeout=60)
    assert '"status": "ok"' in (run_dirs[1] / "summary.json").read_text()
    assert not (run_dirs[2] / "summary.json").exists(), "seed 2 ended before it was killed"
    assert not run_dirs[3].exists()
    seed_1 = file_bytes(run_dirs[1])

    result = benchmark(*command)
    assert result.returncode == 0, result.stdout + result.stderr
    assert {seed: row["status"] for (_, seed), row in summary_rows(result.stdout).items()} == {
        1: "ok",
        2: "ok",
        3: "ok",
    }
    assert started(result.stdout) == [f"runs/{run_dirs[seed].name}" for seed in (2, 3)]
    assert file_bytes(run_dirs[1]) == seed_1  # not trained again: event files, log and summary as they were
    # seed 2 went on from its checkpoint: its second attempt's first iteration is past the first
    second_attempt = (run_dirs[2] / "output.log").read_text().split("run_dir=")[2]
    first_iteration = int(re.search(r"^iteration=(\d+)/8 ", second_attempt, re.MULTILINE)[1])
    assert attempts(run_dirs[2]) == 2 and first_iteration > 1
    assert attempts(run_dirs[3]) == 1
    for run_dir in run_dirs.values():
        assert max(event.step for event in as_tensorboard_shows(read_events(run_dir))) == 4096
        assert not list(run_dir.glob("*.model"))


def test_two_launches_of_one_sweep_at_once_train_each_run_once(tmp_path):
    """The training script's lock on each run directory keeps the second launch's run of it waiting; once the
    first has finished it, the second only prints its summary."""
    command = [BENCHMARK, "--workdir", tmp_path, "--env-ids", "InvertedPendulum-v4", "--seeds", 2, "--workers", 1]
    command += ["--", *SMALL, "--total-timesteps", 2048]
    launches = [start_process(*command) for _ in range(2)]
    outputs = [launch.communicate(timeout=300) for launch in launches]
    for launch, (stdout, stderr) in zip(launches, outputs):
        assert launch.returncode == 0, stdout + stderr
        assert {row["status"] for row in summary_rows(stdout).values()} == {"ok"}
    for seed in (1, 2):
        run_dir = tmp_path / "runs" / f"InvertedPendulum-v4__{EXP}__{seed}"
        assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1
        assert (run_dir / "output.log").read_text().count("iteration=1/4 ") == 1


# ---------------------------------------------------------------------------------------------------
# Orchestration, with a stub in place of Python
# ---------------------------------------------------------------------------------------------------

STUB = r"""#!/usr/bin/env bash
# Stands in for "python ppo_continuous_envpool_jax.py", keeping the script's side of the contract benchmark.sh relies
# on: --run-dir DIR is the run's, held by a lock on DIR/.lock (a second process waits); a run whose summary.json says
# ok or diverged is not trained again, one with a checkpoint is resumed; every end of training writes summary.json
# (ok, diverged, interrupted on SIGINT/SIGTERM with the checkpoint kept) and ends with the summary line. It reports
# its arguments, CPU affinity and whether it started or resumed. Bad-v0 is refused before training (no summary.json);
# Diverge-v0 diverges; Block-v0, unless resumed, writes a checkpoint, says "started PID" on $STUB_FIFO and waits for a
# signal; Wait-v0 says so and waits for a line on $STUB_RELEASE. benchmark.sh's own Python (-c) is the real one.
[[ "$1" != -c ]] || exec "@PYTHON@" "$@"
shift
args="$*"
while (($#)); do
    case "$1" in
        --env-id) env_id=$2 ;;
        --seed) seed=$2 ;;
        --run-dir) run_dir=$2 ;;
    esac
    shift
done
exec 9>"$run_dir/.lock"
flock -n 9 || { echo "waiting for the process that trains $run_dir to end" >&2; flock 9; }
ended() {  # ended STATUS EXIT_CODE DETAIL: summary.json and the summary line
    local steps=512
    [[ "$1" != ok ]] || steps=1024
    printf '{"status": "%s", "env_id": "%s", "seed": %s, "global_step": %s, "total_timesteps": 1024, "final_return": 12.5, "last_eval": null, "wall_seconds": 75.4, "detail": %s}\n' \
        "$1" "$env_id" "$seed" "$steps" "$3" >"$run_dir/summary.json"
    echo "summary: status=$1 steps=$steps/1024 run_dir=$run_dir"
    exit "$2"
}
if grep -qE '"status": "(ok|diverged)"' "$run_dir/summary.json" 2>/dev/null; then
    echo "summary: status=ended earlier run_dir=$run_dir"
    exit 0
fi
echo "run_dir=$run_dir"
[[ -e "$run_dir/stub.model" ]] && echo "resumed" || echo "started"
echo "args: $args"
grep Cpus_allowed_list /proc/self/status
case "$env_id" in
    Bad-v0) echo "error: unknown --env-id 'Bad-v0'" >&2; exit 1 ;;
    Diverge-v0) touch "$run_dir/stub.model"; echo "error: training diverged" >&2; ended diverged 1 '"non-finite losses/v_loss"' ;;
    Block-v0)
        if [[ ! -e "$run_dir/stub.model" ]]; then
            touch "$run_dir/stub.model"
            sleep 600 9>&- &
            # The checkpoint takes a moment: the sweep must wait for it before it summarises.
            trap 'kill $!; sleep 0.5; ended interrupted 130 "\"SIGINT\""' INT
            trap 'kill $!; sleep 0.5; ended interrupted 143 "\"SIGTERM\""' TERM
            echo "started $$" >"$STUB_FIFO"
            wait
        fi ;;
    Wait-v0) echo "started $$" >"$STUB_FIFO"; read -r _ <"$STUB_RELEASE" ;;
esac
rm -f "$run_dir/stub.model"
ended ok 0 null
"""


@pytest.fixture
def stub(tmp_path):
    path = tmp_path / "stub-python"
    path.write_text(STUB.replace("@PYTHON@", sys.executable))
    path.chmod(0o755)
    return path


@pytest.fixture
def fifo(tmp_path):
    """A FIFO on which Block-v0 and Wait-v0 stubs say "started PID"; `fd` never blocks and keeps it open."""
    path = tmp_path / "started"
    os.mkfifo(path)
    fd = os.open(path, os.O_RDWR)
    yield path, fd
    os.close(fd)


def wait_started(fd: int) -> int:
    """The pid of the next Block-v0 or Wait-v0 stub to start (bounded wait), read a byte at a time: a line that
    another stub wrote just after stays in the FIFO for the next call."""
    line = b""
    while not line.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], 60)
        assert ready, f"no stub said it started within 60 s; got {line!r}"
        line += os.read(fd, 1)
    return int(line.split()[1])


def stub_log(workdir: Path, env_id: str, seed: int, exp_name: str = EXP) -> str:
    return (workdir / "runs" / f"{env_id}__{exp_name}__{seed}" / "output.log").read_text()


def expand_cpu_list(text: str) -> set[int]:
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def test_help_explains_every_flag():
    result = benchmark("--help")
    assert result.returncode == 0 and result.stderr == ""
    source = BENCHMARK.read_text()
    parser = source[source.index("while (($#)); do") : source.index("\ndone\n")]
    flags = set(re.findall(r"^\s+(?:-h \| )?(--[a-z][a-z-]+)\)", parser, re.MULTILINE))
    assert {"--env-ids", "--seeds", "--workers", "--python", "--workdir", "--slurm", "--wait", "--dry-run"} <= flags
    for flag in flags:
        assert re.search(rf"^\s+(-\w, )?{flag}\b", result.stdout, re.MULTILINE), f"{flag} is not explained in --help"
    assert "Examples:" in result.stdout
    report = subprocess.run([sys.executable, str(REPORT), "--help"], check=False, capture_output=True, text=True)
    assert report.returncode == 0 and "--window-steps" in report.stdout and "example" in report.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--seeds", "0"], "--seeds must be a positive integer"),
        (["--workers", "two"], "--workers must be a positive integer"),
        (["--workers", str(len(USABLE_CPUS) + 1)], "usable cores"),
        (["--cores-per-run", str(len(USABLE_CPUS) + 1)], "needs"),
        (["--env-ids", "Hopper-v4 ../x"], "is not an env id"),
        (["--env-ids", "Hopper-v4,Hopper-v4"], "lists an env id twice"),
        (["--env-ids", "MetaWorld/Reach-v3 MetaWorld-Reach-v3"], "lists an env id twice"),
        (["--slurm", "--job-name", "my sweep"], "--slurm needs a job name of one word"),
        (["--slurm", "--", "--exp-name", "my exp"], "--slurm needs a job name of one word"),
        (["--frobnicate"], "unknown option '--frobnicate'"),
        (["--wait"], "--wait only applies with --slurm"),
        (["--", "--seed", "3"], "do not pass --seed after --"),
        (["--", "--run-dir=runs/x"], "do not pass --run-dir after --"),
        (["--python", "no-such-python-here"], "'no-such-python-here' not found"),
        (["--seeds"], "--seeds needs a value"),
        (["--", "--resume", "runs/x"], "do not pass --resume after --"),
        (["--", "--evaluate=runs/x"], "do not pass --evaluate after --: a sweep trains"),
        (["--", "--list-tasks"], "do not pass --list-tasks after --: a sweep trains"),
        (["--", "-h"], "do not pass -h after --"),
        (["--", "--exp-name", "a/b"], "--exp-name must be a file name"),
        (["--first-seed", "2147483647", "--seeds", "2"], "the last seed, --first-seed + --seeds - 1, must be at most"),
        (["--seeds", "99999999999999999999"], "must be at most 2147483647"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(tmp_path, args, message):
    result = benchmark("--workdir", tmp_path, *args)
    assert result.returncode == 2
    assert (
        result.stderr.count("\n") == 1
        and result.stderr.startswith("benchmark.sh: error: ")
        and message in result.stderr
    )
    assert not (tmp_path / "runs").exists()


def test_env_ids_are_split_at_spaces_commas_and_newlines(tmp_path, stub):
    """A list of tasks from a file, one a line (--env-ids "$(cat tasks.txt)"), is every one of them."""
    result = benchmark("--dry-run", "--workdir", tmp_path, "--python", stub, "--env-ids", "A-v0\nB-v0,C-v0 D-v0\n")
    assert result.returncode == 0, result.stderr
    assert "# 12 runs (4 env ids x 3 seeds)" in result.stdout
    assert re.findall(r"--env-id (\S+) --seed 1 ", result.stdout) == ["A-v0", "B-v0", "C-v0", "D-v0"]


def test_where_proc_lists_no_allowed_cpus_the_sweep_takes_those_nproc_counts(tmp_path, stub):
    """gVisor writes no Cpus_allowed_list in /proc/self/status: the sweep pins its runs to CPUs 0 to nproc - 1 instead
    of refusing with "0 usable cores". A copy of benchmark.sh reads a status file without that line."""
    status = tmp_path / "status"
    lines = Path("/proc/self/status").read_text().splitlines(keepends=True)
    status.write_text("".join(line for line in lines if not line.startswith("Cpus_allowed")))
    copy = tmp_path / "benchmark.sh"
    copy.write_text(BENCHMARK.read_text().replace("/proc/self/status", str(status)))
    copy.chmod(0o755)
    command = ["--dry-run", "--workdir", tmp_path, "--python", stub, "--env-ids", "A-v0", "--workers", 2]
    result = subprocess.run([copy, *map(str, command)], check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    cores = list(range(len(os.sched_getaffinity(0))))  # what nproc counts, numbered from 0
    half = len(cores) // 2
    slots = f"{','.join(map(str, cores[:half]))} {','.join(map(str, cores[half : 2 * half]))}"
    assert f"{half} core(s) each, pinned to the cores: {slots}" in result.stdout


def test_ok_and_failed_runs_pinning_and_threads(tmp_path, stub):
    command = [
        "--workdir", tmp_path, "--python", stub, "--env-ids", "Good-v0,Bad-v0", "--seeds", 2, "--first-seed", 5,
        "--workers", 2, "--", "--exp-name=a b",
    ]  # fmt: skip
    result = benchmark(*command, cwd=REPO)
    assert result.returncode == 1
    rows = summary_rows(result.stdout)
    assert {key: row["status"] for key, row in rows.items()} == {
        ("Good-v0", 5): "ok", ("Bad-v0", 5): "no-summary", ("Good-v0", 6): "ok", ("Bad-v0", 6): "no-summary",
    }  # fmt: skip
    # the figures are summary.json's
    assert [rows[("Good-v0", 5)][key] for key in ("steps", "ret", "last_eval")] == ["1024/1024", "12.5", "-"]
    assert rows[("Bad-v0", 5)]["ret"] == "-" and "2/4 runs ok." in result.stdout
    for seed in (5, 6):
        assert "its output.log ends: error: unknown --env-id 'Bad-v0'" in not_ok_lines(result.stdout)[("Bad-v0", seed)]
    cores_per_run = len(USABLE_CPUS) // 2
    slots = [set(USABLE_CPUS[k * cores_per_run : (k + 1) * cores_per_run]) for k in range(2)]
    for env_id, seed in rows:
        log = stub_log(tmp_path, env_id, seed, "a b")  # under --workdir, whatever the working directory
        args = re.search(r"^args: (.*)$", log, re.MULTILINE)[1]
        run_dir = f"runs/{env_id}__a b__{seed}"
        assert (
            args == f"--run-dir {run_dir} --env-id {env_id} --seed {seed} --num-threads {cores_per_run} --exp-name=a b"
        )
        assert expand_cpu_list(re.search(r"Cpus_allowed_list:\s+(\S+)", log)[1]) in slots  # one slot's cores only
    # --summary reads the same runs again, and runs nothing
    again = benchmark(*command[:-2], "--summary", "--", "--exp-name=a b")
    assert again.returncode == 1 and summary_rows(again.stdout) == rows and started(again.stdout) == []


def test_the_summary_shows_both_success_rates_where_a_run_reports_success(tmp_path):
    """--summary on run directories as two ended runs left them: the success column appears only for a sweep
    with a task that reports success, the rates at the last step and at any step as summary.json has them."""

    def ended_run(env_id, seed, final_success, final_any_step_success):
        run_dir = tmp_path / "runs" / f"{env_id}__s__{seed}"
        run_dir.mkdir(parents=True)
        summary = dict(status="ok", global_step=10, total_timesteps=10, final_return=1.0, last_eval=None)
        summary |= dict(wall_seconds=3.0, final_success=final_success, final_any_step_success=final_any_step_success)
        (run_dir / "summary.json").write_text(json.dumps(summary))

    ended_run("Hopper-v4", 1, None, None)
    ended_run("FetchReach-v4", 1, 0.25, 0.875)
    command = ["--workdir", tmp_path, "--seeds", 1, "--summary", "--", "--exp-name", "s"]
    both = summary_rows(benchmark("--env-ids", "Hopper-v4 FetchReach-v4", *command).stdout)
    assert {key: row["success"] for key, row in both.items()} == {
        ("Hopper-v4", 1): "-/-",
        ("FetchReach-v4", 1): "0.25/0.88",
    }
    gym_only = summary_rows(benchmark("--env-ids", "Hopper-v4", *command).stdout)
    assert "success" not in gym_only[("Hopper-v4", 1)] and gym_only[("Hopper-v4", 1)]["ret"] == "1.0"


def test_a_damaged_summary_is_a_run_not_ok_in_one_line(tmp_path):
    """A summary.json cut short (a full disk) or holding no object: the sweep's summary names it and the file,
    with no traceback; the same command would train the run, which the training script then refuses in one line."""
    for seed, text in [(1, '{"status": "o'), (2, "[]")]:
        run_dir = tmp_path / "runs" / f"Hopper-v4__s__{seed}"
        run_dir.mkdir(parents=True)
        (run_dir / "summary.json").write_text(text)
    result = benchmark(
        "--workdir", tmp_path, "--env-ids", "Hopper-v4", "--seeds", 2, "--summary", "--", "--exp-name", "s"
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = not_ok_lines(result.stdout)
    assert "bad-summary -- its summary.json cannot be read (Unterminated string" in lines[("Hopper-v4", 1)]
    assert "bad-summary -- its summary.json cannot be read (not a JSON object)" in lines[("Hopper-v4", 2)]


def test_one_worker_runs_seed_major_on_every_core(tmp_path, stub):
    result = benchmark("--workdir", tmp_path, "--python", stub, "--env-ids", "Good-v0 Other-v0", "--seeds", 2)
    assert result.returncode == 0, result.stdout + result.stderr
    # seed 1 of every env id, then seed 2: a sweep cut short covers every env id
    assert started(result.stdout) == [
        f"runs/{env}__{EXP}__{seed}" for seed in (1, 2) for env in ("Good-v0", "Other-v0")
    ]
    for env_id, seed in summary_rows(result.stdout):
        log = stub_log(tmp_path, env_id, seed)
        assert f"--num-threads {len(USABLE_CPUS)}" in log
        assert expand_cpu_list(re.search(r"Cpus_allowed_list:\s+(\S+)", log)[1]) == set(USABLE_CPUS)


RESTARTED = [("Block-v0", 1), ("Block-v0", 2), ("Good-v0", 2)]


def stopped_sweep(tmp_path, stub, fifo, send_signal):
    """Block-v0 and Good-v0, seeds 1-2, two at a time: once both Block-v0 runs have started (Good-v0 seed 1 ends
    between them), `send_signal(process)`. Returns the sweep's command, environment, exit status and stdout,
    after checking that its runs' processes are gone."""
    fifo_path, fd = fifo
    env = {**os.environ, "STUB_FIFO": str(fifo_path)}
    command = ["--workdir", tmp_path, "--python", stub, "--env-ids", "Block-v0 Good-v0", "--seeds", 2, "--workers", 2]
    process = start_process(BENCHMARK, *command, env=env)
    try:
        pids = {wait_started(fd), wait_started(fd)}
        send_signal(process)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] in "ZX"
    return command, env, process.returncode, stdout + stderr


def assert_stopped_by(stdout: str, signame: str):
    """No run started after the signal, and each running one ended interrupted by it."""
    assert {key: row["status"] for key, row in summary_rows(stdout).items()} == {
        ("Block-v0", 1): "interrupted", ("Good-v0", 1): "ok", ("Block-v0", 2): "interrupted", ("Good-v0", 2): "not-run",
    }  # fmt: skip
    assert not_ok_lines(stdout)[("Block-v0", 1)].startswith(f"Block-v0 seed 1: interrupted -- {signame} [")


def test_ctrl_c_stops_every_run_with_its_checkpoint_and_the_same_command_finishes_the_sweep(tmp_path, stub, fifo):
    """Ctrl-C reaches the sweep's process group: no run starts after it, each running one saves its state, and the
    sweep waits for them before it summarises (exit 130). The same command again skips what ended, resumes the
    interrupted runs and starts the rest."""
    command, env, returncode, output = stopped_sweep(
        tmp_path, stub, fifo, lambda process: os.killpg(process.pid, signal.SIGINT)
    )
    assert returncode == 130, output
    assert_stopped_by(output, "SIGINT")
    assert "The same command again resumes or starts the runs that have not ended." in output

    again = benchmark(*command, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert sorted(started(again.stdout)) == [f"runs/{name}__{EXP}__{seed}" for name, seed in RESTARTED]
    assert {row["status"] for row in summary_rows(again.stdout).values()} == {"ok"}
    for seed in (1, 2):
        assert re.findall(r"^(started|resumed)$", stub_log(tmp_path, "Block-v0", seed), re.MULTILINE) == [
            "started",
            "resumed",
        ]
    assert attempts(tmp_path / "runs" / f"Good-v0__{EXP}__1") == 1


def test_a_sigterm_sent_to_the_sweep_alone_stops_every_run_with_its_checkpoint(tmp_path, stub, fifo):
    """`kill PID` reaches only the sweep's script: it passes the SIGTERM on to each run and to xargs, so that no
    run starts after it, each running one saves its state, and the sweep summarises once they have (exit 143)."""
    _command, _env, returncode, output = stopped_sweep(
        tmp_path, stub, fifo, lambda process: process.send_signal(signal.SIGTERM)
    )
    assert returncode == 143, output
    assert_stopped_by(output, "SIGTERM")


def test_a_sigterm_sent_to_the_sweeps_process_group_stops_each_real_run_with_its_state_saved(tmp_path):
    """As Slurm or `kill -TERM -PGID` send it: each training process stops after its iteration, saves its state
    and says so in its summary, and the sweep summarises after them. (Should the sweep's own SIGTERM also reach a
    run, as it can when xargs outlives the signal by a moment, the run ignores it: the test of StopRequest.)"""
    command = [
        "--workdir", tmp_path, "--env-ids", "Hopper-v4", "--seeds", 2, "--workers", 2,
        "--", *SMALL, "--total-timesteps", 10**8, "--checkpoint-every-seconds", 1e9,
    ]  # fmt: skip
    logs = [tmp_path / "runs" / f"Hopper-v4__{EXP}__{seed}" / "output.log" for seed in (1, 2)]
    process = start_process(BENCHMARK, *command)
    try:
        wait_for(lambda: all(log.exists() and "iteration=" in log.read_text() for log in logs), 300, "iterations")
        os.killpg(process.pid, signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 143, stdout + stderr
    for log in logs:
        summary = json.loads((log.parent / "summary.json").read_text())
        assert (summary["status"], summary["detail"]) == ("interrupted", "SIGTERM")
        assert (log.parent / f"{EXP}.model").exists()
        assert "aborting" not in log.read_text()


def test_a_diverged_run_is_a_result_that_the_same_command_does_not_start_again(tmp_path, stub):
    command = ["--workdir", tmp_path, "--python", stub, "--env-ids", "Good-v0 Diverge-v0", "--seeds", 1]
    result = benchmark(*command)
    assert result.returncode == 1
    assert {key: row["status"] for key, row in summary_rows(result.stdout).items()} == {
        ("Good-v0", 1): "ok", ("Diverge-v0", 1): "diverged",
    }  # fmt: skip
    assert not_ok_lines(result.stdout)[("Diverge-v0", 1)].startswith("Diverge-v0 seed 1: diverged -- non-finite")
    assert "The same command again" not in result.stdout  # nothing left for it to do

    dry = benchmark(*command, "--dry-run")
    assert dry.returncode == 0 and "2 ended (skipped), 0 to run" in dry.stdout and "--env-id" not in dry.stdout
    again = benchmark(*command)
    assert again.returncode == 1 and started(again.stdout) == []
    assert summary_rows(again.stdout)[("Diverge-v0", 1)]["status"] == "diverged"
    assert attempts(tmp_path / "runs" / f"Diverge-v0__{EXP}__1") == 1


def test_a_running_sweep_survives_its_script_being_rewritten(tmp_path, stub, fifo):
    # bash reads a script as it runs it: rewriting the file in place (an editor, a checkout of another
    # version) would make a running sweep read the new file from the old offset
    fifo_path, fd = fifo
    release = tmp_path / "release"
    os.mkfifo(release)
    repo = tmp_path / "repo"
    repo.mkdir()
    script = repo / "benchmark.sh"
    shutil.copy(BENCHMARK, script)
    (repo / "ppo_continuous_envpool_jax.py").touch()
    process = start_process(
        script, "--workdir", tmp_path, "--python", stub, "--env-ids", "Wait-v0", "--seeds", 1,
        env={**os.environ, "STUB_FIFO": str(fifo_path), "STUB_RELEASE": str(release)},
    )  # fmt: skip
    try:
        wait_started(fd)
        text = script.read_text()
        with open(script, "w") as f:  # in place: the same file, every line after the first moved on
            f.write(text.replace("\n", "\n# a line that was not there\n", 1).replace("summary", "SUMMARY"))
        with open(release, "w") as f:
            f.write("go\n")
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, stdout + stderr
    assert summary_rows(stdout)[("Wait-v0", 1)]["status"] == "ok"
    assert stderr == ""


# ---------------------------------------------------------------------------------------------------
# Slurm
# ---------------------------------------------------------------------------------------------------

FAKE_SBATCH = r"""#!/usr/bin/env bash
# A stand-in for sbatch: records its arguments, then runs every array task of the script on its stdin in turn
# (unless FAKE_SLURM_HOLD is set: then the job stays queued for ever), each with its output where --output says.
echo "$*" >>"$FAKE_SLURM_LOG"
script=$(cat)
read -r first last < <(sed -n 's/^#SBATCH --array=\([0-9]*\)-\([0-9]*\).*/\1 \2/p' <<<"$script")
out=$(sed -n 's/^#SBATCH --output=//p' <<<"$script")
name=$(sed -n 's/^#SBATCH --job-name=//p' <<<"$script")
echo "Submitted batch job 4242"
[[ -n "${FAKE_SLURM_HOLD:-}" ]] && exit 0
for i in $(seq "$first" "$last"); do
    log=${out//%x/$name} log=${log//%A/4242} log=${log//%a/$i}
    SLURM_ARRAY_TASK_ID=$i bash -c "$script" >>"$log" 2>&1 || true
done
"""


@pytest.fixture
def fake_slurm(tmp_path):
    """The environment for benchmark.sh --slurm with FAKE_SBATCH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(FAKE_SBATCH)
    (bin_dir / "sbatch").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_SLURM_LOG": str(tmp_path / "sbatch.args")}


def test_slurm_array_with_requeue_and_wait(tmp_path, stub, fake_slurm):
    command = [
        "--slurm", "--wait", "--workdir", tmp_path, "--python", stub, "--env-ids", "Good-v0 Bad-v0", "--seeds", 2,
        "--cores-per-run", 3, "--workers", 2, "--sbatch-args", "--time=00:10:00 --partition=debug",
        "--", "--total-timesteps", 4096,
    ]  # fmt: skip
    result = benchmark(*command, env=fake_slurm)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Submitted batch job 4242" in result.stdout
    assert (tmp_path / "sbatch.args").read_text() == "--wait --time=00:10:00 --partition=debug\n"
    assert {key: row["status"] for key, row in summary_rows(result.stdout).items()} == {
        ("Good-v0", 1): "ok", ("Bad-v0", 1): "no-summary", ("Good-v0", 2): "ok", ("Bad-v0", 2): "no-summary",
    }  # fmt: skip
    for env_id, seed in summary_rows(result.stdout):
        args = re.search(r"^args: (.*)$", stub_log(tmp_path, env_id, seed), re.MULTILINE)[1]
        assert (
            args
            == f"--run-dir runs/{env_id}__{EXP}__{seed} --env-id {env_id} --seed {seed} --num-threads 3 --total-timesteps 4096"
        )
    assert "Bad-v0 seed 2: no-summary -- it ended without one; its output.log ends: error: unknown" in result.stdout
    # The same command again submits the runs that have not ended, and only those.
    again = benchmark("--dry-run", *command, env=fake_slurm)
    assert "#SBATCH --array=0-1%2\n" in again.stdout
    assert re.findall(r"--env-id (\S+) --seed (\d+)", again.stdout) == [("Bad-v0", "1"), ("Bad-v0", "2")]


def test_sigterm_while_waiting_on_slurm_stops_the_wait_not_the_job(tmp_path, stub, fake_slurm, fifo):
    """sbatch --wait lasts as long as the job: SIGTERM ends benchmark.sh's wait at once (exit 143), and the job's
    task goes on."""
    fifo_path, fd = fifo
    release = tmp_path / "release"
    os.mkfifo(release)
    env = {**fake_slurm, "STUB_FIFO": str(fifo_path), "STUB_RELEASE": str(release)}
    command = ["--slurm", "--wait", "--workdir", tmp_path, "--python", stub, "--env-ids", "Wait-v0", "--seeds", 1]
    process = start_process(BENCHMARK, *command, env=env)
    try:
        task = wait_started(fd)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
        os.kill(task, 0)  # still running: raises if it has ended
    finally:
        process.kill()
        with open(release, "w") as f:  # lets the task end
            f.write("go\n")
    assert process.returncode == 143, stdout + stderr
    assert "benchmark.sh: stopped waiting; the job goes on (scancel --name=" in stdout


def array_tasks(script: str) -> dict[int, str]:
    """The commands of an array script's tasks: `case $SLURM_ARRAY_TASK_ID in` branches `i) COMMAND ;;`."""
    return {int(i): command for i, command in re.findall(r"^(\d+)\) (.*) ;;$", script, re.MULTILINE)}


def test_slurm_dry_run_prints_an_array_script_whose_tasks_run_the_local_commands(tmp_path, stub):
    """Task i of the array runs, character for character, the command a local sweep runs for run i; run as Slurm
    would run it, it trains run i in its run directory with the sweep's flags."""
    sweep = ["--workdir", tmp_path, "--python", stub, "--env-ids", "Good-v0 Other-v0", "--seeds", 2, "--first-seed", 3]
    sweep += ["--cores-per-run", 1, "--", "--exp-name", "x y", "--total-timesteps", 4096]
    slurm = benchmark(
        "--dry-run", "--slurm", "--workers", 3, "--job-name", "j", "--sbatch-args", "--time=1:00:00", *sweep
    )
    local = benchmark("--dry-run", *sweep)
    assert slurm.returncode == 0 and local.returncode == 0, slurm.stderr + local.stderr
    script = slurm.stdout.split("# sbatch --time=1:00:00 <<'EOF'\n", 1)[1].rsplit("EOF\n", 1)[0]
    for line in ["--job-name=j", "--array=0-3%3", "--ntasks=1", "--cpus-per-task=1", "--requeue"]:
        assert f"#SBATCH {line}\n" in script
    assert f"#SBATCH --output={tmp_path}/runs/logs/%x-%A_%a.out\n" in script
    assert list(array_tasks(script).values()) == [
        line for line in local.stdout.splitlines() if not line.startswith("#")
    ]
    assert not list(tmp_path.glob("runs/*__*"))  # a dry run runs nothing

    runs = [(env_id, seed) for seed in (3, 4) for env_id in ("Good-v0", "Other-v0")]  # seed-major
    for task, (env_id, seed) in enumerate(runs):
        env = {**os.environ, "SLURM_ARRAY_TASK_ID": str(task)}
        done = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, check=False, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        run_dir = f"runs/{env_id}__x y__{seed}"
        args = re.search(r"^args: (.*)$", (tmp_path / run_dir / "output.log").read_text(), re.MULTILINE)[1]
        assert (
            args
            == f"--run-dir {run_dir} --env-id {env_id} --seed {seed} --num-threads 1 --exp-name x y --total-timesteps 4096"
        )
        assert '"status": "ok"' in (tmp_path / run_dir / "summary.json").read_text()


def test_a_requeued_slurm_task_resumes_its_run(tmp_path, stub, fifo, fake_slurm):
    """Slurm's SIGTERM (time limit, preemption) reaches the task's processes: the run keeps its checkpoint and the task
    exits 143; run again (requeued), the same array script resumes it."""
    fifo_path, fd = fifo
    env = {**fake_slurm, "FAKE_SLURM_HOLD": "1", "STUB_FIFO": str(fifo_path)}
    command = ["--slurm", "--workdir", tmp_path, "--python", stub, "--env-ids", "Block-v0", "--seeds", 1]
    submitted = benchmark(*command, env=env)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    assert "Submitted batch job 4242" in submitted.stdout
    script = benchmark(*command, "--dry-run", env=env).stdout.split("<<'EOF'\n", 1)[1].rsplit("EOF\n", 1)[0]
    task_env = {**env, "SLURM_ARRAY_TASK_ID": "0"}
    task = start_process("bash", "-c", script, env=task_env)
    try:
        wait_started(fd)
        os.killpg(task.pid, signal.SIGTERM)
        task.communicate(timeout=60)
    finally:
        task.kill()
    assert task.returncode == 143
    run_dir = tmp_path / "runs" / f"Block-v0__{EXP}__1"
    assert '"status": "interrupted"' in (run_dir / "summary.json").read_text()
    requeued = subprocess.run(["bash", "-c", script], env=task_env, check=False, capture_output=True, text=True)
    assert requeued.returncode == 0, requeued.stderr
    assert re.findall(r"^(started|resumed)$", (run_dir / "output.log").read_text(), re.MULTILINE) == [
        "started",
        "resumed",
    ]
    assert '"status": "ok"' in (run_dir / "summary.json").read_text()


def can_run_real_slurm() -> bool:
    return shutil.which("sbatch") is not None or (os.geteuid() == 0 and shutil.which("apt-get") is not None)


@pytest.mark.skipif(
    os.environ.get("RUN_SLURM_TESTS") != "1", reason="set RUN_SLURM_TESTS=1 to run against a real Slurm"
)
@pytest.mark.skipif(not can_run_real_slurm(), reason="needs sbatch on PATH, or root and apt-get to install Slurm")
def test_real_single_node_slurm(tmp_path):
    """tests/slurm/run_slurm_check.sh: starts a one-node Slurm here and runs a sweep through it."""
    result = subprocess.run(
        [str(REPO / "tests" / "slurm" / "run_slurm_check.sh"), "--workdir", str(tmp_path)],
        check=False, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    assert "SLURM CHECK PASSED" in result.stdout
    for env_id in ("InvertedPendulum-v4", "Hopper-v4"):
        assert list((tmp_path / "ok" / "runs").glob(f"{env_id}__*__1/events.out.tfevents.*"))
    assert not math.isnan(reference_run(next((tmp_path / "ok" / "runs").glob("Hopper-v4__*")))["final_return"])
