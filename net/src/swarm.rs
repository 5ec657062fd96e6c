//! The agent's network: a libp2p swarm (TCP with an optional private-network pre-shared key, noise,
//! yamux; identify, ping, gossipsub, direct streams, optional mDNS) that carries
//! [`wire::Envelope`]s between agents.
//!
//! A broadcast goes to every connected peer directly, one frame on one stream per peer
//! ([`crate::direct`]), and by gossip only where direct frames may not reach: while some author
//! is heard through a relay without being connected to us, and once a second regardless, so
//! that agents that are not connected learn of each other. A message that arrives both ways is
//! taken once. Peers exchange whom they know ([`crate::peers`]), so that agents come to be
//! connected to each other and gossip has nothing to relay.
//!
//! The swarm runs in its own tokio task; the agent talks to it through bounded channels only
//! ([`Network::send`] and [`Network::next_event`]), so a slow consumer applies back-pressure
//! instead of growing a queue without bound. Every broadcast travels in a signed frame
//! ([`crate::signed`]) whose author each receiver checks once; every inbound message is then
//! decoded with [`wire::decode`] (size-limited, validated): a forged or malformed one is dropped,
//! reported as
//! [`NetEvent::Dropped`], and rejected to gossipsub so that it is not forwarded and its sender's
//! score falls. With a pre-shared key, a peer without it cannot even finish the handshake; with an
//! allowlist, a peer not on it is disconnected as soon as it connects and its messages are ignored.
//!
//! Beside gossip, a request-response protocol ([`crate::learn::PROTOCOL`], CBOR, size-limited)
//! carries experience to the coordinator and checkpoints back ([`Network::request`],
//! [`Network::respond`], [`NetEvent::Request`], [`NetEvent::Response`]).
//!
//! QUIC cannot carry the pre-shared key (pnet wraps a byte stream), so QUIC is only offered when no
//! key is configured.

use crate::behaviour::{Behaviour, BehaviourEvent};
use crate::dial::{Bootstrap, dial_lan_peer};
use crate::direct::{self, Relay, Writers};
pub use crate::event::NetEvent;
use crate::inbound::Inbound;
pub use crate::inbound::Traffic;
use crate::learn;
use crate::peers;
use futures::StreamExt;
use libp2p::core::transport::Transport as _;
use libp2p::core::upgrade::Version;
use libp2p::gossipsub::{self, IdentTopic, MessageAuthenticity};
use libp2p::pnet::{PnetConfig, PreSharedKey};
use libp2p::request_response::{self, ProtocolSupport, ResponseChannel};
use libp2p::swarm::SwarmEvent;
use libp2p::swarm::behaviour::toggle::Toggle;
use libp2p::{
    Multiaddr, PeerId, StreamProtocol, Swarm, identify, identity, mdns, noise, ping, tcp, yamux,
};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tapfinger::wire::{self, Envelope, MAX_FRAME};
use tokio::sync::mpsc;

/// Gossipsub topic of a cluster (one per wire version, so versions never mix).
pub fn topic(cluster: &str) -> IdentTopic {
    IdentTopic::new(format!("tapfinger/{cluster}/v{}", wire::WIRE_VERSION))
}

/// Network settings.
#[derive(Clone)]
pub struct NetConfig {
    /// Identity (peer id = hash of its public key).
    pub keypair: identity::Keypair,
    /// Cluster name (part of the topic).
    pub cluster: String,
    /// Addresses to listen on, e.g. `/ip4/0.0.0.0/tcp/7600`.
    pub listen: Vec<Multiaddr>,
    /// Peers to dial once listening, and again every 5 s while the peer that answered is not
    /// connected.
    pub bootstrap: Vec<Multiaddr>,
    /// Private-network key: peers without it cannot connect.
    pub psk: Option<PreSharedKey>,
    /// If set, only these peers may talk to us.
    pub allow: Option<BTreeSet<PeerId>>,
    /// Discover peers on the LAN with mDNS.
    pub mdns: bool,
    /// Ask connected peers whom they are connected to and dial those ([`crate::peers`]), so
    /// that every agent comes to be connected to every other. Off: only the bootstrap list and
    /// the LAN are dialled, and gossip relays to the rest.
    pub peer_exchange: bool,
    /// Capacity of the inbound and outbound channels.
    pub channel: usize,
}

