#!/usr/bin/env bash
# End-to-end check of `benchmark.sh --slurm --wait` against a real single-node Slurm on this host.
#
# Installs Debian's Slurm (slurmctld, slurmd, slurm-client: the parts of slurm-wlm a node needs) and
# munge if missing (needs root and apt), writes a minimal slurm.conf for this host (no cgroups, no
# accounting), starts munged, slurmctld and slurmd, then
#   1. submits a tiny sweep (2 env ids x 1 seed, 4096 steps) with benchmark.sh --slurm --wait and
#      checks that it succeeds and that every run directory with its event file appears;
#   2. runs the same command again: every run has ended, so nothing is submitted and it exits 0;
#   3. submits a sweep with a bogus env id and checks that benchmark.sh exits non-zero naming it;
#   4. runs report.py on the first sweep.
# Daemons this script started are stopped at the end unless --keep-running is given.
#
# Usage: tests/slurm/run_slurm_check.sh [--keep-running] [--workdir DIR]
#   (transcript: tests/slurm/run_slurm_check.sh 2>&1 | tee docs/slurm-transcript.txt)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
keep_running=0
workdir=""
while (($#)); do
    case "$1" in
        --keep-running) keep_running=1 ;;
        --workdir) workdir=$2; shift ;;
        -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "run_slurm_check.sh: error: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift
done

say() { printf '\n=== %s\n' "$*"; }
# What slurmctld recorded for a job's array tasks (kept for MinJobAge, 300 s, after they end).
show_job() {
    echo "+ scontrol -o show job $1  (abridged)"
    scontrol -o show job "$1" | while read -r record; do
        grep -oE ' (ArrayJobId|ArrayTaskId|JobName|JobState|ExitCode|StartTime|EndTime|NodeList|NumCPUs)=[^ ]+' <<<" $record" |
            paste -sd' '
    done
}
run() { printf '+ %s\n' "$*"; "$@"; }
fail() { echo "SLURM CHECK FAILED: $*" >&2; exit 1; }

conf_dir=/etc/slurm
state_dir=/var/spool/slurm-check
log_dir=/var/log/slurm-check
started=()

