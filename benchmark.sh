#!/usr/bin/env bash
# Run ppo_continuous_envpool_jax.py over env ids x seeds: N runs at a time, each pinned to its own cores, or as a
# Slurm job array. The command fixes each run's directory; the training script starts, resumes or skips the run
# there (--run-dir) and records how it ended in its summary.json, which is all this script reads of it.
set -euo pipefail
# Before 4.4, bash calls an empty array unbound under set -u ("${extra[@]}" with no flags after --).
((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] >= 404)) ||
    { echo "benchmark.sh: error: needs bash 4.4 or newer, this is $BASH_VERSION" >&2; exit 2; }
# One { ... } group, which bash reads whole before running any of it: a running sweep is not disturbed when this
# file is edited or checked out under it (bash reads a script as it goes).
{

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly REPO SCRIPT="$REPO/ppo_continuous_envpool_jax.py" PROG="benchmark.sh"

usage() {
    cat <<EOF
Usage: ./$PROG [options] [-- training-script flags...]

Trains ppo_continuous_envpool_jax.py once per env id and seed, seed-major, each run in the directory
runs/{env_id}__{exp_name}__{seed}/ under --workdir (exp_name: the --exp-name after --, else
ppo_continuous_envpool_jax), its output appended to output.log there. The same command again finishes the
sweep, locally or on Slurm: runs that ended (ok, or diverged: a result) are skipped, runs with a checkpoint
resumed, the rest started; so give each configuration its own --exp-name. At the end a summary from each
run's summary.json. Exit status: 0 when every run is ok, 1 otherwise, 130 after Ctrl-C and 143 after a SIGTERM
(every running run keeps a checkpoint), 2 for a bad option.

  --env-ids "A B ..."   env ids, separated by spaces, commas or newlines (default: "HalfCheetah-v4 Hopper-v4 Walker2d-v4")
  --seeds N             seeds per env id (default: 3)
  --first-seed S        seeds S, S+1, ..., S+N-1 (default: 1)
  -- FLAGS...           passed to every run (this script sets --run-dir, --env-id, --seed and --num-threads)
  --workers N           runs at a time (default: 1); with --slurm, array tasks at a time (default: all)
  --cores-per-run C     each run gets --num-threads C and, locally, C cores of its own, pinned with taskset
                        (default: usable cores / workers, here $(usable_cpus | wc -l) usable; with --slurm 1)
  --no-pin              do not pin the local runs to their cores
  --slurm               submit a Slurm job array instead: a task per run that has not ended, each with
                        --cpus-per-task C and --requeue (requeued, it resumes its run); a task runs the command
                        a local run would
  --wait                with --slurm: wait for the job (sbatch --wait), then print the summary
  --job-name NAME       with --slurm: the job's name (default: the exp name)
  --sbatch-args "ARGS"  with --slurm: more sbatch options, split at spaces (quotes are not read), e.g.
                        "--partition=cpu --time=02:00:00"
  --python "CMD"        the Python to train with (default: the project's environment, set up by uv if it is
                        installed, else <repo>/.venv/bin/python); with --slurm, as the nodes see it
  --workdir DIR         the runs go to DIR/runs/ (default: the current directory)
  --dry-run             print the commands (with --slurm, the array script) and exit
  --summary             print the summary of the sweep's runs and exit
  -h, --help            show this help

Examples:
  # 2 env ids x 3 seeds, two runs at a time, each on half the cores; stopped by Ctrl-C, a kill or a lost
  # machine, the same command finishes it
  ./$PROG --env-ids "HalfCheetah-v4 Hopper-v4" --seeds 3 --workers 2 -- --exp-name mine
  # the same as a Slurm job array, 4 CPUs a task; wait for it, then summarise
  ./$PROG --slurm --wait --cores-per-run 4 --env-ids "HalfCheetah-v4 Hopper-v4" --seeds 3 \\
      --sbatch-args "--time=01:00:00" -- --exp-name mine
  # then the tables and the learning curves
  uv run python report.py runs --exp-name mine
EOF
}

die() {
    echo "$PROG: error: $*" >&2
    exit 2
}

# The CPUs this process may run on (an existing taskset or cgroup affinity holds), one per line; where the kernel
# does not list them (gVisor writes no Cpus_allowed_list), CPUs 0 to nproc - 1.
usable_cpus() {
    local part list
    list=$(sed -n 's/^Cpus_allowed_list:\s*//p' /proc/self/status)
    list=${list:-0-$(($(nproc) - 1))}
    for part in ${list//,/ }; do seq "${part%-*}" "${part#*-}"; done
}

# --- options ------------------------------------------------------------------------------------------------

env_ids_arg="HalfCheetah-v4 Hopper-v4 Walker2d-v4" num_seeds=3 first_seed=1 workers="" cores_per_run="" pin=1
slurm=0 wait_slurm=0 job_name="" sbatch_args="" python_cmd="" workdir="." dry_run=0 summary_only=0 extra=()
while (($#)); do
    case "$1" in
        --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}"; continue ;;  # --opt=value as --opt value
        --env-ids | --seeds | --first-seed | --workers | --cores-per-run | --job-name | --sbatch-args | --python | --workdir)
            (($# >= 2)) || die "$1 needs a value (see --help)" ;;&
        -h | --help) usage; exit 0 ;;
        --env-ids) env_ids_arg=$2; shift ;;
        --seeds) num_seeds=$2; shift ;;
        --first-seed) first_seed=$2; shift ;;
        --workers) workers=$2; shift ;;
        --cores-per-run) cores_per_run=$2; shift ;;
        --no-pin) pin=0 ;;
        --slurm) slurm=1 ;;
        --wait) wait_slurm=1 ;;
        --job-name) job_name=$2; shift ;;
        --sbatch-args) sbatch_args=$2; shift ;;
        --python) python_cmd=$2; shift ;;
        --workdir) workdir=$2; shift ;;
        --dry-run) dry_run=1 ;;
        --summary) summary_only=1 ;;
        --) shift; extra=("$@"); break ;;
        *) die "unknown option '$1' (flags for the training script go after --; see --help)" ;;
    esac
    shift
