//! The deployment replay with the guard: a cluster started on a policy made bad on purpose
//! leaves it after one window, judged on the twin of what it observed, and every window is
//! measured against the best deployable baseline on the true speeds.

// Test code may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

use tapfinger_sim::{Scenario, deployment};

#[test]
fn the_guard_leaves_a_bad_policy_after_one_window_and_stays_off_it() {
    let sc = Scenario::load("hetero6").unwrap();
    // first-fit-max takes over ten times the best baseline's JCT on hetero6 (docs/RESULTS.md).
    let mut told = Vec::new();
    let settings = deployment::Settings {
        windows: 3,
        margin: tapfinger_sim::guard::MARGIN,
        start: "first-fit-max",
        model: None,
        tune: None,
    };
    let r = deployment::replay_observed(&sc, 100, &settings, &mut |w| {
        told.push((w.window, w.policy.clone(), w.extrapolated()))
    })
    .unwrap();
    // Each window was told as it was measured, in order (the command line's progress and its
    // warnings of guessed figures).
    let windows: Vec<_> = r
        .windows
        .iter()
        .map(|w| {
            let guessed = w
                .next
                .unsupported
                .iter()
                .filter(|(_, s)| *s > tapfinger_sim::guard::MAX_UNSUPPORTED)
                .cloned()
                .collect::<Vec<_>>();
            (w.window, w.policy.clone(), guessed)
        })
        .collect();
    assert_eq!(told, windows);
    eprint!("{}", deployment::table(&r));
    assert_eq!(r.windows[0].policy, "first-fit-max");
    assert!(r.windows[0].ratio > 3.0, "{}", r.windows[0].ratio);
    assert!(r.windows[0].next.switched);
    for w in &r.windows[1..] {
        assert_ne!(w.policy, "first-fit-max");
        assert!(
            w.ratio < 1.3,
            "window {}: {} at {}",
            w.window,
            w.policy,
            w.ratio
        );
    }
    // The best baseline is the least of the baselines there: a window a baseline ran is at
    // least 1 of it.
    for w in r.windows.iter().filter(|w| w.policy != "tapfinger") {
        assert!(
            w.ratio >= 1.0 - 1e-9,
            "window {}: {} at {}",
            w.window,
            w.policy,
            w.ratio
        );
    }
}

/// A fine-tune in the replay runs where it is due, and a version that passes its gate is the
/// learned policy from the next window on (the shipped model's own ratio kept beside it); the
/// gate's figures are those of the latest tasks of the window it trained on. (With the gain
/// asked set below zero, a candidate passes by beating every baseline on its gate window alone:
/// on `hetero6` the learned policy does.)
#[test]
fn a_version_that_passes_its_gate_runs_the_next_windows() {
    let sc = Scenario::load("hetero6").unwrap();
    let tune = deployment::TuneEvery {
        every: 3,
        tuning: tapfinger_sim::tune::Tuning {
            holdout: 0.2,
            iterations: 1,
            budget: None,
            lr: 1e-4,
            epochs: None,
            minibatch: None,
            seed: 0,
            min_gain: -1.0,
        },
    };
    let r = deployment::replay(
        &sc,
        100,
        6,
        tapfinger_sim::guard::MARGIN,
        "tapfinger",
        Some(&tune),
    )
    .unwrap();
    eprint!("{}", deployment::table(&r));
    let tuned: Vec<usize> = r
        .windows
        .iter()
        .filter(|w| w.tune.is_some())
        .map(|w| w.window)
        .collect();
    assert_eq!(
        tuned,
        vec![2],
        "due after windows 3 and 6, and never after the last"
    );
    let g = r.windows[2].tune.clone().unwrap();
    assert!(g.passed && g.candidate < g.best.1, "{g:?}");
    for w in &r.windows {
        assert_eq!(w.version, usize::from(w.window > 2), "window {}", w.window);
        if w.version == 0 {
            assert_eq!(w.learned_ratio, w.shipped_ratio);
        }
    }
}

/// `deploy-replay --model DIR` runs the learned policy from that checkpoint in every window,
/// on the twins and alone: the shipped general model's own files replay exactly as the default;
/// the same weights with a bounded focus (another decision rule) replay otherwise.
#[test]
fn a_replay_runs_the_model_it_is_given() {
    let sc = Scenario::load("gen-recur:3").unwrap();
    let run = |model: Option<&std::path::Path>| {
        let settings = deployment::Settings {
            windows: 3,
            margin: tapfinger_sim::guard::MARGIN,
            start: "tapfinger",
            model,
            tune: None,
        };
        deployment::replay_observed(&sc, 100, &settings, &mut |_| {}).unwrap()
    };
    let learned = |r: &deployment::Replay| -> Vec<f64> {
        r.windows
            .iter()
            .map(|w| {
                w.true_jcts
                    .iter()
                    .find(|(p, _)| p == "tapfinger")
                    .unwrap()
                    .1
            })
            .collect()
    };
    let default = run(None);
    let same = tempfile::tempdir().unwrap();
    tapfinger::model::checkpoint::GENERAL
        .write_to(same.path(), |_| {})
        .unwrap();
    assert_eq!(learned(&run(Some(same.path()))), learned(&default));
    let other = tempfile::tempdir().unwrap();
    tapfinger::model::checkpoint::GENERAL
        .write_to(other.path(), |j| j["config"]["net"]["focus"] = 2.into())
        .unwrap();
    assert_ne!(learned(&run(Some(other.path()))), learned(&default));
}
