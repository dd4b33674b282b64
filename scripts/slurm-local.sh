#!/usr/bin/env bash
# A resilab campaign on a real Slurm, on this one machine (as root; CI runs it):
#
#   cargo build --release && bash scripts/slurm-local.sh
#
# 1. installs Debian's slurm-wlm and munge (when missing), writes a one-node slurm.conf
#    (all CPUs of this machine, no accounting) into a scratch directory, and starts munged,
#    slurmctld and slurmd (refused when a Slurm controller already runs here);
# 2. runs configs/slurm/smoke.toml in one process: the reference;
# 3. submits the shipped array script, configs/slurm/campaign-array.sh, for the same campaign
#    in 4 shards; once shard 0 has recorded a run it is cancelled with scancel, and once shard 2
#    has, its process is killed with SIGKILL (a lost node). Shards 0 and 2 hold the 1-flip runs,
#    which train all their steps; the 100-flip runs of shards 1 and 3 stop at their collapse and
#    could finish before a cancellation;
# 4. checks that `campaign --status` names the missing runs and that merge refuses the
#    incomplete parts, resubmits the two tasks on their own (--resume, RESILAB_SHARDS=4), and
#    waits for them;
# 5. merges the shards and checks that the merged runs.csv equals the single-process run's,
#    row for row (values equal, ordered by grid index; the seconds each run took aside), that
#    no shard recorded a run twice, and that each task's log has one line per finished run.
# The daemons are stopped at the end (RESILAB_SLURM_KEEP=1 keeps them and the scratch directory).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
resilab="${RESILAB:-$ROOT/target/release/resilab}"
campaign="$ROOT/configs/slurm/smoke.toml"
shards=4
log() { echo "slurm-local: $*"; }
fail() { echo "slurm-local: FAILED: $*" >&2; exit 1; }

[ -x "$resilab" ] || fail "no binary at $resilab: run cargo build --release first"
[ "$(id -u)" = 0 ] || fail "run as root (it installs packages and starts the Slurm daemons)"
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null || ! command -v pgrep >/dev/null; then
    log "installing slurm-wlm and munge"
    export DEBIAN_FRONTEND=noninteractive
    packages="slurm-wlm munge procps"
    apt-get install -y -q --no-install-recommends $packages >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends $packages >/dev/null; }
fi
if pgrep -x slurmctld >/dev/null; then fail "a Slurm controller already runs on this machine; this script sets up its own"; fi

work="$(mktemp -d /tmp/resilab-slurm.XXXXXX)"
chmod 755 "$work"
export SLURM_CONF="$work/slurm.conf"
host="$(hostname -s)"
cpus="$(nproc)"
mkdir -p "$work/state" "$work/spool" "$work/logs"
cat >"$SLURM_CONF" <<CONF
ClusterName=resilab
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
KillWait=5
MinJobAge=600
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=main Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF

