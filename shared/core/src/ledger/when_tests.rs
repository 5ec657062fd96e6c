//! Tests of the start and finish estimates.

use super::super::tests::{running, succeeded, task};
use super::*;
use crate::resources::Resources;
use crate::task::{NodeId, TaskId};

/// Start and finish estimates: a running task ends after its expected remaining work; a
/// waiting one that fits now starts now, the others in queue order where they first fit, none
/// before the one placed ahead of it.
#[test]
fn waiting_tasks_are_expected_to_start_in_queue_order_where_they_first_fit() {
    // Work in CPUs (the service kind here) at the minimum: what the book learns.
    let mut l: Ledger<()> = Ledger::new(4, 0);
    l.set_node(NodeId(0), Resources(vec![4, 0]));
    // The book learns that tasks of class 0 take 4 slots of work.
    for id in 1..=3 {
        l.insert(task(id, 0, [1, 0], &[0]), TaskState::Pending, ());
        l.set_state(TaskId(id), running(0, [1, 0]));
        for _ in 0..4 {
            l.accrue_service();
        }
        l.set_state(TaskId(id), succeeded());
    }
    l.insert(task(10, 5, [2, 0], &[0]), TaskState::Pending, ());
    l.set_state(TaskId(10), running(0, [2, 0]));
    l.accrue_service();
    l.insert(task(11, 6, [2, 0], &[0]), TaskState::Pending, ());
    l.insert(task(12, 7, [4, 0], &[0]), TaskState::Pending, ());
    l.insert(task(13, 8, [1, 0], &[0]), TaskState::Pending, ());
    let x = l.expected(9);
    let at = |id: u64| {
        let e = x[&TaskId(id)];
        (e.start, e.finish)
    };
    assert_eq!(at(10), (0.0, 3.0), "4 of work, 1 done");
    assert_eq!(at(11), (0.0, 4.0), "fits beside it now");
    assert_eq!(at(12), (4.0, 8.0), "needs the whole box");
    // It would fit at slot 3, before task 12 starts, but does not overtake it.
    assert_eq!(at(13), (8.0, 12.0));
    // A task no box can hold has no estimate.
    l.insert(task(14, 9, [9, 0], &[0]), TaskState::Pending, ());
    assert!(!l.expected(9).contains_key(&TaskId(14)));
    // On an elastic box a running task holds its floor against a newcomer, not what the
    // re-share gave it: a task that runs on the whole box leaves room for one of 2.
    let mut e: Ledger<()> = Ledger::new(4, 0);
    e.set_node(NodeId(0), Resources(vec![4, 0]));
    e.set_elastic(NodeId(0), true);
    e.insert(task(1, 0, [1, 0], &[0]), TaskState::Pending, ());
    e.set_state(TaskId(1), running(0, [4, 0]));
    e.insert(task(2, 1, [2, 0], &[0]), TaskState::Pending, ());
    let x = e.expected(2);
    assert_eq!(x[&TaskId(2)].start, 0.0, "the re-share makes room: {x:?}");
}
