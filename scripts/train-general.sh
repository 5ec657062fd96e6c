#!/bin/bash
# A first general model (feature schema 2): one checkpoint resumed on generated training scenario
# after scenario (generator seeds 20-400 with at most 12 nodes, in order, 2 iterations each; the
# first run imitates the `auto` teacher of its scenario for 16 iterations), for a wall-time budget
# in seconds (default 2400). Output: out/general. Held-out seeds (from 10000) are never used.
#   scripts/train-general.sh [SECONDS]
# Needs the release binary (cargo build --release -p tapfinger-sim). Kept as the command that made
# docs/experiments/general-2026-11-24; `tapfinger-sim train --general --generator-seeds A..B` now
# runs such a curriculum inside one trainer.
cd "$(dirname "$0")/.."
B=./target/release/tapfinger-sim
DIR=out/general
END=$(( $(date +%s) + ${1:-2400} ))
rm -rf $DIR; mkdir -p $DIR
seeds=()
for s in $(seq 20 400); do
  n=$($B generate --seed $s | grep -c '^\[\[nodes\]\]')
  if [ "$n" -le 12 ]; then seeds+=($s); fi
done
echo "training scenarios: ${seeds[*]}" > $DIR/scenarios.txt
first=1; stage=0
while [ $(date +%s) -lt $END ]; do
  s=${seeds[$(( stage % ${#seeds[@]} ))]}
  if [ $first = 1 ]; then
    $B train --scenario gen:$s --general --imitate 16 --lr 1e-3 --iterations 2 --eval-episodes 0 --out $DIR >> $DIR/train.log 2>&1 || break
    first=0
  else
    it=$(python3 -c "import json;print(json.load(open('$DIR/train.json'))['iteration'])")
    lr=""; if [ "$it" -ge 16 ]; then lr="--lr 3e-4"; fi
    timeout 600 $B train --resume $DIR --scenario gen:$s --iterations 2 $lr --out $DIR >> $DIR/train.log 2>&1 || echo "stage $stage gen:$s failed" >> $DIR/train.log
  fi
  echo "stage $stage gen:$s $(date +%T)" >> $DIR/train.log
  stage=$((stage+1))
done
echo done >> $DIR/train.log
