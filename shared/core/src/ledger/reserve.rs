//! Capacity kept for forecast urgent arrivals (RLPTO's reservation; off unless asked): while the
//! forecast says urgent tasks are coming, a task of a lower class may not start if it would
//! leave the cluster less than they are expected to need, so an urgent task that arrives finds
//! room instead of waiting for a running task to end.
//!
//! - **Urgent**: submitted in class 0 where the cluster honours classes.
//! - **Expected need** of the next interval, per kind: the forecast arrivals of the interval
//!   ([`Ledger::set_forecast`]) × the share of urgent tasks among the arrivals of the last
//!   `WINDOW` (20) intervals × their mean minimum demand, rounded up.
//! - **The rule**, in every view ([`Ledger::view`]): a pending task whose class is not 0 now
//!   (aging included, so a task aged into class 0 is never held back) is in no window while the
//!   cluster's claimable units less its minimum demand fall below the expected need in a kind.
//!   The cluster's sum, not one box's: an urgent task may still find the reserve spread over
//!   boxes none of which fits it, a cheap rule's limit.
//!
//! Because it only narrows the windows, every policy honours it, learned or not, and the
//! simulator and the agents apply it alike.

use super::Ledger;
use crate::resources::Resources;
use crate::task::{Task, TaskId};
use std::collections::BTreeMap;

/// Intervals of arrivals the urgent share and demand are measured over.
pub(super) const WINDOW: u64 = 20;

/// The reservation's state in a ledger.
#[derive(Debug, Clone, Default)]
pub(super) struct Reserve {
    /// The forecast interval in slots, if the reservation is on.
    interval: Option<u64>,
    /// Urgent arrivals by slot: id and minimum demand (idempotent by id).
    urgent: BTreeMap<u64, BTreeMap<TaskId, Resources>>,
}

impl<M> Ledger<M> {
    /// Keep capacity for the urgent tasks the forecast (per interval of `interval` slots) says
    /// are coming (module doc); `None` (the default): never.
    pub fn set_reservation(&mut self, interval: Option<u64>) {
        self.reserve.interval = interval.map(|i| i.max(1));
    }

    /// Count an urgent arrival (with [`Ledger::arrived`]).
    pub(super) fn arrived_urgent(&mut self, task: &Task) {
        if self.reserve.interval.is_none() || !self.priorities.honour || task.priority != 0 {
            return;
        }
        self.reserve
            .urgent
            .entry(task.arrival)
            .or_default()
            .insert(task.id, task.min_demand.clone());
        if let Some((&newest, _)) = self.reserve.urgent.last_key_value() {
            let keep = newest.saturating_sub(super::arrivals::KEEP_SLOTS);
            while self
                .reserve
                .urgent
                .first_key_value()
                .is_some_and(|(s, _)| *s < keep)
            {
                self.reserve.urgent.pop_first();
            }
        }
    }

    /// The units kept for urgent arrivals at `slot` (empty: none).
    pub fn reserved(&self, slot: u64) -> Resources {
        let Some(every) = self.reserve.interval else {
            return Resources::default();
        };
        let Some(&next) = self.forecast().first() else {
            return Resources::default();
        };
        let from = (slot / every).saturating_sub(WINDOW) * every;
        let to = slot / every * every;
        let all: usize = self
            .arrival_counts(every, slot, WINDOW as usize)
            .iter()
            .map(|c| *c as usize)
            .sum();
        let demands: Vec<&Resources> = self
            .reserve
            .urgent
            .range(from..to)
            .flat_map(|(_, ids)| ids.values())
            .collect();
        if all == 0 || demands.is_empty() {
            return Resources::default();
        }
        let share = demands.len() as f64 / all as f64;
        let kinds = demands.iter().map(|d| d.len()).max().unwrap_or(0);
        Resources(
            (0..kinds)
                .map(|k| {
                    let mean = demands.iter().map(|d| f64::from(d.get(k))).sum::<f64>()
                        / demands.len() as f64;
                    (next * share * mean).ceil() as u32
                })
                .collect(),
        )
    }

