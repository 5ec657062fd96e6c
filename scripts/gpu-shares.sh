#!/usr/bin/env bash
# What fractional GPU shares buy: the same cluster, jobs and seeds with GPUs shared in quarters
# (`small-gpu-edge`) and with whole devices only (`small-gpu-edge-whole`), per seed, for the
# learned policy, the best baselines and the clairvoyant reference. Prints a Markdown table of
# average JCT (slots) per seed and policy. Usage: scripts/gpu-shares.sh [SEEDS] [FIRST_SEED]
# [COMPARE FLAGS...] (e.g. --pack-shares: boxes pack GPU shares).
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-10}
base=${2:-100}
shift $(($# < 2 ? $# : 2))
policies=tapfinger,optimus,tiresias,first-fit-max,clairvoyant
cargo build --release -q -p tapfinger-sim
sim=target/release/tapfinger-sim
echo "| seed | preset | $(echo $policies | sed 's/,/ | /g') |"
echo "|---|---|$(echo $policies | sed 's/[^,]*/---|/g; s/,//g')"
for ((s = base; s < base + seeds; s++)); do
    for preset in small-gpu-edge small-gpu-edge-whole; do
        row=$($sim compare --scenario "$preset" --policies "$policies" --seeds 1 --seed-base "$s" "$@" --json |
            python3 -c 'import json,sys; print(" | ".join("%.2f" % r["avg_jct"] for r in json.load(sys.stdin)["results"]))')
        echo "| $s | $preset | $row |"
    done
done
