//! The agents' network layer on loopback: agents that share the cluster key find each other through
//! a bootstrap address and exchange messages; a malformed message is dropped and reported; a peer
//! without the key never connects. Ephemeral ports on 127.0.0.1 only, except for the mDNS test,
//! which runs in a network namespace it creates itself (loopback carries no multicast).
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
    start_with(
        identity::Keypair::generate_ed25519(),
        psk,
        None,
        bootstrap,
        true,
    )
    .await
}

async fn start_with(
    keypair: identity::Keypair,
    psk: Option<PreSharedKey>,
    allow: Option<BTreeSet<PeerId>>,
    bootstrap: Vec<Multiaddr>,
    peer_exchange: bool,
) -> (Network, Multiaddr) {
    tapfinger_tests::start_listening(NetConfig {
        keypair,
        cluster: "test".into(),
        listen: Vec::new(),
        bootstrap,
        psk,
        allow,
        mdns: false,
        peer_exchange,
        channel: 64,
    })
    .await
}

/// Heartbeat number `seq` of node `id`. Each must differ from the last, as an agent's do: the
/// gossip's message id is the frame's signature, so a repeated frame is a duplicate and is not
/// delivered again (a receiver that missed the first one would never hear that node).
fn heartbeat(id: u32, seq: u64) -> Envelope {
    Envelope {
        version: WIRE_VERSION,
        from: NodeId(id),
        seq,
        body: Body::Heartbeat(NodeState {
            gangs: Vec::new(),
            addr: String::new(),
            name: format!("box-{id}"),
            labels: Default::default(),
            capacity: Resources(vec![4, 0]),
            steps: vec![1.0, 1.0],
            free: Resources(vec![4, 0]),
            running: Vec::new(),
            incarnation: 1,
            sent: 0,
            hears: Vec::new(),
            lease: true,
            recent: Vec::new(),
            digest: Default::default(),
        }),
    }
}

/// What one node saw while it talked.
type Talked = (
    BTreeSet<u32>,
    BTreeSet<PeerId>,
    Vec<PeerId>,
    Vec<(u32, u64)>,
);

