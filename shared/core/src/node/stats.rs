//! What a node counts about its own negotiation (rounds, claims, conflicts, messages, round
//! latency), for metrics and benchmarks. Counting only: nothing here decides anything.

use std::collections::BTreeMap;

/// What a node counts about its own negotiation (for metrics and benchmarks). Counters only
/// grow. (Round latencies are samples the driver takes, [`super::NodeCore::take_latencies`], for
/// its metrics histogram.)
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NodeStats {
    /// Rounds decided here.
    pub rounds: u64,
    /// Claims this node made (proposals that were not a pass).
    pub claims: u64,
    /// Claims of this node that lost to another agent's.
    pub claims_lost: u64,
    /// Tasks claimed by more than one agent, summed over rounds.
    pub conflicts: u64,
    /// Members whose proposal was missing at a round's deadline, summed over rounds.
    pub missing: u64,
    /// Messages this node broadcast, by kind (`heartbeat`, `protocol`, ...).
    pub sent: BTreeMap<String, u64>,
    /// Messages received from peers.
    pub received: u64,
    /// Copies of tasks this node stopped because another copy won (higher epoch, an outcome).
    #[serde(default)]
    pub copies_stopped: u64,
    /// Copies this node stopped because its lease lapsed (cut off longer than the autonomy time).
    #[serde(default)]
    pub lease_stops: u64,
    /// Pending tasks this node owned and handed to any quorum side when its lease lapsed.
    #[serde(default)]
    pub handed_back: u64,
    /// Announcements refused: a task id known with another task.
    #[serde(default)]
    pub refused_announces: u64,
    /// Rounds with a commit not started because some member's proposal was missing, counted
    /// as a pass for having moved on to a later round, or stated another member set.
    #[serde(default)]
    pub rounds_held_back: u64,
    /// Rounds every member proposed in but some decided over another member set: only tasks
    /// their winner owns started. Many of them mean peers' round trips straddle the in-step
    /// bound (the peer timeout plus one heartbeat).
    #[serde(default)]
    pub rounds_sets_differ: u64,
    /// Protocol messages not taken, by why (`not-a-member`: from a peer not in step;
    /// `stale`, `unknown-peer`, `too-far-ahead`, `equivocation`, `version`, `invalid-claim`).
    #[serde(default)]
    pub protocol_refused: BTreeMap<String, u64>,
    /// Tasks running here whose shares an elastic policy changed ([`super::Action::Resize`]).
    #[serde(default)]
    pub resizes: u64,
    /// Re-shares of this node's own policy refused as out of bounds (a policy bug; the tasks
    /// kept their shares).
    #[serde(default)]
    pub reshares_refused: u64,
    /// Gangs put back to pending because a box hosting a member went silent.
    #[serde(default)]
    pub gangs_broken: u64,
    /// Tasks this node preempted for a higher class ([`super::Action::Preempt`]).
    #[serde(default)]
    pub preempted: u64,
}

impl NodeStats {
    /// Total messages sent.
    pub fn sent_total(&self) -> u64 {
        self.sent.values().sum()
    }

    /// Add another node's counters to these (for cluster-wide figures).
    pub fn merge(&mut self, o: &NodeStats) {
        self.rounds += o.rounds;
        self.claims += o.claims;
        self.claims_lost += o.claims_lost;
        self.conflicts += o.conflicts;
        self.missing += o.missing;
        for (k, v) in &o.sent {
            *self.sent.entry(k.clone()).or_default() += v;
        }
        self.received += o.received;
        self.copies_stopped += o.copies_stopped;
        self.lease_stops += o.lease_stops;
        self.handed_back += o.handed_back;
        self.refused_announces += o.refused_announces;
        self.rounds_held_back += o.rounds_held_back;
        self.rounds_sets_differ += o.rounds_sets_differ;
        self.resizes += o.resizes;
        self.reshares_refused += o.reshares_refused;
        self.preempted += o.preempted;
        for (k, v) in &o.protocol_refused {
            *self.protocol_refused.entry(k.clone()).or_default() += v;
        }
    }

    /// Count a protocol message not taken, for `why`.
    pub(super) fn refused(&mut self, why: &str) {
        *self.protocol_refused.entry(why.to_string()).or_default() += 1;
    }
}
