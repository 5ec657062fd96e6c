//! The centralized critic's input: one global state per round, assembled from every agent's
//! report of that round.
//!
//! Each agent decides on its own view, built from its own state and its peers' heartbeats; a
//! peer's part of it may be a heartbeat old. For training (never for deciding) the critic may see
//! more: the coordinator has the reports of all agents for a round, and each agent is the authority
//! on its own node (its free units, its pending window, what runs on it). [`assemble`] merges a
//! round's reports that way. In the simulator every agent of a round sees the same snapshot, so
//! the merge changes nothing and [`Assembly::view`] says so (`None`), which spares the trainer a
//! second forward pass.
//!
//! Deterministic: rounds, nodes and tasks are merged in id order; where no report comes from a
//! node itself, the lowest-id reporter that knows it speaks for it.

use super::DecisionRecord;
use std::collections::BTreeMap;
use std::sync::Arc;
use tapfinger_core::NodeId;
use tapfinger_core::task::TaskId;
use tapfinger_core::view::{ClusterView, NodeView};

/// A round of the decision protocol: (slot, step within the slot).
pub type Round = (u64, u32);

/// The global state of every round that has reports.
#[derive(Debug, Default)]
pub struct Assembly {
    /// Per round: the merged view, or `None` where every report of the round saw the same
    /// snapshot (then each record's own view already is the global state).
    pub rounds: BTreeMap<Round, Option<Arc<ClusterView>>>,
    /// Reports (records) per round, summed over rounds: `reports / rounds.len()` is the mean
    /// number of agents heard per round.
    pub reports: usize,
    /// Rounds whose merged view differs from at least one agent's own view.
    pub merged: usize,
}

impl Assembly {
    /// The critic's view for a record: the merged global state of its round, if it differs from
    /// the record's own view.
    pub fn view(&self, rec: &DecisionRecord) -> Option<&Arc<ClusterView>> {
        self.rounds
            .get(&(rec.view.slot, rec.view.step))
            .and_then(|v| v.as_ref())
    }

    /// Mean number of reports per round (0 without rounds).
    pub fn reports_per_round(&self) -> f64 {
        if self.rounds.is_empty() {
            0.0
        } else {
            self.reports as f64 / self.rounds.len() as f64
        }
    }
}

/// Merge the reports of each round into one global view.
pub fn assemble<'a>(records: impl IntoIterator<Item = &'a DecisionRecord>) -> Assembly {
    let mut by_round: BTreeMap<Round, BTreeMap<NodeId, &ClusterView>> = BTreeMap::new();
    let mut reports = 0;
    for r in records {
        reports += 1;
        // An agent may decide several times in one round only in the simulator's sub-steps,
        // which carry distinct steps; should it happen anyway, its first report of the round wins.
        by_round
            .entry((r.view.slot, r.view.step))
            .or_default()
            .entry(r.me)
            .or_insert(&r.view);
    }
    let mut out = Assembly {
        reports,
        ..Assembly::default()
    };
    for (round, views) in by_round {
        let mut it = views.values();
        let first = it.next().copied();
        let same = it.all(|v| Some(*v) == first);
        // Reports that differ cannot all equal their merge: a merge is needed exactly then.
        let merged = (!same).then(|| merge(&views));
        if merged.is_some() {
            out.merged += 1;
        }
        out.rounds.insert(round, merged.map(Arc::new));
    }
    out
}

