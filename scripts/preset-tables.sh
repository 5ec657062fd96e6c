#!/bin/bash
# Every preset's comparison table on the reporting seeds 100-109: the preset's own
# model (`tapfinger`), the shipped general model (`general`), every baseline and the clairvoyant
# reference, the same ten workloads for all. One JSON per preset into the output folder
# (default out/presets-100-109), and the tables on stdout.
#   [GENERAL=MODEL_DIR] scripts/preset-tables.sh [OUT_DIR]
# GENERAL names a candidate general model to put in the `general` column instead of the shipped
# one (shared/models/general).
# BIN names another simulator binary (default: the release build).
# Needs the release binary (cargo build --release -p tapfinger-sim).
set -e
cd "$(dirname "$0")/.."
B=${BIN:-./target/release/tapfinger-sim}
OUT=${1:-out/presets-100-109}
mkdir -p "$OUT"
P="tapfinger,general=${GENERAL:-shared/models/general},optimus,optimus-np,tiresias,tiresias-np,drf,first-fit-max,random,min,clairvoyant"
for s in $($B scenarios | awk '{print $1}' | grep -v '^gen:'); do
  $B compare --scenario "$s" --seeds 10 --seed-base 100 --policies "$P" --json > "$OUT/$s.json"
  python3 - "$OUT/$s.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(d["scenario"] + ": " + ", ".join(
    f'{r["policy"]}{"*" if r.get("clairvoyant") else ""} {r["avg_jct"]:.2f}' for r in d["results"]))
PY
done
