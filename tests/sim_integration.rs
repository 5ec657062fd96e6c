//! Cross-crate tests of the simulator driving the shared protocol: determinism, the scheduling
//! invariants over random clusters, workloads and policies, and the reproduction ordering.

// Test helpers may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use std::collections::BTreeMap;
use support::scenarios::scenario_with;
use tapfinger::view::ClusterView;
use tapfinger::{NodeId, Resources, TaskId};
use tapfinger_sim::{Scenario, Simulator, policies, report};

mod support {
    pub(crate) mod scenarios;
}

#[test]
fn same_seed_same_output() {
    let sim = Simulator::new(Scenario::load("hetero6").unwrap());
    for policy in ["random", "tiresias", "optimus", "drf"] {
        let a = report::run_one(&sim, policy, 7).unwrap();
        let b = report::run_one(&sim, policy, 7).unwrap();
        assert_eq!(a, b, "{policy}");
        let c = report::run_one(&sim, policy, 8).unwrap();
        assert_ne!(
            a.tasks, c.tasks,
            "{policy}: another seed should give another episode"
        );
    }
    let names: Vec<String> = vec!["random".into(), "min".into()];
    let j1 = serde_json::to_string(&report::compare(&sim, &names, &[1, 2], &mut || {}).unwrap())
        .unwrap();
    let j2 = serde_json::to_string(&report::compare(&sim, &names, &[1, 2], &mut || {}).unwrap())
        .unwrap();
    assert_eq!(j1, j2);
}

#[test]
fn hetero6_ordering_matches_the_paper() {
    // Published: Optimus 8.13 < Tiresias 10.79 < Random 23.57 < Min 33.46.
    let sim = Simulator::new(Scenario::load("hetero6").unwrap());
    let names: Vec<String> = ["optimus", "tiresias", "random", "min"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let c = report::compare(&sim, &names, &[0, 1, 2, 3, 4], &mut || {}).unwrap();
    let jct: Vec<f64> = c.results.iter().map(|r| r.mean.avg_jct).collect();
    assert!(jct.windows(2).all(|w| w[0] < w[1]), "{jct:?}");
    for r in &c.results {
        assert!(
            r.mean.avg_jct >= r.mean.lower_bound_jct,
            "{}: below the lower bound",
            r.policy
        );
    }
}

/// Audits an episode: every view (`audit`), and the allocations in force, which on elastic nodes
/// differ from what the views show (their running tasks at their minimum demands) once the node
/// re-shares: every re-share keeps each task within [minimum, maximum] and the node within its
/// capacity.
struct Audit<'a> {
    started: &'a mut BTreeMap<u64, u32>,
    capacity: BTreeMap<NodeId, Resources>,
    /// Allocation in force of every running task, and where it runs.
    alloc: BTreeMap<TaskId, (NodeId, Resources, Resources)>,
    reshares: u64,
}

impl tapfinger_sim::env::Observer for Audit<'_> {
    fn wants_views(&self) -> bool {
        true
    }
    fn view(&mut self, v: &ClusterView) {
        audit(v, self.started);
        for n in &v.nodes {
            self.capacity.insert(n.id, n.capacity.clone());
        }
        // A task not running (done, or back in a queue after a failed run) runs nowhere; a
        // running one's minimum is the view's (a failed run re-queues a task with a larger one).
        let running: std::collections::BTreeSet<TaskId> =
            v.running.iter().map(|r| r.task.id).collect();
        self.alloc.retain(|t, _| running.contains(t));
        for r in &v.running {
            if let Some(e) = self.alloc.get_mut(&r.task.id) {
                e.2 = r.task.min_demand.clone();
            }
        }
    }
    fn progressed(&mut self, _slot: u64, task: TaskId, _progress: f64, finished: bool) {
        if finished {
            self.alloc.remove(&task);
        }
    }
    fn round(&mut self, o: &tapfinger::RoundOutcome) {
        // Every commit is a start, with the committed allocation (its minimum is not known yet).
        for c in &o.commits {
            let e = (c.agent, c.alloc.clone(), Resources::zeros(c.alloc.len()));
            self.alloc.insert(c.task, e);
        }
    }
    fn reallocated(&mut self, _slot: u64, node: NodeId, changed: &[(TaskId, Resources)]) {
        self.reshares += 1;
        for (t, a) in changed {
            let e = self.alloc.get_mut(t).expect("a re-shared task runs");
            assert_eq!(e.0, node, "{t} re-shared by a node it does not run on");
            assert!(e.2.fits_in(a), "{t} re-shared below its minimum: {a}");
            e.1 = a.clone();
        }
        let mut used = Resources::zeros(self.capacity[&node].len());
        for (n, a, _) in self.alloc.values() {
            if *n == node {
                used = used.checked_add(a).unwrap();
            }
        }
        assert!(
            used.fits_in(&self.capacity[&node]),
            "node {node} re-shared over capacity: {used} > {}",
            self.capacity[&node]
        );
    }
}

