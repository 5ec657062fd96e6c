#!/usr/bin/env bash
# The deployment-replay table of docs/RESULTS.md ("Deployment replay"): every scenario's workloads
# (SEEDS of them, from seed 100; default 1) replayed in six windows with the guard
# (`tapfinger-sim deploy-replay`), summarised per scenario as a markdown table on stdout, with the
# commit and the date. With several workloads a row pools their later windows and gives the
# spread of the per-workload means. Two references no guard that picks one policy a window
# can be sure to beat: the one baseline fixed in hindsight, and a perfect twin (each later window
# under the policy truly best in the window before).
#
#   scripts/deploy-replay.sh                  # builds the release binary first
#   SIM=path/to/tapfinger-sim SCENARIOS="hetero6 gen:30000" scripts/deploy-replay.sh
#   SEEDS=10 scripts/deploy-replay.sh         # ten workloads per scenario
#   EXTRA="--tune-every 2 --tune-iterations 20" scripts/deploy-replay.sh   # with fine-tuning
#   JSON_DIR=DIR scripts/deploy-replay.sh     # summarise replays already written as DIR/NAME.json
# SCENARIOS may hold scenario files (a trace's import); each replay's JSON is kept in $out.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${SIM:-}" ]; then
    cargo build --release -p tapfinger-sim --features train
    SIM=target/release/tapfinger-sim
fi
SCENARIOS=${SCENARIOS:-"hetero6 gen:30000 gen:30001 gen:30002 gen:30003 gen:30004 gen:30005 gen:30006 gen:30007 gen-wide:30000 gen-wide:30001 gen-long:30000 gen-gavel:30000 gen-gavel:30001 gen-gavel:30002"}
out=${JSON_DIR:-$(mktemp -d)}
if [ -z "${JSON_DIR:-}" ]; then
    for s in $SCENARIOS; do
        # shellcheck disable=SC2086
        "$SIM" deploy-replay --scenario "$s" --windows 6 --seeds "${SEEDS:-1}" ${EXTRA:-} --json > "$out/$(basename "$s" .toml).json"
    done
fi
echo "replays in $out${EXTRA:+, deploy-replay options: $EXTRA}" >&2
echo "commit $(git rev-parse --short HEAD), $(date -u +%F)"
python3 - "$out" $SCENARIOS <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
print("| scenario | workloads | best / lower bound | ran after window 0 | worst window | mean (later windows) | per-workload means: min–max | learned alone: worst, mean | shipped model alone: mean | versions published | one baseline in hindsight: worst, mean | perfect twin: worst, mean |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
means, alone, above, n, fixed_above, perfect_above = [], [], 0, 0, 0, 0
def mean(v):
    return sum(v) / len(v)
for s in names:
    s = s.rsplit("/", 1)[-1].removesuffix(".toml")
    replays = json.load(open(f"{out}/{s}.json"))
    ran, bb, later_all, per_seed, tunes = [], [], [], [], []
    fixed, perfect = {}, []
    for r in replays:
        ws = r["windows"]; later = ws[1:]
        for prev, w in zip(ws, later):
            pj = dict((k, v) for k, v in prev["true_jcts"])
            j = dict((k, v) for k, v in w["true_jcts"]).get(min(pj, key=pj.get))
            perfect.append(j / w["best_baseline"][1] if j is not None else float("inf"))
        for w in later:
            if w["policy"] not in ran:
                ran.append(w["policy"])
        bb += [w["best_over_bound"] for w in ws]
        later_all += later
        per_seed.append(mean([w["ratio"] for w in later]))
        tunes += [w["tune"] for w in ws if w.get("tune")]
        # Each baseline's ratio in the later windows: the one a clairvoyant operator would have
        # fixed (the best mean ratio over them) is what no guard that picks one policy a window
        # can beat for sure.
        for w in later:
            jcts = dict((k, v) for k, v in w["true_jcts"])
            for p in {k for k, _ in w["true_jcts"] if k != "tapfinger"}:
                fixed.setdefault(p, [])
            for p in fixed:
                j = jcts.get(p)
                fixed[p].append(j / w["best_baseline"][1] if j is not None else float("inf"))
    m = mean([w["ratio"] for w in later_all])
    ml = mean([w["learned_ratio"] for w in later_all])
    ms = mean([w["shipped_ratio"] for w in later_all])
    published = f"{sum(t['passed'] for t in tunes)} of {len(tunes)}" if tunes else "-"
    means.append(m); alone.append(ml)
    above += sum(w["ratio"] > 1.05 for w in later_all); n += len(later_all)
    fb = min(sorted(fixed), key=lambda p: sum(fixed[p]))
    fr = fixed[fb]
    fixed_above += sum(x > 1.05 for x in fr)
    perfect_above += sum(x > 1.05 for x in perfect)
    print(f"| `{s}` | {len(replays)} | {mean(bb):.2f} | {', '.join(ran)} | {max(w['ratio'] for w in later_all):.3f} | {m:.3f} | "
          f"{min(per_seed):.3f}–{max(per_seed):.3f} | "
          f"{max(w['learned_ratio'] for w in later_all):.3f}, {ml:.3f} | {ms:.3f} | {published} | "
          f"`{fb}` {max(fr):.3f}, {mean(fr):.3f} | {max(perfect):.3f}, {mean(perfect):.3f} |")
print()
print(f"Mean of the later windows' means: {mean(means):.3f} with the guard, "
      f"{mean(alone):.3f} for the learned policy alone; {above} of {n} later windows above 1.05 "
      f"({fixed_above} for the one baseline fixed in hindsight, {perfect_above} for a perfect twin).")
PY