/// Send a heartbeat every 100 ms for `run`, and collect who we heard from, who connected, what
/// was dropped, and every message taken (author, sequence number).
async fn talk(net: &mut Network, id: u32, run: Duration) -> Talked {
    let (mut heard, mut up, mut dropped) = (BTreeSet::new(), BTreeSet::new(), Vec::new());
    let mut taken = Vec::new();
    let end = Instant::now() + run;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut seq = 0;
    while Instant::now() < end {
        tokio::select! {
            _ = tick.tick() => {
                seq += 1;
                net.send(&heartbeat(id, seq)).await.unwrap();
            }
            ev = net.next_event() => match ev {
                Some(NetEvent::Message { envelope, .. }) => {
                    heard.insert(envelope.from.0);
                    taken.push((envelope.from.0, envelope.seq));
                }
                Some(NetEvent::PeerUp(p)) => { up.insert(p); }
                Some(NetEvent::Dropped { from, .. }) => dropped.push(from),
                Some(_) => {}
                None => break,
            },
            _ = tokio::time::sleep_until(end) => break,
        }
    }
    (heard, up, dropped, taken)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_with_the_key_talk_and_strangers_stay_out() {
    let psk = PreSharedKey::new([7; 32]);
    let (mut a, addr_a) = start(Some(psk), vec![]).await;
    // b and c dial only a, and do not ask it for more peers: what they tell each other goes
    // through a, by gossip.
    let apart = |boot| {
        start_with(
            identity::Keypair::generate_ed25519(),
            Some(psk),
            None,
            boot,
            false,
        )
    };
    let (mut b, _) = apart(vec![addr_a.clone()]).await;
    let (mut c, _) = apart(vec![addr_a.clone()]).await;
    // A stranger with another key dials the same bootstrap address.
    let (mut d, _) = start(Some(PreSharedKey::new([8; 32])), vec![addr_a.clone()]).await;
    let d_id = d.peer_id;
    let run = Duration::from_secs(6);
    let garbage = async {
        // c also sends garbage once the mesh has had time to form.
        tokio::time::sleep(Duration::from_secs(2)).await;
        c.send_raw(vec![0xFF; 64]).await.unwrap();
        // And a heartbeat of "node 9" whose signed frame was altered after signing: a relay
        // cannot make others hear what its author did not sign.
        let key = identity::Keypair::generate_ed25519();
        let bytes = tapfinger::wire::encode(&heartbeat(9, 1)).unwrap();
        let mut forged = tapfinger_agent::signed::sign(&key, &bytes);
        let last = forged.len() - 1;
        forged[last] ^= 1;
        c.send_raw(forged).await.unwrap();
        talk(&mut c, 2, run - Duration::from_secs(2)).await
    };
    let ((ha, ua, da, _), (hb, ub, _, _), (hc, _, _, _), (hd, ud, _, _)) = tokio::join!(
        talk(&mut a, 0, run),
        talk(&mut b, 1, run),
        garbage,
        talk(&mut d, 3, run)
    );
    // Nobody heard the forged "node 9".
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
    // b and c are not connected: what they heard of each other came by gossip, through a.
    assert!(b.traffic().relayed > 0, "b: {:?}", b.traffic());
    assert!(c.traffic().relayed > 0, "c: {:?}", c.traffic());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_box_that_dials_one_peer_comes_to_be_connected_to_every_other() {
    let (mut a, addr_a) = start(None, vec![]).await;
    let (mut b, addr_b) = start(None, vec![addr_a]).await;
    // c knows only b; a learns of c only through b.
    let (mut c, _) = start(None, vec![addr_b]).await;
    let (a_id, c_id) = (a.peer_id, c.peer_id);
    let run = Duration::from_secs(4);
    let ((_, ua, _, _), _, (hc, uc, _, _)) = tokio::join!(
        talk(&mut a, 0, run),
        talk(&mut b, 1, run),
        talk(&mut c, 2, run)
    );
    assert!(uc.contains(&a_id), "c never connected to a: {uc:?}");
    assert!(ua.contains(&c_id), "a never connected to c: {ua:?}");
    assert_eq!(hc, BTreeSet::from([0, 1]), "c heard {hc:?}");
    assert!(c.traffic().direct > 0, "{:?}", c.traffic());
}

/// The race the news closes: `a` asked `b` whom it knows before `c` existed, and `c` never asks
/// (its peer exchange is off), so without news `a` would meet `c` only at its next periodic
/// question, 5 s after it started. `b` tells `a` of `c` as soon as it has met `c`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_hears_at_once_of_a_box_that_joined_after_it_asked() {
    let started = Instant::now();
    let (b, addr_b) = start(None, vec![]).await;
    let b_id = b.peer_id;
    drain(b);
    let (mut a, _) = start(None, vec![addr_b.clone()]).await;
    reach(&mut a, b_id, Duration::from_secs(3), "b").await;
    let (c, _) = start_with(
        identity::Keypair::generate_ed25519(),
        None,
        None,
        vec![addr_b],
        false,
    )
    .await;
    let c_id = c.peer_id;
    drain(c);
    // Before a's second question (its interval starts with it, 5 s): only news can do this.
    let before_asking_again = started + Duration::from_millis(4500);
    assert!(
        Instant::now() < before_asking_again,
        "the setup took {:?}: the test cannot tell news from the periodic question",
        started.elapsed()
    );
    reach(
        &mut a,
        c_id,
        before_asking_again - Instant::now(),
        "c (b did not tell a)",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connected_agents_hear_each_other_directly_and_take_each_message_once() {
    let (mut a, addr_a) = start(None, vec![]).await;
    let (mut b, addr_b) = start(None, vec![addr_a.clone()]).await;
    let (mut c, _) = start(None, vec![addr_a, addr_b]).await;
    let run = Duration::from_secs(4);
    let (ta, tb, tc) = tokio::join!(
        talk(&mut a, 0, run),
        talk(&mut b, 1, run),
        talk(&mut c, 2, run)
    );
    for (name, (heard, _, dropped, taken), net) in [("a", ta, &a), ("b", tb, &b), ("c", tc, &c)] {
        assert_eq!(heard.len(), 2, "{name} heard {heard:?}");
        assert!(dropped.is_empty(), "{name} dropped {dropped:?}");
        let distinct: BTreeSet<_> = taken.iter().collect();
        assert_eq!(distinct.len(), taken.len(), "{name} took a message twice");
        // Every peer is connected: messages come straight from their authors. Gossip carries
        // at most one of each author's messages a second (so that authors who are not
        // connected learn of each other), and its copy is a duplicate unless it came first.
        let t = net.traffic();
        assert!(t.direct > 0 && t.direct > t.relayed, "{name}: {t:?}");
        // (The network goes on taking messages after its node stopped reading them.)
        assert!(t.direct + t.relayed >= taken.len() as u64, "{name}: {t:?}");
        assert!(
            t.gossip_sent * 4 < 40,
            "{name} gossiped {t:?} of about 40 messages"
        );
        assert_eq!(t.queue_full, 0, "{name}: {t:?}");
    }
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
        true,
    )
    .await;
    let (mut b, _) = start_with(kb, Some(psk), None, vec![addr_a.clone()], true).await;
    let (mut c, _) = start_with(
        identity::Keypair::generate_ed25519(),
        Some(psk),
        None,
        vec![addr_a],
        true,
    )
    .await;
    let c_id = c.peer_id;
    let run = Duration::from_secs(4);
    let ((ha, ua, _, _), _, _) = tokio::join!(
        talk(&mut a, 0, run),
        talk(&mut b, 1, run),
        talk(&mut c, 2, run)
    );
    assert!(ha.contains(&1), "a did not hear b: {ha:?}");
    assert!(!ha.contains(&2), "a heard c, which is not on its allowlist");
    assert!(ua.contains(&b_id) && !ua.contains(&c_id), "{ua:?}");
}

/// Keep a network's events flowing (its swarm waits while its bounded event channel is full) for
/// the rest of the test.
fn drain(mut net: Network) {
    tokio::spawn(async move { while net.next_event().await.is_some() {} });
}

/// Wait until `net` reports `peer` connected; panics after `within`.
async fn reach(net: &mut Network, peer: PeerId, within: Duration, who: &str) {
    let deadline = Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, net.next_event()).await {
            Ok(Some(NetEvent::PeerUp(p))) if p == peer => return,
            Ok(Some(_)) => {}
            other => panic!("never reached {who}: {other:?}"),
        }
    }
}

