//! `tapfinger-sim`: a seeded, slotted simulator that drives the shared decision protocol with the
//! TapFinger semantics, plus scenarios, speed models, baselines, metrics, reports and plots.
//!
//! The simulator never decides anything itself: policies decide and the protocol of `tapfinger`
//! resolves, exactly as on real agents.

pub mod arrivals;
pub mod bound;
pub mod catalog;
pub mod clairvoyant;
#[cfg(feature = "train")]
pub mod deployment;
pub mod env;

mod episode;
pub mod gangs;
pub mod generate;
pub mod grid;
pub mod guard;
pub mod import;
pub mod learning;
pub mod metrics;
pub mod pack;
pub mod plot;
pub mod policies;
mod presets;
pub mod profile;
pub mod report;
pub mod scenario;
pub mod speed;
pub mod start_estimates;
pub mod suite;
pub mod trace;
#[cfg(feature = "train")]
pub mod train;
#[cfg(feature = "train")]
pub mod tune;
pub mod twin;
pub mod workload;

pub use env::{EpisodeResult, SimError, Simulator};
pub use scenario::{Scenario, ScenarioError};
