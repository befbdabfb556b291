#!/usr/bin/env bash
# Run ppo_continuous_envpool_jax.py over env ids x seeds, locally (N runs at a time, each pinned to its
# own cores) or as a Slurm job array. `./benchmark.sh --help` explains every flag.
set -euo pipefail
# The whole script is one { ... } group, which bash reads to its end before running any of it: a running
# sweep is not disturbed when this file is edited or checked out under it (bash reads a script as it goes).
{

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly REPO
readonly SCRIPT="$REPO/ppo_continuous_envpool_jax.py"
readonly PROG="benchmark.sh"

usage() {
    cat <<EOF
Usage: ./$PROG [options] [-- training-script flags...]

Runs ppo_continuous_envpool_jax.py once per (env id, seed). Each run logs TensorBoard events to
runs/{env_id}__{exp_name}__{seed}__{time}/ as usual; its stdout/stderr goes to
runs/logs/<sweep>/<env_id>__<seed>.log. At the end a summary (env, seed, status, what this call did
with the run, duration, last return) is printed; the exit status is non-zero if any run failed, diverged
or was interrupted (1; 130 after Ctrl-C, which stops the running runs, each keeping a checkpoint; 2 for
a bad option).

A sweep that stopped (Ctrl-C, a killed process, a lost machine, a Slurm job past its time) is picked
up with --continue: runs that succeeded are skipped, and so are runs whose training diverged (a
result, not retried; their last finite state stays in their run directory); runs with a checkpoint are
resumed in their own run directory, the rest (failed ones included) are started; the summary's action
column says which (skipped, resumed, started). A run started again whose earlier attempt left a run
directory without a checkpoint (killed within its first minute, or failed) has that directory moved to
runs/logs/<sweep>/abandoned/, kept but out of the report's way. Running the same command again starts a
new sweep instead.

Sweep:
  --env-ids "A B ..."   env ids, separated by spaces or commas
                        (default: "HalfCheetah-v4 Hopper-v4 Walker2d-v4")
  --seeds N             number of seeds per env id (default: 3)
  --first-seed S        seeds are S, S+1, ..., S+N-1 (default: 1)
  -- FLAGS...           everything after -- is passed to every run, e.g. -- --total-timesteps 4096
                        (--env-id, --seed, --num-threads and --resume are set by this script)

Resources (local runs):
  --workers N           runs at the same time (default: 1)
  --cores-per-run C     cores given to each run: it is pinned with taskset to its own C cores and
                        gets --num-threads C (default: usable cores / workers; here $(count_cores) usable)
  --no-pin              do not pin runs with taskset (they still get --num-threads C)

Slurm:
  --slurm               submit the sweep as a Slurm job array (one task per env id x seed, each with
                        --cpus-per-task C, C = --cores-per-run, default 1) instead of running locally;
                        a task that Slurm requeues (preemption, node failure: the script asks for
                        --requeue) resumes its run from its checkpoint, as --continue does
  --wait                with --slurm: wait for the job to finish (polling squeue), then print the
                        summary; Ctrl-C stops the waiting only, the job keeps running
  --workers N           with --slurm: at most N array tasks run at once (sbatch --array=...%N)
  --job-name NAME       Slurm job name (default: ppo-sweep)
  --sbatch-args "ARGS"  extra sbatch options, e.g. "--partition=cpu --time=02:00:00 --mem=8G"

Continue:
  --continue DIR        pick up the sweep whose log directory is DIR (runs/logs/<sweep>): its env ids,
                        seeds, flags after --, --python, --workers, ... are read from DIR/sweep.args;
                        only --workers, --cores-per-run, --no-pin, --python, --wait, --job-name,
                        --sbatch-args and --dry-run may be given again (they override the saved ones).
                        A run whose process from an earlier call is still alive is waited for, never
                        run twice at once. A --slurm sweep is submitted again.
  --task I              with --continue: skip, resume or start only run I (the index in DIR/runs.tsv),
                        here and now (each local worker and each Slurm array task runs this)

Other:
  --python "CMD"        how to start Python (split on spaces). Default: "uv run --frozen --project
                        <repo> python" when uv is installed, else <repo>/.venv/bin/python, else python3
                        (with --slurm it must also work on the compute nodes)
  --workdir DIR         run from DIR, so runs land in DIR/runs/ (default: the current directory)
  --dry-run             print what would be run (or the sbatch script) and exit
  --summary DIR         print the summary of an earlier sweep from its log directory
                        runs/logs/<sweep> and exit (0 if all its runs succeeded)
  -h, --help            show this help

Examples:
  # 2 envs x 3 seeds, two runs at a time (each pinned to half the cores), 100k steps per run
  ./$PROG --env-ids "HalfCheetah-v4 Hopper-v4" --seeds 3 --workers 2 -- --total-timesteps 100000

  # the same sweep as a Slurm job array, 4 CPUs per task; wait for it and summarise
  ./$PROG --slurm --wait --cores-per-run 4 --env-ids "HalfCheetah-v4 Hopper-v4" --seeds 3 \\
      --sbatch-args "--time=01:00:00" -- --total-timesteps 1000000

  # after a Ctrl-C, a killed terminal or a lost node: finish that sweep
  ./$PROG --continue runs/logs/20261201-101500

  # then tables and learning curves
  uv run python report.py runs --out-dir docs
EOF
}

die() {
    echo "$PROG: error: $*" >&2
    exit 2
}

# --- CPU bookkeeping --------------------------------------------------------------------------------

# The CPUs this process may run on (respects an existing taskset/cgroup affinity), one per line.
usable_cpus() {
    local list
    list=$(awk '/^Cpus_allowed_list:/ {print $2}' /proc/self/status 2>/dev/null || true)
    if [[ -z "$list" ]]; then
        seq 0 $(($(nproc) - 1))
        return
    fi
    local part lo hi
    for part in ${list//,/ }; do
        if [[ "$part" == *-* ]]; then
            lo=${part%-*} hi=${part#*-}
            seq "$lo" "$hi"
        else
            echo "$part"
        fi
    done
}

count_cores() { usable_cpus | wc -l; }

# --- arguments --------------------------------------------------------------------------------------

env_ids_arg="HalfCheetah-v4 Hopper-v4 Walker2d-v4"
num_seeds=3
first_seed=1
workers=""
cores_per_run=""
pin=1
slurm=0
wait_slurm=0
job_name="ppo-sweep"
sbatch_args=""
python_cmd=""
workdir="."
dry_run=0
summary_dir=""
continue_dir=""
task=""
extra=()
declare -A given=()  # the options of the last parse_options call: --continue allows only some of them

is_uint() { [[ "$1" =~ ^(0|[1-9][0-9]*)$ ]]; }

# quote_words ARGS...: the arguments as shell words (nothing at all for no arguments)
quote_words() { (($#)) && printf '%q ' "$@"; return 0; }

# parse_options ARGS...: sets the variables above from the options, and `given` to the options seen.
parse_options() {
    local opt value has_inline_value
    given=()
    while (($#)); do
        opt=$1
        value=""
        has_inline_value=0
        if [[ "$opt" == --*=* ]]; then
            value=${opt#*=} opt=${opt%%=*} has_inline_value=1
        fi
        case "$opt" in
            --env-ids | --seeds | --first-seed | --workers | --cores-per-run | --job-name | --sbatch-args | --python | --workdir | --summary | --continue | --task)
                if ((!has_inline_value)); then
                    (($# >= 2)) || die "$opt needs a value (see --help)"
                    value=$2
                    shift
                fi
                ;;
            -h | --help | --no-pin | --slurm | --wait | --dry-run)
                ((!has_inline_value)) || die "$opt takes no value"
                ;;
        esac
        given[$opt]=1
        case "$opt" in
            -h | --help) usage; exit 0 ;;
            --env-ids) env_ids_arg=$value ;;
            --seeds) num_seeds=$value ;;
            --first-seed) first_seed=$value ;;
            --workers) workers=$value ;;
            --cores-per-run) cores_per_run=$value ;;
            --no-pin) pin=0 ;;
            --slurm) slurm=1 ;;
            --wait) wait_slurm=1 ;;
            --job-name) job_name=$value ;;
            --sbatch-args) sbatch_args=$value ;;
            --python) python_cmd=$value ;;
            --workdir) workdir=$value ;;
            --dry-run) dry_run=1 ;;
            --summary) summary_dir=$value ;;
            --continue) continue_dir=$value ;;
            --task) task=$value ;;
            --) shift; extra=("$@"); break ;;
            *) die "unknown option '$1' (flags for the training script go after --; see --help)" ;;
        esac
        shift
    done
}

