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

use crate::behaviour::Behaviour;
use crate::direct::{self, Writers};
use crate::driver::Out;
pub use crate::event::NetEvent;
use crate::inbound::Inbound;
pub use crate::inbound::Traffic;
use crate::learn;
use crate::peers;
use libp2p::core::transport::Transport as _;
use libp2p::core::upgrade::Version;
use libp2p::gossipsub::{self, IdentTopic, MessageAuthenticity};
use libp2p::pnet::{PnetConfig, PreSharedKey};
use libp2p::request_response::{self, ProtocolSupport, ResponseChannel};
use libp2p::swarm::behaviour::toggle::Toggle;
use libp2p::{
    Multiaddr, PeerId, StreamProtocol, Swarm, identify, identity, mdns, noise, ping, tcp, yamux,
};
use std::collections::BTreeSet;
use std::time::Duration;
use tapfinger_core::wire::{self, Envelope, MAX_FRAME};
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
    /// Peers to dial once listening, and again every second while the peer that answered is
    /// not connected (see `dial.rs`).
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

/// Gossip's settings: anonymous, each message identified by its signature, relaying only.
fn gossip_config() -> Result<gossipsub::Config, gossipsub::ConfigBuilderError> {
    gossipsub::ConfigBuilder::default()
        .max_transmit_size(MAX_FRAME + 4096)
        // Authorship is proved by our own signed frame, checked once per message
        // (crate::signed): gossip itself is anonymous, and a message's id is its signature.
        .validation_mode(gossipsub::ValidationMode::Anonymous)
        .message_id_fn(|m: &gossipsub::Message| {
            gossipsub::MessageId::from(
                crate::signed::signature(&m.data).map_or_else(|| m.data.clone(), <[u8]>::to_vec),
            )
        })
        .validate_messages()
        // Gossip only relays what direct frames cannot reach (crate::direct): an author sends
        // its gossip copy to its mesh peers, not to every peer it is connected to.
        .flood_publish(false)
        .heartbeat_interval(Duration::from_millis(500))
        .build()
}

impl Network {
    /// Build the swarm, start listening and dialing, and run it in a background task.
    pub async fn start(cfg: NetConfig) -> Result<Self, NetError> {
        let setup = |e: &dyn std::fmt::Display| NetError::Setup(e.to_string());
        let keypair = cfg.keypair.clone();
        let gossip_cfg = gossip_config().map_err(|e| setup(&e))?;
        let mdns_on = cfg.mdns;
        let peers_protocol = peers::protocol(&cfg.cluster).map_err(|e| setup(&e))?;
        let behaviour = move |key: &identity::Keypair| -> Result<Behaviour, BoxError> {
            let gossipsub = gossipsub::Behaviour::new(MessageAuthenticity::Anonymous, gossip_cfg)
                .map_err(BoxError::from)?;
            let identify = identify::Behaviour::new(identify::Config::new(
                "/tapfinger/1".into(),
                key.public(),
            ));
            let ping = ping::Behaviour::new(
                ping::Config::new()
                    .with_interval(crate::dial::PING_INTERVAL)
                    .with_timeout(crate::dial::PING_TIMEOUT),
            );
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
                            .multiplex(yamux::Config::default())
                            .timeout(crate::dial::CONNECT_TIMEOUT))
                    })
                    .map_err(|e| setup(&e))?
                    .with_behaviour(behaviour)
                    .map_err(|e| setup(&e))?
                    .with_swarm_config(swarm_cfg)
                    .build()
            }
            // TCP as the key's path builds it (with the connect timeout the builder's `with_tcp`
            // has no setting for), and QUIC beside it.
            None => libp2p::SwarmBuilder::with_existing_identity(cfg.keypair.clone())
                .with_tokio()
                .with_quic()
                .with_other_transport(|key| -> Result<_, BoxError> {
                    let noise = noise::Config::new(key)?;
                    Ok(tcp::tokio::Transport::new(tcp::Config::default())
                        .upgrade(Version::V1Lazy)
                        .authenticate(noise)
                        .multiplex(yamux::Config::default())
                        .timeout(crate::dial::CONNECT_TIMEOUT))
                })
                .map_err(|e| setup(&e))?
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
        let settings = crate::driver::Settings {
            allow: cfg.allow.clone(),
            peer_exchange: cfg.peer_exchange,
            bootstrap: cfg.bootstrap.clone(),
            no_listen: cfg.listen.is_empty(),
        };
        let task = tokio::spawn(crate::driver::run(
            swarm,
            topic,
            settings,
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
