#!/usr/bin/env bash
# Retrain the models shipped in shared/models/ (one per preset) with the recipe of docs/MODELS.md:
# 12 imitation (DAgger) iterations at lr 1e-3, then 8 PPO iterations at lr 1e-4. The shipped
# models imitated the clairvoyant reference as it was before 2026-11-23 (non-elastic); it is
# elastic now and cannot teach, so this script uses the default teacher `auto` (the best
# non-elastic policy of each preset on development workloads) and gives other models.
#   scripts/train-models.sh [PRESET...]          (default: every preset that ships a model)
#   VARIANT=nohan scripts/train-models.sh hetero6  (an ablation, same recipe; not shipped)
# Work folders go to out/models/<preset> (out/ablations/<variant>/<preset> for a variant); the
# shipped files are copied into shared/models/<preset>.
set -euo pipefail
cd "$(dirname "$0")/.."
variant="${VARIANT:-tapfinger}"
presets=("$@")
if [ ${#presets[@]} -eq 0 ]; then
  presets=(hetero6 synthetic6-l3 multitask3 synthetic3 synthetic6-l2 synthetic6-l4 edge-synergy edge-agent)
fi
# The train profile: burn's CPU backend fully optimized (Cargo.toml), as the shipped models
# were trained; a run bounded in minutes does as many iterations as they did.
cargo build --profile train -p tapfinger-sim --features train
bin=target/train/tapfinger-sim
for p in "${presets[@]}"; do
  if [ "$variant" = tapfinger ]; then out="out/models/$p"; else out="out/ablations/$variant/$p"; fi
  rm -rf "$out"
  "$bin" train --scenario "$p" --variant "$variant" --imitate 12 --iterations 12 --lr 1e-3 --out "$out"
  "$bin" train --scenario "$p" --resume "$out" --out "$out" --iterations 8 --lr 1e-4
  if [ "$variant" = tapfinger ]; then
    mkdir -p "shared/models/$p"
    cp "$out/model.safetensors" "$out/train.json" "$out/curve.csv" "shared/models/$p/"
  fi
done
