//! `tapfinger-policies`: the heuristic scheduling policies every comparison runs beside the
//! learned one, and the lookahead reference, over the core's [`tapfinger_core::Policy`] trait.
//!
//! - [`baselines`]: FIFO, SRTF, Tiresias, Optimus, DRF and the rest, by name
//!   ([`baselines::by_name`]); each decides from the same view the learned policy sees.
//! - [`sized`]: the size-aware baselines (shortest predicted first, shortest predicted
//!   remaining, Gittins' index), on what the cluster learned of sizes.
//! - [`lookahead`]: the look-ahead planner of one node's tasks and the deployable `lookahead`
//!   policy that plans on the online estimator's figures.
//!
//! Plain code over the core: no network, no solver.

pub mod baselines;
pub mod lookahead;
pub mod sized;
