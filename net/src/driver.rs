//! The swarm's task: one loop that takes the agent's requests ([`Out`]), redials and asks for
//! peers on a timer, and turns swarm events into [`NetEvent`]s for the agent. Its state (the
//! relay's gossip rule, the address book, the LAN peers, the bootstrap dials) lives in
//! [`Driver`], one method per kind of event, so the loop itself only routes.

use crate::behaviour::{Behaviour, BehaviourEvent};
use crate::dial::{Bootstrap, dial_lan_peer};
use crate::direct::{self, Relay, Writers};
use crate::event::NetEvent;
use crate::inbound::Inbound;
use crate::learn;
use crate::peers;
use futures::StreamExt;
use libp2p::gossipsub::{self, IdentTopic};
use libp2p::request_response::{self, ResponseChannel};
use libp2p::swarm::SwarmEvent;
use libp2p::{Multiaddr, PeerId, Swarm, identify, mdns, ping};
use std::collections::{BTreeMap, BTreeSet};
use tokio::sync::mpsc;

/// What the agent asks of the swarm task.
pub(crate) enum Out {
    /// A signed frame already handed to the direct writers: gossip it too if `Relay` says so.
    Relay(std::sync::Arc<[u8]>),
    /// A request of the learning protocol to a peer.
    Request(PeerId, Box<learn::Request>),
    /// The answer to a peer's request.
    Respond(ResponseChannel<learn::Response>, Box<learn::Response>),
}

/// What the loop needs of the network's settings ([`crate::swarm::NetConfig`]).
pub(crate) struct Settings {
    /// If set, only these peers may talk to us.
    pub(crate) allow: Option<BTreeSet<PeerId>>,
    /// Ask connected peers whom they know, and dial those.
    pub(crate) peer_exchange: bool,
    /// Peers to dial once listening, and again while not connected.
    pub(crate) bootstrap: Vec<Multiaddr>,
    /// Whether no listen address was asked for (then bootstrap peers are dialled at once).
    pub(crate) no_listen: bool,
}

/// Aborts a task when dropped (the direct streams' acceptor ends with the swarm's task).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The swarm task's state.
struct Driver {
    swarm: Swarm<Behaviour>,
    topic: IdentTopic,
    cfg: Settings,
    inbound: Inbound,
    writers: Writers,
    me: PeerId,
    /// When a broadcast must also go by gossip.
    relay: Relay,
    /// Whom each peer has told identify it listens on, for peer exchange.
    book: peers::Book,
    /// Round-robin over connected peers for the periodic peer-exchange question.
    ask_next: usize,
    /// Peers mDNS found and has not yet expired. mDNS reports a peer once, so a dial that
    /// fails must be retried from here.
    lan: BTreeMap<PeerId, Vec<Multiaddr>>,
    bootstrap: Bootstrap,
    /// Whether bootstrap peers may be dialled yet (see [`run`]).
    dial: bool,
    /// Redial ticks so far.
    ticks: u32,
}

/// The swarm's task, until the agent's side of `out` closes or its events are no longer read.
pub(crate) async fn run(
    swarm: Swarm<Behaviour>,
    topic: IdentTopic,
    cfg: Settings,
    mut out: mpsc::Receiver<Out>,
    inbound: Inbound,
    incoming: libp2p_stream::IncomingStreams,
    writers: Writers,
) {
    let _acceptor = AbortOnDrop(tokio::spawn(direct::accept(incoming, inbound.clone())));
    let events = inbound.events.clone();
    let me = *swarm.local_peer_id();
    let relay = Relay::new(if cfg.peer_exchange {
        direct::BEACON_WITH_EXCHANGE
    } else {
        direct::BEACON
    });
    let mut redial = tokio::time::interval(crate::dial::REDIAL);
    redial.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Bootstrap peers are dialled once we listen, so that `Listening` is always reported before
    // any peer we dialled is (a consumer waiting for the listen address cannot skip a `PeerUp`),
    // and identify can tell them where to reach us. At the latest from the sixth tick on (5 s),
    // should no listen address ever be reported.
    let mut d = Driver {
        bootstrap: Bootstrap::new(cfg.bootstrap.clone()),
        dial: cfg.no_listen,
        swarm,
        topic,
        cfg,
        inbound,
        writers,
        me,
        relay,
        book: peers::Book::default(),
        ask_next: 0,
        lan: BTreeMap::new(),
        ticks: 0,
    };
    loop {
        tokio::select! {
            msg = out.recv() => match msg {
                None => return,
                Some(msg) => d.on_out(msg),
            },
            _ = redial.tick() => d.on_tick(),
            ev = d.swarm.select_next_some() => {
                if let Some(r) = d.on_event(ev)
                    && events.send(r).await.is_err()
                {
                    return;
                }
            }
        }
    }
}