parse_options "$@"

# --- the training script's side: the one place that says what this file relies on ------------------
#
# `python ppo_continuous_envpool_jax.py --env-id E --seed S --num-threads C FLAGS... [--resume RUN_DIR]`
#   - prints as its first stdout line `run_dir=RUN_DIR`, the run directory it logs to, relative to its
#     working directory (the sweep's --workdir): logged_run_dir finds the run again after a stop;
#   - prints progress lines `iteration=I/N global_step=S return=R SPS=X [eval=E]` (R is - in an
#     iteration where no episode ended): the summary shows the last R (last_return);
#   - keeps a resumable checkpoint RUN_DIR/<exp_name>.model while it runs and after SIGINT/SIGTERM; at
#     a normal end it is removed (unless --save-model: then it is the final model);
#   - with --resume RUN_DIR continues that run in RUN_DIR (a directory without a .model is an error, so
#     plan_run passes --resume only when there is one);
#   - exits 0 when done, 128+signal after SIGINT/SIGTERM (the checkpoint kept), 1 on errors; when training
#     diverged (a non-finite loss or parameter), it prints a line that starts with `error: training
#     diverged` (last_attempt_diverged).
# tests/test_benchmark.py checks these lines against the real script.

# The run directory a run's log names (its last "run_dir=" line), or nothing.
logged_run_dir() {
    [[ -f "$1" ]] || return 0
    sed -n 's/^run_dir=//p' "$1" | tail -n 1
}

