//! The coordinator with live agents on loopback: three agents in learning mode (simulated
//! executor) and a coordinator; tasks flow, experience reaches the coordinator, an update runs, the
//! shipped evaluation gate (tolerance 0) publishes a new version (a candidate it refuses is
//! answered with more work until one passes), and every agent ends up on the same version and weight hash; the
//! coordinator killed and restarted resumes from its checkpoint. Then a coordinator process
//! (this binary re-run as one) paused with SIGSTOP and later killed and started again, with
//! learning agents restarted around both: it keeps learning.
#![allow(clippy::unwrap_used)]

use libp2p::identity;
use std::time::Duration;
use tapfinger_agent::online::OnlineConfig;
use tapfinger_coordinator::config::CoordinatorConfig;
use tapfinger_tests::{Exec, Local, spec, statuses, wait};

/// An agent's learning link to the coordinator of `key`: experience in batches of 4 decisions,
/// polled every 200 ms, no workload pushes.
fn learning(
    key: &identity::Keypair,
    dir: std::path::PathBuf,
    start: &(Vec<u8>, String, String),
) -> OnlineConfig {
    OnlineConfig {
        coordinator: key.public().to_peer_id(),
        learning: true,
        dir,
        spool_max: 100,
        batch_decisions: 4,
        poll_ms: 200,
        explore_candidates: false,
        window: 10,
        start: start.clone(),
        workload_push_ms: 0,
        workload_window_s: 3600,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_learn_through_the_coordinator_and_converge_on_one_version() {
    let root = std::env::temp_dir().join(format!("tapfinger-coord-it-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let key = identity::Keypair::generate_ed25519();
    let (net, coord_addr) = tapfinger_tests::start_member(key.clone()).await;
    let cfg = CoordinatorConfig {
        data_dir: root.join("coordinator"),
        update_decisions: 24,
        eval_episodes: 1,
        // The product's gate as shipped (a candidate worse than the published version is
        // refused), not one opened wide for the test.
        ..CoordinatorConfig::default()
    };
    let coordinator = tapfinger_coordinator::serve::spawn(cfg.clone(), key.clone(), net).unwrap();
    let start = tapfinger_agent::policy::initial_checkpoint(None).unwrap();
    let mut agents = Vec::new();
    let mut addrs = vec![coord_addr.clone()];
    for i in 0..3 {
        let mut l = Local::new(&format!("n{i}"), Exec::Simulated(0.05)).bootstrap(addrs.clone());
        l.online = Some(learning(&key, root.join(format!("agent{i}")), &start));
        let (agent, addr) = l.start().await;
        agents.push(agent);
        addrs.push(addr);
    }
    let all: Vec<_> = agents.iter().collect();
    wait(
        &all,
        Duration::from_secs(60),
        "agents to see each other",
        |s| s.iter().all(|st| st.peers.len() == 2),
    )
    .await;
    for i in 0..30 {
        all[i % 3].submit(spec()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    // Every agent on the coordinator's current version (≥ 1), with its hash.
    let converged = |s: &[std::sync::Arc<tapfinger_agent::daemon::Status>]| {
        let c = coordinator.snapshot();
        c.state.version >= 1
            && s.iter().all(|st| {
                st.policy
                    .as_ref()
                    .is_some_and(|p| p.version == c.state.version && p.hash == c.state.hash)
            })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    let mut refusals_answered = 0;
    loop {
        let s = statuses(&all);
        if converged(&s) {
            break;
        }
        // The real gate may refuse a candidate worse than the start model; then more work
        // brings more experience and another candidate (each refusal is answered once).
        let c = coordinator.snapshot().state;
        if c.version == 0 && c.refused > refusals_answered {
            refusals_answered = c.refused;
            let e = c.last_evaluation.as_ref().unwrap();
            assert!(!e.published && e.candidate_jct > e.published_jct, "{e:?}");
            for i in 0..30 {
                all[i % 3].submit(spec()).await.unwrap();
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no convergence: coordinator {:?}; agents {:?}",
            coordinator.snapshot().state,
            s.iter().map(|st| st.policy.clone()).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let c = coordinator.snapshot();
    assert!(c.state.updates >= 1);
    // Every update was judged by the gate: published as a version or refused.
    assert_eq!(
        c.state.version + c.state.refused,
        c.state.updates,
        "{:?}",
        c.state
    );
    let e = c.state.last_evaluation.clone().expect("an evaluation");
    assert_eq!(e.published, e.candidate_jct <= e.published_jct, "{e:?}");
    assert!(c.state.critic_loss.is_finite());
    // The critic trained on assembled rounds (how many reports share a round depends on when
    // batches arrive; the merge itself is unit-tested in shared and sim).
    assert!(
        c.state.rounds_assembled > 0 && c.state.reports_per_round >= 1.0,
        "{:?}",
        c.state
    );
    // The latest candidate is served as a signed trial (for agents that explore with it).
    let (t, tc) = c.trial.clone().expect("a trial after an update");
    assert!(t.trial && t.version == c.state.updates, "{t:?}");
    assert_eq!(t.verify(&key.public().to_peer_id()), Ok(()));
    assert_eq!(t.check(&tc), Ok(()));
    eprintln!(
        "critic: {} rounds assembled, {} merged, {:.2} reports per round",
        c.state.rounds_assembled, c.state.rounds_merged, c.state.reports_per_round
    );
    // Experience came from all three agents.
    assert_eq!(c.received_live.len(), 3, "{:?}", c.received_live);
    for st in statuses(&all) {
        let p = st.policy.clone().unwrap();
        assert!(
            p.learning && p.batches_shipped > 0 && p.refused == 0,
            "{p:?}"
        );
    }
    // Killed (no shutdown step) and restarted from its data directory: it resumes its
    // published version, hash and counters.
    agents.iter().for_each(|a| a.kill());
    // No experience arrives any more; let an update in flight complete.
    tokio::time::sleep(Duration::from_millis(500)).await;
    while coordinator.snapshot().updating {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = coordinator.snapshot().state;
    coordinator.kill();
    drop(coordinator);
    let (net, _) = tapfinger_tests::start_member(key.clone()).await;
    let again = tapfinger_coordinator::serve::spawn(cfg, key, net).unwrap();
    let after = again.snapshot();
    assert_eq!(after.state, before);
    assert_eq!(
        after.published.map(|(a, _)| a.version),
        Some(before.version)
    );
    again.kill();
    std::fs::remove_dir_all(&root).ok();
}

/// The coordinator child of [`learning_goes_on_around_a_paused_and_a_restarted_coordinator_process`]:
/// `key file|data dir|libp2p port|API address`.
const CHILD_ENV: &str = "TAPFINGER_COORDINATOR_CHILD";

/// Run a coordinator in this process, as the parent asked ([`CHILD_ENV`]), until killed.
async fn coordinator_child(how: &str) {
    let parts: Vec<&str> = how.split('|').collect();
    let key = identity::Keypair::from_protobuf_encoding(&std::fs::read(parts[0]).unwrap()).unwrap();
    let net = tapfinger_agent::net::Network::start(tapfinger_agent::net::NetConfig {
        keypair: key.clone(),
        cluster: "it".into(),
        listen: vec![format!("/ip4/127.0.0.1/tcp/{}", parts[2]).parse().unwrap()],
        bootstrap: Vec::new(),
        psk: Some(libp2p::pnet::PreSharedKey::new([42; 32])),
        allow: None,
        mdns: false,
        peer_exchange: true,
        channel: 256,
    })
    .await
    .unwrap();
    let cfg = CoordinatorConfig {
        data_dir: parts[1].into(),
        update_decisions: 16,
        eval_episodes: 1,
        ..CoordinatorConfig::default()
    };
    let mut c = tapfinger_coordinator::serve::spawn(cfg, key, net).unwrap();
    let api = tapfinger_coordinator::api::api(parts[3], c.shared.clone(), None);
    tokio::select! {
        r = api => panic!("the API ended: {r:?}"),
        why = c.stopped() => panic!("the coordinator stopped: {why}"),
    }
}

/// The coordinator's `/v1/status`, if it answers.
async fn coordinator_status(api: &str) -> Option<serde_json::Value> {
    let get = tapfinger_agent::client::http(api, "GET", "/v1/status", None, None);
    let (code, body) = tokio::time::timeout(Duration::from_secs(2), get)
        .await
        .ok()?
        .ok()?;
    (code == 200).then(|| serde_json::from_str(&body).ok())?
}

/// Two learning agents' settings, kept across their restarts (identity, journal, spool).
struct Learners<'a> {
    root: &'a std::path::Path,
    coordinator: &'a identity::Keypair,
    keys: Vec<identity::Keypair>,
    start: (Vec<u8>, String, String),
}

impl Learners<'_> {
    /// Agent `i` in its `incarnation`, dialling `addrs`.
    fn local(&self, i: usize, incarnation: u64, addrs: Vec<libp2p::Multiaddr>) -> Local {
        let mut l = Local::new(&format!("n{i}"), Exec::Simulated(0.05)).bootstrap(addrs);
        l.keypair = self.keys[i].clone();
        l.incarnation = incarnation;
        l.journal = Some(self.root.join(format!("agent{i}.journal")));
        l.online = Some(learning(
            self.coordinator,
            self.root.join(format!("agent{i}")),
            &self.start,
        ));
        l
    }
}

/// Sixteen tasks, in turn to each agent.
async fn submit_work(agents: &[tapfinger_agent::daemon::Agent]) {
    for i in 0..16 {
        agents[i % 2].submit(spec()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
}

/// Wait (at most 180 s, giving the agents work while the inbox is empty) until the coordinator
/// at `api` has run more than `n` updates, asserting meanwhile that learning is alive and
/// nothing was set aside; its updates then.
async fn learned_past(
    api: &str,
    n: u64,
    agents: &[tapfinger_agent::daemon::Agent],
    what: &str,
) -> u64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    loop {
        if let Some(s) = coordinator_status(api).await {
            assert_eq!(s["learning"]["alive"], true, "{what}: {s}");
            assert_eq!(s["learning"]["set_aside"], 0, "{what}: {s}");
            let u = s["updates"].as_u64().unwrap_or(0);
            if u > n {
                return u;
            }
            if s["inbox_batches"] == 0 {
                submit_work(agents).await;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: no update past {n}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// This test binary re-run as the coordinator child ([`CHILD_ENV`] = `how`), its output
/// appended to `log`.
fn spawn_child(how: &str, log: &std::path::Path) -> std::process::Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "learning_goes_on_around_a_paused_and_a_restarted_coordinator_process",
            "--nocapture",
        ])
        .env(CHILD_ENV, how)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// A child process killed (and reaped) when dropped, also when the test fails.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `kill <sig> <pid>`.
fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Learning agents restarted around a coordinator process that is paused (SIGSTOP for 4 s, one
/// agent restarted on its data meanwhile, its spooled batches, whose rounds now run ahead of its
/// restarted core, shipped again; the other after it resumes) and then killed and started again
/// on its data: the process stays up, learning stays alive, nothing is set aside, updates go on
/// after each, and the agents' batches reach the new process. The coordinator runs in a child
/// process (this test binary, re-run as it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learning_goes_on_around_a_paused_and_a_restarted_coordinator_process() {
    if let Ok(how) = std::env::var(CHILD_ENV) {
        return coordinator_child(&how).await;
    }
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    let key = identity::Keypair::generate_ed25519();
    let key_file = root.join("coordinator.key");
    std::fs::write(&key_file, key.to_protobuf_encoding().unwrap()).unwrap();
    let (port, api) = (free_port(), format!("127.0.0.1:{}", free_port()));
    let how = format!(
        "{}|{}|{port}|{api}",
        key_file.display(),
        root.join("coordinator").display()
    );
    let log = root.join("coordinator.log");
    let coordinator = Killed(spawn_child(&how, &log));
    let coord: libp2p::Multiaddr = format!(
        "/ip4/127.0.0.1/tcp/{port}/p2p/{}",
        key.public().to_peer_id()
    )
    .parse()
    .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while coordinator_status(&api).await.is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the child never answered"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let learners = Learners {
        root,
        coordinator: &key,
        keys: (0..2)
            .map(|_| identity::Keypair::generate_ed25519())
            .collect(),
        start: tapfinger_agent::policy::initial_checkpoint(None).unwrap(),
    };
    let (a0, addr0) = learners.local(0, 1, vec![coord.clone()]).start().await;
    let (a1, addr1) = learners
        .local(1, 1, vec![coord.clone(), addr0.clone()])
        .start()
        .await;
    let mut agents = [a0, a1];
    submit_work(&agents).await;
    let first = learned_past(&api, 0, &agents, "at first").await;
    // Paused for 4 s; agent 0 restarts on its data meanwhile, agent 1 once it resumes.
    signal(coordinator.0.id(), "-STOP");
    agents[0].killed().await;
    let (a0, addr0) = learners
        .local(0, 2, vec![coord.clone(), addr1.clone()])
        .start()
        .await;
    agents[0] = a0;
    submit_work(&agents).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    signal(coordinator.0.id(), "-CONT");
    agents[1].killed().await;
    agents[1] = learners
        .local(1, 2, vec![coord.clone(), addr0.clone()])
        .start()
        .await
        .0;
    let paused = learned_past(&api, first, &agents, "after the pause").await;
    // Killed and started again on its data (the same port): the agents find it again.
    drop(coordinator);
    agents[0].killed().await;
    agents[0] = learners
        .local(0, 3, vec![coord.clone(), addr1.clone()])
        .start()
        .await
        .0;
    let mut coordinator = Killed(spawn_child(&how, &log));
    let restarted = learned_past(&api, paused, &agents, "after the restart").await;
    // The agents' batches reach the new process.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let s = coordinator_status(&api).await;
        let heard = s.as_ref().and_then(|s| {
            s["decisions_received_since_start"]
                .as_object()
                .map(|m| m.len())
        });
        if heard.is_some_and(|n| n > 0) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no batch after the restart: {s:?}"
        );
        submit_work(&agents).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        coordinator.0.try_wait().unwrap().is_none(),
        "the coordinator exited"
    );
    eprintln!(
        "updates: {first} at first, {paused} after a 4 s pause with both agents restarted around it, {restarted} after a restart; batches set aside 0"
    );
    agents.iter().for_each(|a| a.kill());
}
