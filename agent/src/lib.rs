//! `tapfinger-agent` as a library: the pieces of the edge daemon (issue #4, in progress), usable by
//! the binary and by the integration tests that start several agents on loopback.
//!
//! Built so far: resource discovery ([`discovery`]) and the libp2p network layer ([`net`]) that
//! carries the shared wire format between agents. The negotiation loop, executors, HTTP API and
//! store are not built yet.

pub mod config;
pub mod daemon;
pub mod discovery;
pub mod exec;
pub mod net;
