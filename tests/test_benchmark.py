"""Tests of benchmark.sh (local and --slurm).

The sweep test trains for real (4 tiny runs, two at a time: about half a minute on 2 cores); the
orchestration tests (failures, pinning, Ctrl-C, sweeps killed with SIGKILL and continued, Slurm array)
use a stub in place of Python that keeps the training script's side of the contract benchmark.sh
states, so they take no training time. The real sweep (tests/conftest.py) is read back with the
independent event-file reader of tests/support.py.
The test against a real single-node Slurm is opt-in: RUN_SLURM_TESTS=1.
"""

from __future__ import annotations

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
    SWEEP_ENVS,
    USABLE_CPUS,
    benchmark,
    read_events,
    reference_run,
)

pytestmark = pytest.mark.skipif(len(USABLE_CPUS) < 2, reason="the sweeps run two at a time: needs 2 usable cores")


def start_process(*command, env=None) -> subprocess.Popen:
    """A command in the background, in a process group of its own (read its stdout with read_until,
    then communicate)."""
    return subprocess.Popen(
        [*map(str, command)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def read_until(fd: int, text: str, timeout: float) -> str:
    """What the pipe `fd` gives until `text` has appeared, waiting at most `timeout` seconds in all."""
    seen = b""
    deadline = time.monotonic() + timeout
    while text.encode() not in seen:
        ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
        assert ready, f"{text!r} did not appear within {timeout} s; got {seen.decode()!r}"
        chunk = os.read(fd, 65536)
        assert chunk, f"the pipe closed before {text!r}; got {seen.decode()!r}"
        seen += chunk
    return seen.decode()


def kill_sweep(process: subprocess.Popen, sweep_dir: Path, whole_runs: bool = True):
    """SIGKILL benchmark.sh and each running run's task (with whole_runs, its whole process group, as a
    lost machine would; without, the training processes live on as orphans)."""
    process.kill()
    process.wait(timeout=10)
    for lock in sweep_dir.glob("*.lock"):
        pid = int(lock.read_text())  # the task that holds (or last held) the run's lock
        try:
            if b"--task" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue  # that task has ended, and its pid was taken by something else
            (os.killpg if whole_runs else os.kill)(pid, signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            continue


def summary_rows(stdout: str) -> dict[tuple[str, int], dict]:
    """The rows of benchmark.sh's summary table: (env, seed) -> status, action, return, log."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("env ") and "status" in line)
    rows = {}
    for line in lines[start + 1 :]:
        if re.match(r"^\d+/\d+ runs succeeded", line):
            break
        env_id, seed, status, action, _duration, ret, log = line.split(maxsplit=6)
        rows[(env_id, int(seed))] = {"status": status, "action": action, "return": ret, "log": log}
    return rows


def log_attempts(log: Path) -> list[str]:
    """The commands of a run's attempts, in order (each attempt's "+ command" line)."""
    return [line for line in log.read_text().splitlines() if line.startswith("+ ")]


# ---------------------------------------------------------------------------------------------------
# The real sweep
# ---------------------------------------------------------------------------------------------------


def test_sweep_runs_every_env_and_seed(sweep):
    workdir, result = sweep
    assert result.returncode == 0, result.stdout + result.stderr
    rows = summary_rows(result.stdout)
    assert set(rows) == {(env_id, seed) for env_id in SWEEP_ENVS for seed in (1, 2)}
    cores_per_run = len(USABLE_CPUS) // 2
    for (env_id, seed), row in rows.items():
        assert row["status"] == "ok"
        (run_dir,) = (workdir / "runs").glob(f"{env_id}__ppo_continuous_envpool_jax__{seed}__*")
        ref = reference_run(run_dir)
        # the flags reached the script: the sweep's env id, seed, thread share and pass-through flags
        hp = ref["hyperparameters"]
        assert (hp["env_id"], hp["seed"], hp["num_threads"]) == (env_id, str(seed), str(cores_per_run))
        assert (hp["total_timesteps"], hp["num_envs"], hp["num_steps"]) == ("4096", "8", "64")
        assert ref["total_steps"] == 4096
        # the summary's return is the last one the run logged
        assert row["return"] == f"{ref['last_return']:.1f}"
        # the log holds the run's output after a line naming the cores (its own) and the command
        log = Path(row["log"]).read_text()
        assert "iteration=8/8 global_step=4096" in log
        assert row["action"] == "started" and log.splitlines()[1].startswith("+ ")
        pinned = re.match(r"# .*: started on \S+, cores (\S+)$", log.splitlines()[0])[1]
        assert len(pinned.split(",")) == cores_per_run and {int(c) for c in pinned.split(",")} <= set(USABLE_CPUS)


# ---------------------------------------------------------------------------------------------------
# Failures through the real script
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env_id, extra, reason",
    [
        ("NoSuchEnv-v0", ["--total-timesteps", "4096"], "unknown --env-id 'NoSuchEnv-v0'"),
        ("InvertedPendulum-v4", ["--total-timesteps", "-5"], "--total-timesteps must be positive"),
    ],
)
def test_failing_run_is_named_and_fails_the_sweep(tmp_path, env_id, extra, reason):
    result = benchmark("--workdir", tmp_path, "--env-ids", env_id, "--seeds", 1, "--", *extra)
    assert result.returncode == 1, result.stdout + result.stderr
    assert summary_rows(result.stdout)[(env_id, 1)]["status"] == "failed(rc=1)"
    named = [line for line in result.stdout.splitlines() if line.strip().startswith(f"{env_id} seed 1: failed")]
    assert named and reason in named[0]


# ---------------------------------------------------------------------------------------------------
# The training script's side of the contract, and a real sweep killed and continued
# ---------------------------------------------------------------------------------------------------

PROGRESS = re.compile(r"iteration=(\d+)/(\d+) global_step=(\d+) return=(-|-?\d+(?:\.\d+)?) SPS=\d+(?: eval=-?\d+\.\d)?")


def logged_run_dirs(log: Path) -> list[str]:
    return re.findall(r"^run_dir=(.*)$", log.read_text(), re.MULTILINE)


def test_training_script_keeps_the_contract(sweep):
    """The lines benchmark.sh reads (its "training script's side" comment), as the real script prints them."""
    workdir, result = sweep
    for (env_id, seed), row in summary_rows(result.stdout).items():
        lines = Path(row["log"]).read_text().splitlines()
        (run_dir,) = logged_run_dirs(Path(row["log"]))
        assert (workdir / run_dir).is_dir() and Path(run_dir).name.startswith(
            f"{env_id}__ppo_continuous_envpool_jax__{seed}__"
        )
        progress = [line for line in lines if line.startswith("iteration=")]
        assert lines.index(f"run_dir={run_dir}") < lines.index(progress[0])
        assert all(PROGRESS.fullmatch(line) for line in progress), progress
        *_, (iteration, num_iterations, global_step, _) = (PROGRESS.fullmatch(line).groups() for line in progress)
        assert (iteration, num_iterations, global_step) == ("8", "8", "4096")
        assert not list((workdir / run_dir).glob("*.model"))  # removed at a normal end (no --save-model)


def wait_for(condition, timeout: float, what: str):
    """Polls `condition` every 10 ms until it is true (and returns it), for at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.01)
    return value


def only(paths):
    """The one path of `paths` (fails if there are none or several)."""
    (path,) = paths
    return path


def file_states(run_dir: Path) -> dict[str, tuple[int, int]]:
    return {path.name: (path.stat().st_size, path.stat().st_mtime_ns) for path in run_dir.iterdir()}


def test_real_sweep_killed_with_sigkill_continues_where_it_stopped(tmp_path):
    """Three tiny Hopper-v4 runs, one at a time, checkpointed after every iteration. The whole sweep
    (benchmark.sh and each run's process group) is killed once seed 1 has finished and seed 2 has a
    checkpoint; --continue then skips seed 1, resumes seed 2 in its own run directory, starts seed 3."""
    process = start_process(
        BENCHMARK, "--workdir", tmp_path, "--env-ids", "Hopper-v4", "--seeds", 3, "--workers", 1,
        "--", "--total-timesteps", 4096, "--num-envs", 8, "--num-steps", 64, "--num-minibatches", 4,
        "--update-epochs", 2, "--checkpoint-every-seconds", 1e-9,
    )  # fmt: skip
    sweep_dir = wait_for(lambda: next((tmp_path / "runs" / "logs").glob("*"), None), 60, "sweep directory")
    log2 = sweep_dir / "Hopper-v4__2.log"

    def checkpoint_of_seed_2():
        return log2.exists() and logged_run_dirs(log2) and list((tmp_path / logged_run_dirs(log2)[0]).glob("*.model"))

    def seed_2_checkpointed_or_ended():
        return checkpoint_of_seed_2() or (sweep_dir / "Hopper-v4__2.status").exists() or process.poll() is not None

    try:
        wait_for(seed_2_checkpointed_or_ended, 300, "checkpoint of seed 2")
    finally:
        kill_sweep(process, sweep_dir)
    process.communicate(timeout=60)
    assert (sweep_dir / "Hopper-v4__1.status").read_text().startswith("ok 0 ")
    assert not (sweep_dir / "Hopper-v4__2.status").exists(), "seed 2 ended before it was killed"
    assert not (sweep_dir / "Hopper-v4__3.log").exists()
    (run_dir_1,) = (tmp_path / "runs").glob("Hopper-v4__*__1__*")
    before = file_states(run_dir_1)

    result = benchmark("--continue", sweep_dir, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = summary_rows(result.stdout)
    assert {seed: (row["status"], row["action"]) for (_, seed), row in rows.items()} == {
        1: ("ok", "skipped"), 2: ("ok", "resumed"), 3: ("ok", "started"),
    }  # fmt: skip
    # seed 1 was not repeated: its run directory untouched, no second one
    assert file_states(run_dir_1) == before and len(list((tmp_path / "runs").glob("Hopper-v4__*__1__*"))) == 1
    # seed 2 went on in its own run directory, seed 3 started once; both reached the full step count
    run_dirs = {seed: only(tmp_path.glob(f"runs/Hopper-v4__*__{seed}__*")) for seed in (2, 3)}
    first, again = log_attempts(sweep_dir / "Hopper-v4__2.log")
    assert again == f"{first} --resume runs/{run_dirs[2].name}"
    assert logged_run_dirs(sweep_dir / "Hopper-v4__2.log") == [f"runs/{run_dirs[2].name}"] * 2
    assert len(log_attempts(sweep_dir / "Hopper-v4__3.log")) == 1
    for seed, run_dir in run_dirs.items():
        assert "iteration=8/8 global_step=4096" in (sweep_dir / f"Hopper-v4__{seed}.log").read_text()
        assert max(event.step for event in read_events(run_dir)) == 4096
        assert not list(run_dir.glob("*.model"))


# ---------------------------------------------------------------------------------------------------
# Orchestration, with a stub in place of Python
# ---------------------------------------------------------------------------------------------------

STUB = r"""#!/usr/bin/env bash
# Stands in for "python ppo_continuous_envpool_jax.py", keeping the script's side of the contract that
# benchmark.sh states (run_dir= first, a checkpoint while it runs, --resume RUN_DIR), and reports its
# arguments and CPU affinity. Bad-v0 fails; Diverge-v0 keeps a checkpoint and fails as the script does when
# training diverges; Block-v0 writes a checkpoint, says so on $STUB_FIFO and
# blocks, unless it is resumed; Early-v0 says so and blocks without a checkpoint the first time it runs
# (no runs/early-ran yet), then succeeds; Wait-v0 says so and waits for a line on $STUB_RELEASE, then
# succeeds.
shift
args="$*" env_id="" seed="" run_dir=""
while (($#)); do
    case "$1" in
        --env-id) env_id=$2 ;;
        --seed) seed=$2 ;;
        --resume) run_dir=$2 ;;
    esac
    shift
done
run_dir=${run_dir:-runs/${env_id}__stub__${seed}__$$}
mkdir -p "$run_dir"
echo "run_dir=$run_dir"
echo "args: $args"
grep Cpus_allowed_list /proc/self/status
case "$env_id" in
    Bad-v0) echo "error: unknown --env-id 'Bad-v0'" >&2; exit 1 ;;
    Diverge-v0)
        touch "$run_dir/stub.model"
        echo "error: training diverged: non-finite losses/v_loss = nan at iteration 2 (global_step 1024)" >&2; exit 1 ;;
    Block-v0)
        touch "$run_dir/stub.model"
        if [[ " $args " != *" --resume "* ]]; then echo "started $$" >"$STUB_FIFO"; exec sleep 600; fi ;;
    Early-v0)
        echo "logged before the first checkpoint" >"$run_dir/events"
        if [[ ! -e runs/early-ran ]]; then touch runs/early-ran; echo "started $$" >"$STUB_FIFO"; exec sleep 600; fi ;;
    Wait-v0) echo "started $$" >"$STUB_FIFO"; read -r _ <"$STUB_RELEASE" ;;  # goes on when released
esac
echo "iteration=1/2 global_step=512 return=12.5 SPS=10"
echo "iteration=2/2 global_step=1024 return=- SPS=10"
rm -f "$run_dir/stub.model"
"""


@pytest.fixture
def stub(tmp_path):
    path = tmp_path / "stub-python"
    path.write_text(STUB)
    path.chmod(0o755)
    return path


def test_help_explains_every_flag():
    result = benchmark("--help")
    assert result.returncode == 0 and result.stderr == ""
    source = BENCHMARK.read_text()
    parser = source[source.index("while (($#)); do") : source.index('\nparse_options "$@"')]
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)\)", parser)) | set(re.findall(r"\| (--[a-z][a-z-]+)", parser))
    assert {"--env-ids", "--seeds", "--workers", "--python", "--slurm", "--wait", "--continue", "--task"} <= flags
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
        (["--frobnicate"], "unknown option '--frobnicate'"),
        (["--wait"], "--wait only applies with --slurm"),
        (["--", "--seed", "3"], "do not pass --seed after --"),
        (["--python", "no-such-python-here"], "'no-such-python-here' not found"),
        (["--seeds"], "--seeds needs a value"),
        (["--", "--resume", "runs/x"], "do not pass --resume after --"),
        (["--", "--evaluate=runs/x"], "do not pass --evaluate after --: a sweep trains"),
        (["--", "--list-tasks"], "do not pass --list-tasks after --: a sweep trains"),
        (["--", "-h"], "do not pass -h after --"),
        (["--first-seed", "2147483647", "--seeds", "2"], "the last seed, --first-seed + --seeds - 1, must be at most"),
        (["--seeds", "99999999999999999999"], "must be at most 2147483647"),
        (["--task", "0"], "--task only applies with --continue"),
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


