//! What an attacker on the network would try, against real agent processes on 127.0.0.1
//! (ephemeral ports): the shipped network defaults off loopback refuse to start; a host without
//! the cluster key cannot connect; a host with the key but off the allowlist cannot announce a
//! task, claim one, report an outcome, cancel or take over a task. Verdicts come from what tasks write
//! themselves (a task that ran leaves its record) and from the process's exit, not from the
//! agents' word alone.
#![allow(clippy::unwrap_used)]

use libp2p::{Multiaddr, PeerId, identity::Keypair};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tapfinger::protocol::{Claim, Message, PROTOCOL_VERSION, Proposal, Round};
use tapfinger::spec::TaskSpec;
use tapfinger::wire::{Body, CANCELLED, Envelope, Outcome, WIRE_VERSION};
use tapfinger::{NodeId, Resources, Task, TaskId, TaskTypeId};
use tapfinger_agent::net::{NetConfig, NetEvent, Network};
use tapfinger_net::identity::node_id;

#[path = "support/process.rs"]
mod process;
use process::{Agent, free_port, http, json, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_tapfinger-agent");

fn agent(dir: &Path, name: &str, listen: &str, api: &str, extra: &[String]) -> Child {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    Command::new(BIN)
        .args(["run", "--name", name, "--listen", listen, "--api", api])
        .arg("--data-dir")
        .arg(dir.join(name))
        .args(["--policy", "first-fit-max"])
        .args(["--set", "heartbeat_ms=100", "--set", "peer_timeout_ms=1000"])
        .args(["--set", "autonomy_ms=3000", "--set", "slot_ms=500"])
        .args(["--set", "round_ms=200", "--set", "offer.gpu=0"])
        .args(["--set", "offer.cpu=2", "--set", "offer.mem_gb=1"])
        .args(extra)
        .env("RUST_LOG", "info,libp2p=warn")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap()
}

#[test]
fn the_shipped_network_defaults_refuse_to_start_beyond_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("/ip4/0.0.0.0/tcp/{}", free_port());
    let api = format!("127.0.0.1:{}", free_port());
    // No key: exit 1 before binding anything, naming `keygen`.
    let mut open = agent(dir.path(), "a", &listen, &api, &[]);
    let end = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = open.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < end, "the agent did not refuse to start");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(1));
    let log = std::fs::read_to_string(dir.path().join("a.log")).unwrap();
    assert!(
        log.contains("tapfinger-agent keygen") && log.contains("cluster_key_file"),
        "{log}"
    );
    assert!(
        json(&api, "/v1/node").is_none(),
        "the API of a refused agent answers"
    );
    // Asked for explicitly: it starts, warns, and says so on its API.
    let _lab = Agent(agent(
        dir.path(),
        "b",
        &listen,
        &api,
        &["--set".into(), "insecure_open_cluster=true".into()],
    ));
    wait_until(Duration::from_secs(60), "the open agent's API", || {
        json(&api, "/v1/node").is_some()
    });
    let node = json(&api, "/v1/node").unwrap();
    assert_eq!(node["security"]["open_cluster"], true, "{node}");
    assert_eq!(node["security"]["cluster_key"], false, "{node}");
    let dash = json(&api, "/v1/dashboard").unwrap();
    assert_eq!(dash["security"]["open_cluster"], true);
    let log = std::fs::read_to_string(dir.path().join("b.log")).unwrap();
    assert!(log.contains("OPEN CLUSTER"), "{log}");
}

/// A network in this test process: `psk` from the key file (or none), no allowlist.
async fn outsider(key: Keypair, psk_file: Option<&Path>, dial: Multiaddr) -> Network {
    let psk = psk_file.map(|p| tapfinger_net::secret::read_swarm_key(p).unwrap());
    Network::start(NetConfig {
        keypair: key,
        cluster: "default".into(),
        listen: vec!["/ip4/127.0.0.1/tcp/0".parse().unwrap()],
        bootstrap: vec![dial],
        psk,
        allow: None,
        mdns: false,
        peer_exchange: false,
        channel: 64,
    })
    .await
    .unwrap()
}

/// What `net` heard for `dur`: whether it was ever connected, and whether it still is.
async fn connection(net: &mut Network, dur: Duration) -> (bool, bool) {
    let (mut ever, mut now) = (false, false);
    let end = tokio::time::Instant::now() + dur;
    while let Ok(Some(ev)) = tokio::time::timeout_at(end, net.next_event()).await {
        match ev {
            NetEvent::PeerUp(_) => (ever, now) = (true, true),
            NetEvent::PeerDown(_) => now = false,
            _ => {}
        }
    }
    (ever, now)
}

/// A key file's identity, written where an agent started with `--data-dir dir` reads it.
fn identity_in(dir: &Path) -> PeerId {
    let key = Keypair::generate_ed25519();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("identity.key"),
        key.to_protobuf_encoding().unwrap(),
    )
    .unwrap();
    key.public().to_peer_id()
}

