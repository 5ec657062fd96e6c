//! `tapfinger-agent` as a library: the pieces of the edge daemon, usable by
//! the binary and by the integration tests that start several agents on loopback.
//!
//! [`config`] (agent.toml), [`discovery`] (what the box has), [`net`] (libp2p), [`exec`] (process
//! and simulated executors), [`devices`] (which device nodes a task may open: GPU isolation), [`daemon`] (the event loop around the shared node state machine),
//! [`api`] (local HTTP API), [`store`] (durable task journal), [`recover`] (what a restart does
//! with the data directory), [`reports`] (tasks' metrics and convergence), [`supervise`] (the process between the agent and each task, so tasks
//! are adopted after a restart and never outlive the agent's lease), [`guard`] (what makes a task
//! die with its supervisor), [`procs`] (what `/proc` says of a process), [`mps`] (fractional GPU shares through NVIDIA MPS), [`policy`] (the learned
//! policy and baselines), [`online`]/[`learn`] (the coordinator link), [`run`] (assembles the
//! daemon).
//!
//! The lab is behind the cargo feature `dev`, which tests enable and the packaged binary does
//! not: the demo workloads (`demo`, `demo_gang`), the simulated executor and the NVML stand-in
//! ([`nvml::FAKE_NVML`]).

pub mod api;
pub mod client;
pub mod config;
pub mod daemon;
#[cfg(feature = "dev")]
pub mod demo;
#[cfg(feature = "dev")]
pub mod demo_gang;
pub mod devices;
pub mod discovery;
pub mod exec;
pub mod gang_launch;
pub mod gpu_use;
pub mod guard;
pub mod history;
pub mod logs;
pub mod metrics;
pub mod mps;
pub mod nvml;
pub mod online;
pub mod policy;
pub mod procs;
pub mod recover;
pub mod reports;
pub mod run;
pub mod status;
pub mod store;
pub mod supervise;
pub mod workload;

// The networking the coordinator shares lives in `tapfinger-net`; these paths stay for the agent.
pub use tapfinger_net::{learn, signed, swarm as net};
