//! `tapfinger-core`: the sans-IO core every driver of tapfinger shares.
//!
//! It holds the resource and task model, the view an agent has of the cluster, the [`Policy`]
//! trait, the decision protocol as a sans-IO state machine ([`protocol`]), the cluster ledger
//! ([`ledger`]), the node state machine the agent drives ([`node`]), task specs and the wire
//! format. Nothing here opens a socket, spawns a thread or reads the wall clock: time and
//! randomness are passed in, so every driver (simulator or daemon) gets the same decisions from
//! the same inputs.
//!
//! It carries no heavy dependency, and Cargo keeps it so: the crates above it bring their own.
//! `tapfinger-policies` has the heuristic baselines, `tapfinger-model` the learned network
//! (burn only for training), `tapfinger-jobs` the LP placement of multi-node jobs (good_lp) and
//! `tapfinger-forecast` the task-volume forecast; the `tapfinger` crate gathers them all under
//! one name. Where the core needs one of them it owns the interface and the driver passes the
//! implementation in: a gang placer ([`placement::gang::PlaceNow`]), a policy ([`Policy`]).
//!
//! Modules:
//!
//! | module | what it holds |
//! |---|---|
//! | [`resources`], [`task`] | resource vectors over kinds; tasks, ids, gang shapes |
//! | [`view`], [`share`], [`estimate`], [`fit`] | what a policy sees; fair shares; the online speed estimator |
//! | [`policy`] | the [`Policy`] trait every scheduler implements |
//! | [`protocol`] | rounds, claims, the Bayes resolution of contested tasks, gang claims |
//! | [`ledger`] | the cluster's task ledger: lifecycle, queues and window, shares, preemption, shrinking |
//! | [`slot`] | one slot step: the proposal order, rooms made by preemption, the end of a slot |
//! | [`node`] | [`node::NodeCore`], the per-box state machine an agent drives: leases, rounds, reports |
//! | [`experience`] | what learning gets from decisions and rounds (records, lost claims, rewards) |
//! | [`spec`], [`wire`] | task specs as users write them; the versioned messages between boxes |
//! | [`placement`], [`plan`] | the placement model of multi-node jobs; the pipeline planner |
//! | [`gpu_pool`], [`frag`] | GPU devices and fractions; how fragmented a box's devices are (FGD's measure) |
//! | [`plateau`], [`twin`] | convergence; the cluster's twin |
//! | [`sizes`] | what the cluster knows of a task's size before it runs: distributions per recurring job, submitter, class, with their measured error |

pub mod estimate;
pub mod experience;
pub mod fit;
pub mod frag;
pub mod gpu_pool;
pub mod ledger;
pub mod node;
pub mod placement;
pub mod plan;
pub mod plateau;
pub mod policy;
pub mod protocol;
pub mod resources;
pub mod share;
pub mod sizes;
pub mod slot;
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
