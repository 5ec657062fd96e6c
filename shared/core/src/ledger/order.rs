//! The order of a node's queue, and so of its window: priority classes first (0 is the
//! highest), with aging, then the oldest arrival, then same-age tasks by a rank of each node's
//! own ([`rank`]), then by id.
//!
//! A queue is kept sorted by `(class, arrival, rank, id)` with the class as submitted, so that
//! with one class in the queue (the common case) the window is its first tasks, as before
//! classes existed. **Aging** ([`Priorities::aging_slots`]) moves a waiting task up one class
//! per so many slots of waiting; its *effective* class at a slot is what orders it. Within one
//! submitted class the older task has waited longer, so each class's run of the queue is already
//! in effective order, and the window is a merge of those runs, stopped once it is full: a task
//! of class `c` that has waited `c × aging_slots` slots is in class 0 and goes ahead of every
//! task that arrived after it. Priority-blind ledgers ([`Priorities::honour`] off) give every
//! task class 0.

use crate::task::{NodeId, Task, TaskId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// How priority classes order the windows (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Priorities {
    /// Serve the highest non-empty class first (off: by arrival alone, priority-blind).
    pub honour: bool,
    /// A waiting task moves up one class per this many slots of waiting (`None`: never).
    pub aging_slots: Option<u64>,
}

impl Default for Priorities {
    /// Honoured, a class up per [`Priorities::AGING_SLOTS`] slots of waiting.
    fn default() -> Self {
        Self {
            honour: true,
            aging_slots: Some(Self::AGING_SLOTS),
        }
    }
}

impl Priorities {
    /// The default aging: a class up per 50 slots of waiting.
    pub const AGING_SLOTS: u64 = 50;

    /// Every task in class 0: the order of a ledger before classes existed.
    pub const BLIND: Priorities = Priorities {
        honour: false,
        aging_slots: None,
    };

    /// The class `task` is queued under (as submitted; 0 when blind).
    pub fn queued(&self, task: &Task) -> u8 {
        if self.honour { task.priority } else { 0 }
    }

    /// The effective class at `slot` of a task queued under `class` that arrived at `arrival`.
    pub fn effective(&self, class: u8, arrival: u64, slot: u64) -> u8 {
        match self.aging_slots {
            Some(a) if class > 0 => {
                let up = slot.saturating_sub(arrival) / a.max(1);
                class.saturating_sub(u8::try_from(up).unwrap_or(u8::MAX))
            }
            _ => class,
        }
    }

    /// The effective class of `task` at `slot`.
    pub fn class(&self, task: &Task, slot: u64) -> u8 {
        self.effective(self.queued(task), task.arrival, slot)
    }
}

/// A queue entry: class as queued, arrival, rank, id.
pub(super) type QueueKey = (u8, u64, u64, TaskId);

/// The rank of same-age `task` in `node`'s queue: splitmix64 of task and node id. Each node
/// has an order of its own, so that agents whose windows hold the same oldest tasks do not all
/// claim the same one and lose the round to each other (by id, a 240-node cluster needed about
/// ten rounds a slot, and more the larger it grew; ranked, about four and a half at any size).
/// It is deterministic, so every agent computes the same window for every node, and the
/// simulator the agents' windows.
pub fn rank(task: TaskId, node: NodeId) -> u64 {
    let mut z = task.0 ^ (u64::from(node.0)).rotate_left(32) ^ 0x9E37_79B9_7F4A_7C15;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The queue key of `task` at `node`.
pub(super) fn key(p: Priorities, task: &Task, node: NodeId) -> QueueKey {
    (p.queued(task), task.arrival, rank(task.id, node), task.id)
}

/// A node's window at `slot`: the first `size` tasks of `queue` in effective order that are not
/// `refused`, and how many allowed tasks wait behind them (module doc).
pub(super) fn window(
    queue: &BTreeSet<QueueKey>,
    p: Priorities,
    slot: u64,
    size: usize,
    refused: &BTreeSet<TaskId>,
) -> (Vec<TaskId>, usize) {
    // One run of the queue per class in it, each in effective order already.
    let mut runs = Vec::new();
    let mut next = queue.first().map(|k| k.0);
    while let Some(c) = next {
        let lo = (c, 0, 0, TaskId(0));
        let hi = (c, u64::MAX, u64::MAX, TaskId(u64::MAX));
        runs.push(queue.range(lo..=hi).peekable());
        next = c
            .checked_add(1)
            .and_then(|c| queue.range((c, 0, 0, TaskId(0))..).next().map(|k| k.0));
    }
    let mut window = Vec::with_capacity(size.min(queue.len()));
    let mut overflow = 0;
    loop {
        // The run whose head comes first: effective class, then the queue's own order.
        let head = runs
            .iter_mut()
            .enumerate()
            .filter_map(|(i, r)| r.peek().map(|k| (i, **k)))
            .min_by_key(|(_, k)| (p.effective(k.0, k.1, slot), k.1, k.2, k.3));
        let Some((i, k)) = head else { break };
        runs[i].next();
        let id = k.3;
        if refused.contains(&id) {
            continue;
        }
        if window.len() < size {
            window.push(id);
        } else if refused.is_empty() {
            overflow = queue.len() - size;
            break;
        } else {
            overflow += 1;
        }
    }
    (window, overflow)
}
