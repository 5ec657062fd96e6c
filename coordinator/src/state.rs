//! What the coordinator's serving loop, its learner's thread and its HTTP API share: the
//! counters, the published version and trial, the guard's state and whether learning runs.

use crate::guard::GuardState;
use crate::learner::State;
use tapfinger_net::learn::{Announcement, Checkpoint};

/// What the loop and the API share.
#[derive(Debug, Default, Clone)]
pub struct Shared {
    /// Counters and last evaluation.
    pub state: State,
    /// The published version.
    pub published: Option<(Announcement, Checkpoint)>,
    /// The latest candidate, signed as a trial.
    pub trial: Option<(Announcement, Checkpoint)>,
    /// Batches waiting for an update.
    pub inbox_batches: u64,
    /// Batches dropped because the inbox was full.
    pub inbox_dropped: u64,
    /// Decisions received since the start of this process, per node.
    pub received_live: std::collections::BTreeMap<u32, u64>,
    /// An update is running.
    pub updating: bool,
    /// Connections and requests refused from peers off the allowlist, by what they tried
    /// (`connect`, `experience`, ...).
    pub refused: std::collections::BTreeMap<String, u64>,
    /// The guard's state (the choice in force, counters, the last judgement).
    pub guard: GuardState,
    /// The share of one core the guard used since this process started.
    pub guard_busy_share: f64,
    /// Whether learning runs, and the batches set aside.
    pub learning: Learning,
}

/// Whether the learner's thread runs, and what it set aside (a batch an update panicked on).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Learning {
    /// The thread runs and the loop serves (false once either has ended: the process exits).
    pub alive: bool,
    /// Batches set aside (an update panicked on them), since this process started.
    pub set_aside: u64,
    /// Why the last ones were set aside.
    pub last_set_aside: Option<String>,
    /// Why the coordinator stopped serving, once it has.
    pub stopped: Option<String>,
}
