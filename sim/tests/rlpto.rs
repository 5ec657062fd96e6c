//! The shipped RLPTO model (`rlpto`) in whole episodes: one set of weights loads and decides on
//! clusters of every shape (GPU and CPU-only boxes, with priority classes or without, generated
//! ones), each episode forecasts its arrivals with the interval the model was trained with (the
//! forecast is one of its features), and on `rlpto-edge` its urgent class finishes well before
//! the batch class. Behaviour, not timing; the figures are in docs/DECISIONS.md ("Priorities,
//! forecasts, shrinking, RLPTO").

// Test code may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

use tapfinger_sim::env::Simulator;
use tapfinger_sim::scenario::Scenario;
use tapfinger_sim::{policies, report};

#[test]
fn the_shipped_rlpto_model_decides_on_every_kind_of_cluster_and_forecasts_as_trained() {
    for name in [
        "hetero6",
        "edge-agent",
        "priority-edge",
        "rlpto-edge",
        "gen:3",
        "gen:10004",
    ] {
        let mut sc = Scenario::load(name).unwrap();
        sc.tasks = sc.tasks.min(60);
        let sim = Simulator::new(sc);
        let ps = policies::rlpto(&sim).unwrap_or_else(|e| panic!("{name}: {e}"));
        let every = ps[0].forecast_interval();
        assert!(every.is_some_and(|e| e > 0), "{name}: no forecast interval");
        // The simulator refuses any illegal claim: finishing every task is the check.
        let r = sim.run(ps, 100).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(r.tasks.len(), sim.scenario().tasks as usize, "{name}");
        // The episode forecast its arrivals per the model's interval, though the scenario
        // asked for no forecast.
        assert!(sim.scenario().forecast_interval_slots.is_none(), "{name}");
        assert!(!r.forecasts.is_empty(), "{name}: no interval forecast");
    }
}

#[test]
fn under_the_rlpto_model_the_urgent_class_finishes_well_before_the_batch_class() {
    let sim = Simulator::new(Scenario::load("rlpto-edge").unwrap());
    let c = report::compare(&sim, &["rlpto".to_string()], &[100, 101], &mut || {}).unwrap();
    let m = &c.results[0].mean;
    let (urgent, batch) = (m.class_avg_jct[&0], m.class_avg_jct[&2]);
    // With the classes ignored (`--priority-blind`) the gap on these seeds is 1.05×, the two
    // classes' different jobs alone; honoured it is about 1.5×.
    assert!(
        urgent * 1.3 < batch,
        "class 0 {urgent:.2} slots, class 2 {batch:.2}"
    );
    assert!(m.cluster_reward.is_finite());
}
