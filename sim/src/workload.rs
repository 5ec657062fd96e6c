//! Workload generation: Poisson arrivals, task types by weight, random reachable subsets.
//!
//! The workload of an episode depends only on the scenario and the seed — never on the policy —
//! so every policy compared on a seed schedules exactly the same tasks.

use crate::scenario::{Reachability, Scenario};
use rand::RngExt;
use tapfinger::{NodeId, Task, TaskId, TaskTypeId};

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

/// All tasks of an episode, in arrival order (ids 0..n).
pub fn generate(sc: &Scenario, seed: u64) -> Vec<Task> {
    let mut rng = tapfinger::seeded_rng(seed ^ 0x005E_ED0F_7A5C);
    let total_weight: f64 = sc.types.iter().map(|t| t.weight).sum();
    let mut tasks = Vec::with_capacity(sc.tasks as usize);
    let mut slot = 0u64;
    while tasks.len() < sc.tasks as usize {
        let n = poisson(sc.lambda, &mut rng);
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
            // Only nodes that can ever run the task are candidates: its request *and* its true need
            // must fit (a task re-queued after running out of memory asks for its need). Validation
            // guarantees one.
            let must_fit = def.min_demand.max_each(&def.need);
            let hosts: Vec<NodeId> = sc
                .nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| must_fit.fits_in(&n.capacity))
                .map(|(i, _)| NodeId(i as u32))
                .collect();
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
}
