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
    let r = deployment::replay(&sc, 100, 3, tapfinger_sim::guard::MARGIN, "first-fit-max").unwrap();
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
