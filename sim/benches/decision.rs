//! Decision latency of the learned policy: one agent's decision (graph batching, HAN encoder,
//! pointer and allocation heads through the decision pass `model::net::infer`, sampling) on the
//! busiest `hetero6` state of a Tiresias episode, with the per-preset features (schema 1) and
//! with the general ones (which also read the speed estimates the view carries),
//! untrained and as shipped (elastic: no allocation heads).
//! Goals: under 2 ms (per preset), 0.5 ms (general).

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use tapfinger::model::TapfingerPolicy;
use tapfinger::model::net::NetConfig;
use tapfinger::view::ClusterView;
use tapfinger::{NodeId, Policy};
use tapfinger_sim::env::Observer;
use tapfinger_sim::{Scenario, Simulator, policies};

/// Keeps the busiest snapshot seen (most pending + running tasks).
#[derive(Default)]
struct Busiest(Option<ClusterView>);

impl Observer for Busiest {
    fn wants_views(&self) -> bool {
        true
    }
    fn view(&mut self, v: &ClusterView) {
        let size = |c: &ClusterView| c.pending.len() + c.running.len();
        if self.0.as_ref().is_none_or(|b| size(v) > size(b)) {
            self.0 = Some(v.clone());
        }
    }
}

fn decision(c: &mut Criterion) {
    let sim = Simulator::new(Scenario::load("hetero6").expect("preset"));
    let mut obs = Busiest::default();
    sim.run_observed(
        policies::build(&sim, "tiresias").expect("policy"),
        0,
        &mut obs,
    )
    .expect("episode");
    let view = obs.0.expect("a snapshot");
    let device = burn::tensor::Device::flex();
    let mut policy = TapfingerPolicy::untrained(NetConfig::new(sim.dims()), device);
    let mut rng = tapfinger::seeded_rng(1);
    // The agent with the fullest window.
    let me = view
        .nodes
        .iter()
        .max_by_key(|n| n.window.len())
        .map_or(NodeId(0), |n| n.id);
    let v = view.for_agent(me).expect("agent");
    c.bench_function("tapfinger_decision_hetero6", |b| {
        b.iter(|| black_box(policy.decide(&v, &mut rng)))
    });
    let mut general = TapfingerPolicy::untrained(
        NetConfig::new(tapfinger::model::batch::Dims::general(
            sim.scenario().window,
        )),
        burn::tensor::Device::flex(),
    );
    c.bench_function("tapfinger_decision_hetero6_general", |b| {
        b.iter(|| black_box(general.decide(&v, &mut rng)))
    });
    // The shipped general model as it runs: elastic, so no allocation heads.
    let (net, cfg) = tapfinger::model::checkpoint::GENERAL
        .load(&sim.dims())
        .expect("the shipped general model");
    let mut shipped = TapfingerPolicy::new(std::sync::Arc::new(net), cfg);
    c.bench_function("tapfinger_decision_hetero6_general_shipped", |b| {
        b.iter(|| black_box(shipped.decide(&v, &mut rng)))
    });
}

criterion_group!(benches, decision);
criterion_main!(benches);