def test_ok_and_failed_runs_pinning_and_threads(tmp_path, stub):
    result = benchmark(
        "--workdir", tmp_path, "--python", stub, "--env-ids", "Good-v0,Bad-v0", "--seeds", 2, "--first-seed", 5,
        "--workers", 2, "--", "--exp-name", "a b",
    )  # fmt: skip
    assert result.returncode == 1
    rows = summary_rows(result.stdout)
    assert {key: row["status"] for key, row in rows.items()} == {
        ("Good-v0", 5): "ok", ("Bad-v0", 5): "failed(rc=1)", ("Good-v0", 6): "ok", ("Bad-v0", 6): "failed(rc=1)",
    }  # fmt: skip
    assert rows[("Good-v0", 5)]["return"] == "12.5" and rows[("Bad-v0", 5)]["return"] == "-"
    assert "2/4 runs succeeded." in result.stdout
    for seed in (5, 6):
        assert f"Bad-v0 seed {seed}: failed(rc=1) -- error: unknown --env-id 'Bad-v0'" in result.stdout
    cores_per_run = len(USABLE_CPUS) // 2
    slots = [set(USABLE_CPUS[k * cores_per_run : (k + 1) * cores_per_run]) for k in range(2)]
    for (env_id, seed), row in rows.items():
        log = Path(row["log"]).read_text()
        args = re.search(r"^args: (.*)$", log, re.MULTILINE)[1]
        assert args == f"--env-id {env_id} --seed {seed} --num-threads {cores_per_run} --exp-name a b"
        allowed = re.search(r"Cpus_allowed_list:\s+(\S+)", log)[1]
        assert expand_cpu_list(allowed) in slots  # the run saw only the cores of one slot
    # --summary re-reads the same sweep and agrees
    (sweep_dir,) = (tmp_path / "runs" / "logs").iterdir()
    again = benchmark("--summary", sweep_dir)
    assert again.returncode == 1 and summary_rows(again.stdout) == rows


