#!/usr/bin/env python3
"""Per-seed cluster reward of an RLPTO model against the best baseline of each seed.

Usage: scripts/rlpto-eval.py SCENARIO MODEL [FIRST_SEED] [SEEDS]

Runs `target/release/tapfinger-sim compare` once per workload seed (default 100..119, seeds the
model never trained on) with the model (as `rlpto=MODEL`), the shipped general model
(`tapfinger`) and every baseline, and prints, per seed, the model's cluster reward and the best
baseline's (the baseline with the highest reward on that seed), then the wins (the model's
reward at least the best baseline's), the mean gap, and the same for JCT. The clairvoyant
reference is left out (it reads the true speed model).
"""
import json
import subprocess
import sys

BASELINES = "optimus,optimus-np,tiresias,tiresias-np,drf,first-fit-max,random,min"


def main():
    scenario, model = sys.argv[1], sys.argv[2]
    first = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    rows = []
    for seed in range(first, first + n):
        out = subprocess.run(
            [
                "target/release/tapfinger-sim", "compare", "--scenario", scenario,
                "--seeds", "1", "--seed-base", str(seed), "--json",
                "--policies", f"rlpto={model},tapfinger,{BASELINES}",
            ],
            check=True, capture_output=True, text=True,
        ).stdout
        res = {r["policy"]: r for r in json.loads(out)["results"]}
        base = [res[b] for b in BASELINES.split(",") if b in res]
        best_r = max(base, key=lambda r: r["cluster_reward"])
        best_j = min(base, key=lambda r: r["avg_jct"])
        m = res["rlpto"]
        rows.append((seed, m["cluster_reward"], best_r["cluster_reward"], best_r["policy"],
                     m["avg_jct"], best_j["avg_jct"], best_j["policy"],
                     res["tapfinger"]["cluster_reward"]))
        print(f"seed {seed}: reward {m['cluster_reward']:.3f} vs best baseline "
              f"{best_r['cluster_reward']:.3f} ({best_r['policy']}); JCT {m['avg_jct']:.2f} vs "
              f"{best_j['avg_jct']:.2f} ({best_j['policy']})", flush=True)
    k = len(rows)
    wins = sum(1 for r in rows if r[1] >= r[2] - 1e-9)
    gap = sum(r[1] - r[2] for r in rows) / k
    jwins = sum(1 for r in rows if r[4] <= r[5] + 1e-9)
    jratio = sum(r[4] / r[5] for r in rows) / k
    gwins = sum(1 for r in rows if r[7] >= r[2] - 1e-9)
    print(f"{scenario}, seeds {first}..{first + n - 1}: cluster reward wins {wins}/{k} "
          f"(mean gap {gap:+.3f} per task); JCT wins {jwins}/{k} (mean ratio {jratio:.3f}); "
          f"the general model's reward wins {gwins}/{k}")


if __name__ == "__main__":
    main()
