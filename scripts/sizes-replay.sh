#!/usr/bin/env bash
# The size tables of docs/RESULTS.md ("Sizes in deployment"): each scenario's workloads (SEEDS of
# them, from seed 100; default 10) replayed in six windows with the guard (`tapfinger-sim
# deploy-replay`: the agents start with no size history and learn it window by window), and per
# scenario, over the later windows (1-5) of every workload, the average JCT of: the deployment
# under the guard, the learned policy alone, the best size-blind baseline and the best size-aware
# one (each fixed for the whole replay, chosen in hindsight per workload), and the pooled bound
# (the cluster as one machine, shortest remaining first on true sizes). Ratios are to the best
# size-blind baseline, mean over the workloads (min-max in brackets); the last column is the
# deployment over the best single policy the guard may choose (every one but Optimus's two,
# which fit profiles agents do not make), fixed in hindsight. Markdown on stdout, with the
# commit and the date.
#
#   scripts/sizes-replay.sh                               # builds the release binary first
#   SIM=path/to/tapfinger-sim SCENARIOS="gen-recur:30000 x.toml" SEEDS=3 scripts/sizes-replay.sh
#   JSON_DIR=DIR scripts/sizes-replay.sh                  # summarise replays already written
#   MODEL=DIR scripts/sizes-replay.sh                     # the learned policy from a checkpoint
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${SIM:-}" ]; then
    cargo build --release -p tapfinger-sim --features train
    SIM=target/release/tapfinger-sim
fi
default=""
for f in recur blind declared; do
    for s in 30000 30001 30002 30003 30004 30005 30006 30007 30008 30009; do
        default="$default gen-$f:$s"
    done
done
SCENARIOS=${SCENARIOS:-$default}
out=${JSON_DIR:-$(mktemp -d)}
if [ -z "${JSON_DIR:-}" ]; then
    for s in $SCENARIOS; do
        "$SIM" deploy-replay --scenario "$s" --windows 6 --seeds "${SEEDS:-10}" ${MODEL:+--model "$MODEL"} --json \
            > "$out/$(basename "$s" .toml).json" 2>/dev/null
    done
fi
echo "replays in $out" >&2
echo "commit $(git rev-parse --short HEAD), $(date -u +%F)"
python3 - "$out" $SCENARIOS <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
SIZED = {"shortest-predicted", "srpt-predicted", "gittins", "lookahead-predicted"}
LEARNED = "tapfinger"
UNCHOSEN = {"optimus", "optimus-np"}
def mean(v):
    return sum(v) / len(v)
def spread(v):
    return f"{mean(v):.3f} ({min(v):.3f}–{max(v):.3f})"
print("| scenario | workloads | best size-blind (most often) | deployed, guard | learned alone | best size-aware | pooled bound | deployed / best the guard may choose |")
print("|---|---|---|---|---|---|---|---|")
families = {}
for s in names:
    s = s.rsplit("/", 1)[-1].removesuffix(".toml")
    rows = {"deployed": [], "learned": [], "sized": [], "pooled": [], "choosable": []}
    chosen = {}
    for r in json.load(open(f"{out}/{s}.json")):
        later = r["windows"][1:]
        total = {}
        for w in later:
            for p, j in w["true_jcts"]:
                total[p] = total.get(p, 0.0) + j
        blind = min((j, p) for p, j in total.items() if p not in SIZED and p != LEARNED)
        sized = min((j, p) for p, j in total.items() if p in SIZED)
        chosen[blind[1]] = chosen.get(blind[1], 0) + 1
        rows["deployed"].append(sum(w["avg_jct"] for w in later) / blind[0])
        rows["learned"].append(total.get(LEARNED, float("inf")) / blind[0])
        rows["sized"].append(sized[0] / blind[0])
        rows["pooled"].append(sum(w["pooled_bound"] for w in later) / blind[0])
        choosable = min(j for p, j in total.items() if p not in UNCHOSEN)
        rows["choosable"].append(sum(w["avg_jct"] for w in later) / choosable)
    fam = s.split(":")[0] if s.startswith("gen") else s
    f = families.setdefault(fam, {k: [] for k in rows} | {"n": []})
    f["n"].append(s)
    for k in rows:
        f[k] += rows[k]
    most = max(chosen, key=chosen.get)
    print(f"| `{s}` | {len(rows['deployed'])} | `{most}` | {spread(rows['deployed'])} | "
          f"{spread(rows['learned'])} | {spread(rows['sized'])} | {spread(rows['pooled'])} | "
          f"{spread(rows['choosable'])} |")
for fam, f in families.items():
    if len(f["n"]) > 1:
        print(f"| **{fam}, all** | {len(f['deployed'])} | | {spread(f['deployed'])} | "
              f"{spread(f['learned'])} | {spread(f['sized'])} | {spread(f['pooled'])} | "
              f"{spread(f['choosable'])} |")
PY