cleanup() {
    if ((keep_running)); then
        ((${#started[@]} == 0)) || echo "(leaving ${started[*]} running: --keep-running)"
        return
    fi
    local daemon pid
    for daemon in "${started[@]+"${started[@]}"}"; do
        pid=$(cat "/run/slurm-check-$daemon.pid" 2>/dev/null || true)
        if [[ -n "$pid" ]] && kill "$pid" 2>/dev/null; then
            echo "stopped $daemon (pid $pid)"
        fi
    done
}
trap cleanup EXIT

# ---------------------------------------------------------------------------------------------------
say "install"
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    ((EUID == 0)) || fail "slurm-wlm/munge are missing and installing them needs root"
    run apt-get update -qq
    # the daemons and client commands of Debian's slurm-wlm, without its many optional plugins
    packages=(slurmctld slurmd slurm-client munge)
    echo "+ apt-get install -y -qq --no-install-recommends ${packages[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
fi
dpkg-query -W -f='${Package} ${Version}\n' slurmctld slurmd slurm-client munge

# ---------------------------------------------------------------------------------------------------
say "munge"
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    [[ -s /etc/munge/munge.key ]] || run runuser -u munge -- mungekey --create
    install -d -o munge -g munge -m 0755 /run/munge
    run runuser -u munge -- /usr/sbin/munged
    started+=(munged)
    cp /run/munge/munged.pid /run/slurm-check-munged.pid
fi
munge -n | unmunge | grep -E '^STATUS' || fail "munge does not work"

# ---------------------------------------------------------------------------------------------------
say "slurm.conf"
host=$(hostname -s)
cpus=$(nproc)
real_memory=$(free -m | awk '/^Mem:/ { print int($2 * 0.9) }')
mkdir -p "$conf_dir" "$state_dir/ctld" "$state_dir/d" "$log_dir"
if ! scontrol ping 2>/dev/null | grep -q UP; then
    cat >"$conf_dir/slurm.conf" <<EOF
# Minimal single-node Slurm for run_slurm_check.sh: no cgroups, no accounting, daemons run as root.
ClusterName=benchcheck
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$state_dir/ctld
SlurmdSpoolDir=$state_dir/d
SlurmctldPidFile=/run/slurm-check-slurmctld.pid
SlurmdPidFile=/run/slurm-check-slurmd.pid
SlurmctldLogFile=$log_dir/slurmctld.log
SlurmdLogFile=$log_dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
SlurmdTimeout=60
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$real_memory State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    cat "$conf_dir/slurm.conf"

    say "start slurmctld and slurmd"
    run slurmctld -i
    started+=(slurmctld)
    run slurmd
    started+=(slurmd)
else
    echo "(a slurmctld already answers; using it as it is)"
fi

# Wait (bounded) until the node is idle.
for ((i = 0; ; i++)); do
    node_state=$(sinfo -h -N -n "$host" -o %T 2>/dev/null || true)
    [[ "$node_state" == idle* || "$node_state" == mix* ]] && break
    if [[ "$node_state" == down* || "$node_state" == drain* ]]; then
        scontrol update NodeName="$host" State=RESUME 2>/dev/null || true
    fi
    ((i < 60)) || { tail -20 "$log_dir"/*.log >&2 || true; fail "node $host is '$node_state', not idle, after 60 s"; }
    sleep 1
done
run pgrep -a -x 'slurmctld|slurmd|munged'
run scontrol ping
run sinfo -N -l

# ---------------------------------------------------------------------------------------------------
if [[ -z "$workdir" ]]; then
    workdir=$(mktemp -d /tmp/slurm-check.XXXXXX)
fi
mkdir -p "$workdir/ok" "$workdir/fail"
envs="InvertedPendulum-v4 Hopper-v4"
say "1. a tiny sweep: $envs x 1 seed, through benchmark.sh --slurm --wait"
status=0
sweep=("$REPO/benchmark.sh" --slurm --wait --workdir "$workdir/ok" --env-ids "$envs" --seeds 1 --cores-per-run 1
    -- --total-timesteps 4096 --num-envs 8 --num-steps 64)
# sweep_out ARGS...: runs benchmark.sh with ARGS, shows its output and exit status, sets $out, $status and $job
sweep_out() {
    echo "+ $*"
    status=0
    out=$("$@" 2>&1) || status=$?
    printf '%s\n(exit status %s)\n' "$out" "$status"
    job=$(sed -n 's/^Submitted batch job //p' <<<"$out")
}
sweep_out "${sweep[@]}"
((status == 0)) || fail "benchmark.sh --slurm --wait exited $status"
run cat "$workdir"/ok/runs/logs/*.out
show_job "$job"
for env_id in $envs; do
    found=$(ls "$workdir"/ok/runs/"${env_id}"__*__1/events.out.tfevents.* 2>/dev/null || true)
    [[ -n "$found" ]] || fail "no run directory with an event file for $env_id in $workdir/ok/runs"
    echo "ok: $found"
done

say "2. the same command again: every run has ended, nothing to submit"
sweep_out "${sweep[@]}"
((status == 0)) || fail "the same command again exited $status"
[[ -z "$job" ]] || fail "the same command again submitted job $job"

say "3. a failing sweep (bogus env id) must exit non-zero and name the run"
sweep_out "$REPO/benchmark.sh" --slurm --wait --workdir "$workdir/fail" --env-ids NoSuchEnv-v0 --seeds 1 \
    --job-name bench-check-fail -- --total-timesteps 4096
((status != 0)) || fail "a failing sweep exited 0"
grep -q "NoSuchEnv-v0 seed 1: no-summary -- .*unknown --env-id" <<<"$out" || fail "the failed run is not named"
show_job "$job"

say "4. report.py on the first sweep"
run uv run --frozen --project "$REPO" python "$REPO/report.py" "$workdir/ok/runs" --out-dir "$workdir/report" --no-plots \
    --env-id InvertedPendulum-v4 --env-id Hopper-v4 2>&1

say "SLURM CHECK PASSED"
