#!/usr/bin/env bash
# Regenerate the measured tables of docs/RESULTS.md: every preset's comparison (the learned policy
# beside every baseline, workload seeds 100-104, which training never sees), each table with its
# command, the commit and the date. Rewrites the part between the markers
# `<!-- results:begin -->` and `<!-- results:end -->`; the rest of the file is written by hand.
#
#   scripts/results.sh            # builds the release binary first
#   SIM=path/to/tapfinger-sim scripts/results.sh
#
# sim/tests/results.rs checks that the hetero6 table still matches what the code gives.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${SIM:-}" ]; then
    cargo build --release -p tapfinger-sim
    SIM=target/release/tapfinger-sim
fi
PRESETS=${PRESETS:-"hetero6 synthetic3 synthetic6-l2 synthetic6-l3 synthetic6-l4 multitask3 hetero3 hetero12 edge-agent edge-synergy"}
commit=$(git rev-parse --short HEAD)
day=$(date -u +%F)
tables=$(mktemp)
for p in $PRESETS; do
    "$SIM" compare --scenario "$p" --json > "$tables.$p.json"
    python3 - "$p" "$commit" "$day" "$tables.$p.json" >> "$tables" <<'PY'
import json, sys
preset, commit, day, path = sys.argv[1:]
d = json.load(open(path))
seeds = d["seeds"]
print(f"### {preset}\n")
print(f"`tapfinger-sim compare --scenario {preset}` (seeds {seeds[0]}–{seeds[-1]}), commit `{commit}`, {day}. "
      "Average JCT in slots, mean over the seeds ± the standard deviation of that mean; "
      "`*`: the clairvoyant reference, which reads the true speed model.\n")
print("| policy | avg JCT | p95 JCT | JCT / lower bound |")
print("|---|---|---|---|")
for r in d["results"]:
    name = r["policy"] + ("*" if r.get("clairvoyant") else "")
    print(f"| {name} | {r['avg_jct']:.2f} ± {r.get('avg_jct_std', 0.0):.2f} | {r['p95_jct']:.2f} | {r['jct_over_lower_bound']:.2f} |")
print()
PY
    rm -f "$tables.$p.json"
done
python3 - docs/RESULTS.md "$tables" <<'PY'
import sys
doc, new = sys.argv[1:]
text = open(doc).read()
begin, end = "<!-- results:begin -->", "<!-- results:end -->"
a, b = text.index(begin) + len(begin), text.index(end)
open(doc, "w").write(text[:a] + "\n\n" + open(new).read().rstrip() + "\n\n" + text[b:])
PY
rm -f "$tables"
echo "docs/RESULTS.md: tables of $PRESETS at $commit ($day)"
