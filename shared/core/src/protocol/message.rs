//! What the protocol's members exchange and report: rounds, claims and proposals, the message
//! that carries one, a decided round and its commits, the machine's outputs and errors, and its
//! settings. The state machine that uses them is [`super::Protocol`].

use super::gang::{GangClaim, GangCommit};
use crate::resources::Resources;
use crate::task::{NodeId, TaskId};
use serde::{Deserialize, Serialize};

/// Version of the wire format of [`Message`]; a message with another version is refused.
pub const PROTOCOL_VERSION: u16 = 1;

/// A decision round: step `step` of slot `slot`. Ordered by slot, then step.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default,
)]
pub struct Round {
    /// Slot (the unit of time in which progress is made).
    pub slot: u64,
    /// Decision step within the slot.
    pub step: u32,
}

impl std::fmt::Display for Round {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.slot, self.step)
    }
}

/// A claim on one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    /// The claimed task.
    pub task: TaskId,
    /// The allocation the claimant would give it.
    pub alloc: Resources,
    /// The claimant's selection probability for the task (Bayes likelihood), in [0, 1].
    pub prob: f64,
    /// The claimant's headroom ρ = min_r free_r / min_demand_r (Bayes prior), ≥ 0.
    pub headroom: f64,
}

/// One member's proposal for a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Proposal {
    /// Nothing this round.
    Pass,
    /// A claim.
    Claim(Claim),
    /// A claim on a multi-node task: all its members, on the boxes named ([`gang`](super::gang)).
    Gang(GangClaim),
}

/// The message a member broadcasts for a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Must equal [`PROTOCOL_VERSION`].
    pub version: u16,
    /// The round it belongs to.
    pub round: Round,
    /// Sender.
    pub from: NodeId,
    /// What the sender proposes.
    pub proposal: Proposal,
    /// The members the sender decides this round with (itself included, sorted), as it
    /// proposed; empty: not stated (the simulator's one-instance driver, where every member
    /// agrees by construction). A member that decides over another member set may decide the
    /// round otherwise, so a round with such a member is reported in
    /// [`RoundOutcome::disagree`].
    #[serde(default)]
    pub members: Vec<NodeId>,
    /// The sender's free units when it proposed; empty: not stated. Gang claims place members
    /// only on boxes that stated them this round ([`gang`](super::gang)).
    #[serde(default)]
    pub free: Resources,
}

impl Message {
    /// `from`'s proposal for `round`: what its [`Protocol::propose`](super::Protocol::propose) broadcasts. A driver that
    /// stands for many members at once (the simulator, which resolves each round once) builds
    /// their messages with it.
    pub fn new(round: Round, from: NodeId, proposal: Proposal) -> Self {
        Self {
            version: PROTOCOL_VERSION,
            round,
            from,
            proposal,
            members: Vec::new(),
            free: Resources::default(),
        }
    }
}

/// A winning claim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Commit {
    /// Task to start.
    pub task: TaskId,
    /// Agent that starts it.
    pub agent: NodeId,
    /// Allocation it starts with.
    pub alloc: Resources,
    /// Number of agents that claimed the task this round (1 = uncontested).
    pub claimants: u32,
}

/// The result of one round, identical on every member that saw the same proposals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundOutcome {
    /// The decided round.
    pub round: Round,
    /// Winners, sorted by task id.
    pub commits: Vec<Commit>,
    /// Gangs that won, every member placed, sorted by task id.
    #[serde(default)]
    pub gangs: Vec<GangCommit>,
    /// Claims that lost (agent, task), sorted.
    pub lost: Vec<(NodeId, TaskId)>,
    /// Tasks claimed by more than one agent.
    pub contested: u32,
    /// Members whose proposal was missing at the deadline (treated as passes).
    pub missing: Vec<NodeId>,
    /// Members counted as passes because they had already proposed in a later round: they
    /// decided this round without waiting for this member, perhaps otherwise.
    #[serde(default)]
    pub ahead: Vec<NodeId>,
    /// Members whose proposal stated another member set than this member's at the decision:
    /// they decide this round over other proposals, perhaps otherwise.
    #[serde(default)]
    pub disagree: Vec<NodeId>,
    /// True when nothing committed: the slot ends and the next round is step 0 of the next slot.
    pub slot_ended: bool,
    /// The round that follows.
    pub next: Round,
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Broadcast this message to every other member.
    Send(Message),
    /// A round was decided.
    Decided(RoundOutcome),
}

/// Errors: a refused message or call. Refusing never corrupts the machine's state.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProtocolError {
    /// Wire version mismatch.
    #[error("protocol version {got} not supported (expected {PROTOCOL_VERSION})")]
    Version {
        /// Version received.
        got: u16,
    },
    /// Sender is not a member.
    #[error("message from {0}, which is not a member")]
    UnknownPeer(NodeId),
    /// The message belongs to a round already decided.
    #[error("stale message for round {got} (current round {current})")]
    Stale {
        /// Message round.
        got: Round,
        /// Current round.
        current: Round,
    },
    /// The message is too far in the future to buffer.
    #[error("message for round {got} is too far ahead of round {current}")]
    TooFarAhead {
        /// Message round.
        got: Round,
        /// Current round.
        current: Round,
    },
    /// A member sent two different proposals for one round; the first one stands.
    #[error("{from} sent two different proposals for round {round}; the first stands")]
    Equivocation {
        /// Sender.
        from: NodeId,
        /// Round.
        round: Round,
    },
    /// The local agent proposed twice in one round.
    #[error("already proposed in round {0}")]
    AlreadyProposed(Round),
    /// A claim with an out-of-range probability or headroom; it is counted as a pass.
    #[error("invalid claim from {from}: {reason}; counted as a pass")]
    InvalidClaim {
        /// Sender.
        from: NodeId,
        /// What is wrong.
        reason: String,
    },
}

impl ProtocolError {
    /// A short name of the kind, for counters.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Version { .. } => "version",
            Self::UnknownPeer(_) => "unknown-peer",
            Self::Stale { .. } => "stale",
            Self::TooFarAhead { .. } => "too-far-ahead",
            Self::Equivocation { .. } => "equivocation",
            Self::AlreadyProposed(_) => "already-proposed",
            Self::InvalidClaim { .. } => "invalid-claim",
        }
    }
}

/// Settings of the state machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProtocolConfig {
    /// After proposing, how long (in the caller's `now` unit) to wait for missing members before
    /// deciding without them. `None` waits forever (the simulator, where delivery is instant).
    pub round_timeout: Option<u64>,
    /// While members are missing, send this member's proposal again after this long (same unit),
    /// then after twice as long, and so on. Sending the same proposal twice is harmless (a
    /// receiver keeps the first); a lost message is the one cause of a missing proposal that
    /// waiting cannot cure, but a late one (a busy member) is the usual cause, so the gaps grow.
    /// `None`: never.
    pub resend_every: Option<u64>,
    /// How many rounds ahead a message may be buffered (peers that are faster than us).
    pub max_rounds_ahead: u32,
    /// How many committed task ids to remember (to reject claims on tasks already started).
    pub committed_memory: usize,
}

impl Default for ProtocolConfig {
    fn default() -> Self {
        Self {
            round_timeout: None,
            resend_every: None,
            max_rounds_ahead: 64,
            committed_memory: 1 << 20,
        }
    }
}