/// A bootstrap peer that is not up when an agent starts is dialled again until it is, even while
/// the agent is connected to other peers: an agent that reached its fellow agents but not the
/// coordinator must not give up on the coordinator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bootstrap_peer_that_comes_up_later_is_reached_while_others_are_connected() {
    // Printed only if the test fails: why a dial or handshake did not complete.
    let _ = tracing_subscriber::fmt()
        .with_env_filter("libp2p_swarm=debug,libp2p_tcp=debug,libp2p_noise=debug,libp2p_pnet=debug,tapfinger_agent=debug")
        .with_writer(std::io::stderr)
        .try_init();
    let psk = PreSharedKey::new([5; 32]);
    let (a, addr_a) = start(Some(psk), vec![]).await;
    let a_id = a.peer_id;
    drain(a);
    // b's address is fixed before b exists: a free loopback port, and b's key.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let kb = identity::Keypair::generate_ed25519();
    let b_id = kb.public().to_peer_id();
    let addr_b: Multiaddr = format!("/ip4/127.0.0.1/tcp/{port}/p2p/{b_id}")
        .parse()
        .unwrap();
    let (mut x, _) = start(Some(psk), vec![addr_a, addr_b]).await;
    reach(&mut x, a_id, Duration::from_secs(20), "a").await;
    // x is connected (to a) and its first dial to b has failed; now b comes up.
    let b = Network::start(NetConfig {
        keypair: kb,
        cluster: "test".into(),
        listen: vec![format!("/ip4/127.0.0.1/tcp/{port}").parse().unwrap()],
        bootstrap: Vec::new(),
        psk: Some(psk),
        allow: None,
        mdns: false,
        peer_exchange: true,
        channel: 64,
    })
    .await
    .unwrap();
    drain(b);
    // The redial tick is 5 s; allow a few of them on a loaded machine.
    reach(
        &mut x,
        b_id,
        Duration::from_secs(30),
        "b, which came up late",
    )
    .await;
}

/// The environment variable that tells the mDNS test it is the copy inside the namespace.
const IN_NETNS: &str = "TAPFINGER_TEST_IN_NETNS";
/// The LAN address inside the namespace.
const LAN_ADDR: &str = "10.77.0.1";

/// mDNS: two agents with no bootstrap address find each other on a LAN. Multicast needs a
/// non-loopback interface, and a test must not touch the machine's own, so the test re-runs itself
/// in a fresh user + network namespace (`unshare -rn`) with a veth interface that carries
/// multicast. Where namespaces or `ip` are not available it fails and says so (CI has them;
/// CONTRIBUTING.md tells how to leave it out elsewhere): never a silent pass.
#[test]
fn mdns_finds_peers_on_a_lan() {
    if std::env::var_os(IN_NETNS).is_some() {
        return mdns_inside_the_namespace();
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("unshare")
        .args(["--user", "--map-root-user", "--net", "--"])
        .arg(&exe)
        .args(["--exact", "mdns_finds_peers_on_a_lan", "--nocapture"])
        .env(IN_NETNS, "1")
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            panic!("the mDNS test needs `unshare` (util-linux), as CI has: {e}");
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if stderr.contains("SKIP-NETNS") || (!out.status.success() && stderr.contains("unshare:")) {
        panic!("the mDNS test needs user and network namespaces and `ip`, as CI has: {stderr}");
    }
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "mDNS test in the namespace failed:\n{stdout}\n{stderr}"
    );
}

