//! What tasks report besides their progress (RLPTO's loss and accuracy, and whether the plateau
//! detector finds them converging), shared with the peers: the runner puts its tasks' latest
//! reports in its heartbeats, so that any agent shows them, not only the one running the task.
//! The runner's own judgement of convergence also drives its shrinking ([`crate::ledger`]'s
//! `shrink` rule). A report is kept while its task runs; a heartbeat carries at most
//! [`MAX_METRICS`] metrics per task, with names of at most [`MAX_NAME`] bytes.

use super::NodeCore;
use crate::task::TaskId;
use crate::wire::RunningState;
pub use crate::wire::TaskReport;
use std::collections::BTreeMap;

/// Most metrics a task's report carries.
pub const MAX_METRICS: usize = 8;
/// Longest metric name (bytes).
pub const MAX_NAME: usize = 32;

/// The report as a heartbeat may carry it: finite values, short names, the first
/// [`MAX_METRICS`] by name.
fn bounded(metrics: &BTreeMap<String, f64>, converging: bool) -> TaskReport {
    TaskReport {
        metrics: metrics
            .iter()
            .filter(|(k, v)| k.len() <= MAX_NAME && v.is_finite())
            .take(MAX_METRICS)
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        converging,
    }
}

impl NodeCore {
    /// A task running here reported `metrics` (its latest of each), and the plateau detector
    /// judges it `converging` or not: kept for the heartbeats, and while it is, and this node
    /// shrinks converging tasks, it gives up a CPU a slot down to its minimum demand
    /// ([`crate::ledger::Ledger::shrink_step`]), resized in place.
    pub fn on_report(&mut self, task: TaskId, metrics: &BTreeMap<String, f64>, converging: bool) {
        if self.tasks.get(task).and_then(|t| t.state.running_on()) == Some(self.cfg.me) {
            self.tasks.set_converging(task, converging);
            self.reports.insert(task, bounded(metrics, converging));
        }
    }

    /// The latest report of every running task this node has heard of (its own and its
    /// peers').
    pub fn reports(&self) -> BTreeMap<TaskId, TaskReport> {
        self.reports
            .iter()
            .filter(|(id, _)| {
                self.tasks
                    .get(**id)
                    .is_some_and(|e| e.state.running_on().is_some())
            })
            .map(|(id, r)| (*id, r.clone()))
            .collect()
    }

    /// This node's report of its task `task`, for its heartbeat (empty if none).
    pub(super) fn report_of(&self, task: TaskId) -> TaskReport {
        self.reports.get(&task).cloned().unwrap_or_default()
    }

    /// Peer `from`'s heartbeat: the reports of the tasks it runs; reports of tasks no longer
    /// running anywhere are dropped. Its judgement of its own tasks' convergence is marked here
    /// too, so that every node's view shows it as the runner's does (the simulator's view shows
    /// one judgement for all).
    pub(super) fn heard_reports(&mut self, from: crate::NodeId, running: &[RunningState]) {
        for r in running {
            if self.tasks.get(r.task).and_then(|t| t.state.running_on()) == Some(from) {
                self.tasks.set_converging(r.task, r.report.converging);
            }
            self.reports
                .insert(r.task, bounded(&r.report.metrics, r.report.converging));
        }
        let tasks = &self.tasks;
        self.reports.retain(|id, _| {
            tasks
                .get(*id)
                .is_some_and(|e| e.state.running_on().is_some())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_in_a_heartbeat_is_bounded_finite_and_short_named() {
        let mut m: BTreeMap<String, f64> = (0..20).map(|i| (format!("m{i:02}"), 1.0)).collect();
        m.insert("a_nan".into(), f64::NAN);
        m.insert("a".repeat(MAX_NAME + 1), 2.0);
        let r = bounded(&m, true);
        assert_eq!(r.metrics.len(), MAX_METRICS);
        assert!(r.metrics.values().all(|v| v.is_finite()));
        assert!(r.metrics.keys().all(|k| k.len() <= MAX_NAME));
        assert!(r.converging);
    }
}
