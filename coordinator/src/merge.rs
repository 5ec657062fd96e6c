//! The workload the guard judges is the cluster's, not one box's word: every box pushes what it
//! observed (each box's node core learns every task of the cluster by gossip, so their
//! workloads describe the same tasks), and a task is judged only where another box reported it
//! alike: same class, priority and minimum demand, arrival and end within [`SLACK`] slots of
//! each other (boxes see an event a round or two apart). A box that makes tasks up, or changes
//! their arrivals, sizes or ends, has them dropped; what the other boxes agree on stays.
//!
//! Each box's workload is first checked against what the coordinator heard itself
//! ([`crate::heard`]): boxes that agree cannot make up what the cluster was never told.
//!
//! What one allowlisted box can still do: the class speed figures, the boxes and the kinds come
//! from the workload of the box that reported the most corroborated finished tasks (one box's
//! estimator), and two colluding boxes corroborate each other, though only on what the whole
//! cluster was told at the time.

use std::collections::BTreeMap;
use tapfinger::twin::{TaskRecord, Workload};

/// How far apart (slots) two boxes' arrival or end of one task may be and still agree.
pub const SLACK: u64 = 2;

/// What the merge kept and dropped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Merge {
    /// Boxes whose workloads were merged.
    pub boxes: usize,
    /// The box whose workload gave the classes, boxes and kinds.
    pub base: u32,
    /// Tasks of that workload no other box reported alike (dropped).
    pub uncorroborated: usize,
    /// Tasks of that box's workload that disagreed with what the coordinator heard itself
    /// (dropped before the merge; [`crate::heard`]).
    pub unheard: usize,
}

/// Whether `a` and `b` tell the same task alike.
fn alike(a: &TaskRecord, b: &TaskRecord) -> bool {
    let near = |x: u64, y: u64| x.abs_diff(y) <= SLACK;
    let ends = match (a.finished, b.finished) {
        (Some(x), Some(y)) => near(x, y),
        (None, None) => true,
        _ => false,
    };
    a.id == b.id
        && a.class == b.class
        && a.priority == b.priority
        && a.min_demand == b.min_demand
        && near(a.arrival, b.arrival)
        && ends
}

/// `w`'s tasks that another workload of `others` reports alike.
fn corroborated(w: &Workload, others: &[&Workload]) -> Vec<TaskRecord> {
    let by_id: Vec<BTreeMap<_, &TaskRecord>> = others
        .iter()
        .map(|o| o.tasks.iter().map(|t| (t.id, t)).collect())
        .collect();
    w.tasks
        .iter()
        .filter(|t| {
            by_id
                .iter()
                .any(|m| m.get(&t.id).is_some_and(|o| alike(t, o)))
        })
        .cloned()
        .collect()
}

/// The cluster's workload from the boxes' `workloads` (by node), once at least `min_boxes`
/// reported: each box's tasks that another box reports alike, from the box with the most such
/// finished tasks. With `min_boxes` 1 and one box, its workload as it is (a one-box cluster).
pub fn merged(workloads: &BTreeMap<u32, Workload>, min_boxes: usize) -> Option<(Workload, Merge)> {
    if workloads.len() < min_boxes.max(1) {
        return None;
    }
    if workloads.len() == 1 {
        let (&node, w) = workloads.iter().next()?;
        let merge = Merge {
            boxes: 1,
            base: node,
            uncorroborated: 0,
            unheard: 0,
        };
        return Some((w.clone(), merge));
    }
    let finished = |ts: &[TaskRecord]| ts.iter().filter(|t| t.finished.is_some()).count();
    let (node, tasks) = workloads
        .iter()
        .map(|(node, w)| {
            let others: Vec<&Workload> = workloads
                .iter()
                .filter(|(n, _)| *n != node)
                .map(|(_, o)| o)
                .collect();
            (*node, corroborated(w, &others))
        })
        .max_by_key(|(node, ts)| (finished(ts), std::cmp::Reverse(*node)))?;
    let base = &workloads[&node];
    let merge = Merge {
        boxes: workloads.len(),
        base: node,
        uncorroborated: base.tasks.len() - tasks.len(),
        unheard: 0,
    };
    Some((
        Workload {
            tasks,
            ..base.clone()
        },
        merge,
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tapfinger::{Resources, TaskId};

    fn task(id: u64, arrival: u64, finished: Option<u64>) -> TaskRecord {
        TaskRecord {
            identity: None,
            id: TaskId(id),
            class: 0,
            arrival,
            priority: 0,
            min_demand: Resources(vec![1, 0, 0]),
            max_demand: None,
            reachable: Vec::new(),
            runs: Vec::new(),
            finished,
            code: Some(0),
            work: None,
            gang: None,
        }
    }

    /// A workload of `tasks` in slots of `slot_seconds`, with no boxes or classes (what the
    /// guard's checks read of one).
    pub(crate) fn workload_of(tasks: Vec<TaskRecord>, slot_seconds: f64) -> Workload {
        Workload {
            sizes: None,
            format: tapfinger::twin::FORMAT.into(),
            slot_seconds,
            from_slot: 0,
            to_slot: 100,
            kinds: Vec::new(),
            nodes: Vec::new(),
            classes: Vec::new(),
            tasks,
            links: None,
        }
    }

    fn workload(tasks: Vec<TaskRecord>) -> Workload {
        workload_of(tasks, 1.0)
    }

    /// Two honest boxes that saw the tasks a slot apart agree; a third that made tasks up, or
    /// stretched one, has those dropped; one box alone judges nothing unless a one-box
    /// cluster is asked for.
    #[test]
    fn only_tasks_another_box_reports_alike_are_judged() {
        let honest: Vec<TaskRecord> = (1..=10).map(|i| task(i, i, Some(i + 5))).collect();
        let seen_later: Vec<TaskRecord> = (1..=10).map(|i| task(i, i + 1, Some(i + 6))).collect();
        let mut lying = honest.clone();
        lying[0].finished = Some(90); // task 1 made to look long
        lying.extend((100..150).map(|i| task(i, 1, Some(2)))); // 50 short tasks made up
        let mut ws = BTreeMap::new();
        ws.insert(3, workload(lying.clone()));
        assert!(merged(&ws, 2).is_none(), "one box's word is not enough");
        let (alone, m) = merged(&ws, 1).unwrap();
        assert_eq!((alone.tasks.len(), m.boxes), (60, 1));
        ws.insert(1, workload(honest));
        ws.insert(2, workload(seen_later));
        let (w, m) = merged(&ws, 2).unwrap();
        assert_eq!(m.boxes, 3);
        assert_ne!(m.base, 3, "the liar's made-up tasks count for nothing");
        assert_eq!(w.tasks.len(), 10, "{m:?}");
        assert!(w.tasks.iter().all(|t| t.id.0 <= 10));
        // The liar's own workload, merged: only what others saw alike stays.
        let others: Vec<&Workload> = vec![&ws[&1], &ws[&2]];
        let kept = corroborated(&workload(lying), &others);
        assert_eq!(
            kept.len(),
            9,
            "the stretched task and the 50 made up are dropped"
        );
        assert!(kept.iter().all(|t| t.id.0 != 1 && t.id.0 < 100));
    }
}
