#!/usr/bin/env python3
"""Summary of scripts/finetune-suite.sh: per scenario, the fine-tuned model's average JCT over
workload seeds 100..109, the shipped general model's, and the best baseline's (the baseline with
the least average JCT on that scenario; the clairvoyant reference is not among them), with the
ratios to the best baseline; then the wins (ratio <= 1), the mean ratios, and what fine-tuning
added (fine-tuned over general). Each fine-tune's iterations come from its train.log.

Usage: scripts/finetune-summary.py ROOT A B [--json]
"""
import json
import re
import sys

BASELINES = ["optimus", "optimus-np", "tiresias", "tiresias-np", "drf", "first-fit-max", "random", "min"]


def main():
    root, a, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rows = []
    for n in range(a, b):
        d = f"{root}/gen-{n}"
        res = {r["policy"]: r for r in json.load(open(f"{d}/compare.json"))["results"]}
        base = min((res[p] for p in BASELINES if p in res), key=lambda r: r["avg_jct"])
        log = open(f"{d}/train.log").read()
        it = re.findall(r"trained (\d+) iteration", log)
        rows.append({
            "generator_seed": n,
            "iterations": int(it[-1]) if it else None,
            "fine_tuned": res["fine-tuned"]["avg_jct"],
            "general": res["tapfinger"]["avg_jct"],
            "best_baseline": base["policy"],
            "best": base["avg_jct"],
        })
    for r in rows:
        r["ratio_fine_tuned"] = r["fine_tuned"] / r["best"]
        r["ratio_general"] = r["general"] / r["best"]
    k = len(rows)
    summary = {
        "scenarios": k,
        "wins_fine_tuned": sum(r["ratio_fine_tuned"] <= 1.0 for r in rows),
        "wins_general": sum(r["ratio_general"] <= 1.0 for r in rows),
        "mean_ratio_fine_tuned": sum(r["ratio_fine_tuned"] for r in rows) / k,
        "mean_ratio_general": sum(r["ratio_general"] for r in rows) / k,
        "better_than_general": sum(r["fine_tuned"] < r["general"] for r in rows),
    }
    if "--json" in sys.argv:
        print(json.dumps({"scenarios": rows, "summary": summary}, indent=1))
        return
    print("| scenario | iterations | fine-tuned | general | best baseline | fine-tuned / best | general / best |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| gen:{r['generator_seed']} | {r['iterations']} | {r['fine_tuned']:.2f} | {r['general']:.2f} | "
              f"{r['best_baseline']} {r['best']:.2f} | {r['ratio_fine_tuned']:.3f} | {r['ratio_general']:.3f} |")
    s = summary
    print(f"\nfine-tuned: {s['wins_fine_tuned']}/{k} at most the best baseline, mean ratio "
          f"{s['mean_ratio_fine_tuned']:.3f}; general as shipped: {s['wins_general']}/{k}, "
          f"{s['mean_ratio_general']:.3f}; fine-tuned better than general on {s['better_than_general']}/{k}")


if __name__ == "__main__":
    main()
