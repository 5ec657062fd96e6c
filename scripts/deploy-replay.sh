#!/usr/bin/env bash
# The deployment-replay table of docs/RESULTS.md ("Deployment replay"): every scenario's workload
# (seed 100) replayed in six windows with the guard (`tapfinger-sim deploy-replay`), summarised
# per scenario as a markdown table on stdout, with the commit and the date.
#
#   scripts/deploy-replay.sh                  # builds the release binary first
#   SIM=path/to/tapfinger-sim SCENARIOS="hetero6 gen:30000" scripts/deploy-replay.sh
#   EXTRA="--tune-every 2 --tune-iterations 20" scripts/deploy-replay.sh   # with fine-tuning
#   JSON_DIR=DIR scripts/deploy-replay.sh     # summarise replays already written as DIR/NAME.json
# SCENARIOS may hold scenario files (a trace's import); each replay's JSON is kept in $out.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${SIM:-}" ]; then
    cargo build --release -p tapfinger-sim
    SIM=target/release/tapfinger-sim
fi
SCENARIOS=${SCENARIOS:-"hetero6 gen:30000 gen:30001 gen:30002 gen:30003 gen:30004 gen:30005 gen:30006 gen:30007 gen-wide:30000 gen-wide:30001 gen-long:30000 gen-gavel:30000 gen-gavel:30001 gen-gavel:30002"}
out=${JSON_DIR:-$(mktemp -d)}
if [ -z "${JSON_DIR:-}" ]; then
    for s in $SCENARIOS; do
        # shellcheck disable=SC2086
        "$SIM" deploy-replay --scenario "$s" --windows 6 ${EXTRA:-} --json > "$out/$(basename "$s" .toml).json"
    done
fi
echo "replays in $out${EXTRA:+, deploy-replay options: $EXTRA}" >&2
echo "commit $(git rev-parse --short HEAD), $(date -u +%F)"
python3 - "$out" $SCENARIOS <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
print("| scenario | best / lower bound | ran after window 0 | worst window | mean (later windows) | learned alone: worst, mean | shipped model alone: mean | versions published | one baseline in hindsight: worst, mean |")
print("|---|---|---|---|---|---|---|---|---|")
means, alone, above, n, fixed_above = [], [], 0, 0, 0
for s in names:
    s = s.rsplit("/", 1)[-1].removesuffix(".toml")
    r = json.load(open(f"{out}/{s}.json"))[0]
    ws = r["windows"]; later = ws[1:]
    ran = []
    for w in later:
        if w["policy"] not in ran:
            ran.append(w["policy"])
    bb = sum(w["best_over_bound"] for w in ws) / len(ws)
    m = sum(w["ratio"] for w in later) / len(later)
    ml = sum(w["learned_ratio"] for w in later) / len(later)
    ms = sum(w["shipped_ratio"] for w in later) / len(later)
    tunes = [w["tune"] for w in ws if w.get("tune")]
    published = f"{sum(t['passed'] for t in tunes)} of {len(tunes)}" if tunes else "-"
    means.append(m); alone.append(ml)
    above += sum(w["ratio"] > 1.05 for w in later); n += len(later)
    # The one baseline a clairvoyant operator would have fixed for the later windows (the best
    # mean ratio there): what no guard that picks one policy a window can beat for sure.
    def ratios(p):
        out = []
        for w in later:
            j = dict((k, v) for k, v in w["true_jcts"]).get(p)
            out.append(j / w["best_baseline"][1] if j is not None else float("inf"))
        return out
    names_b = {k for w in later for k, _ in w["true_jcts"] if k != "tapfinger"}
    fb = min(sorted(names_b), key=lambda p: sum(ratios(p)))
    fr = ratios(fb)
    fixed_above += sum(x > 1.05 for x in fr)
    print(f"| `{s}` | {bb:.2f} | {', '.join(ran)} | {max(w['ratio'] for w in later):.3f} | {m:.3f} | "
          f"{max(w['learned_ratio'] for w in later):.3f}, {ml:.3f} | {ms:.3f} | {published} | "
          f"`{fb}` {max(fr):.3f}, {sum(fr)/len(fr):.3f} |")
print()
print(f"Mean of the later windows' means: {sum(means)/len(means):.3f} with the guard, "
      f"{sum(alone)/len(alone):.3f} for the learned policy alone; {above} of {n} later windows above 1.05 "
      f"({fixed_above} for the one baseline fixed in hindsight).")
PY