# Whether the latest attempt in a run's log (the lines after its last "+ command" line) diverged.
last_attempt_diverged() {
    awk '/^\+ / { hit = 0 } /^error: training diverged/ { hit = 1 } END { exit !hit }' "$1"
}

# Last "return=X" (X != "-") printed by the training script, or "-".
last_return() {
    [[ -f "$1" ]] || { echo "-"; return; }
    awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^return=/ && $i != "return=-") last = substr($i, 8) }
         END { print (last == "" ? "-" : last) }' "$1"
}

# --- summary (shared by local runs, Slurm --wait and --summary) -------------------------------------

# A sweep's log directory holds sweep.args (the options that define it, one per line, read back by
# --continue), runs.tsv (index, env id, seed), and per run <env>__<seed>.log (the output of every
# attempt, each after its "+ command" line), <env>__<seed>.lock (held while an attempt runs; it names
# the attempt's pid) and, once the latest attempt has ended, <env>__<seed>.status:
# "STATE RC START END ACTION" (STATE: ok, diverged, failed, interrupted; START/END: unix seconds of that
# attempt; ACTION: what the latest call did with the run: started, resumed, skipped).

format_duration() {
    local s=$1
    if ((s >= 3600)); then
        printf '%dh%02dm%02ds' $((s / 3600)) $((s % 3600 / 60)) $((s % 60))
    elif ((s >= 60)); then
        printf '%dm%02ds' $((s / 60)) $((s % 60))
    else
        printf '%ds' "$s"
    fi
}

# The most telling line of a failed run's log: the last line that mentions an error, else the last one.
failure_reason() {
    [[ -f "$1" ]] || { echo "(no log)"; return; }
    awk '/[Ee]rror|Unrecognized|Exception|Killed|CANCELLED|TIME LIMIT/ { hit = $0 }
         NF { last = $0 }
         END { print (hit != "" ? hit : last) }' "$1" |
        sed -e 's/^[[:space:]│]*//' -e 's/[[:space:]│]*$//' | cut -c1-200
}

