//! Random placement instances: small ones for the comparison with the exact optimum (2–3 boxes,
//! 1–3 jobs, background load), and online workloads for the locality figures (edge links at
//! 1 Gbit/s against rack links at 10 Gbit/s). Seeds below 100 are for development; figures use
//! seeds from 100 up.

use super::{Cluster, Free, Job};
use rand::RngExt;

/// 1 Gbit/s between edge boxes.
pub const EDGE: f64 = 1.25e8;
/// 10 Gbit/s between boxes in a rack.
pub const RACK: f64 = 1.25e9;
/// Within a box (shared memory or loopback).
const INTERNAL: f64 = 5e9;

fn job(rng: &mut crate::Rng, c: &Cluster, arrival: usize, max_workers: u32) -> Job {
    let lo = rng.random_range(1..=2u32);
    let hi = rng.random_range(lo.max(2)..=max_workers);
    let mut j = Job {
        arrival,
        iterations: 0.0,
        compute: rng.random_range(0.2..1.0),
        gradient_bytes: rng.random_range(20e6..200e6),
        workers: (lo, hi),
        ps: rng.random_range(1..=2u32),
        worker_demand: vec![rng.random_range(1..=2u32), rng.random_range(1..=4u32)],
        ps_demand: vec![1, rng.random_range(1..=2u32)],
    };
    // Work for 1–5 slots of its most workers, all local.
    let per_slot = f64::from(hi) * j.rate(c, 0, 0) * c.slot_seconds;
    j.iterations = (per_slot * rng.random_range(1.0..5.0)).round().max(1.0);
    j
}

/// A small instance: 2–3 boxes of 4–8 cores and 8–16 memory units, background load in the
/// first slots, 1–3 jobs of up to 4 workers arriving in the first 3 slots; edge or rack links.
pub fn small(seed: u64) -> (Cluster, Free, Vec<Job>) {
    let mut rng = crate::seeded_rng(seed ^ 0x51ac_e0ff);
    let boxes = rng.random_range(2..=3usize);
    let c = Cluster {
        capacity: (0..boxes)
            .map(|_| vec![rng.random_range(4..=8u32), rng.random_range(8..=16u32)])
            .collect(),
        internal: INTERNAL,
        external: if rng.random_bool(0.5) { EDGE } else { RACK },
        slot_seconds: 60.0,
    };
    let mut free = Free::new(&c);
    for t in 0..6 {
        for m in 0..boxes {
            if rng.random_bool(0.4) {
                let cpu = rng.random_range(1..=3u32);
                free.take(t, m, 0, cpu);
                free.take(t, m, 1, 2 * cpu);
            }
        }
    }
    let jobs = (0..rng.random_range(1..=3usize))
        .map(|_| {
            let arrival = rng.random_range(0..=3usize);
            job(&mut rng, &c, arrival, 4)
        })
        .collect();
    (c, free, jobs)
}

/// An online workload: `boxes` boxes of 16 cores and 64 memory units, `jobs` jobs of up to 8
/// workers arriving over about `jobs` slots, links at `external` bytes per second.
pub fn workload(seed: u64, boxes: usize, jobs: usize, external: f64) -> (Cluster, Vec<Job>) {
    let mut rng = crate::seeded_rng(seed ^ 0x0a11_ce55);
    let c = Cluster {
        capacity: vec![vec![16, 64]; boxes],
        internal: INTERNAL,
        external,
        slot_seconds: 60.0,
    };
    let mut t = 0usize;
    let jobs = (0..jobs)
        .map(|_| {
            t += rng.random_range(0..=2usize);
            job(&mut rng, &c, t, 8)
        })
        .collect();
    (c, jobs)
}
