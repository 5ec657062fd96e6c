//! Direct broadcast: every message goes straight to every connected peer, one frame on one
//! long-lived stream per peer, and nobody forwards it.
//!
//! Why not gossip alone? Gossip relays every message hop by hop: in the 16-agent cluster
//! benchmark a proposal reached its first peer after 19 ms (p50) and its last one 49 ms later,
//! queued behind the relaying agents' own work, and each copy was one more decryption and
//! deduplication for every agent on the way (docs/DECISIONS.md, "The agents' network and
//! rounds"). Boxes of one cluster normally reach each other directly (they exchange whom
//! they know, [`crate::peers`]), so one frame per peer is both the fewest frames and the fewest
//! hops. Gossip stays for what a direct frame cannot reach (`Relay`: an author heard of but
//! not connected).
//!
//! Framing: `[4: length, big endian][signed frame]`, at most [`MAX_DIRECT`] bytes. The
//! connection's handshake (noise) proves who the peer is, so a frame that names the peer as its
//! author is taken without checking its signature ([`crate::signed::open_from`]); one that
//! names anybody else, or does not decode, is dropped and reported. (The stream stays open: a
//! reader that closed it would leave its writer sending into a stream nobody reads.) Only a
//! length over the limit, after which the framing cannot be trusted, ends the stream.
//!
//! Each peer has a writer task fed by a bounded queue (1024 frames); when a peer does not keep
//! up, frames for it are dropped (counted as `tapfinger_frames_dropped_slow_peer_total`, logged)
//! rather than slowing every other peer down. Proposals are resent and heartbeats repeat recent
//! finishes; a peer that slow soon falls out of step and out of the rounds.

use crate::inbound::{Counters, Inbound};
use futures::{AsyncReadExt as _, AsyncWriteExt as _, StreamExt as _};
use libp2p::{PeerId, Stream, StreamProtocol};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tapfinger_core::wire::{self, MAX_FRAME};
use tokio::sync::mpsc;

/// The largest direct frame accepted: a signed wire frame (the signature and key add a few
/// hundred bytes to [`MAX_FRAME`]).
pub const MAX_DIRECT: usize = MAX_FRAME + 4096;

/// Frames queued for one peer before further ones are dropped.
const QUEUE: usize = 1024;

/// The stream protocol of a cluster (one per wire version, so versions never mix).
pub fn protocol(cluster: &str) -> Result<StreamProtocol, String> {
    StreamProtocol::try_from_owned(format!(
        "/tapfinger/direct/{cluster}/{}",
        wire::WIRE_VERSION
    ))
    .map_err(|e| e.to_string())
}

/// The writer side: one queue and task per connected peer.
/// Each connected peer's writer queue.
type Queues = BTreeMap<PeerId, mpsc::Sender<Arc<[u8]>>>;

/// The writer queues of the connected peers. Cloned into the [`crate::swarm::Network`] handle, so that
/// a broadcast reaches the writers from the sender's own task: through the swarm's task it
/// waited behind the swarm's other work (a task hop more for every message).
#[derive(Clone)]
pub(crate) struct Writers {
    /// Opens streams to peers.
    control: libp2p_stream::Control,
    /// The direct protocol's name.
    protocol: StreamProtocol,
    /// Each connected peer's writer queue.
    peers: Arc<std::sync::Mutex<Queues>>,
    /// Frames dropped for a slow peer are counted here.
    counters: Arc<Counters>,
}

impl Writers {
    pub(crate) fn new(
        control: libp2p_stream::Control,
        protocol: StreamProtocol,
        counters: Arc<Counters>,
    ) -> Self {
        Self {
            control,
            protocol,
            peers: Arc::default(),
            counters,
        }
    }

    /// A peer connected: start its writer (its stream opens with the first frame).
    fn peers(&self) -> std::sync::MutexGuard<'_, Queues> {
        // Nothing panics while holding the lock (inserts, removes, `try_send`s).
        self.peers.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn connect(&self, peer: PeerId) {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(write_to(
            peer,
            self.control.clone(),
            self.protocol.clone(),
            rx,
        ));
        self.peers().insert(peer, tx);
    }

    /// A peer's last connection closed: its writer ends with its queue.
    pub(crate) fn disconnect(&self, peer: &PeerId) {
        self.peers().remove(peer);
    }

    /// Queue `frame` for every connected peer.
    pub(crate) fn send_all(&self, frame: &Arc<[u8]>) {
        for (peer, tx) in self.peers().iter() {
            if tx.try_send(frame.clone()).is_err() {
                let n = self.counters.queue_full.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::debug!(%peer, dropped = n, "peer's direct queue full: frame dropped");
            }
        }
    }
}