/// The part that runs inside the namespace: bring up the LAN, start two networks with mDNS
/// on and no bootstrap, and wait until each hears the other.
fn mdns_inside_the_namespace() {
    let ip = |args: &str| {
        std::process::Command::new("ip")
            .args(args.split_whitespace())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    let lan = [
        "link set lo up".to_string(),
        // A veth pair (dummy interfaces need a kernel module that containers often lack).
        "link add tf0 type veth peer name tf1".to_string(),
        "link set tf0 multicast on".to_string(),
        format!("addr add {LAN_ADDR}/24 dev tf0"),
        "link set tf1 up".to_string(),
        "link set tf0 up".to_string(),
        "route add 224.0.0.0/4 dev tf0".to_string(),
    ];
    if !lan.iter().all(|a| ip(a)) {
        eprintln!("SKIP-NETNS: `ip` could not set up the veth interface");
        return;
    }
    // mDNS can only work where the kernel delivers multicast on this interface; some sandboxes do
    // not. Check that with two plain sockets first, so that a failure below is ours, not theirs.
    if let Err(why) = multicast_works() {
        eprintln!(
            "SKIP-NETNS: this kernel does not deliver multicast on the veth interface: {why}"
        );
        return;
    }
    // On failure the libp2p logs tell why (discovery, dial or handshake); they are printed only
    // when the test fails, through the outer test's message.
    let _ = tracing_subscriber::fmt()
        .with_env_filter("libp2p_mdns=debug,libp2p_swarm=debug,tapfinger_agent=debug")
        .with_writer(std::io::stderr)
        .try_init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let psk = PreSharedKey::new([5; 32]);
        let start = || {
            Network::start(NetConfig {
                keypair: identity::Keypair::generate_ed25519(),
                cluster: "test".into(),
                listen: vec![format!("/ip4/{LAN_ADDR}/tcp/0").parse().unwrap()],
                bootstrap: Vec::new(),
                psk: Some(psk),
                allow: None,
                mdns: true,
                peer_exchange: true,
                channel: 64,
            })
        };
        let mut a = start().await.unwrap();
        let mut b = start().await.unwrap();
        // mDNS probes at 0.5 s, 1 s, 2 s, 4 s, ... after start; talk in short spells until both
        // have heard each other, for at most 30 s (a loaded machine can be slow to answer).
        let (mut ha, mut hb) = (BTreeSet::new(), BTreeSet::new());
        let (mut ua, mut ub) = (BTreeSet::new(), BTreeSet::new());
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let spell = Duration::from_secs(2);
            let ((h1, u1, _, _), (h2, u2, _, _)) =
                tokio::join!(talk(&mut a, 0, spell), talk(&mut b, 1, spell));
            ha.extend(h1);
            ua.extend(u1);
            hb.extend(h2);
            ub.extend(u2);
            if ha.contains(&1) && hb.contains(&0) {
                break;
            }
        }
        assert!(
            ua.contains(&b.peer_id) && ub.contains(&a.peer_id),
            "a connected to {ua:?}, b to {ub:?}"
        );
        assert_eq!(ha, BTreeSet::from([1]), "a heard {ha:?}");
        assert_eq!(hb, BTreeSet::from([0]), "b heard {hb:?}");
    });
}

/// Send one datagram to the mDNS group from the LAN address and receive it on a socket that
/// joined the group there, as mDNS itself does (with multicast loop on).
fn multicast_works() -> Result<(), String> {
    use std::net::{Ipv4Addr, UdpSocket};
    let group = Ipv4Addr::new(224, 0, 0, 251);
    let lan: Ipv4Addr = LAN_ADDR.parse().unwrap();
    let recv = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).map_err(|e| format!("bind: {e}"))?;
    recv.join_multicast_v4(&group, &lan)
        .map_err(|e| format!("join: {e}"))?;
    recv.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    let port = recv.local_addr().map_err(|e| e.to_string())?.port();
    let send = UdpSocket::bind((lan, 0)).map_err(|e| format!("bind {lan}: {e}"))?;
    send.set_multicast_loop_v4(true)
        .map_err(|e| e.to_string())?;
    let mut buf = [0u8; 16];
    for _ in 0..3 {
        send.send_to(b"tapfinger", (group, port))
            .map_err(|e| format!("send: {e}"))?;
        if let Ok((n, _)) = recv.recv_from(&mut buf)
            && &buf[..n] == b"tapfinger"
        {
            return Ok(());
        }
    }
    Err("a datagram sent to 224.0.0.251 did not arrive".into())
}
