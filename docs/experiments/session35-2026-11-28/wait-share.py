#!/usr/bin/env python3
"""Where the shipped general model's JCT goes on the development scenarios, by offered load.

Run first (workload seed 0 of each development scenario):
  for g in $(seq 9000 9049); do
    tapfinger-sim run --scenario gen:$g --seed 0 --policy tapfinger --csv > DIR/t$g.csv
  done
then: wait-share.py DIR SUITE_JSON (a suite JSON of the same scenarios, for their loads).
Per scenario: waiting (start - arrival) as a share of the summed JCT; running beyond each task's
lower bound as a share of it; the share of slots with more than 10 tasks waiting in the cluster.
"""
import csv
import json
import statistics as st
import sys

root, suite = sys.argv[1], sys.argv[2]
load = {s["generator_seed"]: s["load"] for s in json.load(open(suite))["scenarios"]}
out = []
for g in sorted(load):
    r = list(csv.DictReader(open(f"{root}/t{g}.csv")))
    end = max(int(x["finish"]) for x in r)
    waiting = [0] * (end + 1)
    for x in r:
        for t in range(int(x["arrival"]), int(x["start"])):
            waiting[t] += 1
    jct = sum(float(x["jct"]) for x in r)
    wait = sum(int(x["start"]) - int(x["arrival"]) for x in r)
    bound = sum(float(x["lower_bound"]) for x in r)
    crowded = sum(1 for w in waiting if w > 10) / end
    out.append((load[g], wait / jct, (jct - wait - bound) / jct, crowded))
print("| offered load | scenarios | waiting / JCT | running beyond the bound / JCT | slots with > 10 waiting |")
print("|---|---|---|---|---|")
for lo, hi in [(0, 0.5), (0.5, 0.7), (0.7, 0.85), (0.85, 1.0)]:
    o = [x for x in out if lo <= x[0] < hi]
    print(f"| {lo}–{hi} | {len(o)} | {st.mean(x[1] for x in o):.3f} | {st.mean(x[2] for x in o):.3f} | {st.mean(x[3] for x in o):.3f} |")
