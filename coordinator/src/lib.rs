//! `tapfinger-coordinator`: the optional piece that learns from live agents.
//!
//! Agents decide on their own; in learning mode they ship their experience to the coordinator,
//! which trains the shared actor and the centralized critic with the simulator's PPO trainer
//! ([`learner`]), evaluates every candidate in the simulator, and publishes only candidates that
//! are not worse, signed with its libp2p identity key ([`serve`]). Agents accept weights only from
//! the coordinator peer id they are configured with (the agent's `online` module). Its guard
//! ([`guard`]) judges the workload the agents observed and has the whole cluster run a baseline
//! while the learned policy does worse there.

pub mod api;
pub mod config;
pub mod guard;
pub mod heard;
pub mod learner;
mod learning;
pub mod merge;
pub mod serve;
pub mod state;
