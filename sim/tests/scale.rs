//! The learned policy's cost per decision does not grow with the cluster: a cheap, deterministic
//! stand-in for the scale bench (`cargo bench -p tapfinger-sim --bench scale`, whose wall times
//! RESULTS keeps). The network's pass dominates a learned decision, and its cost follows the
//! size of the graph it encodes; a model deciding on the whole cluster (no `focus`) encodes a
//! graph that grows with every node added, which made a 1002-node episode take minutes. Here
//! the shipped general model's graphs, on the decision views of `hetero6` repeated to 12 and to
//! 96 nodes, must stay within [`MAX_GROWTH`] of each other on average.

// Test code may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

use tapfinger::view::ClusterView;
use tapfinger_sim::env::Observer;
use tapfinger_sim::{Scenario, Simulator, policies};

/// The most the mean graph at 96 nodes may be over the mean at 12 (the bar for the cost
/// per task, applied to what drives it).
const MAX_GROWTH: f64 = 1.5;

/// The first decision views of an episode.
#[derive(Default)]
struct Views(Vec<ClusterView>);

impl Observer for Views {
    fn wants_views(&self) -> bool {
        self.0.len() < 40
    }
    fn decision_view(&mut self, v: &ClusterView) {
        if self.0.len() < 40 {
            self.0.push(v.clone());
        }
    }
}

/// The mean rows of the graphs the shipped general model encodes for every agent with a task
/// in its window, over the first decision views of a Tiresias episode on `hetero6` × `copies`.
fn mean_rows(copies: usize) -> f64 {
    let sim = Simulator::new(Scenario::load("hetero6").unwrap().repeated(copies, 8));
    let (net, cfg) = tapfinger::model::checkpoint::GENERAL
        .load(&sim.dims())
        .unwrap();
    let model = tapfinger::model::TapfingerPolicy::new(std::sync::Arc::new(net), cfg).greedy(true);
    let mut views = Views::default();
    let ps = policies::build(&sim, "tiresias").unwrap();
    sim.run_observed(ps, 100, &mut views).unwrap();
    let (mut rows, mut decisions) = (0usize, 0usize);
    for v in &views.0 {
        for n in &v.nodes {
            let Some(view) = v.for_agent(n.id) else {
                continue;
            };
            if view.window().next().is_some() {
                rows += model.graph_rows(&view);
                decisions += 1;
            }
        }
    }
    assert!(decisions > 0, "no agent had a task to decide on");
    rows as f64 / decisions as f64
}

#[test]
fn the_general_models_graphs_stay_bounded_as_the_cluster_grows() {
    let (small, large) = (mean_rows(2), mean_rows(16));
    eprintln!("mean graph rows per decision: 12 nodes {small:.1}, 96 nodes {large:.1}");
    assert!(
        large <= MAX_GROWTH * small,
        "the general model's graphs grow with the cluster: {small:.1} rows at 12 nodes, \
         {large:.1} at 96 (bar: {MAX_GROWTH}x); does its train.json set config.net.focus?"
    );
}
