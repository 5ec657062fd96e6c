//! The agents' network layer on loopback: agents that share the cluster key find each other through
//! a bootstrap address and exchange messages; a malformed message is dropped and reported; a peer
//! without the key never connects. Ephemeral ports on 127.0.0.1 only.
#![allow(clippy::unwrap_used)]

use libp2p::pnet::PreSharedKey;
use libp2p::{Multiaddr, PeerId, identity};
use std::collections::BTreeSet;
use std::time::Duration;
use tapfinger::wire::{Body, Envelope, NodeState, WIRE_VERSION};
use tapfinger::{NodeId, Resources};
use tapfinger_agent::net::{NetConfig, NetEvent, Network};
use tokio::time::Instant;

async fn start(psk: Option<PreSharedKey>, bootstrap: Vec<Multiaddr>) -> (Network, Multiaddr) {
    start_with(identity::Keypair::generate_ed25519(), psk, None, bootstrap).await
}

async fn start_with(
    keypair: identity::Keypair,
    psk: Option<PreSharedKey>,
    allow: Option<BTreeSet<PeerId>>,
    bootstrap: Vec<Multiaddr>,
) -> (Network, Multiaddr) {
    tapfinger_tests::start_listening(NetConfig {
        keypair,
        cluster: "test".into(),
        listen: Vec::new(),
        bootstrap,
        psk,
        allow,
        mdns: false,
        channel: 64,
    })
    .await
}

fn heartbeat(id: u32) -> Envelope {
    Envelope {
        version: WIRE_VERSION,
        from: NodeId(id),
        seq: 0,
        body: Body::Heartbeat(NodeState {
            name: format!("box-{id}"),
            labels: Default::default(),
            capacity: Resources(vec![4, 0]),
            free: Resources(vec![4, 0]),
            running: Vec::new(),
            incarnation: 1,
        }),
    }
}

/// Send a heartbeat every 100 ms for `run`, and collect who we heard from, who connected, and
/// what was dropped.
async fn talk(
    net: &mut Network,
    id: u32,
    run: Duration,
) -> (BTreeSet<u32>, BTreeSet<PeerId>, Vec<PeerId>) {
    let (mut heard, mut up, mut dropped) = (BTreeSet::new(), BTreeSet::new(), Vec::new());
    let end = Instant::now() + run;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    while Instant::now() < end {
        tokio::select! {
            _ = tick.tick() => net.send(&heartbeat(id)).await.unwrap(),
            ev = net.next_event() => match ev {
                Some(NetEvent::Message { envelope, .. }) => { heard.insert(envelope.from.0); }
                Some(NetEvent::PeerUp(p)) => { up.insert(p); }
                Some(NetEvent::Dropped { from, .. }) => dropped.push(from),
                Some(_) => {}
                None => break,
            },
            _ = tokio::time::sleep_until(end) => break,
        }
    }
    (heard, up, dropped)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_with_the_key_talk_and_strangers_stay_out() {
    let psk = PreSharedKey::new([7; 32]);
    let (mut a, addr_a) = start(Some(psk), vec![]).await;
    let (mut b, _) = start(Some(psk), vec![addr_a.clone()]).await;
    let (mut c, _) = start(Some(psk), vec![addr_a.clone()]).await;
    // A stranger with another key dials the same bootstrap address.
    let (mut d, _) = start(Some(PreSharedKey::new([8; 32])), vec![addr_a.clone()]).await;
    let d_id = d.peer_id;
    let run = Duration::from_secs(6);
    let garbage = async {
        // c also sends garbage once the mesh has had time to form.
        tokio::time::sleep(Duration::from_secs(2)).await;
        c.send_raw(vec![0xFF; 64]).await.unwrap();
        talk(&mut c, 2, run - Duration::from_secs(2)).await
    };
    let ((ha, ua, da), (hb, ub, _), (hc, _, _), (hd, ud, _)) = tokio::join!(
        talk(&mut a, 0, run),
        talk(&mut b, 1, run),
        garbage,
        talk(&mut d, 3, run)
    );
    assert_eq!(ha, BTreeSet::from([1, 2]), "a heard {ha:?}");
    assert_eq!(
        hb,
        BTreeSet::from([0, 2]),
        "b heard {hb:?} (c's messages go through a)"
    );
    assert_eq!(hc, BTreeSet::from([0, 1]), "c heard {hc:?}");
    assert!(
        !ua.contains(&d_id) && !ub.contains(&d_id),
        "the stranger connected"
    );
    assert!(
        hd.is_empty() && ud.is_empty(),
        "the stranger heard {hd:?}, connected to {ud:?}"
    );
    assert!(
        da.contains(&c.peer_id),
        "a did not report c's garbage: {da:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_off_the_allowlist_is_not_heard() {
    // a allows only b; c has the key but is not on the list.
    let psk = PreSharedKey::new([9; 32]);
    let kb = identity::Keypair::generate_ed25519();
    let b_id = kb.public().to_peer_id();
    let (mut a, addr_a) = start_with(
        identity::Keypair::generate_ed25519(),
        Some(psk),
        Some(BTreeSet::from([b_id])),
        vec![],
    )
    .await;
    let (mut b, _) = start_with(kb, Some(psk), None, vec![addr_a.clone()]).await;
    let (mut c, _) = start_with(
        identity::Keypair::generate_ed25519(),
        Some(psk),
        None,
        vec![addr_a],
    )
    .await;
    let c_id = c.peer_id;
    let run = Duration::from_secs(4);
    let ((ha, ua, _), _, _) = tokio::join!(
        talk(&mut a, 0, run),
        talk(&mut b, 1, run),
        talk(&mut c, 2, run)
    );
    assert!(ha.contains(&1), "a did not hear b: {ha:?}");
    assert!(!ha.contains(&2), "a heard c, which is not on its allowlist");
    assert!(ua.contains(&b_id) && !ua.contains(&c_id), "{ua:?}");
}
