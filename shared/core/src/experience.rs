//! What learning takes from decisions and rounds, whatever produced them (the simulator's
//! episodes, a live agent's reports to the coordinator): each decision the learned policy made
//! ([`DecisionRecord`]), which claims lost their round and each agent's reward per slot
//! ([`Outcomes`], what the node core itself records), joined into an [`Experience`].
//!
//! Plain data: the network that makes the records and the PPO that reads them live above the
//! core (`tapfinger-model`, the simulator's training, the coordinator).

/// One decision of the learned policy, as training needs it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DecisionRecord {
    /// The snapshot decided on.
    pub view: crate::view::ClusterView,
    /// The deciding agent.
    pub me: crate::NodeId,
    /// Window slots that were not selectable (besides empty ones).
    pub blocked: Vec<bool>,
    /// Chosen pointer index (`window` = do nothing).
    pub slot: usize,
    /// Chosen units per kind (empty when passing).
    pub units: Vec<u32>,
    /// Legal range per kind for the chosen task.
    pub lo: Vec<u32>,
    /// Legal range per kind for the chosen task.
    pub hi: Vec<u32>,
    /// Log-probability of the pointer choice.
    pub logp_ptr: f32,
    /// Log-probability of the allocation choices (0 when passing).
    pub logp_alloc: f32,
    /// Whether passing was masked (the work-conserving mask: an idle node with a task that fits).
    #[serde(default)]
    pub pass_blocked: bool,
}

impl DecisionRecord {
    /// A decision by `me` on `view` choosing pointer index `slot` (`window`: do nothing), with
    /// no allocation yet and log-probabilities 0; the policy fills in what it chose.
    pub fn new(
        view: crate::view::ClusterView,
        me: crate::NodeId,
        blocked: Vec<bool>,
        slot: usize,
    ) -> Self {
        Self {
            view,
            me,
            blocked,
            slot,
            units: Vec::new(),
            lo: Vec::new(),
            hi: Vec::new(),
            logp_ptr: 0.0,
            logp_alloc: 0.0,
            pass_blocked: false,
        }
    }
}

/// Where recorded decisions go (one buffer shared by the agents of an episode).
pub type Recorder = std::sync::Arc<std::sync::Mutex<Vec<DecisionRecord>>>;

/// What PPO learns from, whatever produced it — the simulator's episodes or live agents' reports
/// to the coordinator: the recorded decisions, which claims lost their round, and each agent's
/// reward per slot (−tasks queued at or running on it).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Experience {
    /// Decisions, in the order each agent made them.
    pub records: Vec<DecisionRecord>,
    /// Claims that lost their round: (slot, step, agent).
    pub lost: std::collections::BTreeSet<(u64, u32, crate::NodeId)>,
    /// Reward per (slot, agent) (a list of triples on the wire: JSON maps need string keys).
    #[serde(with = "reward_list")]
    pub rewards: std::collections::BTreeMap<(u64, crate::NodeId), f64>,
    /// The stream goes on after its last record (a live agent's, cut into batches): learning
    /// bootstraps its return from the critic instead of ending it at zero.
    #[serde(default)]
    pub truncated: bool,
}

/// Serde of the reward map as a list of `(slot, agent, reward)`.
mod reward_list {
    use crate::NodeId;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::BTreeMap;

    pub(super) fn serialize<S: Serializer>(
        m: &BTreeMap<(u64, NodeId), f64>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let v: Vec<(u64, NodeId, f64)> = m.iter().map(|((a, b), r)| (*a, *b, *r)).collect();
        v.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<(u64, NodeId), f64>, D::Error> {
        let v: Vec<(u64, NodeId, f64)> = Vec::deserialize(d)?;
        Ok(v.into_iter().map(|(a, b, r)| ((a, b), r)).collect())
    }
}

impl Experience {
    /// Nothing recorded.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.lost.is_empty() && self.rewards.is_empty()
    }

    /// Append `other` (another batch of the same or another agent).
    pub fn extend(&mut self, other: Experience) {
        self.records.extend(other.records);
        self.lost.extend(other.lost);
        self.rewards.extend(other.rewards);
        self.truncated |= other.truncated;
    }
}

/// What the node core records for learning: which of its claims lost their round and its reward
/// at every slot end. The driver joins it with the decisions its recording policy made
/// ([`Outcomes::join`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcomes {
    /// Claims that lost their round: (slot, step, agent).
    pub lost: std::collections::BTreeSet<(u64, u32, crate::NodeId)>,
    /// Reward per (slot, agent).
    pub rewards: std::collections::BTreeMap<(u64, crate::NodeId), f64>,
}

impl Outcomes {
    /// The experience of `records` (the decisions, in the order they were made) and these
    /// outcomes.
    pub fn join(self, records: Vec<DecisionRecord>) -> Experience {
        Experience {
            records,
            lost: self.lost,
            rewards: self.rewards,
            truncated: false,
        }
    }
}