fn record_task(rec: &Path, name: &str, seconds: f64) -> TaskSpec {
    TaskSpec::from_toml(&format!(
        "name = \"{name}\"\ncommand = [\"sh\", \"-c\", \"sleep {seconds}; echo ran >> '{}'\"]\nmin_demand = {{ cpu = 1, mem = 1 }}\n",
        rec.join(name).display()
    ))
    .unwrap()
}

#[test]
fn outsiders_can_neither_join_nor_be_heard() {
    let dir = tempfile::tempdir().unwrap();
    let rec: PathBuf = dir.path().join("rec");
    std::fs::create_dir_all(&rec).unwrap();
    let key = keygen(dir.path());
    let (_agents, ids, apis, p2p) = two_boxes(dir.path(), &key);
    let addr = |i: usize| -> Multiaddr {
        format!("/ip4/127.0.0.1/tcp/{}/p2p/{}", p2p[i], ids[i])
            .parse()
            .unwrap()
    };
    // A legitimate task, long enough for the attacks below to land while it runs.
    let (code, body) = http(
        &apis[0],
        "POST",
        "/v1/tasks",
        Some(serde_json::to_string(&record_task(&rec, "legit", 6.0)).unwrap()),
    )
    .unwrap();
    assert_eq!(code, 201, "{body}");
    let legit = TaskId(
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
            .as_u64()
            .unwrap(),
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // Without the key, or with another one: never connected.
        let mut keyless = outsider(Keypair::generate_ed25519(), None, addr(0)).await;
        let other = dir.path().join("other.key");
        tapfinger_net::secret::write_private(
            &other,
            &tapfinger_net::secret::new_swarm_key().unwrap(),
        )
        .unwrap();
        let mut wrong = outsider(Keypair::generate_ed25519(), Some(&other), addr(0)).await;
        let (k, w) = tokio::join!(
            connection(&mut keyless, Duration::from_secs(4)),
            connection(&mut wrong, Duration::from_secs(4))
        );
        assert_eq!(k, (false, false), "a host without the key connected");
        assert_eq!(w, (false, false), "a host with another key connected");

        // With the key, off the allowlist: whatever it sends while it tries is not heard.
        let rogue_key = Keypair::generate_ed25519();
        let me = node_id(&rogue_key.public().to_peer_id());
        let mut rogue = outsider(rogue_key, Some(&key), addr(0)).await;
        let bodies = rogue_messages(me, legit, &ids, &rec);
        let (ever, now) = keep_sending(&mut rogue, me, &bodies).await;
        // It did connect (its key is right), and was cut off by the allowlist.
        assert!(
            ever,
            "the key holder never connected: the allowlist was not what refused it"
        );
        assert!(
            !now,
            "the agent kept a connection from a peer off its allowlist"
        );
    });
    refused_and_unharmed(&apis, &rec, legit);
}

