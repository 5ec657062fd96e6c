//! The libp2p behaviours an agent's swarm runs (gossip, identify, ping, optional mDNS, the
//! learning request-response, direct streams, peer exchange), in a module of their own so
//! that the swarm task and the dialler both build on it without depending on each other.

use crate::{learn, peers};
use libp2p::swarm::NetworkBehaviour;
use libp2p::swarm::behaviour::toggle::Toggle;
use libp2p::{gossipsub, identify, mdns, ping, request_response};

/// The behaviours, combined.
#[derive(NetworkBehaviour)]
pub(crate) struct Behaviour {
    /// Relays broadcasts where no direct stream reaches.
    pub(crate) gossipsub: gossipsub::Behaviour,
    /// Learns peers' listen addresses.
    pub(crate) identify: identify::Behaviour,
    /// Keeps idle connections alive.
    pub(crate) ping: ping::Behaviour,
    /// Finds peers on the LAN (optional).
    pub(crate) mdns: Toggle<mdns::tokio::Behaviour>,
    /// Experience to the coordinator, checkpoints back.
    pub(crate) rr: request_response::cbor::Behaviour<learn::Request, learn::Response>,
    /// One stream per peer for direct broadcasts.
    pub(crate) direct: libp2p_stream::Behaviour,
    /// Peer exchange.
    pub(crate) peers: request_response::cbor::Behaviour<peers::Ask, peers::Known>,
}
