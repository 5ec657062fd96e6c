//! What running tasks report besides their progress (`TAPFINGER progress=… loss=… accuracy=…`,
//! [`crate::exec`]): each task's latest metrics, and whether it is converging by RLPTO's
//! plateau detector ([`tapfinger::plateau`]) on its loss, or on its accuracy when it reports no
//! loss. Shown by `show`/`tasks`; with `shrink_converging` the node shrinks a converging task
//! (`NodeCore::on_converging`).

use std::collections::{BTreeMap, VecDeque};
use tapfinger::TaskId;
use tapfinger::plateau::Plateau;

/// One task's reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// The latest value of every metric it reported.
    pub last: BTreeMap<String, f64>,
    /// Its loss (or accuracy) reports the detector judges, oldest first, at most a window and one.
    history: VecDeque<f64>,
    /// Its loss or accuracy has plateaued.
    pub converging: bool,
    /// What the detector judges: `loss` if its first report had one, else `accuracy`.
    judged: Option<&'static str>,
}

/// Every running task's reports here.
#[derive(Debug, Clone, Default)]
pub struct Reports {
    /// The detector.
    plateau: Plateau,
    /// By task.
    by_task: BTreeMap<TaskId, Report>,
}

impl Reports {
    /// Reports judged by `plateau`.
    pub fn new(plateau: Plateau) -> Self {
        Self {
            plateau,
            by_task: BTreeMap::new(),
        }
    }

    /// Take a progress line's metrics for `task`.
    pub fn record(&mut self, task: TaskId, metrics: BTreeMap<String, f64>) {
        let r = self.by_task.entry(task).or_default();
        // One series per task: a report without it (a malformed loss, dropped) adds nothing.
        let key = *r.judged.get_or_insert(if metrics.contains_key("loss") {
            "loss"
        } else {
            "accuracy"
        });
        let lower = key == "loss";
        if let Some(v) = metrics.get(key) {
            r.history.push_back(*v);
            while r.history.len() > self.plateau.window + 1 {
                r.history.pop_front();
            }
            let judged: Vec<f64> = r.history.iter().copied().collect();
            r.converging = self.plateau.reached(&judged, lower);
        }
        r.last.extend(metrics);
    }

    /// Forget `task` (it ended here).
    pub fn forget(&mut self, task: TaskId) {
        self.by_task.remove(&task);
    }

    /// Every task's reports.
    pub fn all(&self) -> &BTreeMap<TaskId, Report> {
        &self.by_task
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_whose_loss_stops_falling_is_converging_and_its_latest_metrics_are_kept() {
        let mut r = Reports::default();
        let t = TaskId(4);
        for loss in [2.0, 1.5, 1.2, 1.0, 0.9, 0.85] {
            r.record(t, BTreeMap::from([("loss".into(), loss)]));
            assert!(!r.all()[&t].converging, "{loss}");
        }
        for _ in 0..5 {
            r.record(
                t,
                BTreeMap::from([("loss".into(), 0.85), ("accuracy".into(), 0.9)]),
            );
        }
        assert!(r.all()[&t].converging);
        assert_eq!(r.all()[&t].last.get("accuracy"), Some(&0.9));
        // A report without the judged series (its loss malformed, dropped) adds nothing to it.
        let u = TaskId(5);
        for loss in [2.0, 1.0, 0.5] {
            r.record(u, BTreeMap::from([("loss".into(), loss)]));
        }
        for _ in 0..6 {
            r.record(u, BTreeMap::from([("accuracy".into(), 0.7)]));
        }
        assert!(!r.all()[&u].converging);
        r.forget(t);
        r.forget(u);
        assert!(r.all().is_empty());
    }
}
