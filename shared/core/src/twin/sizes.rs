//! Each task's size as the twin infers it: the work it did over the work a task of its class's
//! mean size does, from its own runs and the estimator's figures at their allocations — no
//! speed model. A run of `d` slots at an allocation where the estimator says a mean task takes
//! `T` slots alone did `d / T` of a mean task's work (less its start-up, the estimator's start
//! cost); a task that did that much in all and moved from progress `p₀` to `p₁` is
//! `Σ d/T ÷ (p₁ − p₀)` times a mean task.

use super::{TaskRecord, Workload};

/// Least progress a task's runs must cover for its size to be measured (below it the class's
/// median is taken: a task that barely ran says little of its size).
const MIN_PROGRESS: f64 = 0.05;

/// Task `t`'s size relative to its class's mean task, if its runs measure it.
pub fn size_of(t: &TaskRecord, start_cost: f64) -> Option<f64> {
    let mut work = 0.0;
    let mut progress = 0.0;
    for r in &t.runs {
        if !(r.est_slots.is_finite() && r.est_slots > 0.0) {
            return None;
        }
        let lost = if r.start {
            start_cost.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let slots = (r.to.saturating_sub(r.from) as f64 - lost).max(0.0);
        work += slots / r.est_slots;
        progress += (r.progress_to - r.progress_from).max(0.0);
    }
    (progress >= MIN_PROGRESS && work > 0.0).then(|| work / progress)
}

/// Every task's size in `w` (by task order): measured where its runs say; else, where it
/// declared its work, that times its class's median measured size per unit declared (a
/// declared fine-tune of 30 epochs that barely ran is not a median task); else its class's
/// median measured size, else 1.
pub fn sizes(w: &Workload) -> Vec<f64> {
    let start = |class: u16| {
        w.classes
            .iter()
            .find(|c| c.id == class)
            .map_or(0.0, |c| c.start_cost)
    };
    let measured: Vec<Option<f64>> = w.tasks.iter().map(|t| size_of(t, start(t.class))).collect();
    let median = |class: u16, per: &dyn Fn(&TaskRecord, f64) -> Option<f64>| {
        let mut v: Vec<f64> = w
            .tasks
            .iter()
            .zip(&measured)
            .filter(|(t, _)| t.class == class)
            .filter_map(|(t, m)| per(t, (*m)?))
            .collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let declared = |t: &TaskRecord| t.work.filter(|x| x.is_finite() && *x > 0.0);
    w.tasks
        .iter()
        .zip(&measured)
        .map(|(t, m)| {
            m.or_else(|| {
                let work = declared(t)?;
                median(t.class, &|u, m| Some(m / declared(u)?)).map(|per| per * work)
            })
            .or_else(|| median(t.class, &|_, m| Some(m)))
            .unwrap_or(1.0)
        })
        .collect()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::task::{NodeId, TaskId};
    use crate::{Resources, twin::RunRecord};

    fn run(from: u64, to: u64, p: (f64, f64), est: f64, start: bool) -> RunRecord {
        RunRecord {
            node: NodeId(0),
            alloc: Resources(vec![1]),
            from,
            to,
            progress_from: p.0,
            progress_to: p.1,
            start,
            est_slots: est,
            members: vec![],
        }
    }

    /// A task of class 0 with `runs` and the work it declared.
    pub(in crate::twin) fn task(id: u64, runs: Vec<RunRecord>, work: Option<f64>) -> TaskRecord {
        TaskRecord {
            identity: None,
            id: TaskId(id),
            class: 0,
            arrival: 0,
            priority: 0,
            min_demand: Resources(vec![1]),
            max_demand: None,
            reachable: vec![],
            runs,
            finished: None,
            code: None,
            work,
            gang: None,
        }
    }

    /// Three times a mean task's work: 4 slots where a mean task takes 4, then 2 where it takes 1.
    #[test]
    fn a_size_is_the_work_of_the_runs_over_the_progress_they_made() {
        let t = task(
            1,
            vec![
                run(0, 4, (0.0, 0.5), 4.0, true),
                run(4, 6, (0.5, 1.0), 1.0, false),
            ],
            None,
        );
        assert!((size_of(&t, 0.0).unwrap() - 3.0).abs() < 1e-9);
        // A start-up of half a slot: 3.5 slots of work in the first run.
        assert!((size_of(&t, 0.5).unwrap() - (3.5 / 4.0 + 2.0)).abs() < 1e-9);
        let mut none = t.clone();
        none.runs.clear();
        assert_eq!(size_of(&none, 0.0), None);
    }

    /// A task that barely ran takes its class's size per declared work times its own
    /// declared work; one that declared nothing the class's median.
    #[test]
    fn a_task_that_barely_ran_is_sized_by_its_declared_work() {
        let w = Workload {
            sizes: None,
            format: crate::twin::FORMAT.into(),
            slot_seconds: 60.0,
            from_slot: 0,
            to_slot: 10,
            kinds: vec![],
            nodes: vec![],
            classes: vec![],
            tasks: vec![
                // Twice a mean task, declared as 4 units: half a mean task per unit.
                task(1, vec![run(0, 2, (0.0, 1.0), 1.0, true)], Some(4.0)),
                task(2, vec![run(0, 1, (0.0, 0.01), 1.0, true)], Some(10.0)),
                task(3, vec![], None),
            ],
            links: None,
        };
        let s = sizes(&w);
        assert!((s[0] - 2.0).abs() < 1e-9, "{s:?}");
        assert!((s[1] - 5.0).abs() < 1e-9, "{s:?}");
        assert!((s[2] - 2.0).abs() < 1e-9, "{s:?}");
    }
}
