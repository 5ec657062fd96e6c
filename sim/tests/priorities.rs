//! Priority classes in whole episodes of the `priority-edge` preset (a fifth of the tasks urgent,
//! class 0; the rest batch, class 2): the urgent class finishes sooner where the queues honour
//! classes than in the same workloads with classes ignored (`--priority-blind`), for a policy
//! that takes its window in order and for elastic Tiresias, whose shares go class by class.
//! Behaviour, not timing; the figures are in docs/BENCHMARKS.md.

// Test code may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

use tapfinger::ledger::Priorities;
use tapfinger_sim::env::Simulator;
use tapfinger_sim::report;
use tapfinger_sim::scenario::Scenario;

/// Mean JCT of class 0 and of class 2 for `policy` over seeds 100–103.
fn classes(sim: &Simulator, policy: &str) -> (f64, f64) {
    let names = vec![policy.to_string()];
    let c = report::compare(sim, &names, &[100, 101, 102, 103], &mut || {}).unwrap();
    let m = &c.results[0].mean.class_avg_jct;
    (m[&0], m[&2])
}

#[test]
fn the_urgent_class_finishes_sooner_where_the_queues_honour_classes() {
    let sim = Simulator::new(Scenario::load("priority-edge").unwrap());
    assert!(sim.scenario().priorities.honour);
    let blind =
        Simulator::new(Scenario::load("priority-edge").unwrap()).priorities(Priorities::BLIND);
    for (policy, at_least) in [("first-fit-max", 2.0), ("tiresias", 1.3)] {
        let (urgent, batch) = classes(&sim, policy);
        let (urgent_blind, batch_blind) = classes(&blind, policy);
        eprintln!(
            "{policy}: class 0 {urgent:.2} (blind {urgent_blind:.2}), class 2 {batch:.2} (blind {batch_blind:.2})"
        );
        assert!(
            urgent_blind >= at_least * urgent,
            "{policy}: class 0 at {urgent:.2} slots, blind {urgent_blind:.2}: not {at_least}× better"
        );
        // Blind, the classes are alike (the same task, drawn alike): the gain is the order's.
        assert!(
            (urgent_blind / batch_blind - 1.0).abs() < 0.25,
            "{urgent_blind} vs {batch_blind}"
        );
    }
}

#[test]
fn a_negative_aging_an_unknown_class_and_a_misspelt_key_are_refused_with_their_field() {
    let text = include_str!("../presets/priority-edge.toml")
        .replace("aging_slots = 50", "aging_slots = -1");
    let e = Scenario::from_toml(&text, "test", None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("priorities.aging_slots"), "{e}");
    let text =
        include_str!("../presets/priority-edge.toml").replace("priority = 2", "priority = 12");
    let e = Scenario::from_toml(&text, "test", None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("batch") && e.contains("priority") && e.contains("0 (the highest) to 9"),
        "{e}"
    );
    let text =
        include_str!("../presets/priority-edge.toml").replace("honour = true", "honor = true");
    let e = Scenario::from_toml(&text, "test", None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("honor"), "{e}");
}
