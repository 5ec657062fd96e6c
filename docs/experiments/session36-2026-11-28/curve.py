"""Hindsight best-of-N from extract.py's rows, scored as `suite` scores: per scenario, the mean
over its workloads of the chosen schedule's average JCT, over the best baseline's (the baseline
with the least mean over those workloads); a win is a ratio <= 1. "Best of" picks per workload,
in hindsight, the least average JCT among the shipped model's greedy schedule and its first n
sampled ones (TF_SAMPLE=1..n), then also the baselines' and the clairvoyant reference's.
Usage: curve.py rows.csv"""
import csv, statistics as st, sys
rows = {}
for r in csv.DictReader(open(sys.argv[1])):
    rows.setdefault(r['generator_seed'], []).append(dict(
        greedy=float(r['greedy']), clair=float(r['clairvoyant']),
        samp=[float(r[k]) for k in r if k[0] == 's' and k[1:].isdigit()],
        bl={k[2:]: float(r[k]) for k in r if k.startswith('b:')}))
N = len(next(iter(rows.values()))[0]['samp'])
def report(name, f):
    per = []
    for ws in rows.values():
        best = min(st.mean(w['bl'][b] for w in ws) for b in ws[0]['bl'])
        per.append(st.mean(f(w) for w in ws) / best)
    print(f"| {name} | {st.mean(per):.4f} | {sum(p <= 1.0 for p in per)} of {len(per)} |")
print("| schedule per workload | mean ratio to the best baseline | wins |\n|---|---|---|")
report('greedy (as shipped)', lambda w: w['greedy'])
report(f'sampled, mean of {N}', lambda w: st.mean(w['samp']))
for n in sorted({1, 2, 4, 8, 16, 32, N}):
    if n <= N:
        report(f'best of greedy and {n} sampled', lambda w, n=n: min([w['greedy']] + w['samp'][:n]))
report('clairvoyant reference', lambda w: w['clair'])
report(f'best of greedy, {N} sampled, every baseline and the clairvoyant reference',
       lambda w: min([w['greedy'], w['clair']] + w['samp'] + list(w['bl'].values())))
