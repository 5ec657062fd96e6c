//! What a node reconciles with its peers about copies and gangs, and the rules that keep it:
//! how long a peer has left a copy out of its heartbeats, which tasks were asked about (each at
//! most once per peer timeout), which questions were heard again, the tasks this node won in
//! rounds that started nothing, and the gangs held from an incomplete round until a member box
//! confirms them. Every map is bounded here: beyond `4 ×` [`MAX_WANT`] entries the stale ones
//! go. The node's handlers ([`super::messages`], [`super::announce`], [`super::entropy`],
//! [`super::gangs`]) decide when; this says how.

use crate::NodeId;
use crate::task::TaskId;
use crate::wire::MAX_WANT;
use std::collections::{BTreeMap, BTreeSet};

/// Entries a reconciliation map holds before its stale ones are dropped.
const BOUND: usize = 4 * MAX_WANT;

/// What this node reconciles with its peers about copies and gangs (module doc).
#[derive(Default)]
pub(super) struct Reconcile {
    /// Copies this node believes a peer runs that the peer's heartbeats did not list: the peer,
    /// and since when; asked about only after a peer timeout.
    unlisted: BTreeMap<TaskId, (NodeId, u64)>,
    /// Tasks this node asked its peers about ([`crate::wire::Body::Want`]), and when: each at most once per
    /// peer timeout.
    asked: BTreeMap<TaskId, u64>,
    /// Tasks peers asked this node about, and when it first heard that: a question heard again a
    /// peer timeout later is answered by every node that knows the answer ([`super::announce`]).
    heard_asked: BTreeMap<TaskId, u64>,
    /// Tasks this node won in rounds that started nothing (tentative): peers that decided those
    /// rounds in full believe it runs them, and ask; it answers for them although it does not
    /// own them (pending ones only; pruned when large).
    won_in_vain: BTreeSet<TaskId>,
    /// Gangs this node holds from a round it decided without every proposal, with the time by
    /// which a member box must confirm it started them; otherwise they go back to pending
    /// ([`super::gangs`]).
    gangs_unconfirmed: BTreeMap<TaskId, u64>,
    /// Epochs at which each gang really started (a complete round here, or a member box said it
    /// started): a failure requeues a gang while these number no more than its restarts. A
    /// tentative start from an incomplete round, which bumps the epoch too, is not a run.
    gang_runs: BTreeMap<TaskId, BTreeSet<u64>>,
}

impl Reconcile {
    /// How long (ms) `from` has not listed `id`, which this node believes it runs, counting
    /// from the first heartbeat that left it out. Keyed by the runner too: a copy believed to
    /// have moved starts its wait again.
    pub(super) fn unlisted_for(&mut self, id: TaskId, from: NodeId, now: u64) -> u64 {
        let since = match self.unlisted.get(&id) {
            Some(&(node, since)) if node == from => since,
            _ => {
                self.unlisted.insert(id, (from, now));
                now
            }
        };
        now.saturating_sub(since)
    }

    /// `id` is listed (or no longer awaited): its wait ends.
    pub(super) fn listed(&mut self, id: TaskId) {
        self.unlisted.remove(&id);
    }

    /// `from` listed `id`: the wait counted for `from` ends, not one counted for another box
    /// (every member box lists a running gang, so each heartbeat would reset it).
    pub(super) fn listed_by(&mut self, id: TaskId, from: NodeId) {
        if self.unlisted.get(&id).is_some_and(|(n, _)| *n == from) {
            self.unlisted.remove(&id);
        }
    }

    /// Beyond the bound, only the waits of copies `running` still says run somewhere are kept.
    pub(super) fn bound_unlisted(&mut self, running: impl Fn(TaskId) -> bool) {
        if self.unlisted.len() > BOUND {
            self.unlisted.retain(|id, _| running(*id));
        }
    }

    /// Of `ids`, at most `limit` not asked about within `timeout` (ms), now marked asked at
    /// `now`: the answer to a question is a broadcast that may still be on its way, and asking
    /// at every heartbeat of every peer was most of the cluster's traffic under load.
    pub(super) fn ask_now(
        &mut self,
        ids: impl IntoIterator<Item = TaskId>,
        now: u64,
        timeout: u64,
        limit: usize,
    ) -> Vec<TaskId> {
        if self.asked.len() > BOUND {
            // Questions asked a timeout ago may be asked again anyway.
            self.asked.retain(|_, at| now.saturating_sub(*at) < timeout);
        }
        let ids: Vec<TaskId> = ids
            .into_iter()
            .filter(|id| {
                self.asked
                    .get(id)
                    .is_none_or(|at| now.saturating_sub(*at) >= timeout)
            })
            .take(limit)
            .collect();
        for id in &ids {
            self.asked.insert(*id, now);
        }
        ids
    }

    /// A peer asked about `id` at `now`: whether the question is heard again, a peer timeout
    /// (`timeout`, ms) or more after it was first heard; one heard four timeouts after the last
    /// is a new question.
    pub(super) fn heard_again(&mut self, id: TaskId, now: u64, timeout: u64) -> bool {
        let first = self.heard_asked.entry(id).or_insert(now);
        if now.saturating_sub(*first) >= 4 * timeout {
            *first = now;
        }
        now.saturating_sub(*first) >= timeout
    }

    /// This node won `id` in a round that started nothing: it answers for it while it waits.
    pub(super) fn won_in_vain(&mut self, id: TaskId) {
        self.won_in_vain.insert(id);
    }

    /// Whether this node answers for pending `id`, having won it in a round that started nothing.
    pub(super) fn answers_for_won(&self, id: TaskId) -> bool {
        self.won_in_vain.contains(&id)
    }