/// Checks every observed state: capacity, minimum demand, and no task in two places.
fn audit(v: &ClusterView, started: &mut BTreeMap<u64, u32>) {
    for n in &v.nodes {
        let mut used = Resources::zeros(n.capacity.len());
        for &r in &n.running {
            let rv = &v.running[r];
            assert_eq!(rv.node, n.id);
            assert!(
                rv.task.min_demand.fits_in(&rv.alloc),
                "{} runs below its minimum",
                rv.task.id
            );
            used = used.checked_add(&rv.alloc).unwrap();
        }
        assert!(
            used.fits_in(&n.capacity),
            "node {} over capacity: {used} > {}",
            n.id,
            n.capacity
        );
        assert_eq!(
            n.capacity.checked_sub(&used).unwrap(),
            n.free,
            "node {} free units inconsistent",
            n.id
        );
    }
    let mut seen = std::collections::BTreeSet::new();
    for r in &v.running {
        assert!(seen.insert(r.task.id), "{} runs twice", r.task.id);
        *started.entry(r.task.id.0).or_default() |= 1;
    }
    for p in &v.pending {
        assert!(
            !seen.contains(&p.task.id),
            "{} both pending and running",
            p.task.id
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn scheduling_invariants_hold(sc in scenario_with(true), policy in 0usize..9, seed in 0u64..1000) {
        let name = policies::all_policies()[policy];
        let n_tasks = sc.tasks as usize;
        let fast = Simulator::new(sc.clone());
        // Every agent's protocol instance, checked to agree on every round.
        let sim = Simulator::new(sc).replicated(true);
        let ps = policies::build(&sim, name).unwrap();
        let elastic = ps[0].elastic();
        let mut started = BTreeMap::new();
        let mut obs = Audit { started: &mut started, capacity: BTreeMap::new(), alloc: BTreeMap::new(), reshares: 0 };
        let r = sim.run_observed(ps, seed, &mut obs).unwrap();
        prop_assert!(elastic || obs.reshares == 0, "{} re-shared", name);
        // Resolving each round once gives the same episode.
        prop_assert_eq!(&fast.run(policies::build(&fast, name).unwrap(), seed).unwrap(), &r);
        // Every arrived task finished, exactly once.
        prop_assert_eq!(r.tasks.len(), n_tasks);
        let ids: std::collections::BTreeSet<u64> = r.tasks.iter().map(|t| t.id).collect();
        prop_assert_eq!(ids.len(), n_tasks);
        for t in &r.tasks {
            prop_assert!(t.finish > t.start || t.finish == t.start + 1 || t.start >= t.arrival);
            prop_assert!(t.start >= t.arrival);
            prop_assert!(t.jct >= t.lower_bound, "task {} faster than its lower bound", t.id);
        }
        // Tasks start once, except those re-queued after a failed run.
        let restarts: u32 = r.tasks.iter().map(|t| t.failures).sum();
        let starts: u32 = r.slots.iter().map(|s| s.commits).sum();
        prop_assert_eq!(starts as usize, n_tasks + restarts as usize);
    }
}

/// The online bench's gate scenarios describe the bench's live clusters in the agents' own shape:
/// they load, have the dimensions the agents' model takes, and in them the allocation matters (the
/// best baseline is several times better than the worst), so learning has something to show.
#[test]
fn the_online_bench_clusters_are_valid_scenarios_for_the_agents_model() {
    let edge = Simulator::new(Scenario::load("edge-agent").unwrap());
    for file in ["cluster.toml", "mixed.toml"] {
        let path = format!("{}/benches/online/{file}", env!("CARGO_MANIFEST_DIR"));
        let sim = Simulator::new(Scenario::load(&path).unwrap());
        assert_eq!(sim.dims(), edge.dims());
        let names = vec!["first-fit-max".to_string(), "min".to_string()];
        let c = report::compare(&sim, &names, &[0], &mut || {}).unwrap();
        let (good, bad) = (c.results[0].mean.avg_jct, c.results[1].mean.avg_jct);
        assert!(
            bad > 3.0 * good,
            "{file}: first-fit-max {good:.2}, min {bad:.2}"
        );
    }
}
