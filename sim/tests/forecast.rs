//! The task-volume forecast inside episodes (`compare --forecast N`): each interval while tasks
//! arrive is forecast (the last value until 40 intervals are known, then RLPTO's ARIMA + GRU),
//! and judged against what arrived. Behaviour, not accuracy: the figures are in
//! docs/BENCHMARKS.md.

// Test code may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

use tapfinger_sim::env::Simulator;
use tapfinger_sim::scenario::Scenario;

#[test]
fn an_episode_forecasts_each_interval_while_tasks_arrive() {
    let plain = Simulator::new(Scenario::load("converging-edge").unwrap());
    let run = |sim: &Simulator| {
        let policies = tapfinger_sim::policies::build(sim, "min").unwrap();
        sim.run(policies, 100).unwrap()
    };
    assert!(run(&plain).forecasts.is_empty());
    let sim = Simulator::new(Scenario::load("converging-edge").unwrap()).forecast(2);
    let e = run(&sim);
    let last_arrival = e.tasks.iter().map(|t| t.arrival).max().unwrap();
    assert!(
        e.forecasts.len() as u64 <= last_arrival / 2,
        "{}",
        e.forecasts.len()
    );
    // The first 40 intervals are the fallback's, the rest a model's.
    assert!(
        e.forecasts
            .iter()
            .take(39)
            .all(|p| !p.fitted && p.predicted == p.last_value)
    );
    assert!(e.forecasts.iter().skip(40).all(|p| p.fitted));
    assert!(e.forecasts.len() > 40, "{}", e.forecasts.len());
    assert!(
        e.forecasts
            .iter()
            .all(|p| p.predicted.is_finite() && p.predicted >= 0.0 && p.actual >= 0.0)
    );
    // What arrived, summed over the judged intervals (from the second on: the first is
    // forecast at its start, slot 2), is what the records say arrived then.
    let end = 2 + e.forecasts.len() as u64 * 2;
    let arrived = e
        .tasks
        .iter()
        .filter(|t| (2..end).contains(&t.arrival))
        .count() as f64;
    let counted: f64 = e.forecasts.iter().map(|p| p.actual).sum();
    assert_eq!(counted, arrived);
}
