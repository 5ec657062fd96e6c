//! What the network reports to the agent ([`NetEvent`]).

use crate::learn;
use libp2p::request_response::ResponseChannel;
use libp2p::{Multiaddr, PeerId};
use tapfinger_core::wire::Envelope;

/// What the network reports.
#[derive(Debug)]
pub enum NetEvent {
    /// Listening on an address.
    Listening(Multiaddr),
    /// A peer connected (and, with an allowlist, is on it).
    PeerUp(PeerId),
    /// The last connection to a peer closed.
    PeerDown(PeerId),
    /// A valid message from a peer.
    Message {
        /// Who sent it (the gossipsub source).
        from: PeerId,
        /// The message (boxed: it is much larger than the other events).
        envelope: Box<Envelope>,
    },
    /// A peer off the allowlist connected or asked something: disconnected, its request not
    /// answered.
    Refused {
        /// Who.
        from: PeerId,
        /// What it tried (`connect`, or the request's kind).
        what: String,
    },
    /// A message that failed decoding or validation, dropped.
    Dropped {
        /// Who propagated it.
        from: PeerId,
        /// Why.
        reason: String,
    },
    /// A request from a peer; answer it with [`Network::respond`](crate::swarm::Network::respond) (dropping `channel` fails it).
    Request {
        /// Who asks.
        from: PeerId,
        /// What.
        request: Box<learn::Request>,
        /// Where the answer goes.
        channel: ResponseChannel<learn::Response>,
    },
    /// The answer to one of our requests.
    Response {
        /// Who answered.
        from: PeerId,
        /// The answer.
        response: Box<learn::Response>,
    },
    /// One of our requests failed (peer unreachable, timeout, closed connection).
    RequestFailed {
        /// To whom.
        to: PeerId,
        /// Why.
        reason: String,
    },
}