impl Driver {
    /// Whether `p` may talk to us (no allowlist: everyone).
    fn allowed(&self, p: &PeerId) -> bool {
        self.cfg.allow.as_ref().is_none_or(|a| a.contains(p))
    }

    /// The connected peers that may talk to us.
    fn connected(&self) -> Vec<PeerId> {
        self.swarm
            .connected_peers()
            .copied()
            .filter(|p| self.allowed(p))
            .collect()
    }

    /// Dial every LAN peer we are not connected to.
    fn dial_lan(&mut self) {
        for (peer, addrs) in &self.lan {
            if !self.swarm.is_connected(peer) {
                dial_lan_peer(&mut self.swarm, *peer, addrs.clone());
            }
        }
    }

    /// Dial the peers `news` names that we may talk to and are not connected to.
    fn dial_news(&mut self, news: peers::Known, via: PeerId, why: &str) {
        let allow = self.cfg.allow.clone();
        let swarm = &self.swarm;
        let to: Vec<_> = peers::to_dial(
            news,
            &self.me,
            |p| allow.as_ref().is_none_or(|a| a.contains(p)),
            |p| swarm.is_connected(p),
        );
        for (p, addrs) in to {
            tracing::debug!(peer = %p, via = %via, "dialling a peer {why}");
            dial_lan_peer(&mut self.swarm, p, addrs);
        }
    }

    /// A request of the agent's.
    fn on_out(&mut self, msg: Out) {
        match msg {
            Out::Relay(frame) => {
                // "No peers subscribed" is normal while alone (or before gossip's mesh has
                // formed); anything else is worth a log line.
                let (me, swarm) = (self.me, &self.swarm);
                if self.relay.due(|p| *p == me || swarm.is_connected(p)) {
                    self.inbound
                        .counters
                        .gossip_sent
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if let Err(e) = self
                        .swarm
                        .behaviour_mut()
                        .gossipsub
                        .publish(self.topic.clone(), frame.to_vec())
                        && !matches!(
                            e,
                            gossipsub::PublishError::NoPeersSubscribedToTopic
                                | gossipsub::PublishError::Duplicate
                        )
                    {
                        tracing::warn!(error = %e, "publish failed");
                    }
                }
            }
            Out::Request(peer, r) => {
                self.swarm.behaviour_mut().rr.send_request(&peer, *r);
            }
            Out::Respond(channel, r) => {
                if self
                    .swarm
                    .behaviour_mut()
                    .rr
                    .send_response(channel, *r)
                    .is_err()
                {
                    tracing::debug!("a response could not be sent (the asker is gone)");
                }
            }
        }
    }

    /// Every second ([`crate::dial::REDIAL`]): redial the bootstrap and LAN peers that are not
    /// connected; every fifth, ask one connected peer in turn whom it knows (heals a mesh whose
    /// first answers came before identify had told the answering peer every address).
    fn on_tick(&mut self) {
        self.ticks += 1;
        self.dial |= self.ticks > 5;
        if self.dial {
            self.bootstrap.dial_missing(&mut self.swarm);
        }
        self.dial_lan();
        let connected = self.connected();
        if self.cfg.peer_exchange && !connected.is_empty() && self.ticks.is_multiple_of(5) {
            self.ask_next = (self.ask_next + 1) % connected.len();
            self.swarm
                .behaviour_mut()
                .peers
                .send_request(&connected[self.ask_next], peers::Ask::Whom);
        }
    }