stop() {
    local rc=$?
    scancel --quiet --user root 2>/dev/null || true
    if [ "${RESILAB_SLURM_KEEP:-0}" = 1 ]; then
        log "daemons left running; SLURM_CONF=$SLURM_CONF"
    else
        local daemons="slurmd slurmctld"
        [ -n "${started_munged:-}" ] && daemons="$daemons munged"
        for d in $daemons; do pkill -x "$d" 2>/dev/null || true; done
        # The next run refuses to start beside a controller, so wait until they are gone.
        for _ in $(seq 20); do
            pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null || break
            sleep 0.5
        done
        for d in $daemons; do pkill -KILL -x "$d" 2>/dev/null || true; done
        [ $rc = 0 ] && rm -rf "$work"
    fi
    [ $rc = 0 ] || { log "logs kept in $work"; tail -n 20 "$work"/slurm*.log "$work"/logs/*.log 2>/dev/null || true; }
}
trap stop EXIT

if ! pgrep -x munged >/dev/null; then
    [ -s /etc/munge/munge.key ] || mungekey --create --keyfile /etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    mkdir -p /run/munge /var/log/munge /var/lib/munge && chown munge:munge /run/munge /var/log/munge /var/lib/munge
    runuser -u munge -- /usr/sbin/munged
    started_munged=1
fi
slurmctld
slurmd
for _ in $(seq 60); do
    state="$(sinfo -h -o %T 2>/dev/null || true)"
    [ "$state" = idle ] && break
    sleep 1
done
[ "$state" = idle ] || fail "the node did not come up (sinfo says '${state:-nothing}')"
log "Slurm is up: one node, $cpus CPUs"

log "reference: the campaign in one process"
"$resilab" campaign --config "$campaign" --out "$work/single" --jobs "$cpus" --threads 1 --quiet

submit() {  # submit ARRAY [VAR=VALUE,...]: prints the job id
    sbatch --parsable --chdir="$work" --array="$1" --cpus-per-task=1 --output="$work/logs/%A_%a.log" \
        --export="ALL,RESILAB=$resilab,RESILAB_OUT=$work/array,RESILAB_JOBS=1${2:+,$2}" \
        "$ROOT/configs/slurm/campaign-array.sh" "$campaign"
}
rows() { [ -f "$1/runs.jsonl" ] && wc -l <"$1/runs.jsonl" || echo 0; }
wait_for_rows() {  # wait_for_rows SHARD: until the shard has recorded a run
    for _ in $(seq 1200); do
        [ "$(rows "$work/array/smoke-shard-$1")" -ge 1 ] && return 0
        sleep 0.25
    done
    fail "shard $1 recorded no run in 5 minutes"
}
wait_job() {  # wait_job ID: until no task of the job is pending or running
    for _ in $(seq 1800); do
        [ -z "$(squeue -h -j "$1" 2>/dev/null)" ] && return 0
        sleep 1
    done
    fail "job $1 did not finish in 30 minutes"
}

job="$(submit 0-$((shards - 1)))"
log "submitted array job $job ($shards shards)"
wait_for_rows 0
scancel "${job}_0"
log "cancelled task ${job}_0 after $(rows "$work/array/smoke-shard-0") recorded run(s)"
wait_for_rows 2
pkill -KILL -f -- "--shard 2/$shards" || fail "no process of shard 2 to kill"
log "killed shard 2's process with SIGKILL after $(rows "$work/array/smoke-shard-2") recorded run(s)"
wait_job "$job"
for t in 0 2; do
    scontrol show job "${job}_$t" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | sed "s/^/slurm-local: task $t: /" || true
done

status="$("$resilab" campaign --status "$work"/array/smoke-shard-*)"
echo "$status"
echo "$status" | grep -q "shard 0/$shards: .* missing" || fail "--status does not show shard 0 incomplete"
echo "$status" | grep -q "shard 2/$shards: .* missing" || fail "--status does not show shard 2 incomplete"
if "$resilab" merge --out "$work/refused" "$work"/array/smoke-shard-* 2>"$work/refused.err"; then
    fail "merge accepted shards with missing runs"
fi
grep -q "recorded by no part" "$work/refused.err" || fail "merge's refusal does not say why: $(cat "$work/refused.err")"

job2="$(submit 0,2 RESILAB_SHARDS=$shards)"
log "resubmitted tasks 0 and 2 as job $job2"
wait_job "$job2"

"$resilab" merge --out "$work/merged" "$work"/array/smoke-shard-*
"$resilab" campaign --status "$work"/array/smoke-shard-* | tail -n 1 | tee "$work/status.txt"
grep -q ", 0 missing" "$work/status.txt" || fail "the shards are still incomplete"
python3 "$ROOT/scripts/slurm_check.py" "$work/single" "$work/merged" "$work"/array/smoke-shard-* --logs "$work/logs" --interrupted 2
log "passed: the merged shards equal the single-process campaign"
