//! Shared by the loopback network tests: start a network on an ephemeral 127.0.0.1 port and
//! return it with its full dialable address (`.../p2p/<peer id>`).

use libp2p::Multiaddr;
use std::time::Duration;
use tapfinger_agent::net::{NetConfig, NetEvent, Network};
use tokio::time::timeout;

/// `cfg` with `listen` set to an ephemeral loopback port; panics if it does not come up in 10 s.
pub async fn start_listening(mut cfg: NetConfig) -> (Network, Multiaddr) {
    cfg.listen = vec!["/ip4/127.0.0.1/tcp/0".parse().expect("a valid multiaddr")];
    let mut net = Network::start(cfg).await.expect("network starts");
    let addr = loop {
        match timeout(Duration::from_secs(10), net.next_event()).await {
            Ok(Some(NetEvent::Listening(a))) => break a,
            Ok(Some(_)) => continue,
            other => panic!("no listen address: {other:?}"),
        }
    };
    let full = format!("{addr}/p2p/{}", net.peer_id)
        .parse()
        .expect("a dialable address");
    (net, full)
}
