"""Per workload, from a folder of `suite --seeds 1 --json` outputs (g-SB.json: the shipped model
greedy; s{R}-SB.json: sampled with TF_SAMPLE=R; c-SB.json: --candidate clairvoyant), one CSV row:
generator_seed, workload_seed, load, greedy, clairvoyant, s1..sN, then every baseline (average JCT).
Usage: extract.py DIR N SB1,SB2 > rows.csv"""
import json, os, sys
D, N, SB = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3].split(',')]
def load(f):
    d = json.load(open(os.path.join(D, f)))
    return {s['generator_seed']: ({x['policy']: x['avg_jct'] for x in s['results']}, s.get('load')) for s in d['scenarios']}
head = None
for sb in SB:
    g, c = load(f'g-{sb}.json'), load(f'c-{sb}.json')
    ss = [load(f's{r}-{sb}.json') for r in range(1, N + 1)]
    for gs, (r, ld) in sorted(g.items()):
        bl = sorted(k for k in r if k not in ('tapfinger', 'clairvoyant'))
        if head is None:
            head = bl
            print(','.join(['generator_seed', 'workload_seed', 'load', 'greedy', 'clairvoyant'] + [f's{r}' for r in range(1, N + 1)] + [f'b:{b}' for b in bl]))
        assert bl == head
        vals = [r['tapfinger'], c[gs][0]['clairvoyant']] + [s[gs][0]['tapfinger'] for s in ss] + [r[b] for b in bl]
        print(','.join([str(gs), str(sb), f'{ld:.4f}'] + [f'{v:.6g}' for v in vals]))
