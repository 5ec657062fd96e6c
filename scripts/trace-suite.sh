#!/usr/bin/env bash
# The learned policy against every deployable baseline on replays of published traces: two of
# Gavel's job traces (the first 300 jobs, on a mixed cluster of V100, P100 and K80 boxes, each
# job at Gavel's measured speed on each type) and two of Alibaba's GPU 2023 pod
# lists (the first 500 finished pods, GPU fractions in quarters), each at an offered load of 0.8
# on the built-in cluster. A replay runs the same tasks under every workload seed, so one seed.
#   scripts/trace-suite.sh GAVEL_MSR_DIR ALIBABA_CSV_DIR [OUT]
# GAVEL_MSR_DIR: Gavel's scheduler/traces/msr (github.com/stanford-futuredata/gavel);
# ALIBABA_CSV_DIR: cluster-trace-gpu-v2023/csv of github.com/alibaba/clusterdata.
# EXTRA="..." adds options to `suite` (e.g. EXTRA="--model DIR").
set -euo pipefail
cd "$(dirname "$0")/.."
gavel="$1"; alibaba="$2"; out="${3:-out/trace-suite}"
cargo build --release -p tapfinger-sim
bin=target/release/tapfinger-sim
rm -rf "$out"; mkdir -p "$out"
for t in seed=0/6214e9 seed=1/11cb48; do
  "$bin" import --format gavel "$gavel/$t.trace" --gpu-model v100,p100,k80 \
    --target-load 0.8 --limit 300 \
    --out "$out/gavel-${t#*/}.toml"
done
for f in default gpuspec33; do
  "$bin" import --format alibaba-2023 "$alibaba/openb_pod_list_$f.csv" --target-load 0.8 \
    --limit 500 --gpu-step 0.25 --out "$out/alibaba-$f.toml"
done
# shellcheck disable=SC2086
"$bin" suite --scenarios "$out" --seeds 1 ${EXTRA:-}
