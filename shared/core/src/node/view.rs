//! What a node's policy sees and is rewarded for, from its [`crate::ledger::Ledger`]: the same
//! view and reward the simulator computes, with one difference: a pending task this node may not start now (its owner is on the other side of a
//! partition) is in no window it decides from (the protocol's rule, not the ledger's).

use super::NodeCore;
use crate::view::ClusterView;

impl NodeCore {
    /// This node's reward for the slot that just ended ([`crate::ledger`] defines it).
    pub fn reward(&self) -> f64 {
        self.tasks.reward(self.cfg.me)
    }

    /// The forecast arrivals of the next intervals, nearest first, which this node's views
    /// carry from now on (its driver's forecast, refreshed once an interval).
    pub fn set_forecast(&mut self, ahead: Vec<f64>) {
        self.tasks.set_forecast(ahead);
    }

    /// Keep capacity for forecast urgent arrivals, the forecast being per interval of
    /// `interval` slots ([`crate::ledger::Ledger::set_reservation`]; `None`: never).
    pub fn set_reservation(&mut self, interval: Option<u64>) {
        self.tasks.set_reservation(interval);
    }

    /// The cluster as this node knows it, for its policy.
    pub fn view(&self) -> ClusterView {
        let round = self.protocol.round();
        self.view_at(round.slot, round.step)
    }

    /// [`Self::view`] as of `slot` and `step`: the re-share that closes a slot runs after the
    /// protocol has moved on to the next one, but shares the slot that is about to run, as the
    /// simulator's re-share before it runs does (a task started in that slot has not run yet).
    pub(crate) fn view_at(&self, slot: u64, step: u32) -> ClusterView {
        let may_start = self.start_rule(self.now);
        self.tasks
            .view(slot, step, self.cfg.num_types, Some(&may_start))
    }
}
