//! What RLPTO's learned policy reads and is paid beyond the general policy's, kept in the ledger
//! so that the simulator and the agent show and pay the same: the arrival forecast a view
//! carries ([`Ledger::set_forecast`]) and the cluster reward ([`Ledger::with_cluster_reward`]).
//!
//! The cluster reward is RLPTO's per-task `w_acc·accuracy − w_time·JCT − w_res·resource_time`
//! paid slot by slot: in a slot a node pays `w_time` for each task in its queue or running on
//! it (the default reward's time term: each node counts its own queue, so a task several nodes
//! may run weighs on each of them while it waits), `w_res` per node-slot its running tasks hold
//! (each kind's units over the live nodes' mean capacity of it, averaged over the kinds the
//! cluster has), and earns `w_acc` per unit of accuracy its running tasks gained since the last
//! report ([`Ledger::note_accuracy`]; the gains of a task sum to its last report). Summed over
//! the nodes and slots, the resource and accuracy terms are the tasks' own, but for what is
//! gained in the last slot a driver pays (a slot's gains are paid with the next slot's reward).

use super::{Ledger, TaskState};
use crate::task::{NodeId, TaskId};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The cluster reward's weights (a scenario's `[reward]`).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct RewardWeights {
    /// Per unit of final accuracy (accuracy in [0, 1]).
    #[serde(default = "w_acc")]
    pub accuracy: f64,
    /// Per slot of JCT.
    #[serde(default = "w_one")]
    pub time: f64,
    /// Per node-slot of resources held.
    #[serde(default = "w_one")]
    pub resources: f64,
}

fn w_acc() -> f64 {
    10.0
}
fn w_one() -> f64 {
    1.0
}

impl Default for RewardWeights {
    /// 10 per unit of accuracy (0.1 accuracy is worth a slot), 1 per slot, 1 per node-slot.
    fn default() -> Self {
        Self {
            accuracy: w_acc(),
            time: w_one(),
            resources: w_one(),
        }
    }
}

impl RewardWeights {
    /// Every weight finite and ≥ 0, or the field and why not.
    pub fn check(&self) -> Result<(), (String, String)> {
        for (name, w) in [
            ("accuracy", self.accuracy),
            ("time", self.time),
            ("resources", self.resources),
        ] {
            if !(w.is_finite() && w >= 0.0) {
                return Err((
                    format!("reward.{name}"),
                    format!("must be a finite weight ≥ 0, got {w}"),
                ));
            }
        }
        Ok(())
    }

    /// One task's cluster reward.
    pub fn of(&self, accuracy: Option<f64>, jct: u64, resource_time: f64) -> f64 {
        self.accuracy * accuracy.unwrap_or(0.0)
            - self.time * jct as f64
            - self.resources * resource_time
    }
}

/// The ledger's RLPTO state.
#[derive(Debug, Clone, Default)]
pub(super) struct Outlook {
    /// Expected arrivals of the next intervals, nearest first.
    forecast: Vec<f64>,
    /// The cluster reward's weights, if it is the reward paid.
    weights: Option<RewardWeights>,
    /// Each task's last accuracy report.
    accuracy: BTreeMap<TaskId, f64>,
    /// Accuracy gained per node since the last [`Ledger::accrue_service`].
    gained: BTreeMap<NodeId, f64>,
}

impl<M> Ledger<M> {
    /// The forecast arrivals of the next intervals, nearest first, which every view from now on
    /// carries (the driver refreshes it once an interval; empty: no forecast).
    pub fn set_forecast(&mut self, ahead: Vec<f64>) {
        self.outlook.forecast = ahead;
    }

    /// The forecast views carry.
    pub fn forecast(&self) -> &[f64] {
        &self.outlook.forecast
    }

    /// Pay the cluster reward with these weights instead of the default reward (module doc).
    pub fn with_cluster_reward(mut self, weights: RewardWeights) -> Self {
        self.outlook.weights = Some(weights);
        self
    }

    /// Task `id` reports `accuracy` (a finite value; others are ignored): the gain since its
    /// last report is credited to the node running it. A task not running: nothing.
    pub fn note_accuracy(&mut self, id: TaskId, accuracy: f64) {
        if !accuracy.is_finite() {
            return;
        }
        let Some(TaskState::Running { node, .. }) = self.tasks.get(&id).map(|e| &e.state) else {
            return;
        };
        let last = self.outlook.accuracy.insert(id, accuracy).unwrap_or(0.0);
        *self.outlook.gained.entry(*node).or_default() += accuracy - last;
    }