# print_summary DIR: prints the table and the runs that did not succeed; returns 0 if all are "ok".
print_summary() {
    local dir=$1
    local index env_id seed name log state rc start end action duration ret detail
    local n_total=0 n_ok=0 n_diverged=0 bad=()
    local row='%-24s %5s  %-14s %-8s %9s  %10s  %s\n'
    echo
    echo "Summary of $dir"
    # shellcheck disable=SC2059
    printf "$row" "env" "seed" "status" "action" "duration" "return" "log"
    while IFS=$'\t' read -r index env_id seed; do
        [[ "$index" == "index" ]] && continue
        name="${env_id//\//-}__${seed}"
        log="$dir/$name.log"
        state="" rc="" start="" end="" action="" duration="-" detail=""
        if [[ -f "$dir/$name.status" ]]; then
            read -r state rc start end action <"$dir/$name.status" || true
            duration=$(format_duration $((end - start)))
        elif [[ -f "$log" ]]; then
            state="unfinished"  # still running, or killed without a status (e.g. by Slurm or SIGKILL)
        else
            state="not-started"
        fi
        case "$state" in
            ok) n_ok=$((n_ok + 1)) ;;
            diverged) n_diverged=$((n_diverged + 1)) detail=" -- $(failure_reason "$log") [$log]" ;;
            failed) state="failed(rc=$rc)" detail=" -- $(failure_reason "$log") [$log]" ;;
            unfinished) detail=" -- $(failure_reason "$log") [$log]" ;;
        esac
        [[ "$state" == ok ]] || bad+=("$env_id seed $seed: $state$detail")
        [[ -f "$log" ]] || log="-"
        ret=$(last_return "$log")
        n_total=$((n_total + 1))
        # shellcheck disable=SC2059
        printf "$row" "$env_id" "$seed" "$state" "${action:--}" "$duration" "$ret" "$log"
    done <"$dir/runs.tsv"
    echo "$n_ok/$n_total runs succeeded."
    if ((${#bad[@]})); then
        echo "Runs that did not succeed:"
        printf '  %s\n' "${bad[@]}"
        # --continue skips diverged runs, so it has something to do only if another run did not succeed.
        if ((${#bad[@]} > n_diverged)); then echo "Continue the sweep with: ./$PROG --continue $dir"; fi
        return 1
    fi
    return 0
}

if [[ -n "$summary_dir" ]]; then
    [[ -f "$summary_dir/runs.tsv" ]] || die "--summary: no runs.tsv in '$summary_dir' (expected a runs/logs/<sweep> directory)"
    print_summary "$summary_dir" && exit 0 || exit 1
fi

# --- continuing a sweep -----------------------------------------------------------------------------

# The sweep's own options come first, then the few of this command line that may override them.
if [[ -n "$continue_dir" ]]; then
    for opt in "${!given[@]}"; do
        case "$opt" in
            --continue | --task | --workers | --cores-per-run | --no-pin | --python | --wait | --job-name | --sbatch-args | --dry-run) ;;
            *) die "$opt cannot be given with --continue: the sweep's settings are read from its sweep.args" ;;
        esac
    done
    [[ -f "$continue_dir/sweep.args" ]] || die "--continue: no sweep.args in '$continue_dir' (expected a runs/logs/<sweep> directory)"
    mapfile -t saved_args <"$continue_dir/sweep.args"
    parse_options "${saved_args[@]}"
    parse_options "$@"
    continue_dir=$(cd "$continue_dir" && pwd)
fi
[[ -z "$task" || -n "$continue_dir" ]] || die "--task only applies with --continue"
[[ -z "$task" ]] || ((!dry_run)) || die "--dry-run does not apply with --task (without --task it shows what --continue would do)"

# --- validation -------------------------------------------------------------------------------------

read -r -a env_ids <<<"${env_ids_arg//,/ }"
((${#env_ids[@]})) || die "--env-ids is empty"
for env_id in "${env_ids[@]}"; do
    [[ "$env_id" =~ ^[A-Za-z0-9][A-Za-z0-9._/-]*$ ]] || die "--env-ids: '$env_id' is not an env id (letters, digits, . _ - /)"
done
if [[ $(printf '%s\n' "${env_ids[@]}" | sort | uniq -d) ]]; then
    die "--env-ids lists an env id twice"
fi
is_positive() { is_uint "$1" && (($1 > 0)); }
is_positive "$num_seeds" || die "--seeds must be a positive integer, got '$num_seeds'"
is_uint "$first_seed" || die "--first-seed must be a non-negative integer, got '$first_seed'"
# The training script's seeds are EnvPool's int32; the lengths come first, so bash's 64-bit sum cannot wrap.
((${#first_seed} <= 10 && ${#num_seeds} <= 10 && first_seed + num_seeds - 1 <= 2147483647)) ||
    die "the last seed, --first-seed + --seeds - 1, must be at most 2147483647 (EnvPool's seeds are int32)"
[[ -z "$workers" ]] || is_positive "$workers" || die "--workers must be a positive integer, got '$workers'"
[[ -z "$cores_per_run" ]] || is_positive "$cores_per_run" || die "--cores-per-run must be a positive integer, got '$cores_per_run'"

((slurm || !wait_slurm)) || die "--wait only applies with --slurm"
((slurm)) || [[ -z "$sbatch_args" ]] || die "--sbatch-args only applies with --slurm"
[[ -d "$workdir" ]] || die "--workdir '$workdir' is not a directory"
[[ -f "$SCRIPT" ]] || die "training script not found: $SCRIPT"
for arg in "${extra[@]+"${extra[@]}"}"; do
    case "$arg" in
        --env-id | --env-id=* | --env_id | --env_id=* | --seed | --seed=* | --num-threads | --num-threads=* | --num_threads | --num_threads=* | --resume | --resume=*)
            die "do not pass ${arg%%=*} after --: the sweep sets it (use --env-ids, --seeds, --cores-per-run, --continue)" ;;
        # Each would make every run exit 0 without training, and --continue would then skip them as finished.
        -h | --help | --list-tasks | --list_tasks | --evaluate | --evaluate=*)
            die "do not pass ${arg%%=*} after --: a sweep trains (run the training script itself for it)" ;;
    esac
done

if [[ -n "$python_cmd" ]]; then
    read -r -a python <<<"$python_cmd"
elif command -v uv >/dev/null; then
    python=(uv run --frozen --project "$REPO" python)
elif [[ -x "$REPO/.venv/bin/python" ]]; then
    python=("$REPO/.venv/bin/python")
else
    python=(python3)
fi
((${#python[@]})) || die "--python is empty"
command -v "${python[0]}" >/dev/null || die "--python: '${python[0]}' not found"

workdir=$(cd "$workdir" && pwd)

# What defines the sweep, as given, for sweep.args (resources the machine decides are left out).
sweep_args=(--workdir "$workdir" --env-ids "${env_ids[*]}" --seeds "$num_seeds" --first-seed "$first_seed")
if [[ -n "$workers" ]]; then sweep_args+=(--workers "$workers"); fi
if [[ -n "$cores_per_run" ]]; then sweep_args+=(--cores-per-run "$cores_per_run"); fi
if ((!pin)); then sweep_args+=(--no-pin); fi
if [[ -n "$python_cmd" ]]; then sweep_args+=(--python "$python_cmd"); fi
if ((slurm)); then sweep_args+=(--slurm --job-name "$job_name" --sbatch-args "$sbatch_args"); fi
sweep_args+=(-- "${extra[@]+"${extra[@]}"}")
[[ "${sweep_args[*]}" != *$'\n'* ]] || die "options must not contain newlines (sweep.args keeps one per line)"

# runs: seed-major, so that a partial sweep already covers every env id.
run_envs=() run_seeds=()
for ((seed = first_seed; seed < first_seed + num_seeds; seed++)); do
    for env_id in "${env_ids[@]}"; do
        run_envs+=("$env_id")
        run_seeds+=("$seed")
    done
done
num_runs=${#run_envs[@]}
[[ -z "$task" ]] || { is_uint "$task" && ((task < num_runs)); } || die "--task must be a run index 0..$((num_runs - 1)), got '$task'"

# A run's file names in the sweep directory; "/" (MetaWorld/Reach-v3) becomes "-", as in its run directory.
run_name() { echo "${run_envs[$1]//\//-}__${run_seeds[$1]}"; }

new_sweep_dir() {
    local base dir
    base="$workdir/runs/logs/$(date +%Y%m%d-%H%M%S)"
    mkdir -p "$workdir/runs/logs"
    dir=$base
    local i=1
    until mkdir "$dir" 2>/dev/null; do
        dir="$base-$i"
        i=$((i + 1))
    done
    printf '%s\n' "${sweep_args[@]}" >"$dir/sweep.args"
    {
        printf 'index\tenv_id\tseed\n'
        for ((i = 0; i < num_runs; i++)); do
            printf '%d\t%s\t%s\n' "$i" "${run_envs[i]}" "${run_seeds[i]}"
        done
    } >"$dir/runs.tsv"
    echo "$dir"
}

# =====================================================================================================
# One run: skip, resume or start it. Each local worker and each Slurm array task runs
# `benchmark.sh --continue SWEEP_DIR --task I`, so both pick a run up the same way.
# =====================================================================================================

# plan_run INDEX: what the run needs now, from its files alone (run from the workdir): sets $action
# (skipped: its latest attempt ended ok or diverged, $skipped says which; resumed: its run directory has a
# checkpoint; started), $cmd, and $planned_state (the latest attempt's state). A diverged run is a
# result: resuming it from its last finite state on fresh environments would retry it until a seed
# survives, and the sweep would report survivors only.
plan_run() {
    local i=$1 name state="" run_dir
    name=$(run_name "$i")
    if [[ -f "$sweep_dir/$name.status" ]]; then read -r state _ <"$sweep_dir/$name.status"; fi
    # A sweep of a benchmark.sh before the status `diverged` recorded such a run as failed.
    if [[ "$state" == failed ]] && last_attempt_diverged "$sweep_dir/$name.log"; then state=diverged; fi
    planned_state=$state
    cmd=("${python[@]}" "$SCRIPT" --env-id "${run_envs[i]}" --seed "${run_seeds[i]}" --num-threads "$cores_per_run")
    cmd+=("${extra[@]+"${extra[@]}"}")
    run_dir=$(logged_run_dir "$sweep_dir/$name.log")
    if [[ "$state" == ok || "$state" == diverged ]]; then
        action=skipped
        skipped=$([[ "$state" == ok ]] && echo "finished earlier" || echo "diverged earlier: a result, not retried")
    elif [[ -n "$run_dir" ]] && compgen -G "$run_dir/*.model" >/dev/null; then
        action=resumed
        cmd+=(--resume "$run_dir")
    else
        action=started
    fi
}

# abandon_earlier_attempt INDEX: a run being started afresh may have an earlier attempt's run directory
# (the attempt ended before its first checkpoint); its partial curves would sit beside the new run's in
# runs/, so it moves to the sweep's abandoned/ folder, kept rather than deleted.
abandon_earlier_attempt() {
    local name run_dir
    [[ "$action" == started ]] || return 0
    name=$(run_name "$1")
    run_dir=$(logged_run_dir "$sweep_dir/$name.log")
    [[ -n "$run_dir" && -d "$run_dir" ]] || return 0
    mkdir -p "$sweep_dir/abandoned"
    mv "$run_dir" "$sweep_dir/abandoned/"
    echo "[$(date +%H:%M:%S)]        $name: the earlier attempt's $run_dir (no checkpoint) moved to $sweep_dir/abandoned/"
}

signalled=0  # set by run_task's trap

# run_task INDEX: skips, resumes or starts the run in the foreground, appending to its log, and exits
# with its exit status.
run_task() {
    local i=$1 name log lock status cpus start rc state end
    name=$(run_name "$i")
    log="$sweep_dir/$name.log"
    lock="$sweep_dir/$name.lock"
    status="$sweep_dir/$name.status"
    command -v flock >/dev/null || die "flock not found (install util-linux)"
    # fd 9 is inherited by the training script, so the lock is free exactly when no process of an
    # earlier attempt is left, even one whose sweep was killed with SIGKILL: never two at once.
    exec 9>>"$lock"
    if ! flock -n 9; then
        echo "[$(date +%H:%M:%S)] wait   $name: an earlier attempt (task pid $(cat "$lock")) is still running"
        flock 9
    fi
    echo "$$" >"$lock"
    plan_run "$i"
    if [[ "$action" == skipped ]]; then
        read -r _ rc start end _ <"$status"
        echo "$planned_state $rc $start $end skipped" >"$status"
        echo "[$(date +%H:%M:%S)] skip   $name ($skipped)"
        exit 0
    fi
    rm -f "$status"
    cpus=$(usable_cpus | paste -sd,)
    echo "[$(date +%H:%M:%S)] $action $name (cores $cpus)"
    abandon_earlier_attempt "$i"
    printf '# %s: %s on %s, cores %s\n+ %s\n' "$(date '+%F %T')" "$action" "$(hostname)" "$cpus" "${cmd[*]}" >>"$log"
    start=$(date +%s)
    # SIGINT/SIGTERM (Ctrl-C of the sweep, scancel, Slurm's time limit or preemption) reach the script
    # too; bash runs this trap once the script has saved its checkpoint and exited.
    trap 'signalled=1' INT TERM
    PYTHONUNBUFFERED=1 OMP_NUM_THREADS=$cores_per_run "${cmd[@]}" >>"$log" 2>&1 </dev/null && rc=0 || rc=$?
    trap - INT TERM
    if ((rc == 0)); then
        state=ok
    elif last_attempt_diverged "$log"; then  # also when a signal came in the iteration that diverged
        state=diverged
    elif ((signalled)); then
        state=interrupted
    else
        state=failed
    fi
    echo "$state $rc $start $(date +%s) $action" >"$status"
    if ((rc == 0)); then
        echo "[$(date +%H:%M:%S)] ok     $name"
    else
        echo "[$(date +%H:%M:%S)] $state $name (rc=$rc, see $log)"
    fi
    exit "$rc"
}

if [[ -n "$task" ]]; then
    sweep_dir=$continue_dir
    cores_per_run=${cores_per_run:-$(count_cores)}
    cd "$workdir"
    run_task "$task"
fi

# open_sweep_dir: $sweep_dir, the sweep's log directory (the one being continued, else a new one: call
# this once every check has passed), and $task_args, what a task needs to see what this call sees.
open_sweep_dir() {
    if [[ -n "$continue_dir" ]]; then
        sweep_dir=$continue_dir
    elif ((dry_run)); then
        sweep_dir="$workdir/runs/logs/<sweep>"
    else
        sweep_dir=$(new_sweep_dir)
    fi
    task_args=(--continue "$sweep_dir")
    if [[ -n "$python_cmd" ]]; then task_args+=(--python "$python_cmd"); fi
}

# =====================================================================================================
# Slurm: one array task per run.
# =====================================================================================================

if ((slurm)); then
    cores_per_run=${cores_per_run:-1}
    [[ "$workdir" != *[[:space:]]* ]] || die "--slurm: the working directory '$workdir' must not contain spaces"
    if ((!dry_run)); then
        command -v sbatch >/dev/null || die "--slurm: sbatch not found on PATH"
        if ((wait_slurm)); then command -v squeue >/dev/null || die "--wait: squeue not found on PATH"; fi
    fi
    open_sweep_dir
    array="0-$((num_runs - 1))${workers:+%$workers}"
    read -r -a sbatch_extra <<<"$sbatch_args"

    batch_script=$(
        cat <<EOS
#!/usr/bin/env bash
#SBATCH --job-name=$job_name
#SBATCH --array=$array
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=$cores_per_run
#SBATCH --output=$sweep_dir/slurm-%a.out
#SBATCH --open-mode=append
#SBATCH --chdir=$workdir
#SBATCH --requeue
# Generated by benchmark.sh: array task i skips, resumes or starts run i of runs.tsv, so a task that
# Slurm requeues (preemption, a failed node) or a resubmitted sweep (--continue) picks up its checkpoint.
exec $(quote_words "$REPO/benchmark.sh" "${task_args[@]}")--task "\$SLURM_ARRAY_TASK_ID" --cores-per-run "\${SLURM_CPUS_PER_TASK:-$cores_per_run}"
EOS
    )

    if ((dry_run)); then
        echo "# sbatch ${sbatch_extra[*]+"${sbatch_extra[*]}"} <<'EOF'"
        echo "$batch_script"
        echo "EOF"
        exit 0
    fi

    echo "$batch_script" >"$sweep_dir/sweep.sbatch"
    echo "$PROG: submitting $num_runs array tasks (${#env_ids[@]} env ids x $num_seeds seeds), $cores_per_run CPU(s) each"
    job_id=$(sbatch --parsable "${sbatch_extra[@]+"${sbatch_extra[@]}"}" "$sweep_dir/sweep.sbatch") ||
        { echo "$PROG: error: sbatch failed" >&2; exit 1; }
    job_id=${job_id%%;*}
    echo "$job_id" >"$sweep_dir/slurm_job_id"
    echo "Submitted Slurm job $job_id; logs in $sweep_dir"
    echo "  watch:     squeue -j $job_id     (or: tail -f $sweep_dir/*.log)"
    echo "  cancel:    scancel $job_id"
    echo "  summarise: ./$PROG --summary $sweep_dir"
    ((wait_slurm)) || exit 0

    # Wait by polling squeue (works without Slurm accounting, unlike sacct); Ctrl-C stops waiting only.
    trap 'echo; echo "$PROG: stopped waiting; job $job_id keeps running (scancel $job_id to stop it)"; print_summary "$sweep_dir" || true; exit 130' INT TERM
    echo "Waiting for job $job_id ..."
    delay=2
    while true; do
        if ! queued=$(squeue -h -j "$job_id" -o %i 2>/dev/null); then
            # squeue rejects job ids that have already left the controller's memory.
            break
        fi
        [[ -n "$queued" ]] || break
        sleep "$delay"
        delay=$((delay * 2 > 30 ? 30 : delay * 2))
    done
    trap - INT TERM
    print_summary "$sweep_dir" && exit 0 || exit 1
fi

# =====================================================================================================
# Local: N runs at a time, each pinned to its own cores.
# =====================================================================================================

workers=${workers:-1}
mapfile -t cpus < <(usable_cpus)
if [[ -z "$cores_per_run" ]]; then
    cores_per_run=$((${#cpus[@]} / workers))
    if ((cores_per_run == 0 && !pin)); then cores_per_run=1; fi
    ((cores_per_run > 0)) || die "--workers $workers is more than the ${#cpus[@]} usable cores (pass --no-pin to oversubscribe)"
fi
if ((pin)); then
    command -v taskset >/dev/null || die "taskset not found (install util-linux, or pass --no-pin)"
    ((workers * cores_per_run <= ${#cpus[@]})) ||
        die "--workers $workers x --cores-per-run $cores_per_run needs $((workers * cores_per_run)) cores, only ${#cpus[@]} usable (${cpus[*]}); pass --no-pin to oversubscribe"
fi
command -v setsid >/dev/null || die "setsid not found (install util-linux)"
((workers <= num_runs)) || workers=$num_runs

# slot_cpus[k]: the cores of worker slot k, e.g. "0,1"
slot_cpus=()
for ((k = 0; k < workers; k++)); do
    slot_cpus[k]=$(IFS=,; echo "${cpus[*]:k*cores_per_run:cores_per_run}")
done

# pinning SLOT -> the taskset prefix of a run in that slot in $pinning (empty with --no-pin)
pinning() {
    pinning=()
    if ((pin)); then pinning=(taskset -c "${slot_cpus[$1]}"); fi
}

open_sweep_dir
cd "$workdir"
if ((dry_run)); then
    echo "# from $workdir: $num_runs runs, $workers at a time, $cores_per_run core(s) each"
    for ((i = 0; i < num_runs; i++)); do
        plan_run "$i"
        pinning $((i % workers))
        if [[ "$action" == skipped ]]; then
            echo "# $(run_name "$i"): skipped ($skipped)"
        else
            quote_words "${pinning[@]+"${pinning[@]}"}" env "OMP_NUM_THREADS=$cores_per_run" "${cmd[@]}"
            echo
        fi
    done
    exit 0
fi

pinned=""
if ((pin)); then pinned=", pinned with taskset"; fi
verb="running"
if [[ -n "$continue_dir" ]]; then verb="continuing"; fi
echo "$PROG: $verb $num_runs runs (${#env_ids[@]} env ids x $num_seeds seeds), $workers at a time, $cores_per_run core(s) each$pinned"
echo "  python: ${python[*]}"
echo "  runs:   $workdir/runs/    logs: $sweep_dir/"

slot_pid=()    # slot -> pid of its task (the leader of the run's own process group), "" when free
slot_run=()    # slot -> run index
run_start=()   # run index -> unix start time
for ((k = 0; k < workers; k++)); do slot_pid[k]=""; done

interrupted=0
# shellcheck disable=SC2317  # called by the trap below
on_signal() {
    interrupted=$((interrupted + 1))
    local k sig=TERM
    ((interrupted == 1)) || sig=KILL
    echo
    echo "$PROG: interrupted; stopping the running runs with SIG$sig (Ctrl-C again to force)" >&2
    for ((k = 0; k < workers; k++)); do
        if [[ -n "${slot_pid[k]}" ]]; then kill -s "$sig" -- "-${slot_pid[k]}" 2>/dev/null || true; fi
    done
}
trap on_signal INT TERM

start_run() {  # start_run INDEX SLOT
    local i=$1 k=$2
    pinning "$k"
    run_start[i]=$(date +%s)
    # setsid: the task gets its own process group (benchmark.sh --task, uv, python, ...), so it can be
    # stopped as a whole. It prints its start and end lines itself.
    setsid "${pinning[@]+"${pinning[@]}"}" "$REPO/$PROG" "${task_args[@]}" --task "$i" --cores-per-run "$cores_per_run" </dev/null &
    slot_pid[k]=$!
    slot_run[k]=$i
}

finish_run() {  # finish_run SLOT: the task in SLOT has exited
    local k=$1 i name status rc=0 state=failed
    i=${slot_run[k]}
    wait "${slot_pid[k]}" 2>/dev/null || rc=$?
    slot_pid[k]=""
    name=$(run_name "$i")
    status="$sweep_dir/$name.status"
    # Only a task killed outright (Ctrl-C twice) or one that stopped at an error of its own leaves none.
    if [[ ! -f "$status" ]]; then
        if ((interrupted)); then state=interrupted; fi
        echo "$state $rc ${run_start[i]} $(date +%s)" >"$status"
        echo "[$(date +%H:%M:%S)] $state $name (rc=$rc, see $sweep_dir/$name.log)"
    fi
}

wait_for_any() {
    # bash >= 5.1 returns from `wait -n` for a job that ended before the call; older ones may not.
    if ((BASH_VERSINFO[0] > 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] >= 1))); then
        wait -n 2>/dev/null || true
    else
        sleep 1 || true
    fi
}

next=0
while true; do
    # reap the runs that have ended
    busy=0
    for ((k = 0; k < workers; k++)); do
        [[ -n "${slot_pid[k]}" ]] || continue
        if kill -0 "${slot_pid[k]}" 2>/dev/null; then  # (an unreaped zombie counts as busy: wait -n reaps it)
            busy=$((busy + 1))
        else
            finish_run "$k"
        fi
    done
    # fill free slots
    if ((!interrupted)); then
        for ((k = 0; k < workers && next < num_runs; k++)); do
            if [[ -z "${slot_pid[k]}" ]]; then
                start_run "$next" "$k"
                next=$((next + 1))
                busy=$((busy + 1))
            fi
        done
    fi
    ((busy)) || break
    wait_for_any
done
trap - INT TERM

if print_summary "$sweep_dir"; then
    exit 0
elif ((interrupted)); then
    exit 130
else
    exit 1
fi
}