def test_a_diverged_run_is_a_result_that_continue_does_not_retry(tmp_path, stub):
    """Resuming a diverged run from its last finite state would retry it until it survives: the sweep marks it
    diverged, fails, and --continue leaves it, though it has a checkpoint (a failed run with one is resumed)."""
    result = benchmark(
        "--workdir", tmp_path, "--python", stub, "--env-ids", "Good-v0 Diverge-v0", "--seeds", 1, "--workers", 1
    )  # fmt: skip
    assert result.returncode == 1
    rows = summary_rows(result.stdout)
    assert {key: row["status"] for key, row in rows.items()} == {("Good-v0", 1): "ok", ("Diverge-v0", 1): "diverged"}
    assert "Diverge-v0 seed 1: diverged -- error: training diverged: non-finite losses/v_loss" in result.stdout
    assert "--continue" not in result.stdout  # nothing left for it to do
    (sweep_dir,) = (tmp_path / "runs" / "logs").iterdir()
    (run_dir,) = (tmp_path / "runs").glob("Diverge-v0__*")
    assert (run_dir / "stub.model").exists()

    again = benchmark("--continue", sweep_dir)
    assert again.returncode == 1
    assert {key: (row["status"], row["action"]) for key, row in summary_rows(again.stdout).items()} == {
        ("Good-v0", 1): ("ok", "skipped"), ("Diverge-v0", 1): ("diverged", "skipped"),
    }  # fmt: skip
    assert "skip   Diverge-v0__1 (diverged earlier: a result, not retried)" in again.stdout
    assert len(log_attempts(sweep_dir / "Diverge-v0__1.log")) == 1
    dry = benchmark("--continue", sweep_dir, "--dry-run")
    assert "# Diverge-v0__1: skipped (diverged earlier: a result, not retried)" in dry.stdout

    # A sweep of an older benchmark.sh recorded it as failed: the log still tells, from the latest attempt.
    status = sweep_dir / "Diverge-v0__1.status"
    status.write_text(status.read_text().replace("diverged", "failed", 1))
    older = benchmark("--continue", sweep_dir)
    assert summary_rows(older.stdout)[("Diverge-v0", 1)] | {"log": "-"} == {
        "status": "diverged", "action": "skipped", "return": "-", "log": "-",
    }  # fmt: skip
    # An attempt after the diverged one that failed otherwise: a failed run, resumed from its checkpoint.
    status.write_text(status.read_text().replace("diverged", "failed", 1))
    with open(sweep_dir / "Diverge-v0__1.log", "a") as log:
        log.write("+ a later attempt\nerror: something else\n")
    later = benchmark("--continue", sweep_dir)
    assert summary_rows(later.stdout)[("Diverge-v0", 1)]["action"] == "resumed"


