//! Priority classes in whole episodes of the `priority-edge` preset (a fifth of the tasks urgent,
//! class 0; the rest batch, class 2): the urgent class finishes sooner where the queues honour
//! classes than in the same workloads with classes ignored (`--priority-blind`), for a policy
//! that takes its window in order and for elastic Tiresias, whose shares go class by class; and
//! with preemption (`--preempt`) only lower classes are stopped, for rooms that are then used.
//! Behaviour, not timing; the figures are in docs/DECISIONS.md.

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

/// Preemption (`--preempt`): for a policy that leaves urgent tasks waiting behind running batch
/// work (random picks), the urgent class finishes much sooner; only batch tasks are stopped,
/// each room made is used by the task it was made for in the next slot's rounds, and the work
/// the victims lost is counted.
#[test]
fn preemption_stops_only_batch_tasks_and_every_room_it_makes_is_used() {
    let plain = Simulator::new(Scenario::load("priority-edge").unwrap());
    let preempting = Simulator::new(Scenario::load("priority-edge").unwrap()).preempt(None);
    let (urgent, _) = classes(&plain, "random");
    let (urgent_pre, _) = classes(&preempting, "random");
    eprintln!("random: class 0 {urgent:.2} without preemption, {urgent_pre:.2} with");
    assert!(urgent >= 1.5 * urgent_pre, "{urgent} vs {urgent_pre}");
    let mut preempted = 0;
    for seed in [100, 101] {
        for policy in ["random", "first-fit-max", "tiresias", "optimus-np"] {
            let policies = tapfinger_sim::policies::build(&preempting, policy).unwrap();
            let e = preempting.run(policies, seed).unwrap();
            assert_eq!(e.rooms_unused, 0, "{policy}, seed {seed}");
            for t in &e.tasks {
                if t.preemptions > 0 {
                    assert_eq!(t.priority, 2, "{policy}: an urgent task was preempted");
                    preempted += 1;
                } else {
                    assert_eq!(t.work_lost, 0.0);
                }
            }
            let m = tapfinger_sim::metrics::summarize(&e, &preempting.scenario().kind_names());
            assert_eq!(
                m.preempted as u32,
                e.tasks.iter().map(|t| t.preemptions).sum::<u32>()
            );
        }
    }
    assert!(preempted > 0, "nothing was preempted");
    // Without `--preempt` nothing is.
    let policies = tapfinger_sim::policies::build(&plain, "random").unwrap();
    let e = plain.run(policies, 100).unwrap();
    assert!(e.tasks.iter().all(|t| t.preemptions == 0));
}

/// With a grace (`grace_slots`), a victim's units stay taken while it ends, as on an agent: the
/// waiting task starts once they are free, every room is still used, and no claim ever exceeds
/// what a node has left (the episode would fail on one).
#[test]
fn a_grace_keeps_the_victims_units_until_they_end() {
    let text = include_str!("../presets/priority-edge.toml").replace(
        "aging_slots = 50",
        "aging_slots = 50\npreempt = true\ngrace_slots = 2",
    );
    let sim = Simulator::new(Scenario::from_toml(&text, "test", None).unwrap());
    assert_eq!(sim.scenario().preempt_grace_slots, 2);
    let mut preempted = 0;
    for policy in ["random", "first-fit-max"] {
        let policies = tapfinger_sim::policies::build(&sim, policy).unwrap();
        let e = sim.run(policies, 100).unwrap();
        assert_eq!(e.rooms_unused, 0, "{policy}");
        preempted += e.tasks.iter().map(|t| t.preemptions).sum::<u32>();
    }
    assert!(preempted > 0);
    let bad = include_str!("../presets/priority-edge.toml")
        .replace("aging_slots = 50", "aging_slots = 50\ngrace_slots = -1");
    let e = Scenario::from_toml(&bad, "test", None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("priorities.grace_slots"), "{e}");
}
