//! Workload generation: Poisson arrivals (optionally in bursts), task types by weight, random
//! reachable subsets.
//!
//! The workload of an episode depends only on the scenario and the seed — never on the policy —
//! so every policy compared on a seed schedules exactly the same tasks.

pub use crate::scenario::{Burst, TaskSize};
use crate::scenario::{Reachability, Scenario, hosts, hosts_of};
use rand::RngExt;
use tapfinger::{Task, TaskId, TaskTypeId};

pub mod recurring;

/// Draw a Poisson(λ) variate (Knuth's method, in chunks of at most 30 so `e^{-λ}` never underflows).
pub fn poisson(lambda: f64, rng: &mut tapfinger::Rng) -> u32 {
    let mut left = lambda;
    let mut total = 0;
    while left > 0.0 {
        let l = left.min(30.0);
        left -= l;
        let limit = (-l).exp();
        let mut p: f64 = rng.random();
        while p > limit {
            total += 1;
            p *= rng.random::<f64>();
        }
    }
    total
}

/// The work multiplier of each of `n` tasks (by id): 1 without `task_size`. A stream of its own,
/// so that sizes never change which tasks arrive when.
pub fn sizes(sc: &Scenario, seed: u64, n: usize) -> Vec<f64> {
    if let Some(trace) = &sc.trace {
        return trace.iter().take(n).map(|t| t.size).collect();
    }
    let Some(ts) = sc.task_size else {
        return vec![1.0; n];
    };
    if let Some(runs) = recurring::draw(sc, seed, n) {
        return runs.size;
    }
    let mut rng = tapfinger::seeded_rng(seed ^ 0x0005_12E5_EED5);
    (0..n).map(|_| pareto(&ts, &mut rng)).collect()
}

/// One Pareto draw of shape `ts.pareto_shape` scaled to mean 1, capped at `ts.max`.
pub(crate) fn pareto(ts: &TaskSize, rng: &mut tapfinger::Rng) -> f64 {
    let a = ts.pareto_shape;
    let u: f64 = 1.0 - rng.random::<f64>();
    ((a - 1.0) / a / u.powf(1.0 / a)).min(ts.max)
}

/// Who submitted each of `n` tasks (by id) and which recurring job it runs, where the scenario
/// has recurring jobs ([`crate::workload::recurring`]) and no trace (a trace's rows say it themselves);
/// else `None` for every task.
pub fn identities(sc: &Scenario, seed: u64, n: usize) -> Vec<Option<tapfinger::sizes::Identity>> {
    match (&sc.trace, recurring::draw(sc, seed, n)) {
        (None, Some(runs)) => runs.identities(),
        _ => vec![None; n],
    }
}

/// Task `id`'s size in `sizes` (from [`sizes`]); 1 where there is none.
pub fn size_of(sizes: &[f64], id: TaskId) -> f64 {
    usize::try_from(id.0)
        .ok()
        .and_then(|i| sizes.get(i))
        .copied()
        .unwrap_or(1.0)
}

/// The recorded tasks of a scenario with a trace ([`crate::trace`]), the first `tasks` of them.
fn replay(sc: &Scenario, trace: &[crate::trace::TraceTask]) -> Vec<Task> {
    trace
        .iter()
        .take(sc.tasks as usize)
        .enumerate()
        .map(|(i, t)| {
            let def = &sc.types[t.ty];
            if let Some(g) = &t.gang {
                // A gang's members may go to any box that carries the label (a member's demand
                // is the shape's; the episode's placer checks that it fits).
                return Task {
                    id: TaskId(i as u64),
                    ty: TaskTypeId(t.ty as u16),
                    reachable: sc
                        .nodes
                        .iter()
                        .enumerate()
                        .filter(|(_, n)| t.admits(&n.labels))
                        .map(|(i, _)| tapfinger::NodeId(i as u32))
                        .collect(),
                    min_demand: g.shape.worker_demand.clone(),
                    max_demand: None,
                    priority: t.priority.unwrap_or(def.priority),
                    arrival: t.arrival,
                    gang: Some(Box::new(g.shape.clone())),
                };
            }
            let min_demand = t.min.clone().unwrap_or_else(|| def.min_demand.clone());
            Task {
                id: TaskId(i as u64),
                ty: TaskTypeId(t.ty as u16),
                reachable: hosts_of(&sc.nodes, def, &min_demand, |l| t.admits(l)),
                min_demand,
                max_demand: t.max.clone().or_else(|| def.max_demand.clone()),
                priority: t.priority.unwrap_or(def.priority),
                arrival: t.arrival,
                gang: None,
            }
        })
        .collect()
}