def test_one_worker_gets_every_core(tmp_path, stub):
    result = benchmark("--workdir", tmp_path, "--python", stub, "--env-ids", "Good-v0", "--seeds", 1)
    assert result.returncode == 0, result.stdout + result.stderr
    log = Path(summary_rows(result.stdout)[("Good-v0", 1)]["log"]).read_text()
    assert f"--num-threads {len(USABLE_CPUS)}" in log
    assert expand_cpu_list(re.search(r"Cpus_allowed_list:\s+(\S+)", log)[1]) == set(USABLE_CPUS)


def expand_cpu_list(text: str) -> set[int]:
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


@pytest.fixture
def fifo(tmp_path):
    """A FIFO on which Block-v0 stubs say "started PID"; `fifo.fd` never blocks and keeps it open."""
    path = tmp_path / "started"
    os.mkfifo(path)
    fd = os.open(path, os.O_RDWR)
    yield path, fd
    os.close(fd)


def wait_started(fd: int) -> int:
    """The pid of the next Block-v0 stub to start (bounded wait)."""
    return int(read_until(fd, "\n", 60).split()[1])


def test_interrupt_stops_runs_and_prints_summary(tmp_path, stub, fifo):
    fifo_path, fd = fifo
    process = start_process(
        BENCHMARK, "--workdir", tmp_path, "--python", stub, "--env-ids", "Block-v0 Good-v0", "--seeds", 2, "--workers", 1,
        env={**os.environ, "STUB_FIFO": str(fifo_path)},
    )  # fmt: skip
    try:
        pid = wait_started(fd)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, stdout + stderr
    assert "interrupted; stopping the running runs" in stderr
    rows = summary_rows(stdout)
    assert {key: row["status"] for key, row in rows.items()} == {
        ("Block-v0", 1): "interrupted", ("Good-v0", 1): "not-started",
        ("Block-v0", 2): "not-started", ("Good-v0", 2): "not-started",
    }  # fmt: skip
    assert "Block-v0 seed 1: interrupted" in stdout
    # the blocked run's process is gone (or a zombie awaiting its reaper)
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in {"gone", "Z", "X"}


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


