//! `tapfinger-net`: what the agent (`tapfinger-agent`) and the coordinator
//! (`tapfinger-coordinator`) share as networked services, so that the coordinator does not
//! depend on the edge daemon: the libp2p network ([`swarm`]: private network, direct broadcast
//! ([`direct`]) and gossip, request-response, allowlist), identities ([`identity`]: the
//! persistent key and the node id derived from a peer id), the coordinator's messages
//! ([`learn`]: signed checkpoints, experience batches, a bounded spool; [`guard`]: the signed
//! choice of the cluster's policy), a metrics registry
//! ([`metrics`]), logging ([`log`]) and the cluster's secrets on disk ([`secret`]: swarm keys and
//! API tokens).

mod behaviour;
mod dial;
pub mod direct;
mod driver;
pub mod event;
pub mod guard;
pub mod identity;
mod inbound;
pub mod learn;
pub mod log;
pub mod metrics;
pub mod peers;
mod refusal;
pub mod secret;
pub mod signed;
pub mod swarm;
