"""Each policy's average JCT under the size-aware preemption probe over the same runs without
it (the ratio's mean over scenarios; also over those offered at least 0.7 of capacity), and the
shipped model's wins and mean ratio. Usage (in this folder): srpt-compare.py srpt-k1.json ...
against srpt-plain.json."""
import json,sys,statistics as st
def load(f):
    d=json.load(open(f)); return d['summary'], {s['generator_seed']:{r['policy']:r['avg_jct'] for r in s['results']} for s in d['scenarios']}, {s['generator_seed']:s['load'] for s in d['scenarios']}
ps,p,loads=load('srpt-plain.json')
print('plain', ps['wins'], round(ps['mean_ratio_to_best_baseline'],4))
for f in sys.argv[1:]:
    s,r,_=load(f)
    rel={pol: st.mean(r[g][pol]/p[g][pol] for g in p) for pol in ['tapfinger','tiresias','optimus','drf']}
    hi={pol: st.mean(r[g][pol]/p[g][pol] for g in p if loads[g]>=0.7) for pol in ['tapfinger','tiresias','optimus']}
    print(f, s['wins'], round(s['mean_ratio_to_best_baseline'],4), {k:round(v,3) for k,v in rel.items()}, 'load>=0.7', {k:round(v,3) for k,v in hi.items()})
