//! Dialling: the bootstrap addresses, redialled while their peer is not connected, and peers
//! found on the LAN. Split from [`crate::swarm`], which calls these from its task.

use crate::behaviour::Behaviour;
use libp2p::swarm::dial_opts::DialOpts;
use libp2p::swarm::{ConnectionId, DialError};
use libp2p::{Multiaddr, PeerId, Swarm};
use std::collections::BTreeMap;
use std::time::Duration;

/// How often the bootstrap and LAN peers that are not connected are dialled again. With
/// [`CONNECT_TIMEOUT`], a link that comes back (a healed partition, a restarted box) is dialled
/// within about a second, and a dial sent into a cut is given up before TCP's growing SYN
/// retransmission gaps could hold the reconnection back (after a 30 s cut, the next SYN of a dial
/// left running could be 15 s away).
pub(crate) const REDIAL: Duration = Duration::from_secs(1);

/// A connection that is neither up nor failed this long after its dial (TCP connect, the key's
/// handshake, noise, yamux) is given up. Generous for a LAN or a slow WAN link; short against
/// a cut.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Every connection is pinged this often, and closed when a ping has no answer within
/// [`PING_TIMEOUT`]: a link cut without a word (a partition, a box that lost power) is noticed in
/// seconds, so that its peer is dialled afresh as soon as the link is back, instead of waiting on
/// the old connection's TCP retransmission backoff, which after a 30 s cut can hold the data back
/// for another 15–30 s.
pub(crate) const PING_INTERVAL: Duration = Duration::from_secs(1);

/// See [`PING_INTERVAL`]. Several heartbeats long, so that a loaded box's slow answer is not
/// taken for a cut.
pub(crate) const PING_TIMEOUT: Duration = Duration::from_secs(3);

/// Dial a peer found on the LAN. Two agents usually discover each other at the same instant and
/// dial each other; from their listening ports (libp2p's default port reuse) the two dials become
/// one TCP simultaneous open in which both sides think they dialed, and the handshake fails. A
/// fresh source port per dial keeps the two connections apart (a redundant one is harmless).
pub(crate) fn dial_lan_peer(swarm: &mut Swarm<Behaviour>, peer: PeerId, addrs: Vec<Multiaddr>) {
    let opts = DialOpts::peer_id(peer)
        .addresses(addrs)
        .allocate_new_port()
        .build();
    if let Err(e) = swarm.dial(opts) {
        tracing::debug!(%peer, error = %e, "LAN peer not dialed");
    }
}

/// The bootstrap addresses and what became of them. Each address is dialled until a connection
/// dialled to it is up, and again whenever the peer that answered there is no longer connected
/// (a restarted peer returns). Being connected to *some* peers is not enough: an agent that
/// reached its fellow agents but not the coordinator would otherwise never try the coordinator
/// again. An address that turns out to be this agent itself is dropped.
pub(crate) struct Bootstrap {
    /// The bootstrap addresses, dialled again while no peer behind one is connected.
    addrs: Vec<Multiaddr>,
    /// Who answered at each address (once a dial to it succeeded).
    peer: Vec<Option<PeerId>>,
    /// The address is our own (an operator may list every box, this one included).
    own: Vec<bool>,
    /// A failure is logged as a warning once per address and outage, then at debug level.
    warned: Vec<bool>,
    /// Dials in flight, by connection, with the address they try and when they began.
    pending: BTreeMap<ConnectionId, (usize, tokio::time::Instant)>,
}

impl Bootstrap {
    pub(crate) fn new(addrs: Vec<Multiaddr>) -> Self {
        let n = addrs.len();
        Self {
            addrs,
            peer: vec![None; n],
            own: vec![false; n],
            warned: vec![false; n],
            pending: BTreeMap::new(),
        }
    }

    /// Dial every address that has no live connection and no dial in flight. A fresh source port
    /// per dial: with bootstrap lists that name each other, two agents started together would
    /// otherwise dial each other from their listening ports, and the two dials would become one
    /// TCP simultaneous open whose handshake fails (see [`dial_lan_peer`]).
    pub(crate) fn dial_missing(&mut self, swarm: &mut Swarm<Behaviour>) {
        // The transport gives a dial up after CONNECT_TIMEOUT; should its failure never be
        // reported, the dial is forgotten here after twice that, so that nothing can stop the
        // redials for good.
        let now = tokio::time::Instant::now();
        self.pending
            .retain(|_, (_, began)| now.duration_since(*began) < 2 * CONNECT_TIMEOUT);
        for i in 0..self.addrs.len() {
            let in_flight = self.pending.values().any(|&(j, _)| j == i);
            let up = self.peer[i].is_some_and(|p| swarm.is_connected(&p));
            if self.own[i] || in_flight || up {
                continue;
            }
            let opts = DialOpts::unknown_peer_id()
                .address(self.addrs[i].clone())
                .allocate_new_port()
                .build();
            let id = opts.connection_id();
            match swarm.dial(opts) {
                Ok(()) => {
                    self.pending.insert(id, (i, now));
                }
                Err(e) => self.failed_at(i, &e),
            }
        }
    }

    pub(crate) fn established(&mut self, connection: ConnectionId, peer: PeerId) {
        if let Some((i, _)) = self.pending.remove(&connection) {
            self.peer[i] = Some(peer);
            self.warned[i] = false;
        }
    }

    pub(crate) fn failed(&mut self, connection: ConnectionId, error: &DialError) {
        if let Some((i, _)) = self.pending.remove(&connection) {
            self.failed_at(i, error);
        }
    }

    fn failed_at(&mut self, i: usize, error: &DialError) {
        let addr = &self.addrs[i];
        if matches!(error, DialError::LocalPeerId { .. }) {
            tracing::info!(%addr, "bootstrap address is this agent itself: not dialled again");
            self.own[i] = true;
        } else if !self.warned[i] {
            self.warned[i] = true;
            tracing::warn!(%addr, error = %error, "cannot reach bootstrap peer (retrying every second)");
        } else {
            tracing::debug!(%addr, error = %error, "bootstrap peer still unreachable");
        }
    }
}
