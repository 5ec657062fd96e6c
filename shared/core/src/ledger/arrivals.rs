//! The arrival series every ledger keeps for the task-volume forecast (the crate `tapfinger-forecast`):
//! which tasks arrived in which slot, as the ledger first heard of them. Every agent hears of
//! every task (announcements, the journal, peers' histories), each with the slot it was
//! accepted in, so every agent counts the same series, and the simulator's ledger counts its
//! episode's; a task heard of twice (a restart's replay, a peer's history) counts once, and one
//! heard of late counts in its own slot. Slots older than [`KEEP_SLOTS`] behind the newest are
//! forgotten.

use super::Ledger;
use crate::task::Task;

/// Slots of arrivals kept behind the newest one heard of.
pub(super) const KEEP_SLOTS: u64 = 100_000;

impl<M> Ledger<M> {
    /// Count `task`'s arrival (idempotent).
    pub(super) fn arrived(&mut self, task: &Task) {
        self.arrivals
            .entry(task.arrival)
            .or_default()
            .insert(task.id);
        if let Some((&newest, _)) = self.arrivals.last_key_value() {
            let keep = newest.saturating_sub(KEEP_SLOTS);
            while self
                .arrivals
                .first_key_value()
                .is_some_and(|(s, _)| *s < keep)
            {
                self.arrivals.pop_first();
            }
        }
    }

    /// Arrivals per interval of `interval` slots, the last `count` whole intervals before the
    /// one `now` is in, oldest first (fewer if the series is younger; intervals before the
    /// first arrival heard of are left out).
    pub fn arrival_counts(&self, interval: u64, now: u64, count: usize) -> Vec<f64> {
        let interval = interval.max(1);
        let current = now / interval;
        let Some((&first, _)) = self.arrivals.first_key_value() else {
            return Vec::new();
        };
        let from = (first / interval).max(current.saturating_sub(count as u64));
        (from..current)
            .map(|i| {
                self.arrivals
                    .range(i * interval..(i + 1) * interval)
                    .map(|(_, ids)| ids.len())
                    .sum::<usize>() as f64
            })
            .collect()
    }

    /// Whether `id` was counted as an arrival (tests).
    #[cfg(test)]
    pub(super) fn counted(&self, id: crate::task::TaskId) -> bool {
        self.arrivals.values().any(|ids| ids.contains(&id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::TaskState;

    use crate::task::TaskId;
    use std::sync::Arc;

    fn task(id: u64, arrival: u64) -> Arc<Task> {
        Arc::new(Task::new(id, [1, 0]).arriving(arrival))
    }

    #[test]
    fn arrivals_are_counted_once_per_task_in_their_own_interval() {
        let mut l: Ledger<()> = Ledger::new(4, 1);
        assert!(l.arrival_counts(10, 50, 8).is_empty());
        for (id, slot) in [(1, 3), (2, 5), (3, 12), (4, 31), (5, 31)] {
            l.insert(task(id, slot), TaskState::Pending, ());
        }
        // Heard of again after it left (a peer's history): counted once.
        l.remove(TaskId(2));
        l.insert(task(2, 5), TaskState::Pending, ());
        // Intervals 0..3 are whole at slot 45 (interval 4 is under way).
        assert_eq!(l.arrival_counts(10, 45, 8), vec![2.0, 1.0, 0.0, 2.0]);
        assert_eq!(l.arrival_counts(10, 45, 2), vec![0.0, 2.0]);
        // One heard of late counts in its own interval.
        l.insert(task(6, 25), TaskState::Pending, ());
        assert_eq!(l.arrival_counts(10, 45, 2), vec![1.0, 2.0]);
        assert!(l.counted(TaskId(6)));
    }
}
