#!/usr/bin/env bash
# Fine-tuning on one's own cluster, judged on several scenarios: for each
# generated scenario gen:N, N in A..B (held-out generator seeds: the general model never trained
# on them), fine-tune the shipped general model for MINUTES on the scenario's training workloads
# (seeds from 2^40 up), then compare the fine-tuned model, the general model as shipped and every
# baseline on workload seeds 100..109, which neither model ever saw. Two fine-tunes run at a
# time, one thread each. Outputs: out/finetune-suite/gen-N/{model,train.log,compare.json}, then
# the summary of scripts/finetune-summary.py.
#   scripts/finetune-suite.sh A B [MINUTES]      e.g. scripts/finetune-suite.sh 10000 10008 10
# ROOT=DIR puts the outputs elsewhere; TRAIN_ARGS="..." adds options to each `train` (e.g.
# TRAIN_ARGS="--select 0": keep the last weights instead of the best on validation).
set -euo pipefail
cd "$(dirname "$0")/.."
first="$1"; end="$2"; minutes="${3:-10}"
# The train profile: burn's CPU backend fully optimized (Cargo.toml), as the shipped models
# were trained; a run bounded in minutes does as many iterations as they did.
cargo build --profile train -p tapfinger-sim --features train
bin=target/train/tapfinger-sim
root="${ROOT:-out/finetune-suite}"
# shellcheck disable=SC2206
extra=(${TRAIN_ARGS:-})
baselines="optimus,optimus-np,tiresias,tiresias-np,drf,first-fit-max,random,min"
one() {
  local n="$1" dir="$root/gen-$1"
  rm -rf "$dir"; mkdir -p "$dir"
  "$bin" train --scenario "gen:$n" --from general --minutes "$minutes" --threads 1 \
    --eval-episodes 0 --out "$dir/model" "${extra[@]}" > "$dir/train.log" 2>&1
  "$bin" compare --scenario "gen:$n" --seeds 10 --seed-base 100 --json \
    --policies "fine-tuned=$dir/model,tapfinger,$baselines" > "$dir/compare.json"
}
pids=()
for ((n = first; n < end; n++)); do
  one "$n" &
  pids+=($!)
  if [ ${#pids[@]} -ge 2 ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
wait
python3 scripts/finetune-summary.py "$root" "$first" "$end"