    /// A swarm event, and what the agent is told of it.
    fn on_event(&mut self, ev: SwarmEvent<BehaviourEvent>) -> Option<NetEvent> {
        match ev {
            SwarmEvent::NewListenAddr { address, .. } => {
                if !self.dial {
                    self.dial = true;
                    self.bootstrap.dial_missing(&mut self.swarm);
                }
                Some(NetEvent::Listening(address))
            }
            SwarmEvent::ConnectionEstablished {
                peer_id,
                connection_id,
                num_established,
                ..
            } => {
                self.bootstrap.established(connection_id, peer_id);
                if !self.allowed(&peer_id) {
                    tracing::warn!(%peer_id, "peer not on the allowlist: disconnecting");
                    let _ = self.swarm.disconnect_peer_id(peer_id);
                    Some(NetEvent::Refused {
                        from: peer_id,
                        what: "connect".into(),
                    })
                } else if num_established.get() == 1 {
                    self.writers.connect(peer_id);
                    if self.cfg.peer_exchange {
                        self.swarm
                            .behaviour_mut()
                            .peers
                            .send_request(&peer_id, peers::Ask::Whom);
                    }
                    Some(NetEvent::PeerUp(peer_id))
                } else {
                    None
                }
            }
            SwarmEvent::ConnectionClosed {
                peer_id,
                num_established: 0,
                ..
            } if self.allowed(&peer_id) => {
                self.writers.disconnect(&peer_id);
                Some(NetEvent::PeerDown(peer_id))
            }
            SwarmEvent::Behaviour(BehaviourEvent::Ping(ping::Event {
                peer,
                connection,
                result: Err(error),
            })) => {
                // No answer within the ping timeout: the link is cut (or the peer hangs). The
                // connection is closed, so that the peer is dialled afresh once it answers again
                // rather than heard through the old connection's retransmission backoff.
                tracing::info!(%peer, %error, "a connection does not answer its pings: closed");
                self.swarm.close_connection(connection);
                None
            }
            SwarmEvent::Behaviour(BehaviourEvent::Mdns(e)) => {
                self.on_mdns(e);
                None
            }
            SwarmEvent::Behaviour(BehaviourEvent::Identify(identify::Event::Received {
                peer_id,
                info,
                ..
            })) => {
                tracing::debug!(%peer_id, agent = %info.agent_version, "identified peer");
                let news = self.book.learned(peer_id, info.listen_addrs);
                if let Some(news) =
                    news.filter(|_| self.cfg.peer_exchange && self.allowed(&peer_id))
                {
                    for p in self.connected().into_iter().filter(|p| *p != peer_id) {
                        self.swarm
                            .behaviour_mut()
                            .peers
                            .send_request(&p, peers::Ask::News(news.clone()));
                    }
                }
                None
            }
            SwarmEvent::Behaviour(BehaviourEvent::Peers(e)) => {
                self.on_peers(e);
                None
            }
            SwarmEvent::Behaviour(BehaviourEvent::Gossipsub(gossipsub::Event::Message {
                propagation_source,
                message_id,
                message,
            })) => {
                let g = self.inbound.gossip(&propagation_source, &message.data);
                if let Some(author) = g.author {
                    self.relay.heard.insert(author, tokio::time::Instant::now());
                }
                self.swarm
                    .behaviour_mut()
                    .gossipsub
                    .report_message_validation_result(
                        &message_id,
                        &propagation_source,
                        g.acceptance,
                    );
                g.event
            }
            SwarmEvent::Behaviour(BehaviourEvent::Rr(e)) => self.on_request(e),
            SwarmEvent::IncomingConnectionError { error, .. } => {
                tracing::debug!(error = %error, "incoming connection failed");
                None
            }
            SwarmEvent::OutgoingConnectionError {
                peer_id,
                connection_id,
                error,
            } => {
                self.bootstrap.failed(connection_id, &error);
                tracing::debug!(?peer_id, error = %error, "outgoing connection failed");
                None
            }
            _ => None,
        }
    }