/// One peer's writer: opens the stream on the first frame (and again after a failure), then
/// writes every queued frame, flushing once per batch.
async fn write_to(
    peer: PeerId,
    mut control: libp2p_stream::Control,
    protocol: StreamProtocol,
    mut rx: mpsc::Receiver<Arc<[u8]>>,
) {
    let mut stream: Option<Stream> = None;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while let Ok(f) = rx.try_recv() {
            batch.push(f);
        }
        // One attempt on the open stream and, if it failed, one on a fresh one.
        for _ in 0..2 {
            if stream.is_none() {
                match control.open_stream(peer, protocol.clone()).await {
                    Ok(s) => stream = Some(s),
                    Err(e) => {
                        tracing::debug!(%peer, error = %e, "cannot open a direct stream");
                        break;
                    }
                }
            }
            let Some(s) = stream.as_mut() else { break };
            match write_batch(s, &batch).await {
                Ok(()) => break,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "direct stream failed");
                    stream = None;
                }
            }
        }
    }
    if let Some(mut s) = stream {
        let _ = s.close().await;
    }
}

/// The batch as one write: each write on a yamux stream is a frame of its own, sealed and sent
/// on its own (a length and its frame written apart were two of each).
async fn write_batch(s: &mut Stream, batch: &[Arc<[u8]>]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(batch.iter().map(|f| f.len() + 4).sum());
    for f in batch {
        buf.extend_from_slice(&(f.len() as u32).to_be_bytes());
        buf.extend_from_slice(f);
    }
    s.write_all(&buf).await?;
    s.flush().await
}

/// Read `peer`'s frames from one inbound stream and hand each to `inbound` until the stream
/// ends, breaks the framing (a length over [`MAX_DIRECT`]), or the network stops.
async fn read_from(peer: PeerId, mut s: Stream, inbound: Inbound) {
    let mut len = [0u8; 4];
    loop {
        if s.read_exact(&mut len).await.is_err() {
            return;
        }
        let n = u32::from_be_bytes(len) as usize;
        if n > MAX_DIRECT {
            tracing::warn!(%peer, bytes = n, "direct frame too large: stream closed");
            return;
        }
        let mut frame = vec![0u8; n];
        if s.read_exact(&mut frame).await.is_err() {
            return;
        }
        if let Some(ev) = inbound.direct(&peer, &frame)
            && inbound.events.send(ev).await.is_err()
        {
            return;
        }
    }
}

/// Accept inbound streams until the network stops, each read by a task of its own.
pub(crate) async fn accept(mut incoming: libp2p_stream::IncomingStreams, inbound: Inbound) {
    while let Some((peer, stream)) = incoming.next().await {
        if inbound.allowed(&peer) {
            tokio::spawn(read_from(peer, stream, inbound.clone()));
        }
    }
}

/// When a message also goes by gossip. Gossip is needed while some author is heard (through a
/// relay) without being connected to us: then everything we send goes by gossip too, so that it
/// reaches that author. And one message every beacon period goes by gossip regardless, so that
/// authors who are not connected learn of each other in the first place.
pub(crate) struct Relay {
    /// Authors heard by gossip, and when last.
    pub(crate) heard: BTreeMap<PeerId, tokio::time::Instant>,
    /// When we last sent by gossip.
    last: Option<tokio::time::Instant>,
    /// The longest time between two messages sent by gossip.
    beacon: Duration,
}

/// How long an author heard by gossip counts as needing it.
const RELAY_MEMORY: Duration = Duration::from_secs(10);
/// The beacon period without peer exchange: gossip is then the only way agents that are not
/// connected hear of each other.
pub(crate) const BEACON: Duration = Duration::from_secs(1);
/// The beacon period with peer exchange, which connects agents that share a peer: gossip
/// floods every beacon to every agent, and each agent forwards it to its mesh peers, so the
/// beacons grow with the square of the agents. With one a second each, 64 agents in one
/// process on 2 cores (1 s heartbeats) joined but then decided rounds only at their deadline
/// and finished no task in 60 s; with one every 5 s they ran 500 tasks in 52 s
/// (2026-11-24). Two beacons fit in [`RELAY_MEMORY`], so an author heard only by gossip
/// stays heard.
pub(crate) const BEACON_WITH_EXCHANGE: Duration = Duration::from_secs(5);

impl Relay {
    pub(crate) fn new(beacon: Duration) -> Self {
        Self {
            heard: BTreeMap::new(),
            last: None,
            beacon,
        }
    }

    pub(crate) fn due(&mut self, connected: impl Fn(&PeerId) -> bool) -> bool {
        let now = tokio::time::Instant::now();
        self.heard
            .retain(|_, t| now.duration_since(*t) < RELAY_MEMORY);
        let due = self.heard.keys().any(|p| !connected(p))
            || self
                .last
                .is_none_or(|t| now.duration_since(t) >= self.beacon);
        if due {
            self.last = Some(now);
        }
        due
    }
}
