//! `tapfinger`: the core library shared by the agent, the coordinator and the simulator.
//!
//! It holds the resource and task model, the view an agent has of the cluster (and its
//! heterogeneous-graph form), the [`Policy`] trait, and the decision protocol as a
//! sans-IO state machine ([`protocol`]). Nothing here opens a socket, spawns a thread or reads the
//! wall clock: time and randomness are passed in, so every driver (simulator or daemon) gets the
//! same decisions from the same inputs.

pub mod baselines;
pub mod estimate;
pub mod fit;
pub mod forecast;
pub mod gpu_pool;
pub mod graph;
pub mod ledger;
pub mod lookahead;
pub mod model;
pub mod node;
pub mod placement;
pub mod plan;
pub mod plateau;
pub mod policy;
pub mod protocol;
pub mod resources;
pub mod share;
pub mod spec;
pub mod task;
pub mod twin;
pub mod view;
pub mod wire;

pub use policy::{Decision, Policy};
pub use protocol::{
    Claim, Commit, Message, Proposal, Protocol, ProtocolError, Round, RoundOutcome,
};
pub use resources::{ResourceError, ResourceKind, ResourceSpace, Resources};
pub use task::{NodeId, Task, TaskId, TaskTypeId};
pub use view::{NodeView, PendingView, RunningView, View};

/// The RNG every seeded component uses. ChaCha12 (rand's `StdRng`) is reproducible for a given
/// seed on every platform, which the determinism tests rely on.
pub type Rng = rand::rngs::StdRng;

/// Build the project RNG from a seed.
pub fn seeded_rng(seed: u64) -> Rng {
    use rand::SeedableRng;
    Rng::seed_from_u64(seed)
}