    /// Beyond the bound, questions heard four timeouts ago start their count afresh, and only
    /// the won tasks `pending` says still wait are answered for.
    pub(super) fn bound_questions(
        &mut self,
        now: u64,
        timeout: u64,
        pending: impl Fn(TaskId) -> bool,
    ) {
        if self.heard_asked.len() > BOUND {
            self.heard_asked
                .retain(|_, at| now.saturating_sub(*at) < 4 * timeout);
        }
        if self.won_in_vain.len() > BOUND {
            self.won_in_vain.retain(|id| pending(*id));
        }
    }

    /// Gang `task` is held from an incomplete round: a member box must confirm it by `deadline`.
    pub(super) fn gang_unconfirmed(&mut self, task: TaskId, deadline: u64) {
        self.gangs_unconfirmed.insert(task, deadline);
    }

    /// Gang `task` no longer awaits a confirmation (confirmed, requeued or ended).
    pub(super) fn gang_confirmed(&mut self, task: TaskId) {
        self.gangs_unconfirmed.remove(&task);
    }

    /// The gangs whose confirmation was due by `now`, no longer awaited.
    pub(super) fn gangs_due(&mut self, now: u64) -> Vec<TaskId> {
        let due: Vec<TaskId> = self
            .gangs_unconfirmed
            .iter()
            .filter(|(_, d)| now >= **d)
            .map(|(t, _)| *t)
            .collect();
        for t in &due {
            self.gangs_unconfirmed.remove(t);
        }
        due
    }

    /// Gang `task` really started at `epoch` (a complete round, or a member box said so): a run.
    pub(super) fn gang_ran(&mut self, task: TaskId, epoch: u64) {
        self.gang_runs.entry(task).or_default().insert(epoch);
    }

    /// Gang `task` ran at `epoch` and is confirmed: [`Self::gang_ran`] and
    /// [`Self::gang_confirmed`].
    pub(super) fn gang_started(&mut self, task: TaskId, epoch: u64) {
        self.gang_confirmed(task);
        self.gang_ran(task, epoch);
    }

    /// The runs of gang `task` this node knows of (at least one: it is being asked because it ran).
    pub(super) fn gang_runs(&self, task: TaskId) -> usize {
        self.gang_runs.get(&task).map_or(1, |r| r.len().max(1))
    }

    /// Gang `task` ended: nothing about it is awaited any more.
    pub(super) fn gang_ended(&mut self, task: TaskId) {
        self.gangs_unconfirmed.remove(&task);
        self.gang_runs.remove(&task);
    }

    /// Task `task` ended (a gang or not): its runs are forgotten.
    pub(super) fn forget_runs(&mut self, task: TaskId) {
        self.gang_runs.remove(&task);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_is_asked_about_once_per_timeout_and_at_most_the_limit_at_once() {
        let mut r = Reconcile::default();
        let ids = [TaskId(1), TaskId(2), TaskId(3)];
        assert_eq!(r.ask_now(ids, 0, 100, 2), vec![TaskId(1), TaskId(2)]);
        assert_eq!(r.ask_now(ids, 50, 100, 2), vec![TaskId(3)]);
        assert_eq!(r.ask_now(ids, 99, 100, 5), Vec::<TaskId>::new());
        assert_eq!(r.ask_now(ids, 100, 100, 5), vec![TaskId(1), TaskId(2)]);
    }

    #[test]
    fn the_maps_stay_bounded() {
        let mut r = Reconcile::default();
        for i in 0..3 * BOUND as u64 {
            r.ask_now([TaskId(i)], i, 10, 1);
            r.unlisted_for(TaskId(i), NodeId(1), i);
            r.heard_again(TaskId(i), i, 10);
            r.won_in_vain(TaskId(i));
            r.bound_unlisted(|id| id.0 % 2 == 0 && id.0 > i.saturating_sub(BOUND as u64 / 2));
            r.bound_questions(i, 10, |id| id.0 + 10 > i);
        }
        assert!(r.asked.len() <= BOUND + 1, "{}", r.asked.len());
        assert!(r.unlisted.len() <= BOUND + 1, "{}", r.unlisted.len());
        assert!(r.heard_asked.len() <= BOUND + 1, "{}", r.heard_asked.len());
        assert!(r.won_in_vain.len() <= BOUND + 1, "{}", r.won_in_vain.len());
    }

    #[test]
    fn a_question_heard_a_timeout_later_is_heard_again_and_long_after_is_new() {
        let mut r = Reconcile::default();
        assert!(!r.heard_again(TaskId(7), 1000, 100));
        assert!(!r.heard_again(TaskId(7), 1099, 100));
        assert!(r.heard_again(TaskId(7), 1100, 100));
        assert!(
            !r.heard_again(TaskId(7), 1400, 100),
            "four timeouts on: a new question"
        );
    }

    #[test]
    fn a_gang_wait_ends_only_for_the_box_that_counted_it() {
        let mut r = Reconcile::default();
        assert_eq!(r.unlisted_for(TaskId(1), NodeId(2), 0), 0);
        r.listed_by(TaskId(1), NodeId(3));
        assert_eq!(r.unlisted_for(TaskId(1), NodeId(2), 50), 50);
        r.listed_by(TaskId(1), NodeId(2));
        assert_eq!(r.unlisted_for(TaskId(1), NodeId(2), 60), 0);
        r.gang_unconfirmed(TaskId(9), 10);
        assert!(r.gangs_due(9).is_empty());
        assert_eq!(r.gangs_due(10), vec![TaskId(9)]);
        assert!(r.gangs_due(11).is_empty());
        assert_eq!(r.gang_runs(TaskId(9)), 1);
        r.gang_ran(TaskId(9), 3);
        r.gang_ran(TaskId(9), 5);
        assert_eq!(r.gang_runs(TaskId(9)), 2);
    }
}
