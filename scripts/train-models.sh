#!/usr/bin/env bash
# Retrain the models shipped in sim/models/ (one per preset) with the recipe of docs/MODELS.md:
# 12 imitation (DAgger) iterations from the clairvoyant teacher at lr 1e-3, then 8 PPO iterations
# at lr 1e-4. Usage: scripts/train-models.sh [PRESET...]   (default: every preset with a model)
# Work folders go to out/models/<preset>; the shipped files are copied into sim/models/<preset>.
set -euo pipefail
cd "$(dirname "$0")/.."
presets=("$@")
if [ ${#presets[@]} -eq 0 ]; then
  presets=(hetero6 synthetic6-l3 multitask3 synthetic3 synthetic6-l2 synthetic6-l4 edge-synergy)
fi
cargo build --release -p tapfinger-sim
bin=target/release/tapfinger-sim
for p in "${presets[@]}"; do
  out="out/models/$p"
  rm -rf "$out"
  "$bin" train --scenario "$p" --imitate 12 --iterations 12 --lr 1e-3 --out "$out"
  "$bin" train --scenario "$p" --resume "$out" --out "$out" --iterations 8 --lr 1e-4
  mkdir -p "sim/models/$p"
  cp "$out/model.bpk" "$out/train.json" "$out/curve.csv" "sim/models/$p/"
done
