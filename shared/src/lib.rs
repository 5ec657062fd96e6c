//! `tapfinger`: every library crate of tapfinger under one name, for the drivers (the simulator,
//! the agent, the coordinator) and for users who want all of it.
//!
//! The parts live in crates of their own, so that Cargo keeps their direction: nothing in
//! [`tapfinger_core`] (the sans-IO core: resources, tasks, the view, the [`Policy`] trait, the
//! protocol, the ledger, the node state machine, specs and the wire format) depends on the crates
//! above it. Each crate's `lib.rs` documents its modules.
//!
//! | here | crate | what |
//! |---|---|---|
//! | the core's modules (`ledger`, `node`, `protocol`, …) | `tapfinger-core` | the sans-IO core; no heavy dependency |
//! | [`baselines`], [`lookahead`] | `tapfinger-policies` | the heuristic baselines and the lookahead reference |
//! | [`model`], [`graph`] | `tapfinger-model` | the learned network (burn) and its graph |
//! | [`jobs`], [`placement::lp`] | `tapfinger-jobs` | the LP placement of multi-node jobs (good_lp) |
//! | [`forecast`] | `tapfinger-forecast` | the task-volume forecast (ARIMA, GRU) |

pub use tapfinger_core::*;
pub use tapfinger_forecast as forecast;
pub use tapfinger_jobs as jobs;
pub use tapfinger_model as model;
pub use tapfinger_model::graph;
pub use tapfinger_policies::{baselines, lookahead};

/// Placement of multi-node jobs: the core's model and plain placers, and the LP rounding.
pub mod placement {
    pub use tapfinger_core::placement::*;
    pub use tapfinger_jobs::lp;
}