/// What the agent asks of the swarm task.
enum Out {
    /// A signed frame already handed to the direct writers: gossip it too if `Relay` says so.
    Relay(std::sync::Arc<[u8]>),
    Request(PeerId, Box<learn::Request>),
    Respond(ResponseChannel<learn::Response>, Box<learn::Response>),
}

/// Errors of the network layer.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// Building the transport or behaviour failed.
    #[error("network setup: {0}")]
    Setup(String),
    /// Listening failed.
    #[error("cannot listen on {addr}: {reason}")]
    Listen {
        /// Address.
        addr: Multiaddr,
        /// Cause.
        reason: String,
    },
    /// The swarm task has stopped.
    #[error("the network task has stopped")]
    Closed,
    /// A message could not be encoded.
    #[error(transparent)]
    Wire(#[from] wire::WireError),
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A running network.
pub struct Network {
    /// Our peer id.
    pub peer_id: PeerId,
    /// To the swarm task (bounded).
    out: mpsc::Sender<Out>,
    /// From the swarm task and the direct readers (bounded).
    events: mpsc::Receiver<NetEvent>,
    /// The swarm task (aborted on drop).
    task: tokio::task::JoinHandle<()>,
    /// Signs what this node broadcasts ([`crate::signed`]).
    keypair: identity::Keypair,
    /// What the network carried ([`Network::traffic`]).
    counters: std::sync::Arc<crate::inbound::Counters>,
    /// The direct writers, reached from the sender's own task.
    writers: Writers,
}

impl Network {
    /// Build the swarm, start listening and dialing, and run it in a background task.
    pub async fn start(cfg: NetConfig) -> Result<Self, NetError> {
        let setup = |e: &dyn std::fmt::Display| NetError::Setup(e.to_string());
        let keypair = cfg.keypair.clone();
        let gossip_cfg = gossipsub::ConfigBuilder::default()
            .max_transmit_size(MAX_FRAME + 4096)
            // Authorship is proved by our own signed frame, checked once per message
            // (crate::signed): gossip itself is anonymous, and a message's id is its signature.
            .validation_mode(gossipsub::ValidationMode::Anonymous)
            .message_id_fn(|m: &gossipsub::Message| {
                gossipsub::MessageId::from(
                    crate::signed::signature(&m.data)
                        .map_or_else(|| m.data.clone(), <[u8]>::to_vec),
                )
            })
            .validate_messages()
            // Gossip only relays what direct frames cannot reach (crate::direct): an author sends
            // its gossip copy to its mesh peers, not to every peer it is connected to.
            .flood_publish(false)
            .heartbeat_interval(Duration::from_millis(500))
            .build()
            .map_err(|e| setup(&e))?;
        let mdns_on = cfg.mdns;
        let peers_protocol = peers::protocol(&cfg.cluster).map_err(|e| setup(&e))?;
        let behaviour = move |key: &identity::Keypair| -> Result<Behaviour, BoxError> {
            let gossipsub = gossipsub::Behaviour::new(MessageAuthenticity::Anonymous, gossip_cfg)
                .map_err(BoxError::from)?;
            let identify = identify::Behaviour::new(identify::Config::new(
                "/tapfinger/1".into(),
                key.public(),
            ));
            let ping = ping::Behaviour::new(ping::Config::new());
            let mdns = if mdns_on {
                Some(
                    mdns::tokio::Behaviour::new(mdns::Config::default(), key.public().to_peer_id())
                        .map_err(BoxError::from)?,
                )
            } else {
                None
            };
            let codec = request_response::cbor::codec::Codec::default()
                .set_request_size_maximum(learn::MAX_REQUEST)
                .set_response_size_maximum(learn::MAX_RESPONSE);
            let rr = request_response::Behaviour::with_codec(
                codec,
                [(StreamProtocol::new(learn::PROTOCOL), ProtocolSupport::Full)],
                request_response::Config::default().with_request_timeout(Duration::from_secs(30)),
            );
            let peers = request_response::Behaviour::with_codec(
                request_response::cbor::codec::Codec::default()
                    .set_request_size_maximum(peers::MAX_ASK)
                    .set_response_size_maximum(peers::MAX_ANSWER),
                [(peers_protocol.clone(), ProtocolSupport::Full)],
                request_response::Config::default().with_request_timeout(Duration::from_secs(10)),
            );
            Ok(Behaviour {
                gossipsub,
                identify,
                ping,
                mdns: Toggle::from(mdns),
                rr,
                direct: libp2p_stream::Behaviour::new(),
                peers,
            })
        };
        let swarm_cfg =
            |c: libp2p::swarm::Config| c.with_idle_connection_timeout(Duration::from_secs(60));
        let mut swarm: Swarm<Behaviour> = match cfg.psk {
            Some(psk) => {
                let pnet = PnetConfig::new(psk);
                libp2p::SwarmBuilder::with_existing_identity(cfg.keypair.clone())
                    .with_tokio()
                    .with_other_transport(|key| -> Result<_, BoxError> {
                        let noise = noise::Config::new(key)?;
                        Ok(tcp::tokio::Transport::new(tcp::Config::default())
                            .and_then(move |socket, _| pnet.handshake(socket))
                            .upgrade(Version::V1Lazy)
                            .authenticate(noise)
                            .multiplex(yamux::Config::default()))
                    })
                    .map_err(|e| setup(&e))?
                    .with_behaviour(behaviour)
                    .map_err(|e| setup(&e))?
                    .with_swarm_config(swarm_cfg)
                    .build()
            }
            None => libp2p::SwarmBuilder::with_existing_identity(cfg.keypair.clone())
                .with_tokio()
                .with_tcp(
                    tcp::Config::default(),
                    noise::Config::new,
                    yamux::Config::default,
                )
                .map_err(|e| setup(&e))?
                .with_quic()
                .with_behaviour(behaviour)
                .map_err(|e| setup(&e))?
                .with_swarm_config(swarm_cfg)
                .build(),
        };
        let topic = topic(&cfg.cluster);
        swarm
            .behaviour_mut()
            .gossipsub
            .subscribe(&topic)
            .map_err(|e| setup(&e))?;
        for addr in &cfg.listen {
            swarm
                .listen_on(addr.clone())
                .map_err(|e| NetError::Listen {
                    addr: addr.clone(),
                    reason: e.to_string(),
                })?;
        }
        let peer_id = *swarm.local_peer_id();
        let (out_tx, out_rx) = mpsc::channel(cfg.channel.max(1));
        let (ev_tx, ev_rx) = mpsc::channel(cfg.channel.max(1));
        let protocol = direct::protocol(&cfg.cluster).map_err(|e| setup(&e))?;
        let mut control = swarm.behaviour().direct.new_control();
        let incoming = control.accept(protocol.clone()).map_err(|e| setup(&e))?;
        let inbound = Inbound::new(ev_tx, cfg.allow.clone());
        let counters = inbound.counters.clone();
        let writers = Writers::new(control, protocol, counters.clone());
        let task = tokio::spawn(run(
            swarm,
            topic,
            cfg,
            out_rx,
            inbound,
            incoming,
            writers.clone(),
        ));
        Ok(Self {
            peer_id,
            out: out_tx,
            events: ev_rx,
            task,
            keypair,
            counters,
            writers,
        })
    }

    /// What the network has carried so far.
    pub fn traffic(&self) -> Traffic {
        self.counters.snapshot()
    }

    /// Broadcast a message to every peer (waits while the outbound channel is full).
    pub async fn send(&self, e: &Envelope) -> Result<(), NetError> {
        // Signed here, in the sender's task, not in the swarm's.
        let bytes = crate::signed::sign(&self.keypair, &wire::encode(e)?);
        self.broadcast(bytes).await
    }

    /// Queue a frame for every connected peer's writer, from the caller's task (see
    /// [`direct::Writers`]), and let the swarm's task gossip it too if [`direct::Relay`] says so.
    async fn broadcast(&self, bytes: Vec<u8>) -> Result<(), NetError> {
        let frame: std::sync::Arc<[u8]> = bytes.into();
        self.writers.send_all(&frame);
        self.out
            .send(Out::Relay(frame))
            .await
            .map_err(|_| NetError::Closed)
    }

    /// Send a request to `peer` (its answer arrives as [`NetEvent::Response`] or
    /// [`NetEvent::RequestFailed`]).
    pub async fn request(&self, peer: PeerId, r: learn::Request) -> Result<(), NetError> {
        self.out
            .send(Out::Request(peer, Box::new(r)))
            .await
            .map_err(|_| NetError::Closed)
    }

    /// Answer a [`NetEvent::Request`].
    pub async fn respond(
        &self,
        channel: ResponseChannel<learn::Response>,
        r: learn::Response,
    ) -> Result<(), NetError> {
        self.out
            .send(Out::Respond(channel, Box::new(r)))
            .await
            .map_err(|_| NetError::Closed)
    }

    /// Broadcast raw bytes without encoding or validation: only for tests of how peers treat
    /// garbage (a real agent always goes through [`Network::send`]).
    #[doc(hidden)]
    pub async fn send_raw(&self, bytes: Vec<u8>) -> Result<(), NetError> {
        self.broadcast(bytes).await
    }

    /// The next event; `None` once the network has stopped.
    pub async fn next_event(&mut self) -> Option<NetEvent> {
        self.events.recv().await
    }

    /// Stop the swarm (connections close).
    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Aborts a task when dropped (the direct streams' acceptor ends with the swarm's task).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn run(
    mut swarm: Swarm<Behaviour>,
    topic: IdentTopic,
    cfg: NetConfig,
    mut out: mpsc::Receiver<Out>,
    inbound: Inbound,
    incoming: libp2p_stream::IncomingStreams,
    writers: Writers,
) {
    let _acceptor = AbortOnDrop(tokio::spawn(direct::accept(incoming, inbound.clone())));
    let events = inbound.events.clone();
    let me = *swarm.local_peer_id();
    let mut relay = Relay::new(if cfg.peer_exchange {
        direct::BEACON_WITH_EXCHANGE
    } else {
        direct::BEACON
    });
    let mut book = peers::Book::default();
    // Round-robin over connected peers for the periodic peer-exchange question.
    let mut ask_next = 0usize;
    let allowed = |p: &PeerId| cfg.allow.as_ref().is_none_or(|a| a.contains(p));
    let mut redial = tokio::time::interval(Duration::from_secs(5));
    redial.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Peers mDNS found and has not yet expired. mDNS reports a peer once, so a dial that fails
    // must be retried from here.
    let mut lan: BTreeMap<PeerId, Vec<Multiaddr>> = BTreeMap::new();
    let mut bootstrap = Bootstrap::new(cfg.bootstrap.clone());
    // Bootstrap peers are dialled once we listen, so that `Listening` is always reported before
    // any peer we dialled is (a consumer waiting for the listen address cannot skip a `PeerUp`),
    // and identify can tell them where to reach us. At the latest from the second tick on (5 s),
    // should no listen address ever be reported.
    let mut dial = cfg.listen.is_empty();
    let mut ticks = 0u32;
    loop {
        tokio::select! {
            msg = out.recv() => match msg {
                None => return,
                Some(Out::Relay(frame)) => {
                    // "No peers subscribed" is normal while alone (or before gossip's mesh has
                    // formed); anything else is worth a log line.
                    if relay.due(|p| *p == me || swarm.is_connected(p)) {
                        inbound.counters.gossip_sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if let Err(e) = swarm.behaviour_mut().gossipsub.publish(topic.clone(), frame.to_vec())
                            && !matches!(e, gossipsub::PublishError::NoPeersSubscribedToTopic | gossipsub::PublishError::Duplicate)
                        {
                            tracing::warn!(error = %e, "publish failed");
                        }
                    }
                }
                Some(Out::Request(peer, r)) => {
                    swarm.behaviour_mut().rr.send_request(&peer, *r);
                }
                Some(Out::Respond(channel, r)) => {
                    if swarm.behaviour_mut().rr.send_response(channel, *r).is_err() {
                        tracing::debug!("a response could not be sent (the asker is gone)");
                    }
                }
            },
            _ = redial.tick() => {
                ticks += 1;
                dial |= ticks > 1;
                if dial {
                    bootstrap.dial_missing(&mut swarm);
                }
                for (peer, addrs) in &lan {
                    if !swarm.is_connected(peer) {
                        dial_lan_peer(&mut swarm, *peer, addrs.clone());
                    }
                }
                // Ask one connected peer in turn whom it knows: heals a mesh whose first
                // answers came before identify had told the answering peer every address.
                let connected: Vec<PeerId> = swarm.connected_peers().copied().filter(allowed).collect();
                if cfg.peer_exchange && !connected.is_empty() {
                    ask_next = (ask_next + 1) % connected.len();
                    swarm.behaviour_mut().peers.send_request(&connected[ask_next], peers::Ask::Whom);
                }
            }
            ev = swarm.select_next_some() => {
                let report = match ev {
                    SwarmEvent::NewListenAddr { address, .. } => {
                        if !dial {
                            dial = true;
                            bootstrap.dial_missing(&mut swarm);
                        }
                        Some(NetEvent::Listening(address))
                    }
                    SwarmEvent::ConnectionEstablished { peer_id, connection_id, num_established, .. } => {
                        bootstrap.established(connection_id, peer_id);
                        if !allowed(&peer_id) {
                            tracing::warn!(%peer_id, "peer not on the allowlist: disconnecting");
                            let _ = swarm.disconnect_peer_id(peer_id);
                            Some(NetEvent::Refused { from: peer_id, what: "connect".into() })
                        } else if num_established.get() == 1 {
                            writers.connect(peer_id);
                            if cfg.peer_exchange {
                                swarm.behaviour_mut().peers.send_request(&peer_id, peers::Ask::Whom);
                            }
                            Some(NetEvent::PeerUp(peer_id))
                        } else {
                            None
                        }
                    }
                    SwarmEvent::ConnectionClosed { peer_id, num_established: 0, .. } if allowed(&peer_id) => {
                        writers.disconnect(&peer_id);
                        Some(NetEvent::PeerDown(peer_id))
                    }
                    SwarmEvent::Behaviour(BehaviourEvent::Mdns(mdns::Event::Discovered(list))) => {
                        for (peer, addr) in list {
                            if allowed(&peer) {
                                let known = lan.entry(peer).or_default();
                                if !known.contains(&addr) {
                                    known.push(addr);
                                }
                            }
                        }
                        for (peer, addrs) in &lan {
                            if !swarm.is_connected(peer) {
                                dial_lan_peer(&mut swarm, *peer, addrs.clone());
                            }
                        }
                        None
                    }
                    SwarmEvent::Behaviour(BehaviourEvent::Mdns(mdns::Event::Expired(list))) => {
                        for (peer, addr) in list {
                            if let Some(addrs) = lan.get_mut(&peer) {
                                addrs.retain(|a| *a != addr);
                                if addrs.is_empty() {
                                    lan.remove(&peer);
                                }
                            }
                        }
                        None
                    }
                    SwarmEvent::Behaviour(BehaviourEvent::Identify(identify::Event::Received { peer_id, info, .. })) => {
                        tracing::debug!(%peer_id, agent = %info.agent_version, "identified peer");
                        let news = book.learned(peer_id, info.listen_addrs);
                        if let Some(news) = news.filter(|_| cfg.peer_exchange && allowed(&peer_id)) {
                            let others: Vec<PeerId> = swarm.connected_peers().copied().filter(|p| *p != peer_id && allowed(p)).collect();
                            for p in others {
                                swarm.behaviour_mut().peers.send_request(&p, peers::Ask::News(news.clone()));
                            }
                        }
                        None
                    }
                    SwarmEvent::Behaviour(BehaviourEvent::Peers(request_response::Event::Message { peer, message, .. })) => {
                        match message {
                            request_response::Message::Request { channel, request: peers::Ask::Whom, .. } if allowed(&peer) => {
                                let connected: Vec<PeerId> = swarm.connected_peers().copied().filter(allowed).collect();
                                let answer = book.answer(&peer, &connected);
                                let _ = swarm.behaviour_mut().peers.send_response(channel, answer);
                            }
                            request_response::Message::Request { channel, request: peers::Ask::News(news), .. } if allowed(&peer) => {
                                let _ = swarm.behaviour_mut().peers.send_response(channel, peers::Known::default());
                                if cfg.peer_exchange {
                                    for (p, addrs) in peers::to_dial(news, &me, allowed, |p| swarm.is_connected(p)) {
                                        tracing::debug!(peer = %p, via = %peer, "dialling a peer another one has just met");
                                        dial_lan_peer(&mut swarm, p, addrs);
                                    }
                                }
                            }
                            request_response::Message::Response { response, .. } if allowed(&peer) && cfg.peer_exchange => {
                                for (p, addrs) in peers::to_dial(response, &me, allowed, |p| swarm.is_connected(p)) {
                                    tracing::debug!(peer = %p, via = %peer, "dialling a peer another one knows");
                                    dial_lan_peer(&mut swarm, p, addrs);
                                }
                            }
                            _ => {}
                        }
                        None
                    }
                    SwarmEvent::Behaviour(BehaviourEvent::Peers(e)) => {
                        tracing::debug!(event = ?e, "peer exchange");
                        None
                    }
                    SwarmEvent::Behaviour(BehaviourEvent::Gossipsub(gossipsub::Event::Message {
                        propagation_source,
                        message_id,
                        message,
                    })) => {
                        let g = inbound.gossip(&propagation_source, &message.data);
                        if let Some(author) = g.author {
                            relay.heard.insert(author, tokio::time::Instant::now());
                        }
                        let (acceptance, report) = (g.acceptance, g.event);
                        swarm.behaviour_mut().gossipsub.report_message_validation_result(
                            &message_id,
                            &propagation_source,
                            acceptance,
                        );
                        report
                    }
                    SwarmEvent::Behaviour(BehaviourEvent::Rr(request_response::Event::Message { peer, message, .. })) => {
                        if !allowed(&peer) {
                            let what = match &message {
                                request_response::Message::Request { request, .. } => request.kind(),
                                request_response::Message::Response { .. } => "response",
                            };
                            tracing::warn!(%peer, what, "request from a peer not on the allowlist: refused");
                            let _ = swarm.disconnect_peer_id(peer);
                            Some(NetEvent::Refused { from: peer, what: what.into() })
                        } else {
                            match message {
                                request_response::Message::Request { request, channel, .. } => {
                                    Some(NetEvent::Request { from: peer, request: Box::new(request), channel })
                                }
                                request_response::Message::Response { response, .. } => {
                                    Some(NetEvent::Response { from: peer, response: Box::new(response) })
                                }
                            }
                        }
                    }
                    SwarmEvent::Behaviour(BehaviourEvent::Rr(request_response::Event::OutboundFailure { peer, error, .. })) => {
                        Some(NetEvent::RequestFailed { to: peer, reason: error.to_string() })
                    }
                    SwarmEvent::Behaviour(BehaviourEvent::Rr(request_response::Event::InboundFailure { peer, error, .. })) => {
                        tracing::debug!(%peer, error = %error, "inbound request failed");
                        None
                    }
                    SwarmEvent::IncomingConnectionError { error, .. } => {
                        tracing::debug!(error = %error, "incoming connection failed");
                        None
                    }
                    SwarmEvent::OutgoingConnectionError { peer_id, connection_id, error } => {
                        bootstrap.failed(connection_id, &error);
                        tracing::debug!(?peer_id, error = %error, "outgoing connection failed");
                        None
                    }
                    _ => None,
                };
                if let Some(r) = report
                    && events.send(r).await.is_err()
                {
                    return;
                }
            }
        }
    }
}

/// Read a pre-shared key file in the go-libp2p / IPFS `swarm.key` format
/// (`/key/swarm/psk/1.0.0/`, `/base16/`, 64 hex digits).
pub fn parse_psk(text: &str) -> Result<PreSharedKey, PskError> {
    text.parse::<PreSharedKey>()
        .map_err(|e| PskError(e.to_string()))
}

/// A cluster key file that is not a swarm key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "not a swarm key ({0}); expected the lines /key/swarm/psk/1.0.0/, /base16/ and 64 hex digits"
)]
pub struct PskError(String);