/// The operator's first step: a cluster key (and a token), private to their owner; `keygen`
/// never overwrites a key. The key's path.
fn keygen(dir: &Path) -> PathBuf {
    // The operator's first step: a cluster key (and a token), private to their owner.
    let key = dir.join("swarm.key");
    let token = dir.join("api.token");
    let out = Command::new(BIN)
        .args(["keygen", "--swarm-key"])
        .arg(&key)
        .arg("--token")
        .arg(&token)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    {
        use std::os::unix::fs::PermissionsExt;
        for f in [&key, &token] {
            let mode = std::fs::metadata(f).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", f.display());
        }
    }
    let again = Command::new(BIN)
        .args(["keygen", "--swarm-key"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(!again.status.success(), "keygen overwrote a key");

    key
}

/// Two boxes with the key, each allowing only the other, hearing each other: the agents, their
/// peer ids, API addresses and p2p ports.
fn two_boxes(dir: &Path, key: &Path) -> (Vec<Agent>, Vec<PeerId>, Vec<String>, Vec<u16>) {
    let ids: Vec<PeerId> = ["a0", "a1"]
        .iter()
        .map(|n| identity_in(&dir.join(n)))
        .collect();
    let allow = format!(
        "allow_peers=[{}]",
        ids.iter()
            .map(|p| format!("\"{p}\""))
            .collect::<Vec<_>>()
            .join(",")
    );
    let p2p: Vec<u16> = (0..2).map(|_| free_port()).collect();
    let apis: Vec<String> = (0..2)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let addr = |i: usize| -> Multiaddr {
        format!("/ip4/127.0.0.1/tcp/{}/p2p/{}", p2p[i], ids[i])
            .parse()
            .unwrap()
    };
    let agents: Vec<Agent> = (0..2)
        .map(|i| {
            Agent(agent(
                dir,
                &format!("a{i}"),
                &format!("/ip4/127.0.0.1/tcp/{}", p2p[i]),
                &apis[i],
                &[
                    "--cluster-key-file".into(),
                    key.display().to_string(),
                    "--set".into(),
                    allow.clone(),
                    "--bootstrap".into(),
                    addr(1 - i).to_string(),
                ],
            ))
        })
        .collect();
    wait_until(
        Duration::from_secs(60),
        "the two boxes to hear each other",
        || {
            (0..2).all(|i| {
                json(&apis[i], "/v1/peers").and_then(|v| v["peers"].as_array().map(Vec::len))
                    == Some(1)
            })
        },
    );
    let node = json(&apis[0], "/v1/node").unwrap();
    assert_eq!(node["security"]["cluster_key"], true);
    assert_eq!(node["security"]["allowlist"], 2);

    (agents, ids, apis, p2p)
}

/// What a key holder off the allowlist sends: a certain claim on the legitimate task, a task
/// of its own, a cancel, a failure and a start at a huge epoch.
fn rogue_messages(me: NodeId, legit: TaskId, ids: &[PeerId], rec: &Path) -> Vec<Body> {
    let reachable = ids
        .iter()
        .map(node_id)
        .collect::<std::collections::BTreeSet<_>>();
    let pwned = Task {
        id: TaskId(0x5eed_0000_0001),
        ty: TaskTypeId(0),
        min_demand: Resources(vec![1, 0, 0]),
        max_demand: None,
        priority: 0,
        reachable: reachable.into_iter().collect(),
        arrival: 0,
        gang: None,
    };
    let mut members: Vec<_> = pwned.reachable.iter().copied().chain([me]).collect();
    members.sort();
    vec![
        // A claim on the legitimate task in the rounds of the next slots, with certainty.
        Body::Protocol(Message {
            version: PROTOCOL_VERSION,
            round: Round { slot: 0, step: 0 },
            from: me,
            proposal: Proposal::Claim(Claim {
                task: legit,
                alloc: Resources(vec![2, 0, 1]),
                prob: 1.0,
                headroom: 100.0,
            }),
            members,
            free: Resources(vec![64, 0, 64]),
        }),
        Body::Announce {
            task: pwned.clone(),
            spec: record_task(rec, "pwned", 0.0),
            owner: Some(me),
            epoch: 0,
            runs: None,
        },
        // A cancel: an outcome at the cancellation epoch, which beats every copy.
        Body::Finished(Outcome {
            task: legit,
            node: me,
            epoch: CANCELLED,
            exit_code: None,
            work: None,
        }),
        Body::Failed {
            task: legit,
            reason: "taken over".into(),
            requeue: false,
            attained: None,
        },
        Body::Started {
            task: legit,
            alloc: Resources(vec![1, 0, 0]),
            epoch: 1 << 40,
        },
    ]
}

/// Send `bodies` over and over for 4 s while watching the connection: whether it was ever
/// connected, and whether it is at the end.
async fn keep_sending(rogue: &mut Network, me: NodeId, bodies: &[Body]) -> (bool, bool) {
    let mut seq = 0;
    let end = tokio::time::Instant::now() + Duration::from_secs(4);
    let (mut ever, mut now) = (false, false);
    while tokio::time::Instant::now() < end {
        for body in bodies {
            seq += 1;
            let _ = rogue
                .send(&Envelope {
                    version: WIRE_VERSION,
                    from: me,
                    seq,
                    body: body.clone(),
                })
                .await;
        }
        let (e, n) = connection(rogue, Duration::from_millis(200)).await;
        ever |= e;
        now = if e || n { n } else { now };
    }
    (ever, now)
}

/// After the attacks: the box counted the key holder it refused, the legitimate task ran to its
/// end once, and the outsider's never ran.
fn refused_and_unharmed(apis: &[String], rec: &Path, legit: TaskId) {
    // The box counted the key holder it refused, for its operator to see.
    let (_, metrics) = http(&apis[0], "GET", "/metrics", None).unwrap();
    let refused = metrics
        .lines()
        .find_map(|l| l.strip_prefix("tapfinger_refused_peers_total "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(refused.is_some_and(|n| n >= 1.0), "{metrics}");

    // The legitimate task ran to its end, once, and the outsider's never ran.
    wait_until(
        Duration::from_secs(60),
        "the legitimate task's record",
        || rec.join("legit").exists(),
    );
    wait_until(
        Duration::from_secs(30),
        "both boxes to know it succeeded",
        || {
            apis.iter().all(|api| {
                json(api, &format!("/v1/tasks/{}", legit.0))
                    .is_some_and(|v| v["state"] == "succeeded")
            })
        },
    );
    assert!(!rec.join("pwned").exists(), "an outsider's task ran");
    assert_eq!(
        std::fs::read_to_string(rec.join("legit")).unwrap(),
        "ran\n",
        "the legitimate task ran more than once"
    );
    for api in apis {
        let tasks = json(api, "/v1/tasks").unwrap();
        let ids: Vec<u64> = tasks["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_u64().unwrap())
            .collect();
        assert_eq!(ids, [legit.0], "{tasks}");
        let state = json(api, &format!("/v1/tasks/{}", legit.0)).unwrap();
        assert_eq!(state["exit_code"], 0, "{state}");
        assert!(state["epoch"].as_u64().unwrap() < 1 << 40, "{state}");
    }
}
