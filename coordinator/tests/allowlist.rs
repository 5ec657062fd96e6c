//! The coordinator process with an allowlist on 127.0.0.1 (ephemeral ports): an agent on the
//! list has its experience stored and acknowledged; a peer with the cluster key but off the list
//! gets no answer, its batch is not stored, and the refusal is counted in `/metrics`. The API,
//! given a token, answers only requests that carry it.
#![allow(clippy::unwrap_used)]

use libp2p::Multiaddr;
use libp2p::identity::Keypair;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tapfinger_net::identity::node_id;
use tapfinger_net::learn::{Request, Response};
use tapfinger_net::swarm::{NetConfig, NetEvent, Network};

const BIN: &str = env!("CARGO_BIN_EXE_tapfinger-coordinator");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP GET with an optional bearer token: status code and body.
fn get(api: &str, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(api).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {api}\r\n{auth}Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    Some((
        code,
        text.split("\r\n\r\n").nth(1).unwrap_or("").to_string(),
    ))
}

/// `key` on the network with the cluster key, sending one experience batch to the coordinator:
/// its answer, if one came within the time.
async fn send_batch(
    key: Keypair,
    psk: &std::path::Path,
    coordinator: Multiaddr,
) -> Option<Response> {
    let peer = coordinator
        .iter()
        .find_map(|p| match p {
            libp2p::multiaddr::Protocol::P2p(id) => Some(id),
            _ => None,
        })
        .unwrap();
    let node = node_id(&key.public().to_peer_id());
    let mut net = Network::start(NetConfig {
        keypair: key,
        cluster: "default".into(),
        listen: vec!["/ip4/127.0.0.1/tcp/0".parse().unwrap()],
        bootstrap: vec![coordinator],
        psk: Some(tapfinger_net::secret::read_swarm_key(psk).unwrap()),
        allow: None,
        mdns: false,
        peer_exchange: false,
        channel: 64,
    })
    .await
    .unwrap();
    let end = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut sent = false;
    while let Ok(Some(ev)) = tokio::time::timeout_at(end, net.next_event()).await {
        match ev {
            NetEvent::PeerUp(p) if p == peer && !sent => {
                sent = true;
                net.request(
                    peer,
                    Request::Experience {
                        node,
                        batch: 1,
                        exp: Box::default(),
                    },
                )
                .await
                .unwrap();
            }
            NetEvent::Response { response, .. } => return Some(*response),
            _ => {}
        }
    }
    None
}

#[test]
fn experience_from_a_peer_off_the_allowlist_is_refused_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("swarm.key");
    let token_file = dir.path().join("api.token");
    tapfinger_net::secret::write_private(&key, &tapfinger_net::secret::new_swarm_key().unwrap())
        .unwrap();
    tapfinger_net::secret::write_private(&token_file, &tapfinger_net::secret::new_token().unwrap())
        .unwrap();
    let token = tapfinger_net::secret::read_token(&token_file).unwrap();
    let member = Keypair::generate_ed25519();
    let port = free_port();
    let api = format!("127.0.0.1:{}", free_port());
    let data = dir.path().join("data");
    let config = dir.path().join("coordinator.toml");
    std::fs::write(
        &config,
        format!(
            "listen = [\"/ip4/127.0.0.1/tcp/{port}\"]\napi = \"{api}\"\napi_token_file = {:?}\n\
             data_dir = {:?}\nallow_peers = [\"{}\"]\n",
            token_file.display().to_string(),
            data.display().to_string(),
            member.public().to_peer_id()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.path().join("coordinator.log")).unwrap();
    let _coordinator = Killed(
        Command::new(BIN)
            .args(["run", "--config"])
            .arg(&config)
            .arg("--cluster-key-file")
            .arg(&key)
            .env("RUST_LOG", "info,libp2p=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let end = Instant::now() + Duration::from_secs(120);
    while get(&api, "/v1/status", Some(&token)).is_none_or(|(c, _)| c != 200) {
        assert!(Instant::now() < end, "the coordinator's API never answered");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Its peer id, from the data directory's identity key.
    let id = Keypair::from_protobuf_encoding(&std::fs::read(data.join("identity.key")).unwrap())
        .unwrap()
        .public()
        .to_peer_id();
    let addr: Multiaddr = format!("/ip4/127.0.0.1/tcp/{port}/p2p/{id}")
        .parse()
        .unwrap();

    // The API: nothing without the token, or with a wrong one.
    assert_eq!(get(&api, "/v1/status", None).unwrap().0, 401);
    assert_eq!(
        get(&api, "/metrics", Some("0123456789abcdef-wrong"))
            .unwrap()
            .0,
        401
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    let outsider = rt.block_on(send_batch(Keypair::generate_ed25519(), &key, addr.clone()));
    assert!(
        outsider.is_none(),
        "a peer off the allowlist was answered: {outsider:?}"
    );
    let listed = rt.block_on(send_batch(member, &key, addr));
    assert!(
        matches!(listed, Some(Response::Ack { batch: 1 })),
        "the listed agent's batch: {listed:?}"
    );
    let (_, status) = get(&api, "/v1/status", Some(&token)).unwrap();
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["inbox_batches"], 1, "{status}");
    assert!(
        status["refused"]["connect"].as_u64().unwrap_or(0) >= 1,
        "{status}"
    );
    let (_, metrics) = get(&api, "/metrics", Some(&token)).unwrap();
    assert!(
        metrics.contains("tapfinger_coordinator_refused_total{what=\"connect\"}"),
        "{metrics}"
    );
}