/// One round: every node as its own report shows it, or else as the lowest-id reporter knows it.
fn merge(views: &BTreeMap<NodeId, &ClusterView>) -> ClusterView {
    let any = views.values().next().copied();
    // Which view speaks for each node, and whether that is the node's own report.
    let mut source: BTreeMap<NodeId, (&ClusterView, &NodeView, bool)> = BTreeMap::new();
    for (&me, v) in views {
        if let Some(i) = v.node_index(me) {
            source.insert(me, (v, &v.nodes[i], true));
        }
    }
    for v in views.values() {
        for n in &v.nodes {
            source.entry(n.id).or_insert((v, n, false));
        }
    }
    // Running tasks first, own reports before second-hand ones, so that a task that a stale
    // heartbeat still shows elsewhere (or still pending) is kept where its runner says it runs.
    let mut pending = BTreeMap::new();
    let mut running = BTreeMap::new();
    for own in [true, false] {
        for (v, n, _) in source.values().filter(|s| s.2 == own) {
            for &i in &n.running {
                if let Some(t) = v.running.get(i) {
                    running.entry(t.task.id).or_insert_with(|| t.clone());
                }
            }
        }
    }
    for (v, n, _) in source.values() {
        for &i in &n.window {
            if let Some(t) = v.pending.get(i)
                && !running.contains_key(&t.task.id)
            {
                pending.entry(t.task.id).or_insert_with(|| t.clone());
            }
        }
    }
    let pidx: BTreeMap<TaskId, usize> = pending.keys().enumerate().map(|(i, k)| (*k, i)).collect();
    let ridx: BTreeMap<TaskId, usize> = running.keys().enumerate().map(|(i, k)| (*k, i)).collect();
    let nodes = source
        .iter()
        .map(|(&id, (v, n, _))| NodeView {
            gpu: Default::default(),
            id,
            capacity: n.capacity.clone(),
            free: n.free.clone(),
            window: n
                .window
                .iter()
                // A task in two windows (reachable from both nodes) is one pending task.
                .filter_map(|&i| v.pending.get(i).and_then(|t| pidx.get(&t.task.id)))
                .copied()
                .collect(),
            overflow: n.overflow,
            running: n
                .running
                .iter()
                .filter_map(|&i| v.running.get(i))
                // Only what runs here, and only once: a task kept as running elsewhere is not.
                .filter(|t| t.node == id && running.get(&t.task.id).is_some_and(|r| r.node == id))
                .filter_map(|t| ridx.get(&t.task.id))
                .copied()
                .collect(),
        })
        .collect();
    ClusterView {
        slot: any.map_or(0, |v| v.slot),
        step: any.map_or(0, |v| v.step),
        num_types: any.map_or(0, |v| v.num_types),
        classes: any.is_some_and(|v| v.classes),
        kinds: any.map(|v| v.kinds).unwrap_or_default(),
        nodes,
        pending: pending.into_values().collect(),
        running: running.into_values().collect(),
        // Every agent forecasts from the same shared arrivals: any one's will do.
        forecast: any.map(|v| v.forecast.clone()).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::test_task as task;
    use tapfinger_core::Resources;
    use tapfinger_core::view::{PendingView, RunningView};

    fn node(id: u32, free: u32, window: Vec<usize>, running: Vec<usize>) -> NodeView {
        NodeView {
            gpu: Default::default(),
            id: NodeId(id),
            capacity: Resources(vec![4]),
            free: Resources(vec![free]),
            window,
            overflow: 0,
            running,
        }
    }

    fn record(me: u32, view: ClusterView) -> DecisionRecord {
        DecisionRecord::new(view, NodeId(me), Vec::new(), 0)
    }

    /// Two agents, each up to date about itself and a heartbeat behind about the other.
    #[test]
    fn each_node_speaks_for_itself() {
        // Agent 0 knows: itself with task 1 pending; node 1 (stale) with 4 free and task 2 pending.
        let a = ClusterView {
            forecast: Vec::new(),
            slot: 7,
            step: 0,
            num_types: 1,
            classes: false,
            kinds: Default::default(),
            nodes: vec![node(0, 4, vec![0], vec![]), node(1, 4, vec![1], vec![])],
            pending: vec![
                PendingView {
                    on: Vec::new(),
                    class: 0,
                    task: task(1),
                    est: Default::default(),
                    size: None,
                    done: 0.0,
                },
                PendingView {
                    on: Vec::new(),
                    class: 0,
                    task: task(2),
                    est: Default::default(),
                    size: None,
                    done: 0.0,
                },
            ],
            running: vec![],
        };
        // Agent 1 knows: node 0 (stale, task 1 not yet announced); itself running task 2 with 1
        // unit free, and a new task 3 pending.
        let b = ClusterView {
            forecast: Vec::new(),
            slot: 7,
            step: 0,
            num_types: 1,
            classes: false,
            kinds: Default::default(),
            nodes: vec![node(0, 4, vec![], vec![]), node(1, 1, vec![0], vec![0])],
            pending: vec![PendingView {
                on: Vec::new(),
                class: 0,
                task: task(3),
                est: Default::default(),
                size: None,
                done: 0.0,
            }],
            running: vec![RunningView {
                converging: false,
                in_force: Default::default(),
                task: task(2),
                node: NodeId(1),
                alloc: Resources(vec![3]),
                started: 6,
                progress: 0.1,
                attained: 3.0,
                est: Default::default(),
                est_alloc: 0.0,
                size: None,
                done: 0.0,
            }],
        };
        let recs = [record(0, a.clone()), record(1, b.clone())];
        let asm = assemble(&recs);
        assert_eq!((asm.reports, asm.merged, asm.rounds.len()), (2, 1, 1));
        let g = asm.view(&recs[0]).unwrap();
        assert!(Arc::ptr_eq(g, asm.view(&recs[1]).unwrap()));
        let ids = |v: &Vec<PendingView>| v.iter().map(|p| p.task.id.0).collect::<Vec<_>>();
        // Task 2 runs (node 1 says so); tasks 1 and 3 wait, each in its own node's window.
        assert_eq!(ids(&g.pending), vec![1, 3]);
        assert_eq!(g.running.len(), 1);
        assert_eq!(g.running[0].task.id, TaskId(2));
        assert_eq!(g.nodes[0].window, vec![0]);
        assert_eq!(g.nodes[0].free, Resources(vec![4]));
        assert_eq!(g.nodes[1].window, vec![1]);
        assert_eq!(g.nodes[1].running, vec![0]);
        assert_eq!(g.nodes[1].free, Resources(vec![1]));
        assert_eq!((g.slot, g.step), (7, 0));
    }

    /// The simulator's case: one snapshot for all agents of a round; nothing to merge.
    #[test]
    fn one_snapshot_needs_no_merge() {
        let v = ClusterView {
            forecast: Vec::new(),
            slot: 3,
            step: 1,
            num_types: 1,
            classes: false,
            kinds: Default::default(),
            nodes: vec![node(0, 4, vec![0], vec![]), node(1, 4, vec![0], vec![])],
            pending: vec![PendingView {
                on: Vec::new(),
                class: 0,
                task: task(1),
                est: Default::default(),
                size: None,
                done: 0.0,
            }],
            running: vec![],
        };
        let recs = [record(0, v.clone()), record(1, v)];
        let asm = assemble(&recs);
        assert_eq!((asm.reports, asm.merged), (2, 0));
        assert!(asm.view(&recs[0]).is_none());
        assert_eq!(asm.reports_per_round(), 2.0);
    }

    /// A lone report is its own global state.
    #[test]
    fn a_single_report_is_kept_as_is() {
        let v = ClusterView {
            forecast: Vec::new(),
            slot: 1,
            step: 0,
            num_types: 1,
            classes: false,
            kinds: Default::default(),
            nodes: vec![node(0, 4, vec![], vec![])],
            pending: vec![],
            running: vec![],
        };
        let recs = [record(0, v)];
        assert!(assemble(&recs).view(&recs[0]).is_none());
    }
}
