//! The task-volume forecast inside episodes (`compare --forecast N`): each interval is forecast
//! at its start by RLPTO's ARIMA + GRU, fitted once per simulator on arrivals drawn before the
//! episode, from that history and the episode's own counts; the views every policy decides from
//! carry the next intervals' forecast; the intervals while tasks arrive are judged against what
//! arrived. Behaviour, not accuracy: the figures are in docs/DECISIONS.md.

// Test code may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use tapfinger::{Decision, Policy, Rng, View};
use tapfinger_sim::env::Simulator;
use tapfinger_sim::scenario::Scenario;

/// The slot and forecast of every view seen.
type Seen = Arc<Mutex<Vec<(u64, Vec<f64>)>>>;

/// A policy that never claims and keeps the forecast of every view it sees.
struct Watch(Seen);

impl Policy for Watch {
    fn name(&self) -> &str {
        "watch"
    }
    fn decide(&mut self, view: &View<'_>, _rng: &mut Rng) -> Decision {
        self.0
            .lock()
            .unwrap()
            .push((view.cluster.slot, view.cluster.forecast.clone()));
        Decision::Pass
    }
}

#[test]
fn an_episode_forecasts_each_interval_while_tasks_arrive() {
    let plain = Simulator::new(Scenario::load("converging-edge").unwrap());
    let run = |sim: &Simulator| {
        let policies = tapfinger_sim::policies::build(sim, "min").unwrap();
        sim.run(policies, 100).unwrap()
    };
    assert!(run(&plain).forecasts.is_empty());
    let sim = Simulator::new(Scenario::load("converging-edge").unwrap()).forecast(2);
    let pre = sim.prefit(2);
    assert_eq!(pre.why_not, None, "a model fits the drawn history");
    let e = run(&sim);
    let last_arrival = e.tasks.iter().map(|t| t.arrival).max().unwrap();
    assert!(
        e.forecasts.len() as u64 <= last_arrival / 2 + 1,
        "{}",
        e.forecasts.len()
    );
    // The history before the episode lets a model forecast from its first interval on.
    assert!(e.forecasts.iter().all(|p| p.fitted));
    assert!(e.forecasts.len() > 40, "{}", e.forecasts.len());
    assert!(
        e.forecasts
            .iter()
            .all(|p| p.predicted.is_finite() && p.predicted >= 0.0 && p.actual >= 0.0)
    );
    // What arrived, summed over the judged intervals (from slot 0), is what the records say
    // arrived then.
    let end = e.forecasts.len() as u64 * 2;
    let arrived = e
        .tasks
        .iter()
        .filter(|t| (0..end).contains(&t.arrival))
        .count() as f64;
    let counted: f64 = e.forecasts.iter().map(|p| p.actual).sum();
    assert_eq!(counted, arrived);
}

#[test]
fn every_view_carries_the_forecast_of_the_next_intervals() {
    let sc = Scenario::load("converging-edge").unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let watch = |sim: &Simulator| -> Vec<Box<dyn Policy>> {
        (0..sim.scenario().nodes.len())
            .map(|_| Box::new(Watch(seen.clone())) as Box<dyn Policy>)
            .collect()
    };
    // Nobody claims, so the episode cannot finish; the views seen until then are enough.
    let mut short = sc.clone();
    short.max_slots = 12;
    let _ = Simulator::new(short.clone()).run(watch(&Simulator::new(short.clone())), 100);
    assert!(seen.lock().unwrap().iter().all(|(_, f)| f.is_empty()));
    seen.lock().unwrap().clear();
    let sim = Simulator::new(short).forecast(2);
    let _ = sim.run(watch(&sim), 100);
    let seen = seen.lock().unwrap();
    assert!(!seen.is_empty());
    let ahead = tapfinger::graph::FORECAST_AHEAD;
    for (slot, f) in seen.iter() {
        assert_eq!(f.len(), ahead, "slot {slot}");
        assert!(f.iter().all(|x| x.is_finite() && *x >= 0.0), "{f:?}");
    }
    // One forecast per interval: the views of both slots of an interval carry the same one.
    for pair in seen.windows(2) {
        if pair[0].0 / 2 == pair[1].0 / 2 {
            assert_eq!(pair[0].1, pair[1].1);
        }
    }
}