    /// mDNS found or lost LAN peers: remember them (those we may talk to) and dial.
    fn on_mdns(&mut self, e: mdns::Event) {
        match e {
            mdns::Event::Discovered(list) => {
                for (peer, addr) in list {
                    if self.allowed(&peer) {
                        let known = self.lan.entry(peer).or_default();
                        if !known.contains(&addr) {
                            known.push(addr);
                        }
                    }
                }
                self.dial_lan();
            }
            mdns::Event::Expired(list) => {
                for (peer, addr) in list {
                    if let Some(addrs) = self.lan.get_mut(&peer) {
                        addrs.retain(|a| *a != addr);
                        if addrs.is_empty() {
                            self.lan.remove(&peer);
                        }
                    }
                }
            }
        }
    }

    /// Peer exchange: answer whom we know, take news of peers, dial those an answer names.
    fn on_peers(&mut self, e: request_response::Event<peers::Ask, peers::Known>) {
        let request_response::Event::Message { peer, message, .. } = e else {
            tracing::debug!(event = ?e, "peer exchange");
            return;
        };
        if !self.allowed(&peer) {
            return;
        }
        match message {
            request_response::Message::Request {
                channel,
                request: peers::Ask::Whom,
                ..
            } => {
                let answer = self.book.answer(&peer, &self.connected());
                let _ = self
                    .swarm
                    .behaviour_mut()
                    .peers
                    .send_response(channel, answer);
            }
            request_response::Message::Request {
                channel,
                request: peers::Ask::News(news),
                ..
            } => {
                let _ = self
                    .swarm
                    .behaviour_mut()
                    .peers
                    .send_response(channel, peers::Known::default());
                if self.cfg.peer_exchange {
                    self.dial_news(news, peer, "another one has just met");
                }
            }
            request_response::Message::Response { response, .. } if self.cfg.peer_exchange => {
                self.dial_news(response, peer, "another one knows");
            }
            request_response::Message::Response { .. } => {}
        }
    }

    /// The learning protocol (experience and checkpoints): refused from a peer not on the
    /// allowlist, handed to the agent otherwise.
    fn on_request(
        &mut self,
        e: request_response::Event<crate::learn::Request, crate::learn::Response>,
    ) -> Option<NetEvent> {
        match e {
            request_response::Event::Message { peer, message, .. } => {
                if !self.allowed(&peer) {
                    let what = match &message {
                        request_response::Message::Request { request, .. } => request.kind(),
                        request_response::Message::Response { .. } => "response",
                    };
                    tracing::warn!(%peer, what, "request from a peer not on the allowlist: refused");
                    let _ = self.swarm.disconnect_peer_id(peer);
                    return Some(NetEvent::Refused {
                        from: peer,
                        what: what.into(),
                    });
                }
                match message {
                    request_response::Message::Request {
                        request, channel, ..
                    } => Some(NetEvent::Request {
                        from: peer,
                        request: Box::new(request),
                        channel,
                    }),
                    request_response::Message::Response { response, .. } => {
                        Some(NetEvent::Response {
                            from: peer,
                            response: Box::new(response),
                        })
                    }
                }
            }
            request_response::Event::OutboundFailure { peer, error, .. } => {
                Some(NetEvent::RequestFailed {
                    to: peer,
                    reason: error.to_string(),
                })
            }
            request_response::Event::InboundFailure { peer, error, .. } => {
                tracing::debug!(%peer, error = %error, "inbound request failed");
                None
            }
            request_response::Event::ResponseSent { .. } => None,
        }
    }
}