def test_continue_skips_finished_resumes_checkpointed_and_starts_the_rest(tmp_path, stub, fifo):
    """A sweep killed with SIGKILL (benchmark.sh and its runs' process groups, no status for the running
    run) is continued from its sweep.args alone: each run is done once."""
    fifo_path, fd = fifo
    env = {**os.environ, "STUB_FIFO": str(fifo_path)}
    process = start_process(
        BENCHMARK, "--workdir", tmp_path, "--python", stub, "--env-ids", "Good-v0 Block-v0 Fine-v0", "--seeds", 1,
        "--workers", 1, "--", "--exp-name", "x", env=env,
    )  # fmt: skip
    wait_started(fd)
    (sweep_dir,) = (tmp_path / "runs" / "logs").iterdir()
    kill_sweep(process, sweep_dir)
    process.communicate(timeout=60)
    assert (sweep_dir / "Good-v0__1.status").read_text().startswith("ok 0 ")
    assert not (sweep_dir / "Block-v0__1.status").exists() and not (sweep_dir / "Fine-v0__1.log").exists()

    result = benchmark("--continue", sweep_dir, env=env, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = summary_rows(result.stdout)
    assert {key: (row["status"], row["action"]) for key, row in rows.items()} == {
        ("Good-v0", 1): ("ok", "skipped"), ("Block-v0", 1): ("ok", "resumed"), ("Fine-v0", 1): ("ok", "started"),
    }  # fmt: skip
    assert rows[("Block-v0", 1)]["return"] == "12.5"
    # the finished run ran once; the checkpointed one went on in its own run directory, with the sweep's flags
    assert len(log_attempts(sweep_dir / "Good-v0__1.log")) == 1
    assert len(list((tmp_path / "runs").glob("Good-v0__*"))) == 1
    (block_dir,) = (tmp_path / "runs").glob("Block-v0__*")
    first, second = log_attempts(sweep_dir / "Block-v0__1.log")
    assert second == f"{first} --resume runs/{block_dir.name}" and "--exp-name x" in first
    assert not list(block_dir.glob("*.model"))


def test_continue_moves_a_run_killed_before_its_checkpoint_aside(tmp_path, stub, fifo):
    """A run killed before its first checkpoint is started afresh; its earlier run directory leaves runs/
    (report.py would list it beside the new one) for the sweep's abandoned/ folder, contents kept."""
    fifo_path, fd = fifo
    env = {**os.environ, "STUB_FIFO": str(fifo_path)}
    process = start_process(
        BENCHMARK, "--workdir", tmp_path, "--python", stub, "--env-ids", "Early-v0", "--seeds", 1, "--workers", 1,
        env=env,
    )  # fmt: skip
    wait_started(fd)
    (sweep_dir,) = (tmp_path / "runs" / "logs").iterdir()
    (killed_dir,) = (tmp_path / "runs").glob("Early-v0__*")
    kill_sweep(process, sweep_dir)
    process.communicate(timeout=60)

    result = benchmark("--continue", sweep_dir, env=env, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert summary_rows(result.stdout)[("Early-v0", 1)]["action"] == "started"
    (new_dir,) = (tmp_path / "runs").glob("Early-v0__*")
    assert new_dir != killed_dir
    moved = sweep_dir / "abandoned" / killed_dir.name
    assert (moved / "events").read_text() == "logged before the first checkpoint\n"
    assert f"runs/{killed_dir.name} (no checkpoint) moved to" in result.stdout


def test_continue_takes_the_sweep_from_its_directory(tmp_path, stub):
    """Only resources may be given again; what defines the sweep comes from its sweep.args."""
    first = benchmark("--workdir", tmp_path, "--python", stub, "--env-ids", "Good-v0", "--seeds", 1)
    assert first.returncode == 0, first.stdout + first.stderr
    (sweep_dir,) = (tmp_path / "runs" / "logs").iterdir()
    for args, message in [
        (["--continue", tmp_path / "nowhere"], "--continue: no sweep.args in"),
        (["--continue", sweep_dir, "--seeds", 5], "--seeds cannot be given with --continue"),
        (["--continue", sweep_dir, "--workdir", tmp_path], "--workdir cannot be given with --continue"),
        (["--continue", sweep_dir, "--", "--total-timesteps", 5], "-- cannot be given with --continue"),
        (["--continue", sweep_dir, "--task", 1], "--task must be a run index 0..0"),
        (["--continue", sweep_dir, "--task", 0, "--dry-run"], "--dry-run does not apply with --task"),
    ]:
        result = benchmark(*args)
        assert result.returncode == 2 and result.stderr.count("\n") == 1 and message in result.stderr, args
    planned = benchmark("--continue", sweep_dir, "--dry-run")
    assert planned.returncode == 0 and "# Good-v0__1: skipped (finished earlier)" in planned.stdout
    again = benchmark("--continue", sweep_dir, "--workers", 1, "--no-pin")
    assert again.returncode == 0 and summary_rows(again.stdout)[("Good-v0", 1)]["action"] == "skipped"


def test_continue_never_runs_a_run_twice_at_once(tmp_path, stub, fifo):
    """A run whose training process outlived its sweep (and its task) is waited for, then resumed."""
    fifo_path, fd = fifo
    env = {**os.environ, "STUB_FIFO": str(fifo_path)}
    process = start_process(
        BENCHMARK, "--workdir", tmp_path, "--python", stub, "--env-ids", "Block-v0", "--seeds", 1, env=env
    )
    orphan = wait_started(fd)
    (sweep_dir,) = (tmp_path / "runs" / "logs").iterdir()
    kill_sweep(process, sweep_dir, whole_runs=False)
    try:
        again = start_process(BENCHMARK, "--continue", sweep_dir, env=env)
        read_until(again.stdout.fileno(), "wait   Block-v0__1: an earlier attempt", 60)
        assert len(log_attempts(sweep_dir / "Block-v0__1.log")) == 1  # not started while the orphan lives
    finally:
        os.kill(orphan, signal.SIGKILL)
    stdout, stderr = again.communicate(timeout=60)
    process.communicate(timeout=60)
    assert again.returncode == 0, stdout + stderr
    assert summary_rows(stdout)[("Block-v0", 1)]["action"] == "resumed"
    assert len(log_attempts(sweep_dir / "Block-v0__1.log")) == 2


# ---------------------------------------------------------------------------------------------------
# Slurm
# ---------------------------------------------------------------------------------------------------

FAKE_SBATCH = r"""#!/usr/bin/env bash
# A stand-in for sbatch: records its arguments, then runs every array task of the script in turn
# (unless FAKE_SLURM_HOLD is set: then the job stays queued for ever).
echo "$*" >>"$FAKE_SLURM_LOG"
script=${@: -1}
array=$(sed -n 's/^#SBATCH --array=\([0-9]*\)-\([0-9]*\).*/\1 \2/p' "$script")
cpus=$(sed -n 's/^#SBATCH --cpus-per-task=//p' "$script")
out=$(sed -n 's/^#SBATCH --output=//p' "$script")
workdir=$(sed -n 's/^#SBATCH --chdir=//p' "$script")
for i in $(seq $array); do
    [[ -n "${FAKE_SLURM_HOLD:-}" ]] ||
        (cd "$workdir" && SLURM_ARRAY_TASK_ID=$i SLURM_CPUS_PER_TASK=$cpus bash "$script" >>"${out//%a/$i}" 2>&1)
done
echo "4242;cluster"
"""


@pytest.fixture
def fake_slurm(tmp_path):
    """The environment for benchmark.sh --slurm with FAKE_SBATCH and a squeue that sees no job."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(FAKE_SBATCH)
    (bin_dir / "squeue").write_text("#!/bin/sh\nexit 0\n")  # the job is no longer queued
    for tool in ("sbatch", "squeue"):
        (bin_dir / tool).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_SLURM_LOG": str(tmp_path / "sbatch.args")}


def test_slurm_array_with_fake_sbatch(tmp_path, stub, fake_slurm):
    env = fake_slurm
    result = benchmark(
        "--slurm", "--wait", "--workdir", tmp_path, "--python", stub, "--env-ids", "Good-v0 Bad-v0", "--seeds", 2,
        "--cores-per-run", 3, "--workers", 2, "--sbatch-args", "--time=00:10:00 --partition=debug",
        "--", "--total-timesteps", 4096, env=env,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Submitted Slurm job 4242" in result.stdout and "scancel 4242" in result.stdout
    assert (tmp_path / "sbatch.args").read_text().startswith("--parsable --time=00:10:00 --partition=debug ")
    (sweep_dir,) = (tmp_path / "runs" / "logs").iterdir()
    script = (sweep_dir / "sweep.sbatch").read_text()
    assert "#SBATCH --array=0-3%2\n" in script and "#SBATCH --cpus-per-task=3\n" in script
    assert "#SBATCH --requeue\n" in script and '--task "$SLURM_ARRAY_TASK_ID"' in script
    rows = summary_rows(result.stdout)
    assert {key: row["status"] for key, row in rows.items()} == {
        ("Good-v0", 1): "ok", ("Bad-v0", 1): "failed(rc=1)", ("Good-v0", 2): "ok", ("Bad-v0", 2): "failed(rc=1)",
    }  # fmt: skip
    for (env_id, seed), row in rows.items():
        args = re.search(r"^args: (.*)$", Path(row["log"]).read_text(), re.MULTILINE)[1]
        assert args == f"--env-id {env_id} --seed {seed} --num-threads 3 --total-timesteps 4096"
    assert "Bad-v0 seed 2: failed(rc=1) -- error: unknown --env-id 'Bad-v0'" in result.stdout


def test_continued_slurm_sweep_is_submitted_again(tmp_path, stub, fake_slurm):
    first = benchmark(
        "--slurm", "--wait", "--workdir", tmp_path, "--python", stub, "--env-ids", "Good-v0 Bad-v0", "--seeds", 1,
        "--sbatch-args", "--time=00:10:00", env=fake_slurm,
    )  # fmt: skip
    assert first.returncode == 1, first.stdout + first.stderr
    (sweep_dir,) = (tmp_path / "runs" / "logs").iterdir()
    again = benchmark("--continue", sweep_dir, "--wait", env=fake_slurm)
    assert again.returncode == 1, again.stdout + again.stderr
    first_call, second_call = (tmp_path / "sbatch.args").read_text().splitlines()
    assert second_call == first_call  # the same sbatch options and batch script
    rows = summary_rows(again.stdout)
    assert {key: (row["status"], row["action"]) for key, row in rows.items()} == {
        ("Good-v0", 1): ("ok", "skipped"), ("Bad-v0", 1): ("failed(rc=1)", "started"),
    }  # fmt: skip


def test_requeued_slurm_task_resumes_its_run(tmp_path, stub, fifo, fake_slurm):
    """Slurm's SIGTERM (time limit, preemption) reaches every process of the task: the run keeps its
    checkpoint and the task exits 143; run again (requeued), the same batch script resumes it."""
    fifo_path, fd = fifo
    env = {**fake_slurm, "FAKE_SLURM_HOLD": "1", "STUB_FIFO": str(fifo_path)}
    submitted = benchmark(
        "--slurm", "--workdir", tmp_path, "--python", stub, "--env-ids", "Block-v0", "--seeds", 1, env=env
    )
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    (sweep_dir,) = (tmp_path / "runs" / "logs").iterdir()
    task_env = {**env, "SLURM_ARRAY_TASK_ID": "0", "SLURM_CPUS_PER_TASK": "1"}
    task = start_process("bash", sweep_dir / "sweep.sbatch", env=task_env)
    try:
        wait_started(fd)
        os.killpg(task.pid, signal.SIGTERM)
        task.communicate(timeout=60)
    finally:
        task.kill()
    assert task.returncode == 143
    assert (sweep_dir / "Block-v0__1.status").read_text().split()[:2] == ["interrupted", "143"]
    requeued = start_process("bash", sweep_dir / "sweep.sbatch", env=task_env)
    stdout, stderr = requeued.communicate(timeout=60)
    assert requeued.returncode == 0, stdout + stderr
    assert (sweep_dir / "Block-v0__1.status").read_text().split()[::4] == ["ok", "resumed"]
    first, again = log_attempts(sweep_dir / "Block-v0__1.log")
    assert again.startswith(f"{first} --resume runs/Block-v0__stub__1__")


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
        assert list((tmp_path / "ok" / "runs").glob(f"{env_id}__*__1__*/events.out.tfevents.*"))
    assert not math.isnan(reference_run(next((tmp_path / "ok" / "runs").glob("Hopper-v4__*")))["final_return"])