/// All tasks of an episode, in arrival order (ids 0..n).
pub fn generate(sc: &Scenario, seed: u64) -> Vec<Task> {
    if let Some(trace) = &sc.trace {
        return replay(sc, trace);
    }
    let mut rng = tapfinger::seeded_rng(seed ^ 0x005E_ED0F_7A5C);
    let total_weight: f64 = sc.types.iter().map(|t| t.weight).sum();
    let mut tasks = Vec::with_capacity(sc.tasks as usize);
    let mut slot = 0u64;
    let mut burst = false;
    while tasks.len() < sc.tasks as usize {
        // Without bursts no extra random number is drawn: the workloads of every scenario
        // written before bursts existed stay the same.
        let rate = match &sc.burst {
            None => sc.lambda,
            Some(b) => {
                let (quiet, loud) = b.rates(sc.lambda);
                let rate = if burst { loud } else { quiet };
                let mean = if burst { b.on_slots } else { b.off_slots };
                if rng.random::<f64>() < 1.0 / mean {
                    burst = !burst;
                }
                rate
            }
        };
        let n = poisson(rate, &mut rng);
        for _ in 0..n {
            if tasks.len() >= sc.tasks as usize {
                break;
            }
            let mut x = rng.random::<f64>() * total_weight;
            let mut ty = sc.types.len() - 1;
            for (i, t) in sc.types.iter().enumerate() {
                if x < t.weight {
                    ty = i;
                    break;
                }
                x -= t.weight;
            }
            let def = &sc.types[ty];
            // Only nodes that can ever run the task are candidates (validation guarantees one).
            let hosts = hosts(&sc.nodes, def, |_| true);
            let mut reachable = match sc.reachability {
                Reachability::All => hosts,
                Reachability::Random => {
                    let k = rng.random_range(1..=hosts.len());
                    let mut pool = hosts;
                    for i in 0..k {
                        let j = rng.random_range(i..pool.len());
                        pool.swap(i, j);
                    }
                    pool.truncate(k);
                    pool
                }
            };
            reachable.sort();
            tasks.push(Task {
                id: TaskId(tasks.len() as u64),
                ty: TaskTypeId(ty as u16),
                min_demand: def.min_demand.clone(),
                max_demand: def.max_demand.clone(),
                priority: def.priority,
                reachable,
                arrival: slot,
                gang: None,
            });
        }
        slot += 1;
    }
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_mean_is_lambda() {
        let mut rng = tapfinger::seeded_rng(1);
        for lambda in [0.5, 3.0, 45.0] {
            let n = 20_000;
            let mean = (0..n)
                .map(|_| f64::from(poisson(lambda, &mut rng)))
                .sum::<f64>()
                / f64::from(n);
            assert!(
                (mean - lambda).abs() < 0.05 * lambda + 0.02,
                "λ={lambda} mean={mean}"
            );
        }
    }

    #[test]
    fn bursts_keep_the_mean_rate_and_spread_it() {
        let b = Burst {
            factor: 8.0,
            on_slots: 5.0,
            off_slots: 15.0,
        };
        let (quiet, loud) = b.rates(4.0);
        assert!((0.25 * loud + 0.75 * quiet - 4.0).abs() < 1e-9);
        let mut sc = Scenario::load("hetero6").unwrap();
        sc.tasks = 4000;
        let steady = generate(&sc, 1);
        sc.burst = Some(b);
        let bursty = generate(&sc, 1);
        let per_slot = |ts: &[Task]| {
            let mut n = vec![0f64; ts.last().unwrap().arrival as usize + 1];
            for t in ts {
                n[t.arrival as usize] += 1.0;
            }
            let mean = n.iter().sum::<f64>() / n.len() as f64;
            let var = n.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n.len() as f64;
            (mean, var)
        };
        let (m0, v0) = per_slot(&steady);
        let (m1, v1) = per_slot(&bursty);
        assert!((m1 - m0).abs() < 0.1 * m0, "mean {m0} steady, {m1} bursty");
        assert!(v1 > 3.0 * v0, "variance {v0} steady, {v1} bursty");
        assert!(Burst { factor: 0.5, ..b }.invalid().is_some());
    }

    #[test]
    fn workload_is_seeded_and_reachability_is_valid() {
        let sc = Scenario::load("hetero6").unwrap();
        let a = generate(&sc, 3);
        assert_eq!(a, generate(&sc, 3));
        assert_ne!(a, generate(&sc, 4));
        assert_eq!(a.len(), 384);
        for t in &a {
            assert!(!t.reachable.is_empty());
            assert!(t.reachable.windows(2).all(|w| w[0] < w[1]));
            for n in &t.reachable {
                assert!(t.min_demand.fits_in(&sc.nodes[n.0 as usize].capacity));
            }
        }
        // λ = 6: 384 tasks arrive over about 64 slots.
        let last = a.last().unwrap().arrival;
        assert!((50..80).contains(&last), "{last}");
    }

    #[test]
    fn heavy_tailed_sizes_keep_the_mean_and_the_cap_and_leave_arrivals_alone() {
        let mut sc = Scenario::load("synthetic3").unwrap();
        sc.tasks = 20_000;
        let before = generate(&sc, 5);
        assert_eq!(
            sizes(&sc, 5, 10),
            vec![1.0; 10],
            "no sizes without task_size"
        );
        sc.task_size = Some(TaskSize {
            pareto_shape: 2.0,
            max: 20.0,
            recurring: None,
        });
        assert_eq!(
            generate(&sc, 5),
            before,
            "sizes draw from a stream of their own"
        );
        let s = sizes(&sc, 5, 20_000);
        let mean = s.iter().sum::<f64>() / s.len() as f64;
        // The cap trims the mean a little below 1 (by 1/(2·20) for shape 2).
        assert!((0.9..1.02).contains(&mean), "mean {mean}");
        assert!(s.iter().all(|x| (0.5..=20.0).contains(x)));
        assert!(s.iter().filter(|x| **x > 5.0).count() > 100, "a heavy tail");
        assert_eq!(s, sizes(&sc, 5, 20_000));
        assert!(
            TaskSize {
                pareto_shape: 1.0,
                max: 5.0,
                recurring: None,
            }
            .invalid()
            .is_some()
        );
    }
}
