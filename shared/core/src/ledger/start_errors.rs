//! How far a box's start estimates ([`Ledger::expected`]) were from the starts: what a user who
//! reads "starts in ~12 min" needs to know of it. Each waiting task's first estimate (the slot
//! it was expected to start at, when the driver first asked) is kept until the task starts,
//! then the gap in slots is kept among the latest [`MAX_ERRORS`]. Pure bookkeeping: the driver
//! calls [`StartErrors::note`] whenever it made estimates (an agent: when it publishes them).

use super::{Expected, Ledger, TaskState};
use crate::task::TaskId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// The most errors kept (the latest).
pub(super) const MAX_ERRORS: usize = 1000;
/// The most waiting tasks whose first estimate is kept (a larger queue: the latest arrivals
/// wait to be noted until room frees).
pub(super) const MAX_WAITING: usize = 10_000;

/// The start estimates' errors so far (module doc).
#[derive(Debug, Clone, Default)]
pub struct StartErrors {
    /// Each waiting task's first estimated start, as a slot.
    first: BTreeMap<TaskId, f64>,
    /// The latest errors, in slots (absolute).
    errors: VecDeque<f64>,
}

/// What the errors say (slots; a driver turns them into seconds).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StartError {
    /// Tasks measured (at most 1,000, the latest).
    pub tasks: usize,
    /// The median absolute error, in slots.
    pub median: f64,
    /// The 90th percentile of the absolute error, in slots.
    pub p90: f64,
}

impl StartErrors {
    /// At `slot`, with `expected` the estimates made then: note each waiting task's first
    /// estimate, and measure each noted task that has started since against it.
    pub fn note<M>(
        &mut self,
        slot: u64,
        expected: &BTreeMap<TaskId, Expected>,
        ledger: &Ledger<M>,
    ) {
        for (id, e) in expected {
            if self.first.len() >= MAX_WAITING {
                break;
            }
            if ledger
                .get(*id)
                .is_some_and(|t| t.state == TaskState::Pending)
            {
                self.first.entry(*id).or_insert(slot as f64 + e.start);
            }
        }
        let mut measured = Vec::new();
        self.first
            .retain(|id, at| match ledger.get(*id).map(|t| &t.state) {
                Some(TaskState::Pending) => true,
                Some(TaskState::Running { started, .. }) => {
                    measured.push((*started as f64 - *at).abs());
                    false
                }
                // Done, a gang, or gone: it never started as a single task here to measure.
                _ => false,
            });
        for m in measured {
            if self.errors.len() == MAX_ERRORS {
                self.errors.pop_front();
            }
            self.errors.push_back(m);
        }
    }

    /// The errors measured so far, if any.
    pub fn summary(&self) -> Option<StartError> {
        if self.errors.is_empty() {
            return None;
        }
        let mut v: Vec<f64> = self.errors.iter().copied().collect();
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        Some(StartError {
            tasks: v.len(),
            median: at(0.5),
            p90: at(0.9),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{running, task, two_nodes};
    use super::*;
    use crate::task::NodeId;

    fn expect(start: f64) -> Expected {
        Expected {
            start,
            finish: start + 5.0,
            node: NodeId(0),
        }
    }

    /// A task first expected to start 4 slots out that starts 6 slots later is 2 off; a later,
    /// better estimate does not replace the first; a task cancelled before it started is not
    /// measured; the summary is over what was measured.
    #[test]
    fn each_start_is_measured_against_the_first_estimate() {
        let mut l = two_nodes();
        l.insert(task(1, 0, [1, 1], &[0]), TaskState::Pending, ());
        l.insert(task(2, 0, [1, 1], &[0]), TaskState::Pending, ());
        l.insert(task(3, 0, [1, 1], &[0]), TaskState::Pending, ());
        let mut e = StartErrors::default();
        let at10: BTreeMap<TaskId, Expected> = [
            (TaskId(1), expect(4.0)),
            (TaskId(2), expect(1.0)),
            (TaskId(3), expect(0.0)),
        ]
        .into_iter()
        .collect();
        e.note(10, &at10, &l);
        assert_eq!(e.summary(), None);
        // At slot 12 task 1 looks 4 slots out again (it was 2): the first estimate stands.
        let at12: BTreeMap<TaskId, Expected> = [(TaskId(1), expect(4.0))].into_iter().collect();
        e.note(12, &at12, &l);
        let mut started = running(0, [1, 1]);
        if let TaskState::Running { started: s, .. } = &mut started {
            *s = 16;
        }
        l.set_state(TaskId(1), started.clone());
        if let TaskState::Running { started: s, .. } = &mut started {
            *s = 11;
        }
        l.set_state(TaskId(2), started);
        l.set_state(TaskId(3), super::super::tests::succeeded());
        e.note(16, &BTreeMap::new(), &l);
        let s = e.summary().unwrap();
        assert_eq!(s.tasks, 2);
        // Errors 2 (16 against 14) and 0 (11 against 11).
        assert_eq!((s.median, s.p90), (2.0, 2.0));
    }

    /// Memory is bounded: the latest errors only.
    #[test]
    fn only_the_latest_errors_are_kept() {
        let mut l = two_nodes();
        let mut e = StartErrors::default();
        for i in 0..(MAX_ERRORS as u64 + 10) {
            l.insert(task(i, 0, [1, 1], &[0]), TaskState::Pending, ());
            let x: BTreeMap<TaskId, Expected> = [(TaskId(i), expect(0.0))].into_iter().collect();
            e.note(0, &x, &l);
            l.set_state(TaskId(i), running(0, [1, 1]));
            e.note(1, &BTreeMap::new(), &l);
            l.set_state(TaskId(i), super::super::tests::succeeded());
        }
        assert_eq!(e.summary().unwrap().tasks, MAX_ERRORS);
    }
}
