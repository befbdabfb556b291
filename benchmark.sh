#!/usr/bin/env bash
# Run ppo_continuous_envpool_jax.py over env ids x seeds, locally (N runs at a time, each pinned to its
# own cores) or as a Slurm job array. `./benchmark.sh --help` explains every flag.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly REPO
readonly SCRIPT="$REPO/ppo_continuous_envpool_jax.py"
readonly PROG="benchmark.sh"

usage() {
    cat <<EOF
Usage: ./$PROG [options] [-- training-script flags...]

Runs ppo_continuous_envpool_jax.py once per (env id, seed). Each run logs TensorBoard events to
runs/{env_id}__{exp_name}__{seed}__{time}/ as usual; its stdout/stderr goes to
runs/logs/<sweep>/<env_id>__<seed>.log. At the end a summary (env, seed, status, duration, last
return) is printed; the exit status is non-zero if any run failed or was interrupted (1; 130 after
Ctrl-C, which stops the running runs; 2 for a bad option).

Sweep:
  --env-ids "A B ..."   env ids, separated by spaces or commas
                        (default: "HalfCheetah-v4 Hopper-v4 Walker2d-v4")
  --seeds N             number of seeds per env id (default: 3)
  --first-seed S        seeds are S, S+1, ..., S+N-1 (default: 1)
  -- FLAGS...           everything after -- is passed to every run, e.g. -- --total-timesteps 4096
                        (--env-id, --seed and --num-threads are set by this script)

Resources (local runs):
  --workers N           runs at the same time (default: 1)
  --cores-per-run C     cores given to each run: it is pinned with taskset to its own C cores and
                        gets --num-threads C (default: usable cores / workers; here $(count_cores) usable)
  --no-pin              do not pin runs with taskset (they still get --num-threads C)

Slurm:
  --slurm               submit the sweep as a Slurm job array (one task per env id x seed, each with
                        --cpus-per-task C, C = --cores-per-run, default 1) instead of running locally
  --wait                with --slurm: wait for the job to finish (polling squeue), then print the
                        summary; Ctrl-C stops the waiting only, the job keeps running
  --workers N           with --slurm: at most N array tasks run at once (sbatch --array=...%N)
  --job-name NAME       Slurm job name (default: ppo-sweep)
  --sbatch-args "ARGS"  extra sbatch options, e.g. "--partition=cpu --time=02:00:00 --mem=8G"

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
extra=()

is_uint() { [[ "$1" =~ ^(0|[1-9][0-9]*)$ ]]; }

# quote_words ARGS...: the arguments as shell words (nothing at all for no arguments)
quote_words() { (($#)) && printf '%q ' "$@"; return 0; }

while (($#)); do
    opt=$1
    value=""
    has_inline_value=0
    if [[ "$opt" == --*=* ]]; then
        value=${opt#*=} opt=${opt%%=*} has_inline_value=1
    fi
    case "$opt" in
        --env-ids | --seeds | --first-seed | --workers | --cores-per-run | --job-name | --sbatch-args | --python | --workdir | --summary)
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
        --) shift; extra=("$@"); break ;;
        *) die "unknown option '$1' (flags for the training script go after --; see --help)" ;;
    esac
    shift
done

# --- summary (shared by local runs, Slurm --wait and --summary) -------------------------------------

# A sweep's log directory holds runs.tsv (index, env id, seed), and per run <env>__<seed>.log and,
# once the run has ended, <env>__<seed>.status: "STATE RC START END" (STATE: ok, failed, interrupted;
# START/END: unix seconds).

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

# Last "return=X" (X != "-") printed by the training script, or "-".
last_return() {
    [[ -f "$1" ]] || { echo "-"; return; }
    awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^return=/ && $i != "return=-") last = substr($i, 8) }
         END { print (last == "" ? "-" : last) }' "$1"
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
    local index env_id seed name log state rc start end duration ret detail
    local n_total=0 n_ok=0 bad=()
    local row='%-24s %5s  %-14s %9s  %10s  %s\n'
    echo
    echo "Summary of $dir"
    # shellcheck disable=SC2059
    printf "$row" "env" "seed" "status" "duration" "return" "log"
    while IFS=$'\t' read -r index env_id seed; do
        [[ "$index" == "index" ]] && continue
        name="${env_id}__${seed}"
        log="$dir/$name.log"
        state="" rc="" start="" end="" duration="-" detail=""
        if [[ -f "$dir/$name.status" ]]; then
            read -r state rc start end <"$dir/$name.status" || true
            duration=$(format_duration $((end - start)))
        elif [[ -f "$log" ]]; then
            state="unfinished"  # still running, or killed without a status (e.g. by Slurm)
        else
            state="not-started"
        fi
        case "$state" in
            ok) n_ok=$((n_ok + 1)) ;;
            failed) state="failed(rc=$rc)" detail=" -- $(failure_reason "$log") [$log]" ;;
            unfinished) detail=" -- $(failure_reason "$log") [$log]" ;;
        esac
        [[ "$state" == ok ]] || bad+=("$env_id seed $seed: $state$detail")
        [[ -f "$log" ]] || log="-"
        ret=$(last_return "$log")
        n_total=$((n_total + 1))
        # shellcheck disable=SC2059
        printf "$row" "$env_id" "$seed" "$state" "$duration" "$ret" "$log"
    done <"$dir/runs.tsv"
    echo "$n_ok/$n_total runs succeeded."
    if ((${#bad[@]})); then
        echo "Runs that did not succeed:"
        printf '  %s\n' "${bad[@]}"
        return 1
    fi
    return 0
}

if [[ -n "$summary_dir" ]]; then
    [[ -f "$summary_dir/runs.tsv" ]] || die "--summary: no runs.tsv in '$summary_dir' (expected a runs/logs/<sweep> directory)"
    print_summary "$summary_dir" && exit 0 || exit 1
fi

# --- validation -------------------------------------------------------------------------------------

read -r -a env_ids <<<"${env_ids_arg//,/ }"
((${#env_ids[@]})) || die "--env-ids is empty"
for env_id in "${env_ids[@]}"; do
    [[ "$env_id" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || die "--env-ids: '$env_id' is not an env id (letters, digits, . _ -)"
done
if [[ $(printf '%s\n' "${env_ids[@]}" | sort | uniq -d) ]]; then
    die "--env-ids lists an env id twice"
fi
is_positive() { is_uint "$1" && (($1 > 0)); }
is_positive "$num_seeds" || die "--seeds must be a positive integer, got '$num_seeds'"
is_uint "$first_seed" || die "--first-seed must be a non-negative integer, got '$first_seed'"
[[ -z "$workers" ]] || is_positive "$workers" || die "--workers must be a positive integer, got '$workers'"
[[ -z "$cores_per_run" ]] || is_positive "$cores_per_run" || die "--cores-per-run must be a positive integer, got '$cores_per_run'"

((slurm || !wait_slurm)) || die "--wait only applies with --slurm"
((slurm)) || [[ -z "$sbatch_args" ]] || die "--sbatch-args only applies with --slurm"
[[ -d "$workdir" ]] || die "--workdir '$workdir' is not a directory"
[[ -f "$SCRIPT" ]] || die "training script not found: $SCRIPT"
for arg in "${extra[@]+"${extra[@]}"}"; do
    case "$arg" in
        --env-id | --env-id=* | --env_id | --env_id=* | --seed | --seed=* | --num-threads | --num-threads=* | --num_threads | --num_threads=*)
            die "do not pass ${arg%%=*} after --: the sweep sets it (use --env-ids, --seeds, --cores-per-run)" ;;
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

# runs: seed-major, so that a partial sweep already covers every env id.
run_envs=() run_seeds=()
for ((seed = first_seed; seed < first_seed + num_seeds; seed++)); do
    for env_id in "${env_ids[@]}"; do
        run_envs+=("$env_id")
        run_seeds+=("$seed")
    done
done
num_runs=${#run_envs[@]}

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
    {
        printf 'index\tenv_id\tseed\n'
        for ((i = 0; i < num_runs; i++)); do
            printf '%d\t%s\t%s\n' "$i" "${run_envs[i]}" "${run_seeds[i]}"
        done
    } >"$dir/runs.tsv"
    echo "$dir"
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
        sweep_dir=$(new_sweep_dir)
    else
        sweep_dir="$workdir/runs/logs/<sweep>"
    fi
    array="0-$((num_runs - 1))${workers:+%$workers}"
    read -r -a sbatch_extra <<<"$sbatch_args"

    batch_script=$(
        cat <<EOF
#!/usr/bin/env bash
#SBATCH --job-name=$job_name
#SBATCH --array=$array
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=$cores_per_run
#SBATCH --output=$sweep_dir/slurm-%a.out
#SBATCH --chdir=$workdir
# Generated by benchmark.sh: one array task per (env id, seed) of runs.tsv.
set -uo pipefail
env_ids=($(quote_words "${run_envs[@]}"))
seeds=($(quote_words "${run_seeds[@]}"))
i=\$SLURM_ARRAY_TASK_ID
env_id=\${env_ids[i]}
seed=\${seeds[i]}
threads=\${SLURM_CPUS_PER_TASK:-$cores_per_run}
log=$(printf '%q' "$sweep_dir")/\${env_id}__\${seed}.log
status=$(printf '%q' "$sweep_dir")/\${env_id}__\${seed}.status
start=\$(date +%s)
echo "task \$i: \$env_id seed \$seed on \$(hostname) with \$threads CPU(s); log: \$log"
trap 'echo "interrupted 143 \$start \$(date +%s)" >"\$status"; exit 143' TERM
cmd=($(quote_words "${python[@]}" "$SCRIPT")--env-id "\$env_id" --seed "\$seed" --num-threads "\$threads" $(quote_words "${extra[@]+"${extra[@]}"}"))
printf '+ %s\n' "\${cmd[*]}" >"\$log"
PYTHONUNBUFFERED=1 OMP_NUM_THREADS=\$threads "\${cmd[@]}" >>"\$log" 2>&1 </dev/null
rc=\$?
if ((rc == 0)); then state=ok; else state=failed; fi
echo "\$state \$rc \$start \$(date +%s)" >"\$status"
exit \$rc
EOF
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
    command -v setsid >/dev/null || die "setsid not found (install util-linux)"
    ((workers * cores_per_run <= ${#cpus[@]})) ||
        die "--workers $workers x --cores-per-run $cores_per_run needs $((workers * cores_per_run)) cores, only ${#cpus[@]} usable (${cpus[*]}); pass --no-pin to oversubscribe"
fi
((workers <= num_runs)) || workers=$num_runs

# slot_cpus[k]: the cores of worker slot k, e.g. "0,1"
slot_cpus=()
for ((k = 0; k < workers; k++)); do
    slot_cpus[k]=$(IFS=,; echo "${cpus[*]:k*cores_per_run:cores_per_run}")
done

run_command() {  # run_command INDEX SLOT -> the command array in $cmd
    local i=$1 k=$2
    cmd=(env PYTHONUNBUFFERED=1 "OMP_NUM_THREADS=$cores_per_run")
    if ((pin)); then cmd+=(taskset -c "${slot_cpus[k]}"); fi
    cmd+=("${python[@]}" "$SCRIPT" --env-id "${run_envs[i]}" --seed "${run_seeds[i]}" --num-threads "$cores_per_run")
    cmd+=("${extra[@]+"${extra[@]}"}")
}

if ((dry_run)); then
    echo "# from $workdir: $num_runs runs, $workers at a time, $cores_per_run core(s) each"
    for ((i = 0; i < num_runs; i++)); do
        run_command "$i" $((i % workers))
        printf '%q ' "${cmd[@]}"
        echo
    done
    exit 0
fi

cd "$workdir"
sweep_dir=$(new_sweep_dir)
pinned=""
if ((pin)); then pinned=", pinned with taskset"; fi
echo "$PROG: $num_runs runs (${#env_ids[@]} env ids x $num_seeds seeds), $workers at a time, $cores_per_run core(s) each$pinned"
echo "  python: ${python[*]}"
echo "  runs:   $workdir/runs/    logs: $sweep_dir/"

run_name() { echo "${run_envs[$1]}__${run_seeds[$1]}"; }

slot_pid=()    # slot -> pid of its run (the leader of the run's own process group), "" when free
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
    local i=$1 k=$2 name log status
    name=$(run_name "$i")
    log="$sweep_dir/$name.log"
    status="$sweep_dir/$name.status"
    run_command "$i" "$k"
    printf '+ %s\n' "${cmd[*]}" >"$log"
    run_start[i]=$(date +%s)
    # setsid: the run gets its own process group (uv, python, ...), so it can be stopped as a whole.
    # The wrapper writes the status file when the run ends by itself.
    # shellcheck disable=SC2016  # $1, $@ ... belong to the inner bash
    setsid bash -c '
        status=$1 start=$2
        shift 2
        "$@"
        rc=$?
        if ((rc == 0)); then state=ok; else state=failed; fi
        echo "$state $rc $start $(date +%s)" >"$status"
        exit "$rc"' benchmark-run "$status" "${run_start[i]}" "${cmd[@]}" >>"$log" 2>&1 </dev/null &
    slot_pid[k]=$!
    slot_run[k]=$i
    echo "[$(date +%H:%M:%S)] start  $name (cores ${slot_cpus[k]})"
}

finish_run() {  # finish_run SLOT: the run in SLOT has exited
    local k=$1 i name status state rc _
    i=${slot_run[k]}
    wait "${slot_pid[k]}" 2>/dev/null || true
    slot_pid[k]=""
    name=$(run_name "$i")
    status="$sweep_dir/$name.status"
    if [[ ! -f "$status" ]]; then
        echo "interrupted 143 ${run_start[i]} $(date +%s)" >"$status"
    fi
    read -r state rc _ <"$status"
    if [[ "$state" == ok ]]; then
        echo "[$(date +%H:%M:%S)] ok     $name"
    else
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