    /// The pending tasks the reservation holds back at `slot` (module doc).
    pub(super) fn held_back(&self, slot: u64) -> Vec<TaskId> {
        let reserve = self.reserved(slot);
        if reserve.0.iter().all(|r| *r == 0) {
            return Vec::new();
        }
        let mut room = Resources::zeros(reserve.len());
        for (id, b) in &self.nodes {
            if b.live {
                super::add_each(&mut room, &self.claimable(*id));
            }
        }
        self.tasks
            .values()
            .filter(|e| e.state == super::TaskState::Pending)
            .filter(|e| self.priorities.class(&e.task, slot) > 0)
            .filter(|e| {
                (0..reserve.len()).any(|k| {
                    reserve.get(k) > 0
                        && room.get(k).saturating_sub(e.task.min_demand.get(k)) < reserve.get(k)
                })
            })
            .map(|e| e.task.id)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::ledger::{Ledger, TaskState};
    use crate::resources::Resources;
    use crate::task::{NodeId, Task, TaskId};
    use std::sync::Arc;

    fn task(id: u64, arrival: u64, priority: u8, cpus: u32) -> Arc<Task> {
        Arc::new(Task::new(id, [cpus]).class(priority).arriving(arrival))
    }

    /// The pending tasks in some window at `slot`, by id.
    fn window(l: &Ledger<()>, slot: u64) -> Vec<u64> {
        let v = l.view(slot, 0, 1, None);
        v.pending.iter().map(|p| p.task.id.0).collect()
    }

    #[test]
    fn batch_work_is_held_back_for_the_urgent_share_of_the_forecast_and_aged_work_is_not() {
        let mut l: Ledger<()> = Ledger::new(8, 0);
        l.set_node(NodeId(0), Resources(vec![8]));
        l.set_reservation(Some(10));
        // Slots 0–19: 4 arrivals, 1 urgent (2 CPUs), 3 batch; all done since.
        for (id, at, class) in [(1, 0, 0), (2, 3, 2), (3, 12, 2), (4, 15, 2)] {
            l.insert(task(id, at, class, 2), TaskState::Pending, ());
            l.remove(TaskId(id));
        }
        // At slot 20 batch tasks wait: 7 CPUs and 4 CPUs.
        l.insert(task(10, 20, 2, 7), TaskState::Pending, ());
        l.insert(task(11, 20, 2, 4), TaskState::Pending, ());
        // No forecast: nothing reserved.
        assert_eq!(window(&l, 20), vec![10, 11]);
        // 4 arrivals forecast, a quarter urgent at 2 CPUs: 2 CPUs kept. 8 − 7 < 2 holds task 10
        // back; 8 − 4 ≥ 2 does not hold 11.
        l.set_forecast(vec![4.0]);
        assert_eq!(l.reserved(20), Resources(vec![2]));
        assert_eq!(window(&l, 20), vec![11]);
        // An urgent task is never held back.
        l.insert(task(12, 20, 0, 7), TaskState::Pending, ());
        assert_eq!(window(&l, 20), vec![11, 12]);
        l.remove(TaskId(12));
        // Aged into class 0 (two classes at 50 slots each): no longer held back.
        assert_eq!(window(&l, 120), vec![10, 11]);
        // Off again: nothing reserved.
        l.set_reservation(None);
        assert_eq!(window(&l, 20), vec![10, 11]);
    }

    #[test]
    fn a_blind_ledger_or_one_without_urgent_arrivals_reserves_nothing() {
        let mut l: Ledger<()> = Ledger::new(8, 0).with_priorities(crate::ledger::Priorities::BLIND);
        l.set_node(NodeId(0), Resources(vec![8]));
        l.set_reservation(Some(10));
        l.set_forecast(vec![10.0]);
        l.insert(task(1, 0, 0, 2), TaskState::Pending, ());
        assert_eq!(l.reserved(15), Resources::default());
        let mut l: Ledger<()> = Ledger::new(8, 0);
        l.set_node(NodeId(0), Resources(vec![8]));
        l.set_reservation(Some(10));
        l.set_forecast(vec![10.0]);
        l.insert(task(1, 0, 2, 2), TaskState::Pending, ());
        assert_eq!(l.reserved(15), Resources::default());
    }
}
