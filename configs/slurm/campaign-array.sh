#!/bin/bash
# A resilab campaign split over a Slurm job array: each array task runs one shard of the grid
# on its own node, into its own directory; a last job merges the shards and writes the report.
#
#   sbatch --array=0-7 configs/slurm/campaign-array.sh configs/paper/nev.toml
#   # when every task has finished (or: sbatch --dependency=afterok:<array job id> ...):
#   resilab merge --out results/campaigns/nev results/campaigns/nev-shard-*
#   resilab report results/campaigns/nev
#
# A task that was killed (time limit, preemption, a lost node) is resumed by submitting the
# same task again: --resume skips the runs it already recorded. Submitted on its own, a task
# cannot tell how many shards there are, so name the count:
#
#   sbatch --array=3 --export=ALL,RESILAB_SHARDS=8 configs/slurm/campaign-array.sh configs/paper/nev.toml
#
# The shard of a run depends only on its index in the grid, so every task must be given the
# same campaign file and --set options (campaign refuses a directory of another shard or
# campaign). `resilab campaign --status results/campaigns/nev-shard-*` says what each shard
# has recorded; merge checks that the parts hold one campaign, do not overlap, and are complete.
# Each finished run is one line in the task's log.
#
#SBATCH --job-name=resilab-campaign
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=16
#SBATCH --time=02:00:00
#SBATCH --output=resilab-%A_%a.log

set -euo pipefail
config=${1:?usage: sbatch --array=0-N campaign-array.sh CONFIG [--set key=value ...]}
shift
name=$(basename "$config" .toml)
task=${SLURM_ARRAY_TASK_ID:?run this with sbatch --array}
count=${RESILAB_SHARDS:-${SLURM_ARRAY_TASK_COUNT:?run this with sbatch --array}}
resilab=${RESILAB:-./target/release/resilab}
# One worker process per core; each run uses one thread, which is the most efficient way to
# spend cores on many small runs.
jobs=${RESILAB_JOBS:-${SLURM_CPUS_PER_TASK:-1}}
if [ "$task" -ge "$count" ]; then
    echo "campaign-array.sh: array task $task in a job array of $count task(s): a task resubmitted on its own must be told the shard count, e.g. sbatch --array=$task --export=ALL,RESILAB_SHARDS=8 configs/slurm/campaign-array.sh $config" >&2
    exit 2
fi

exec "$resilab" campaign --config "$config" "$@" \
    --shard "$task/$count" --jobs "$jobs" --threads 1 --resume \
    --out "${RESILAB_OUT:-results/campaigns}/$name-shard-$task"
