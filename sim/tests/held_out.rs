//! The shipped general model on a few held-out generated scenarios (generator seeds from 10000,
//! never trained on; of the base, wide, long and Gavel families),
//! against the best baseline of each: a behaviour check of the model that
//! `run`, `compare` and `suite` use by default, not a timing. The bars are what the shipped model
//! is known to hold (docs/RESULTS.md), not the goal of a mean of 0.95: they catch a model that
//! no longer loads everywhere or that falls behind the baselines.

// Test code may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

use tapfinger_sim::generate::Family;
use tapfinger_sim::suite::{self, SuiteConfig};

/// On the base family (with the costs every generated family draws since 2026-11-29: paid
/// re-shares and starts, classes that cannot be resized, many classes, overload), where the
/// shipped model, fine-tuned before the costs, won 9 of these 20 at a mean of 1.013, worst
/// 1.142 (2026-11-29).
#[test]
fn the_shipped_general_model_holds_its_own_against_the_best_baseline_on_held_out_scenarios() {
    holds_its_own(
        Family::Base,
        Bars {
            wins: 6,
            mean: 1.03,
            worst: 1.25,
        },
    );
}

/// The same on the wide family (boxes of up to 32 GPUs, classes that scale to 16 times their
/// minimum demand): it must not fall apart on clusters and tasks larger than the base family's
/// (8 of these 20 won, mean 1.013, worst 1.142, 2026-11-29).
#[test]
fn the_shipped_general_model_holds_its_own_on_the_wide_family() {
    holds_its_own(
        Family::Wide,
        Bars {
            wins: 5,
            mean: 1.03,
            worst: 1.25,
        },
    );
}

/// The same on the long family (many small tasks on each box, 3–10 times as many slots long):
/// 8 of these 20 won, mean 1.046 (2026-11-29). The worst ratio is looser: on the overloaded
/// `gen-long:10005` (offered load 1.17, heavy-tailed sizes) `random` beats every other policy
/// but the clairvoyant reference (1156 slots against 1612 for Tiresias and 1742 for the model)
/// by starting short tasks before long ones by chance.
#[test]
fn the_shipped_general_model_holds_its_own_on_the_long_family() {
    holds_its_own(
        Family::Long,
        Bars {
            wins: 6,
            mean: 1.08,
            worst: 1.7,
        },
    );
}

/// The same on the Gavel family (mixed K80, P100 and V100 boxes; jobs that cannot be resized;
/// loads up to 1.2), a family it never trained on: the worst ratio is looser, as on the long
/// family (13 of these 20 won, mean 0.958, worst 1.347, 2026-11-29).
#[test]
fn the_shipped_general_model_holds_its_own_on_the_gavel_family() {
    holds_its_own(
        Family::Gavel,
        Bars {
            wins: 10,
            mean: 1.0,
            worst: 1.45,
        },
    );
}

fn holds_its_own(family: Family, bars: Bars) {
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
    assert!(wins >= bars.wins, "{wins} wins of 20: {results:?}");
    assert!(mean <= bars.mean, "mean ratio {mean:.3}: {results:?}");
    assert!(worst <= bars.worst, "worst ratio {worst:.3}: {results:?}");
}

/// What the shipped model must keep on the twenty: wins (ratio ≤ 1), the mean ratio to the
/// best baseline and the worst ratio it must stay under. Each a little looser than what it
/// holds (docs/RESULTS.md), so the test catches a model that no longer loads everywhere or
/// falls behind, not the noise of one workload.
struct Bars {
    wins: usize,
    mean: f64,
    worst: f64,
}
