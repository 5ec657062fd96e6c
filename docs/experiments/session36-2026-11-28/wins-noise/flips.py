"""How much of the wins count is workload luck: the shipped model's held-out suite at four
draws of two workloads each (s100.json: `suite --generator-seeds 10000..10100 --seeds 2
--seed-base 100 --json --threads 1`, the issue's own; s102/s104/s106: --seed-base 102, 104, 106).
Prints each draw's wins and mean ratio, how many scenarios change sides (ratio <= 1 or not)
between any two draws, and how many win or lose in all four. Usage: flips.py (in this folder)."""
import itertools, json
R = {}
for b in (100, 102, 104, 106):
    d = json.load(open(f's{b}.json'))
    R[b] = {s['generator_seed']: s['ratio'] for s in d['scenarios']}
    print(b, 'wins', d['summary']['wins'], 'mean', round(d['summary']['mean_ratio_to_best_baseline'], 4))
gs = sorted(R[100])
for a, b in itertools.combinations(R, 2):
    print(a, b, 'change sides', sum((R[a][g] <= 1) != (R[b][g] <= 1) for g in gs))
print('win in all four', sum(all(R[b][g] <= 1 for b in R) for g in gs),
      'lose in all four', sum(all(R[b][g] > 1 for b in R) for g in gs))