done

# Spaces, commas or newlines (--env-ids "$(cat tasks.txt)"): read -a alone stops at the first newline.
env_ids_arg=${env_ids_arg//$'\n'/ }
read -r -a env_ids <<<"${env_ids_arg//,/ }"
((${#env_ids[@]})) || die "--env-ids is empty"
for env_id in "${env_ids[@]}"; do
    [[ "$env_id" =~ ^[A-Za-z0-9][A-Za-z0-9._/-]*$ ]] || die "--env-ids: '$env_id' is not an env id (letters, digits, . _ - /)"
done
# MetaWorld/Reach-v3 and MetaWorld-Reach-v3 are one task and one run directory (runs/MetaWorld-Reach-v3__...).
[[ -z $(printf '%s\n' "${env_ids[@]//\//-}" | sort | uniq -d) ]] || die "--env-ids lists an env id twice"
is_positive() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }
is_positive "$num_seeds" || die "--seeds must be a positive integer, got '$num_seeds'"
[[ "$first_seed" =~ ^(0|[1-9][0-9]*)$ ]] || die "--first-seed must be a non-negative integer, got '$first_seed'"
# EnvPool's seeds are int32; the lengths come first, so that bash's 64-bit sum cannot wrap.
((${#first_seed} <= 10 && ${#num_seeds} <= 10 && first_seed + num_seeds - 1 <= 2147483647)) ||
    die "the last seed, --first-seed + --seeds - 1, must be at most 2147483647 (EnvPool's seeds are int32)"
[[ -z "$workers" ]] || is_positive "$workers" || die "--workers must be a positive integer, got '$workers'"
[[ -z "$cores_per_run" ]] || is_positive "$cores_per_run" || die "--cores-per-run must be a positive integer, got '$cores_per_run'"
((slurm || !wait_slurm)) || die "--wait only applies with --slurm"
((slurm)) || [[ -z "$sbatch_args" ]] || die "--sbatch-args only applies with --slurm"
[[ -d "$workdir" ]] || die "--workdir '$workdir' is not a directory"
workdir=$(cd "$workdir" && pwd)
exp_name=$(basename "$SCRIPT" .py)
for ((i = 0; i < ${#extra[@]}; i++)); do
    flag=${extra[i]%%=*}
    case "${flag//_/-}" in  # the training script takes --env_id for --env-id too
        --exp-name) [[ "${extra[i]}" == *=* ]] && exp_name=${extra[i]#*=} || exp_name=${extra[i + 1]:-} ;;
        --env-id | --seed | --num-threads | --run-dir | --resume)
            die "do not pass $flag after --: the sweep sets it (--env-ids, --seeds, --cores-per-run)" ;;
        -h | --help | --list-tasks | --evaluate)  # each would make every run exit at once without training
            die "do not pass $flag after --: a sweep trains (run the training script itself for it)" ;;
    esac
done
[[ -n "$exp_name" && "$exp_name" != */* && "$exp_name" != .* ]] ||
    die "--exp-name must be a file name, not empty and without '/' or a leading '.', got '$exp_name'"
# The job's name goes into an #SBATCH line and scancel's --name: one word (the exp name by default).
((!slurm)) || [[ "${job_name:-$exp_name}" =~ ^[^[:space:]]+$ ]] ||
    die "--slurm needs a job name of one word (--job-name, else the exp name), got '${job_name:-$exp_name}'"

# Cores: a Slurm task's are Slurm's to give; locally, worker slot k (xargs' SLOT) has the cores slot_cpus[k].
if ((slurm)); then
    cores_per_run=${cores_per_run:-1}
    [[ "$workdir" != *[[:space:]]* ]] || die "--slurm: the working directory '$workdir' must not contain spaces"
    ((dry_run || summary_only)) || command -v sbatch >/dev/null || die "--slurm: sbatch not found on PATH"
else
    workers=${workers:-1}
    mapfile -t cpus < <(usable_cpus)
    ((pin || ${#cpus[@]} >= workers)) || cores_per_run=${cores_per_run:-1}  # --no-pin oversubscribes
    cores_per_run=${cores_per_run:-$((${#cpus[@]} / workers))}
    ((cores_per_run)) || die "--workers $workers is more than the ${#cpus[@]} usable cores (pass --no-pin to oversubscribe)"
    ((!pin || workers * cores_per_run <= ${#cpus[@]})) ||
        die "--workers $workers x --cores-per-run $cores_per_run needs $((workers * cores_per_run)) cores, only ${#cpus[@]} usable (${cpus[*]}); pass --no-pin to oversubscribe"
    ((!pin)) || command -v taskset >/dev/null || die "taskset not found (install util-linux, or pass --no-pin)"
    slot_cpus=()
    for ((k = 0; pin && k < workers; k++)); do slot_cpus+=("$(IFS=,; echo "${cpus[*]:k*cores_per_run:cores_per_run}")"); done
fi

# The default Python is the environment's interpreter itself, not `uv run`, which would stand between the run and
# its signals (it forwards SIGINT and SIGTERM to a child that gets them already, and a second one aborts a run).
if [[ -n "$python_cmd" ]]; then
    read -r -a python <<<"$python_cmd"
elif command -v uv >/dev/null; then
    python=("$(uv run -q --frozen --project "$REPO" python -c 'import sys; print(sys.executable)')") || die "uv could not set up $REPO's environment"
else
    python=("$REPO/.venv/bin/python")
fi
((${#python[@]})) || die "--python is empty"
command -v "${python[0]}" >/dev/null || die "--python: '${python[0]}' not found"
[[ "${python[0]}" != */* ]] || python[0]="$(cd "$(dirname "${python[0]}")" && pwd)/$(basename "${python[0]}")"
cd "$workdir"

# --- the runs, seed-major (a sweep cut short covers every env id), and the command line of each ---------------

envs=() seeds=() dirs=()
for ((seed = first_seed; seed < first_seed + num_seeds; seed++)); do
    for env_id in "${env_ids[@]}"; do
        envs+=("$env_id") seeds+=("$seed") dirs+=("runs/${env_id//\//-}__${exp_name}__${seed}")
    done
done

# run_command I: run I as one shell line, the same locally and in a Slurm array task; run from anywhere.
run_command() {
    local dir=${dirs[$1]} cmd
    printf -v cmd '%q ' "${python[@]}" "$SCRIPT" --run-dir "$dir" --env-id "${envs[$1]}" --seed "${seeds[$1]}" \
        --num-threads "$cores_per_run" "${extra[@]}"
    printf 'cd %q && mkdir -p %q && OMP_NUM_THREADS=%s PYTHONUNBUFFERED=1 exec %s>>%q 2>&1 </dev/null\n' \
        "$workdir" "$dir" "$cores_per_run" "$cmd" "$dir/output.log"
}

# summary plan|table: how each run stands: its summary.json's status, else "running" (its lock is held),
# "no-summary" (it ended without writing one: killed), "bad-summary" (damaged) or "not-run". `plan` prints the
# runs that have not ended; `table` the sweep's summary, and exits 0 when every run is ok, else 1.
read -r -d '' summary_py <<'EOF' || true
import fcntl, json, sys
from pathlib import Path

def state(run_dir):
    try:
        with open(run_dir / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        summary = json.loads((run_dir / "summary.json").read_text())
        if not isinstance(summary, dict):
            raise ValueError("not a JSON object")
        return summary
    except ValueError as error:  # damaged: the training script refuses it too, and says so in output.log
        detail = f"its summary.json cannot be read ({error}); remove it to train the run again"
        return {"status": "bad-summary", "detail": detail}
    except BlockingIOError:
        return {"status": "running"}
    except FileNotFoundError:  # no run directory, or no summary.json in it
        if not (run_dir / "output.log").exists():
            return {"status": "not-run"}
        last = ((run_dir / "output.log").read_text(errors="replace").strip().splitlines() or ["(empty)"])[-1]
        return {"status": "no-summary", "detail": f"it ended without one; its output.log ends: {last[:200]}"}

runs = list(zip(*[iter(sys.argv[2:])] * 3))  # (env id, seed, run directory)
states = [state(Path(run_dir)) for _, _, run_dir in runs]
if sys.argv[1] == "plan":  # a diverged run is a result: it is not trained again
    print(*(i for i, s in enumerate(states) if s["status"] not in ("ok", "diverged")))
    sys.exit()

def rate(value):
    return "-" if value is None else f"{value:.2f}"

rows, not_ok = [("env", "seed", "status", "steps", "return", "success(last/any)", "last-eval", "wall", "run")], []
for (env_id, seed, run_dir), s in zip(runs, states):
    ev, wall, ret = s.get("last_eval"), s.get("wall_seconds"), s.get("final_return")
    rows.append((
        env_id, seed, s["status"], f"{s['global_step']}/{s['total_timesteps'] or '-'}" if "global_step" in s else "-",
        "-" if ret is None else f"{ret:.1f}", f"{rate(s.get('final_success'))}/{rate(s.get('final_any_step_success'))}",
        f"{ev['return']:.1f}@{ev['global_step']}" if ev else "-",
        "-" if wall is None else "{}m{:02d}s".format(*divmod(round(wall), 60)), run_dir,
    ))
    if s["status"] != "ok":
        detail = f" -- {s['detail']}" if s.get("detail") else ""
        log = f" [{run_dir}/output.log]" if s["status"] != "not-run" else ""
        not_ok.append(f"{env_id} seed {seed}: {s['status']}{detail}{log}")
if all(s.get("final_success") is None for s in states):  # the success column only for tasks that report it
    rows = [row[:5] + row[6:] for row in rows]
widths = [max(map(len, column)) for column in zip(*rows)]
print("", *("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows), sep="\n")
print(f"{len(runs) - len(not_ok)}/{len(runs)} runs ok.")
if not_ok:
    print("Runs that are not ok:", *not_ok, sep="\n  ")
if any(s["status"] not in ("ok", "diverged", "running") for s in states):
    print("The same command again resumes or starts the runs that have not ended.")
sys.exit(1 if not_ok else 0)
EOF
summary() {
    local i runs=()
    for i in "${!dirs[@]}"; do runs+=("${envs[i]}" "${seeds[i]}" "${dirs[i]}"); done
    "${python[@]}" -c "$summary_py" "$1" "${runs[@]}"
}

((!summary_only)) || { summary table && exit 0 || exit 1; }
todo=$(summary plan) || die "could not read the runs' summary.json with ${python[*]}"
read -r -a todo <<<"$todo"
plan="${#dirs[@]} runs (${#env_ids[@]} env ids x $num_seeds seeds) in $workdir/runs/, $((${#dirs[@]} - ${#todo[@]})) ended (skipped)"
stopped=0
trap 'stopped=130' INT
trap 'stopped=143' TERM

# --- Slurm: one array task per run that has not ended -------------------------------------------------------

if ((slurm)); then
    read -r -a sbatch_extra <<<"$sbatch_args"
    batch_script="#!/usr/bin/env bash
#SBATCH --job-name=${job_name:-$exp_name}
#SBATCH --array=0-$((${#todo[@]} - 1))${workers:+%$workers}
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=$cores_per_run
#SBATCH --requeue
#SBATCH --output=$workdir/runs/logs/%x-%A_%a.out
#SBATCH --open-mode=append
# Written by benchmark.sh: task i runs the i-th run that had not ended; requeued, it resumes it.
case \$SLURM_ARRAY_TASK_ID in
$(for k in "${!todo[@]}"; do echo "$k) $(run_command "${todo[k]}") ;;"; done)
esac"
    plan+=", ${#todo[@]} to run as array tasks of $cores_per_run CPU(s) (Slurm's logs: runs/logs/)"
    if ((dry_run)); then
        echo "# $plan"
        if ((${#todo[@]})); then printf "# sbatch%s <<'EOF'\n%s\nEOF\n" "${sbatch_args:+ $sbatch_args}" "$batch_script"; fi
        exit 0
    fi
    echo "$PROG: $plan"
    if ((${#todo[@]})); then
        mkdir -p runs/logs
        if ((!wait_slurm)); then
            sbatch "${sbatch_extra[@]}" <<<"$batch_script" || { echo "$PROG: error: sbatch failed" >&2; exit 1; }
            echo "Watch it with squeue --me; the same command with --summary summarises it."
            exit 0
        fi
        # In the background: bash runs a trap only once its foreground command ends, and sbatch --wait lasts as
        # long as the job. The summary says how each task ended.
        sbatch --wait "${sbatch_extra[@]}" <<<"$batch_script" &
        sbatch_pid=$!
        ((stopped)) || wait "$sbatch_pid" || true  # a signal before the wait began has run its trap already
        if ((stopped)); then
            kill "$sbatch_pid" 2>/dev/null || true  # its client only: the job is Slurm's
            echo "$PROG: stopped waiting; the job goes on (scancel --name=${job_name:-$exp_name} stops it)"
        fi
    fi
    summary table && exit 0 || exit "$((stopped ? stopped : 1))"
fi

# --- Local: N runs at a time through xargs, those of worker slot k on the cores slot_cpus[k] ----------------

plan+=", ${#todo[@]} to run, $workers at a time, $cores_per_run core(s) each, pinned to the cores: ${slot_cpus[*]:-no}"
if ((dry_run)); then
    echo "# $plan"
    for i in "${todo[@]}"; do run_command "$i"; done
    exit 0
fi

# run_in_slot RUN_DIR COMMAND: one run in xargs' worker slot $SLOT, on that slot's cores.
run_in_slot() {
    local cpus pin=()
    trap 'exit 130' INT TERM  # once the run has saved its checkpoint: the sweep prints the summary
    read -r -a cpus <<<"$SLOT_CPUS"
    ((${#cpus[@]} == 0)) || pin=(taskset -c "${cpus[SLOT]}")
    echo "[$(date +%T)] start $1${pin[*]+ (cores ${pin[2]})}"
    "${pin[@]}" bash -c "$2" || true
    echo "[$(date +%T)] end   $1: $(tail -n 1 "$1/output.log")"
}
export -f run_in_slot
export SLOT_CPUS="${slot_cpus[*]}"
echo "$PROG: $plan; python: ${python[*]}"
# A SIGTERM sent to this script alone (kill PID) goes on to xargs' workers and their runs: xargs is stopped
# first, so that it starts no worker meanwhile; a worker whose run has not started exits before starting it;
# each run saves its state; then xargs goes. (Sent to the whole group, the runs have it already, and ignore a
# second.) The children come from /proc, as procps may be missing from a container.
xargs_pid=""
stop_runs() {
    [[ -n "$xargs_pid" ]] || return 0
    local children=/proc/$xargs_pid/task/$xargs_pid/children slots worker runs
    kill -STOP "$xargs_pid" 2>/dev/null || return 0
    [[ -r "$children" ]] || echo "$PROG: warning: cannot list xargs' workers ($children): the runs go on to their end" >&2
    slots=$(cat "$children" 2>/dev/null) || true
    for worker in $slots; do
        runs=()
        read -r -a runs 2>/dev/null <"/proc/$worker/task/$worker/children" || true
        kill -TERM "$worker" "${runs[@]}" 2>/dev/null || true
    done
    kill -TERM "$xargs_pid" 2>/dev/null || true
    kill -CONT "$xargs_pid" 2>/dev/null || true
}
trap 'stopped=143; stop_runs' TERM
# xargs runs in the background, so that a trap runs at once rather than when xargs returns. Background commands
# start with SIGINT ignored: it is restored for xargs, and the INT trap also stops xargs (bash 4.2 cannot restore
# it), so that Ctrl-C, which the terminal sends to every run, starts no new one.
for i in "${todo[@]}"; do printf '%s\0%s\0' "${dirs[i]}" "$(run_command "$i")"; done |
    { trap - INT QUIT; exec xargs -0 -r -n 2 -P "$workers" --process-slot-var=SLOT bash -c 'run_in_slot "$@"' run; } &
xargs_pid=$!
trap 'stopped=130; kill -TERM "$xargs_pid" 2>/dev/null || true' INT
((stopped != 143)) || stop_runs  # a SIGTERM that came before xargs_pid was known
while kill -0 "$xargs_pid" 2>/dev/null; do wait "$xargs_pid" || true; done
trap 'stopped=143' TERM
trap 'stopped=130' INT
if ((stopped)); then  # xargs has gone; the runs are saving their checkpoints: wait for each to let go of its lock
    for dir in "${dirs[@]}"; do ! [[ -e "$dir/.lock" ]] || flock "$dir/.lock" true || true; done
fi
summary table && exit 0 || exit "$((stopped ? stopped : 1))"
}
