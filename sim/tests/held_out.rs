//! The shipped general model on a few held-out generated scenarios (generator seeds from 10000,
//! never trained on; of the base, wide, long and Gavel families),
//! against the best baseline of each: a behaviour check of the model that
//! `run`, `compare` and `suite` use by default, not a timing. The bar is what the shipped model
//! is known to hold (docs/RESULTS.md), not the goal of 90 wins at a mean of 0.9: it
//! catches a model that no longer loads everywhere or that falls behind the baselines.

// Test code may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

use tapfinger_sim::generate::Family;
use tapfinger_sim::suite::{self, SuiteConfig};

#[test]
fn the_shipped_general_model_holds_its_own_against_the_best_baseline_on_held_out_scenarios() {
    holds_its_own(Family::Base, WORST);
}

/// The same on the wide family (boxes of up to 32 GPUs, classes that scale to 16 times their
/// minimum demand): it must not fall apart on clusters and tasks larger than the base family's
/// (14 of these 20 won, mean 0.973, when this test was written, by a model that had never
/// trained on the family).
#[test]
fn the_shipped_general_model_holds_its_own_on_the_wide_family() {
    holds_its_own(Family::Wide, WORST);
}

/// The same on the long family (many small tasks on each box, 3–10 times as many slots long):
/// the model shipped before 2026-11-28 lost to the best baseline by 12 % on
/// average there (docs/DECISIONS.md). The worst ratio is looser: on `gen-long:10017`
/// first-fit-max, which gives each task all it can use, beats the model by two thirds (10.3
/// against 17.0 slots, measured 2026-11-28) while every elastic baseline is worse than the
/// model (Tiresias 20.3).
#[test]
fn the_shipped_general_model_holds_its_own_on_the_long_family() {
    holds_its_own(Family::Long, 1.7);
}

/// The same on the Gavel family (mixed K80, P100 and V100 boxes; jobs that cannot be resized;
/// loads up to 1.2), a family it never trained on: the worst ratio is looser, as on the long
/// family (13 of these 20 won, mean 0.958, worst 1.347, when this test
/// was written, 2026-11-29).
#[test]
fn the_shipped_general_model_holds_its_own_on_the_gavel_family() {
    holds_its_own(Family::Gavel, 1.45);
}

fn holds_its_own(family: Family, worst_bound: f64) {
    let cfg = SuiteConfig {
        // The first twenty held-out scenarios, one workload each (a fraction of a second apiece).
        scenarios: suite::Scenarios::Generated {
            family,
            seeds: 10_000..10_020,
        },
        seeds: 1,
        seed_base: 100,
        candidate: "tapfinger".into(),
        model: None,
        threads: 2,
        profile_hints: false,
        declare_work: false,
        start_weight: None,
    };
    let s = suite::run(&cfg, &|| {}).unwrap();
    let results: Vec<(u64, f64)> = s
        .scenarios
        .iter()
        .map(|x| (x.generator_seed.unwrap(), x.ratio))
        .collect();
    eprintln!("held-out ratios to the best baseline ({family:?}): {results:?}");
    let wins = results.iter().filter(|(_, r)| *r <= 1.0).count();
    let mean = results.iter().map(|(_, r)| r).sum::<f64>() / results.len() as f64;
    let worst = results.iter().map(|(_, r)| *r).fold(0.0, f64::max);
    assert_eq!(results.len(), 20);
    assert!(wins >= WINS, "{wins} wins of 20: {results:?}");
    assert!(mean <= MEAN, "mean ratio {mean:.3}: {results:?}");
    assert!(worst <= worst_bound, "worst ratio {worst:.3}: {results:?}");
}

/// Wins (ratio ≤ 1) of the twenty that the shipped model must keep.
const WINS: usize = 8;
/// Mean ratio to the best baseline it must stay under.
const MEAN: f64 = 1.02;
/// The worst ratio it must stay under (on the base and wide families).
const WORST: f64 = 1.25;