    /// A node's reward for the slot that ends now (module doc).
    pub fn reward(&self, node: NodeId) -> f64 {
        if let Some(r) = self.cluster_reward(node) {
            return r;
        }
        self.nodes
            .get(&node)
            .map_or(0.0, |b| -((b.running.len() + b.queue.len()) as f64))
    }

    /// The slot's reward of `node` under the cluster reward, or `None` where the default is
    /// paid.
    pub(super) fn cluster_reward(&self, node: NodeId) -> Option<f64> {
        let w = self.outlook.weights?;
        let b = self.nodes.get(&node)?;
        let live: Vec<&super::Book> = self.nodes.values().filter(|b| b.live).collect();
        let kinds = b.capacity.len();
        // Each kind's mean capacity over the live nodes; kinds no node has do not count.
        let means: Vec<(usize, f64)> = (0..kinds)
            .map(|k| {
                let total: f64 = live.iter().map(|b| f64::from(b.capacity.get(k))).sum();
                (k, total / live.len().max(1) as f64)
            })
            .filter(|(_, m)| *m > 0.0)
            .collect();
        let held: f64 = b
            .running
            .iter()
            .filter_map(|id| match &self.tasks.get(id)?.state {
                TaskState::Running { alloc, .. } => Some(alloc),
                _ => None,
            })
            .map(|a| {
                means
                    .iter()
                    .map(|(k, m)| f64::from(a.get(*k)) / m)
                    .sum::<f64>()
                    / means.len().max(1) as f64
            })
            .sum();
        let tasks = (b.running.len() + b.queue.len()) as f64;
        let gained = self.outlook.gained.get(&node).copied().unwrap_or(0.0);
        Some(w.accuracy * gained - w.time * tasks - w.resources * held)
    }

    /// A new slot's accounting: the gains paid are cleared, and reports of tasks that no
    /// longer exist forgotten.
    pub(super) fn clear_gains(&mut self) {
        self.outlook.gained.clear();
        let tasks = &self.tasks;
        self.outlook.accuracy.retain(|id, _| {
            tasks
                .get(id)
                .is_some_and(|e| !matches!(e.state, TaskState::Done { .. }))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Resources;
    use crate::task::test_task as task;

    #[test]
    fn the_cluster_reward_pays_time_resources_and_accuracy_gained_once() {
        let mut l: Ledger<()> = Ledger::new(4, 0).with_cluster_reward(RewardWeights::default());
        l.set_node(NodeId(0), Resources(vec![4]));
        l.set_node(NodeId(1), Resources(vec![8]));
        l.insert(task(1), TaskState::Pending, ());
        l.insert(task(2), TaskState::Pending, ());
        l.set_state(
            TaskId(1),
            TaskState::Running {
                node: NodeId(0),
                alloc: Resources(vec![3]),
                progress: 0.0,
                started: 0,
            },
        )
        .unwrap();
        // Node 0: task 1 running and task 2 queued (2 slots of time), 3 CPUs over a mean
        // capacity of 6 (half a node-slot); no accuracy yet.
        assert!((l.reward(NodeId(0)) - (-2.5)).abs() < 1e-12);
        l.note_accuracy(TaskId(1), 0.3);
        l.note_accuracy(TaskId(1), 0.5);
        l.note_accuracy(TaskId(2), 0.9); // not running: no credit
        l.note_accuracy(TaskId(1), f64::NAN); // ignored
        assert!((l.reward(NodeId(0)) - (-2.5 + 5.0)).abs() < 1e-12);
        l.accrue_service();
        assert!((l.reward(NodeId(0)) - (-2.5)).abs() < 1e-12);
        l.note_accuracy(TaskId(1), 0.45);
        assert!((l.reward(NodeId(0)) - (-2.5 - 0.5)).abs() < 1e-12);
        // Node 1 only queues task 2.
        assert!((l.reward(NodeId(1)) - (-1.0)).abs() < 1e-12);
    }

    #[test]
    fn without_weights_the_default_reward_is_paid_and_the_forecast_reaches_views() {
        let mut l: Ledger<()> = Ledger::new(4, 0);
        l.set_node(NodeId(0), Resources(vec![4]));
        l.insert(task(1), TaskState::Pending, ());
        l.note_accuracy(TaskId(1), 0.5);
        assert_eq!(l.reward(NodeId(0)), -1.0);
        assert!(l.view(0, 0, 1, None).forecast.is_empty());
        l.set_forecast(vec![2.0, 3.5]);
        assert_eq!(l.view(0, 0, 1, None).forecast, vec![2.0, 3.5]);
    }
}
