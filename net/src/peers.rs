//! Peer exchange: every agent comes to be connected to every other, so that direct broadcast
//! ([`crate::direct`]) reaches all of them and gossip has nothing to relay. When a peer
//! connects (and every 5 s, one connected peer in turn), we ask it which peers it is connected
//! to and where they listen (as identify told it), and dial those we are not connected to. An
//! operator can therefore join a box with a single bootstrap entry and still get a full mesh.
//!
//! Asking alone heals slowly: a box that joins through `b` while `b` has not yet met `a` hears
//! nothing of `a` in `b`'s first answer, and `a`, asked before, knows nothing of it either; both
//! would wait for the next periodic question (up to 5 s, longer in a big mesh). So a node that
//! identifies a peer for the first time also tells its other peers the news (one short request
//! each, naming that one peer), and they dial it at once. A join therefore costs each of the
//! `n` boxes `n − 1` requests of a few hundred bytes, once.
//!
//! Only peers that may talk to us (the allowlist, if any) are dialled; an address a peer gives
//! cannot make us talk to anybody else, since the handshake proves the peer id dialled.

use libp2p::{Multiaddr, PeerId, StreamProtocol};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The most peers an answer lists, and the most whose addresses a node keeps.
pub const MAX_PEERS: usize = 1024;
/// The most addresses kept per peer.
const MAX_ADDRS: usize = 8;
/// The largest answer accepted, in bytes (1024 peers with a few addresses each).
pub const MAX_ANSWER: u64 = 1 << 20;
/// The largest request accepted, in bytes: news names one peer with at most a few addresses.
pub const MAX_ASK: u64 = 16 << 10;

/// A request of the peer exchange.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ask {
    /// "Which peers are you connected to?" Answered with a [`Known`].
    Whom,
    /// "I have just met these peers, here is where they listen." Answered with an empty
    /// [`Known`]; the receiver dials those it is not connected to.
    News(Known),
}

/// The answer: connected peers and where they listen.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Known(pub Vec<(PeerId, Vec<Multiaddr>)>);

/// The request-response protocol of a cluster.
pub fn protocol(cluster: &str) -> Result<StreamProtocol, String> {
    // Version 2: requests carry news (version 1 only asked). Agents of the two versions do not
    // exchange peers; they still reach each other through gossip.
    StreamProtocol::try_from_owned(format!("/tapfinger/peers/{cluster}/2"))
        .map_err(|e| e.to_string())
}

/// Where peers listen, as they told us (identify), bounded.
#[derive(Default)]
pub(crate) struct Book {
    /// Addresses each known peer listens on.
    addrs: BTreeMap<PeerId, Vec<Multiaddr>>,
}

impl Book {
    /// `peer` listens at `listen` (identify). Returns the news to tell other peers: the peer and
    /// its addresses if they are new to us (first met, or listening elsewhere now), else `None`.
    pub(crate) fn learned(&mut self, peer: PeerId, mut listen: Vec<Multiaddr>) -> Option<Known> {
        if self.addrs.len() >= MAX_PEERS && !self.addrs.contains_key(&peer) {
            return None;
        }
        listen.truncate(MAX_ADDRS);
        if listen.is_empty() || self.addrs.get(&peer) == Some(&listen) {
            self.addrs.insert(peer, listen);
            return None;
        }
        self.addrs.insert(peer, listen.clone());
        Some(Known(vec![(peer, listen)]))
    }

    /// What to tell `asker`: the peers among `connected` whose addresses we know, other than it.
    pub(crate) fn answer<'a>(
        &self,
        asker: &PeerId,
        connected: impl IntoIterator<Item = &'a PeerId>,
    ) -> Known {
        Known(
            connected
                .into_iter()
                .filter(|p| *p != asker)
                .filter_map(|p| Some((*p, self.addrs.get(p)?.clone())))
                .filter(|(_, a)| !a.is_empty())
                .take(MAX_PEERS)
                .collect(),
        )
    }
}

/// Which peers from an answer to dial: not us, allowed, not connected, with an address.
pub(crate) fn to_dial(
    known: Known,
    me: &PeerId,
    allowed: impl Fn(&PeerId) -> bool,
    connected: impl Fn(&PeerId) -> bool,
) -> Vec<(PeerId, Vec<Multiaddr>)> {
    known
        .0
        .into_iter()
        .take(MAX_PEERS)
        .filter(|(p, a)| p != me && allowed(p) && !connected(p) && !a.is_empty())
        .map(|(p, mut a)| {
            a.truncate(MAX_ADDRS);
            (p, a)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> PeerId {
        PeerId::random()
    }

    #[test]
    fn an_answer_names_connected_peers_with_addresses_and_not_the_asker() {
        let (a, b, c, d) = (peer(), peer(), peer(), peer());
        let addr: Multiaddr = "/ip4/127.0.0.1/tcp/7600".parse().unwrap();
        let mut book = Book::default();
        assert_eq!(
            book.learned(a, vec![addr.clone()]),
            Some(Known(vec![(a, vec![addr.clone()])]))
        );
        // Heard again from identify (it repeats itself): no news.
        assert_eq!(book.learned(a, vec![addr.clone()]), None);
        assert!(book.learned(b, vec![addr.clone()]).is_some());
        assert_eq!(book.learned(c, Vec::new()), None);
        // d is connected but never identified: no address to give.
        let known = book.answer(&a, [&a, &b, &c, &d]);
        assert_eq!(known, Known(vec![(b, vec![addr.clone()])]));
        // Dialled: neither us, nor a connected or a forbidden peer.
        let me = peer();
        let offered = Known(vec![
            (me, vec![addr.clone()]),
            (a, vec![addr.clone()]),
            (b, vec![addr.clone()]),
            (c, vec![addr.clone(); 20]),
            (d, Vec::new()),
        ]);
        let dial = to_dial(offered, &me, |p| *p != b, |p| *p == a);
        assert_eq!(dial.len(), 1);
        assert_eq!(dial[0].0, c);
        assert_eq!(dial[0].1.len(), MAX_ADDRS);
    }
}
