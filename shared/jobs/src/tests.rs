//! The online placers side by side on random workloads: every schedule replays within what was
//! free, the exact optimum bounds the others, and the LP rounding beats the plain placers.

use crate::lp::Rounding;
use tapfinger_core::placement::simple::{Exact, PackFirst, Spread};
use tapfinger_core::placement::*;

/// Replay a schedule on a copy of what was free: every slot must fit before it is committed.
fn fits_throughout(c: &Cluster, free: &Free, j: &Job, s: &Schedule) -> bool {
    let mut f = free.clone();
    s.slots.iter().all(|p| {
        let ok = f.fits(c, j, p);
        f.commit(j, p);
        ok
    })
}

#[test]
fn every_placer_keeps_capacities_interfaces_and_worker_ranges() {
    let placers: [&dyn Placer; 4] = [&Exact, &PackFirst, &Spread, &Rounding::default()];
    for seed in 0..30 {
        let (c, free, jobs) = random::small(seed);
        for pl in placers {
            let mut f = free.clone();
            let mut rng = tapfinger_core::seeded_rng(seed);
            for j in &jobs {
                let s = pl
                    .place(&c, &f, j, &mut rng)
                    .expect("small jobs fit eventually");
                assert!(fits_throughout(&c, &f, j, &s), "{} seed {seed}", pl.name());
                let done: f64 = s.slots.iter().map(|p| p.iterations(j, &c)).sum();
                assert!(
                    done >= j.iterations * (1.0 - 1e-9),
                    "{} stops early",
                    pl.name()
                );
                for p in &s.slots {
                    f.commit(j, p);
                }
            }
        }
    }
}

#[test]
fn no_placer_beats_the_exact_optimum_on_one_job() {
    for seed in 0..40 {
        let (c, free, jobs) = random::small(seed);
        let j = &jobs[0];
        let mut rng = tapfinger_core::seeded_rng(seed);
        let best = Exact
            .place(&c, &free, j, &mut rng)
            .expect("fits")
            .training_slots;
        for pl in [&PackFirst as &dyn Placer, &Spread, &Rounding::default()] {
            let s = pl.place(&c, &free, j, &mut rng).expect("fits");
            assert!(s.training_slots >= best - 1e-9, "{} beats exact", pl.name());
        }
    }
}

#[test]
fn the_rounding_stays_within_one_and_a_half_times_the_optimum_on_small_instances() {
    let mut worst: f64 = 0.0;
    let mut sum = 0.0;
    let n = 40;
    for seed in 0..n {
        let (c, free, jobs) = random::small(seed);
        let opt = run_online(&c, free.clone(), &jobs, &Exact, seed).total();
        let lp = run_online(&c, free, &jobs, &Rounding::default(), seed).total();
        worst = worst.max(lp / opt);
        sum += lp / opt;
    }
    assert!(worst <= 1.5, "worst ratio {worst}");
    assert!(sum / n as f64 <= 1.2, "mean ratio {}", sum / n as f64);
}

#[test]
fn on_slow_links_locality_beats_spreading() {
    let (mut lp, mut spread) = (0.0, 0.0);
    for seed in 0..4 {
        let (c, jobs) = random::workload(seed, 4, 12, random::EDGE);
        lp += run_online(&c, Free::new(&c), &jobs, &Rounding::default(), seed).mean();
        spread += run_online(&c, Free::new(&c), &jobs, &Spread, seed).mean();
    }
    assert!(lp < 0.9 * spread, "lp {lp} vs spread {spread}");
}

#[test]
fn a_job_that_never_fits_is_refused_by_every_placer() {
    let (c, free, mut jobs) = random::small(1);
    jobs[0].worker_demand = vec![100, 1];
    for pl in [
        &Exact as &dyn Placer,
        &PackFirst,
        &Spread,
        &Rounding::default(),
    ] {
        let mut rng = tapfinger_core::seeded_rng(1);
        assert!(
            pl.place(&c, &free, &jobs[0], &mut rng).is_none(),
            "{}",
            pl.name()
        );
    }
    let out = run_online(&c, free, &jobs[..1], &Rounding::default(), 1);
    assert_eq!(out.training_slots, vec![None]);
}

#[test]
fn a_gang_that_fits_the_total_but_not_the_boxes_is_told_apart_from_one_too_big() {
    // Two boxes of 4 GPUs (kind 0) and 16 cores (kind 1): 8 GPUs in all.
    let c = Cluster {
        capacity: vec![vec![4, 16], vec![4, 16]],
        internal: 5e9,
        external: random::EDGE,
        slot_seconds: 60.0,
    };
    let mut j = Job {
        arrival: 0,
        iterations: 100.0,
        compute: 0.5,
        gradient_bytes: 1e6,
        workers: (1, 2),
        ps: 1,
        worker_demand: vec![6, 1],
        ps_demand: vec![0, 1],
    };
    let why = never_fits(&c, &j).expect("a 6-GPU worker fits no 4-GPU box");
    assert!(
        why.contains("fit the cluster's total") && why.contains("not its boxes"),
        "{why}"
    );
    j.worker_demand = vec![5, 1];
    j.workers = (2, 2);
    let why = never_fits(&c, &j).expect("10 GPUs are more than the cluster has");
    assert!(why.contains("the whole cluster has"), "{why}");
    j.worker_demand = vec![2, 1];
    assert_eq!(never_fits(&c, &j), None);
    let mut rng = tapfinger_core::seeded_rng(0);
    assert!(Exact.place(&c, &Free::new(&c), &j, &mut rng).is_some());
}
