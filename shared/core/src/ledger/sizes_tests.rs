//! Tests of the size book the ledger feeds: work, identity, what it learns.

use super::super::tests::{running, succeeded, task, two_nodes};
use super::*;
use crate::task::{NodeId, TaskId};

/// What a task that succeeded here attained is a size the ledger's size book learns, on the
/// simulator and on every agent alike; failures, cancellations and tasks first heard of as done
/// teach it nothing.
#[test]
fn the_sizes_of_tasks_that_succeeded_here_are_learned() {
    let mut l = two_nodes();
    let done = |code: Option<i32>, epoch: u64| TaskState::Done {
        node: NodeId(0),
        code,
        epoch,
    };
    // Tasks 1-3 run for 2, 3 and 4 slots at one unit of the service kind, then succeed; task
    // 4 runs 9 slots and fails, task 5 runs 9 and is cancelled.
    for (id, slots, end) in [
        (1, 2, done(Some(0), 1)),
        (2, 3, done(Some(0), 1)),
        (3, 4, done(Some(0), 1)),
        (4, 9, done(Some(1), 1)),
        (5, 9, done(None, crate::wire::CANCELLED)),
    ] {
        l.insert(task(id, 0, [1, 1], &[0]), TaskState::Pending, ());
        l.set_state(TaskId(id), running(0, [1, 1]));
        for _ in 0..slots {
            l.accrue_service();
        }
        l.set_state(TaskId(id), end);
    }
    // Heard of only once done: it attained nothing here.
    l.insert(task(6, 0, [1, 1], &[0]), done(Some(0), 1), ());
    l.insert(task(7, 1, [1, 1], &[0]), TaskState::Pending, ());
    let p = l.predict_size(TaskId(7)).unwrap();
    assert_eq!(p.samples, 3);
    assert_eq!(p.median(), 3.0);
    assert_eq!(p.sorted, vec![2.0, 3.0, 4.0]);
    // Each success after the first was predicted before it was learned (from all tasks: the
    // class had fewer than three sizes).
    assert_eq!(l.sizes().error().predicted, 2);
    assert_eq!(
        l.sizes().error_by_level()[&crate::sizes::Level::All].predicted,
        2
    );
}

/// Work is counted in slots at a task's minimum demand of the service kind (here GPUs): a task
/// at twice its minimum does two a slot; a class that holds none of the kind does none (the
/// limit `ledger/sizes.rs` states). A task's identity makes its recurring job's history the one
/// that speaks for it.
#[test]
fn work_is_learned_in_service_units_and_the_recurring_job_speaks_first() {
    let mut l = two_nodes();
    let nightly = crate::sizes::Identity {
        submitter: Some("ada".into()),
        job: Some("nightly".into()),
    };
    // Three of ada's nightly job run 10 slots at one GPU; three others 2 slots at two GPUs
    // (their minimum is one: 4 of work each).
    for (id, slots, gpus, who) in [
        (1, 10, 1, Some(nightly.clone())),
        (2, 10, 1, Some(nightly.clone())),
        (3, 10, 1, Some(nightly.clone())),
        (4, 2, 2, None),
        (5, 2, 2, None),
        (6, 2, 2, None),
    ] {
        l.insert(task(id, 0, [1, 1], &[0]), TaskState::Pending, ());
        if let Some(who) = who {
            l.set_identity(TaskId(id), who);
        }
        l.set_state(TaskId(id), running(0, [1, gpus]));
        for _ in 0..slots {
            l.accrue_service();
        }
        assert_eq!(l.get(TaskId(id)).unwrap().work, f64::from(slots * gpus));
        l.set_state(TaskId(id), succeeded());
    }
    l.insert(task(7, 1, [1, 1], &[0]), TaskState::Pending, ());
    let class = l.predict_size(TaskId(7)).unwrap();
    assert_eq!(class.level, crate::sizes::Level::Class);
    assert_eq!(class.median(), 7.0);
    l.set_identity(TaskId(7), nightly);
    let job = l.predict_size(TaskId(7)).unwrap();
    assert_eq!((job.level, job.median()), (crate::sizes::Level::Job, 10.0));
    // A CPU-only task does no work in GPU units, and teaches the book nothing.
    l.insert(task(8, 1, [1, 0], &[0]), TaskState::Pending, ());
    l.set_state(TaskId(8), running(0, [1, 0]));
    l.accrue_service();
    assert_eq!(l.get(TaskId(8)).unwrap().work, 0.0);
    let learned = l.sizes().learned();
    l.set_state(TaskId(8), succeeded());
    assert_eq!(l.sizes().learned(), learned);
    // A handed-back task's work follows its runner's count of attained service.
    l.set_state(TaskId(7), running(0, [1, 1]));
    l.set_attained(TaskId(7), 6.0);
    assert_eq!(l.get(TaskId(7)).unwrap().work, 6.0);
}

/// A task of minimum three GPUs: its work counted slot by slot and its runner's count of
/// attained service divided once are the same bits (both sum whole units first), and a peer
/// that ends it with the runner's count (`Outcome::work`) learns that count, not its own.
#[test]
fn work_counted_slot_by_slot_and_from_the_runner_agree_to_the_bit_and_the_runner_s_is_learned() {
    let mut l = two_nodes();
    l.insert(task(1, 0, [0, 3], &[0]), TaskState::Pending, ());
    l.set_state(TaskId(1), running(0, [0, 4]));
    for _ in 0..5 {
        l.accrue_service();
    }
    l.set_state(TaskId(1), running(0, [0, 3]));
    l.accrue_service();
    let slot_by_slot = l.get(TaskId(1)).unwrap().work;
    assert_eq!(slot_by_slot, 23.0 / 3.0);
    l.set_attained(TaskId(1), 23.0);
    assert_eq!(
        l.get(TaskId(1)).unwrap().work.to_bits(),
        slot_by_slot.to_bits()
    );
    // The peer heard of the end a slot late and counted one more; the runner's count wins.
    l.accrue_service();
    l.set_work(TaskId(1), slot_by_slot);
    l.set_state(TaskId(1), succeeded());
    assert_eq!(l.sizes().learned(), 1);
    l.insert(task(2, 0, [0, 3], &[0]), TaskState::Pending, ());
    assert_eq!(
        l.predict_size(TaskId(2)).unwrap().sorted,
        vec![slot_by_slot]
    );
}
