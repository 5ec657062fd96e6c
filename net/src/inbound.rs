//! What happens to a frame that arrives, by either path: directly from its author
//! ([`crate::direct`]) or relayed by gossip. Each message is taken once, whichever copy comes
//! first; the author of a gossip copy is proved by its signature, that of a direct one by the
//! connection; a malformed or forged one is reported as [`NetEvent::Dropped`].

use crate::event::NetEvent;
use crate::signed;
use libp2p::PeerId;
use libp2p::gossipsub::MessageAcceptance;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tapfinger_core::wire;
use tokio::sync::mpsc;

/// What the network carried, counted since it started ([`crate::swarm::Network::traffic`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Messages taken from a direct stream.
    pub direct: u64,
    /// Messages taken from gossip (their author's direct frame had not come first).
    pub relayed: u64,
    /// Copies of messages already taken, by either path.
    pub duplicates: u64,
    /// Frames for a peer dropped because its queue was full.
    pub queue_full: u64,
    /// Messages this node also sent by gossip.
    pub gossip_sent: u64,
}

/// The counters behind [`Traffic`], shared by the tasks that count.
#[derive(Default)]
pub(crate) struct Counters {
    /// Messages taken from a direct stream.
    direct: AtomicU64,
    /// Messages taken from gossip.
    relayed: AtomicU64,
    /// Copies of messages already taken, dropped.
    duplicates: AtomicU64,
    /// Frames dropped because a peer's writer queue was full.
    pub(crate) queue_full: AtomicU64,
    /// Broadcasts also sent by gossip.
    pub(crate) gossip_sent: AtomicU64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> Traffic {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Traffic {
            direct: get(&self.direct),
            relayed: get(&self.relayed),
            duplicates: get(&self.duplicates),
            queue_full: get(&self.queue_full),
            gossip_sent: get(&self.gossip_sent),
        }
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Where inbound frames go, shared by the swarm task and the direct streams' readers.
#[derive(Clone)]
pub(crate) struct Inbound {
    /// Where taken messages go (bounded).
    pub(crate) events: mpsc::Sender<NetEvent>,
    /// Messages seen lately (each taken once, whichever way it comes).
    seen: Arc<Mutex<Seen>>,
    /// The allowlist, if any: others' messages are ignored.
    allow: Option<Arc<BTreeSet<PeerId>>>,
    /// What was taken, and how.
    pub(crate) counters: Arc<Counters>,
}

impl Inbound {
    pub(crate) fn new(events: mpsc::Sender<NetEvent>, allow: Option<BTreeSet<PeerId>>) -> Self {
        Self {
            events,
            seen: Arc::default(),
            allow: allow.map(Arc::new),
            counters: Arc::default(),
        }
    }

    /// Whether `peer` may talk to us (the allowlist, if any).
    pub(crate) fn allowed(&self, peer: &PeerId) -> bool {
        self.allow.as_ref().is_none_or(|a| a.contains(peer))
    }

    fn record(&self, id: &[u8], verified: bool) -> Option<bool> {
        // A poisoned lock only means another reader panicked mid-insert; the set is still usable.
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        seen.record(id, verified)
    }

    fn known(&self, id: &[u8]) -> Option<bool> {
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        seen.ids.get(id).copied()
    }

    /// A frame `peer` sent on a direct stream: the message to report, if any (none for a copy
    /// of a message already taken).
    pub(crate) fn direct(&self, peer: &PeerId, frame: &[u8]) -> Option<NetEvent> {
        let dropped = |reason: String| {
            tracing::warn!(from = %peer, %reason, "dropped a direct frame");
            Some(NetEvent::Dropped {
                from: *peer,
                reason,
            })
        };
        let payload = match signed::open_from(frame, peer) {
            Ok(p) => p,
            Err(e) => return dropped(e.to_string()),
        };
        let Some(id) = signed::id(frame) else {
            return dropped("no message id".into());
        };
        if self.record(id, false).is_some() {
            bump(&self.counters.duplicates);
            return None;
        }
        match wire::decode(payload) {
            Ok(envelope) => {
                bump(&self.counters.direct);
                Some(NetEvent::Message {
                    from: *peer,
                    envelope: Box::new(envelope),
                })
            }
            Err(e) => dropped(e.to_string()),
        }
    }

    /// A frame relayed by gossip from `source`: whether gossip may forward it, its author when
    /// proved, and the message to report, if any. A copy of a message already taken is
    /// forwarded (a peer not connected to its author may need it) once its signature has been
    /// checked, and not reported again.
    pub(crate) fn gossip(&self, source: &PeerId, frame: &[u8]) -> Gossiped {
        let (acceptance, event) = self.judge(source, frame);
        let author = match (&acceptance, &event) {
            (MessageAcceptance::Accept, Some(NetEvent::Message { from, .. })) => Some(*from),
            (MessageAcceptance::Accept, _) => signed::author(frame),
            _ => None,
        };
        Gossiped {
            acceptance,
            author,
            event,
        }
    }

    fn judge(&self, source: &PeerId, frame: &[u8]) -> (MessageAcceptance, Option<NetEvent>) {
        if !self.allowed(source) {
            return (MessageAcceptance::Reject, None);
        }
        let id = signed::id(frame);
        if let Some(id) = id
            && self.known(id) == Some(true)
        {
            bump(&self.counters.duplicates);
            return (MessageAcceptance::Accept, None);
        }
        let (from, payload) = match signed::open(frame) {
            Ok(opened) => opened,
            Err(e) => {
                // No author can be named: the peer that relayed it answers for it.
                tracing::warn!(from = %source, error = %e, "dropped an unsigned or forged message");
                let ev = NetEvent::Dropped {
                    from: *source,
                    reason: e.to_string(),
                };
                return (MessageAcceptance::Reject, Some(ev));
            }
        };
        if !self.allowed(&from) {
            return (MessageAcceptance::Reject, None);
        }
        match wire::decode(payload) {
            Ok(envelope) => {
                let id = id.unwrap_or_default();
                if self.record(id, true).is_some() {
                    bump(&self.counters.duplicates);
                    return (MessageAcceptance::Accept, None);
                }
                bump(&self.counters.relayed);
                let ev = NetEvent::Message {
                    from,
                    envelope: Box::new(envelope),
                };
                (MessageAcceptance::Accept, Some(ev))
            }
            Err(e) => {
                tracing::warn!(%from, error = %e, "dropped a malformed message");
                let ev = NetEvent::Dropped {
                    from,
                    reason: e.to_string(),
                };
                (MessageAcceptance::Reject, Some(ev))
            }
        }
    }
}

/// What became of a gossip frame.
pub(crate) struct Gossiped {
    /// What gossip may do with it.
    pub(crate) acceptance: MessageAcceptance,
    /// Its author, once proved.
    pub(crate) author: Option<PeerId>,
    /// What to report.
    pub(crate) event: Option<NetEvent>,
}

/// Messages seen lately, by [`signed::id`], and whether their signature was checked. Bounded:
/// the oldest entries go first.
#[derive(Default)]
struct Seen {
    /// Each message id and whether its signature was checked.
    ids: HashMap<Vec<u8>, bool>,
    /// The ids in arrival order, to drop the oldest.
    order: VecDeque<Vec<u8>>,
}

/// How many message ids [`Seen`] keeps (minutes of a busy 100-box cluster's traffic).
const SEEN: usize = 1 << 16;

impl Seen {
    /// Record `id`; `verified` says whether its signature was checked. Returns what was known
    /// before: `None` (new), or whether an earlier copy had been verified.
    fn record(&mut self, id: &[u8], verified: bool) -> Option<bool> {
        if let Some(v) = self.ids.get_mut(id) {
            let before = *v;
            *v |= verified;
            return Some(before);
        }
        if self.order.len() >= SEEN
            && let Some(old) = self.order.pop_front()
        {
            self.ids.remove(&old);
        }
        self.ids.insert(id.to_vec(), verified);
        self.order.push_back(id.to_vec());
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_takes_a_message_once_and_forgets_the_oldest() {
        let mut s = Seen::default();
        assert_eq!(s.record(b"a", false), None);
        assert_eq!(s.record(b"a", true), Some(false));
        assert_eq!(s.record(b"a", false), Some(true));
        for i in 0..SEEN as u32 {
            s.record(&i.to_be_bytes(), true);
        }
        assert_eq!(s.ids.len(), SEEN);
        assert_eq!(s.record(b"a", true), None, "the oldest entry was forgotten");
    }
}
