//! The coordinator with live agents on loopback: three agents in learning mode (simulated
//! executor) and a coordinator; tasks flow, experience reaches the coordinator, an update runs, the
//! shipped evaluation gate (tolerance 0) publishes a new version (a candidate it refuses is
//! answered with more work until one passes), and every agent ends up on the same version and weight hash; the
//! coordinator killed and restarted resumes from its checkpoint.
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

/// Learning agents restarted around a coordinator that went away and came back: the
/// coordinator is killed, one learning agent is killed and started again on its data (its
/// spooled batches, whose rounds now run ahead of its restarted core, are shipped again) while
/// the coordinator is gone for 4 s, the coordinator starts again on its data directory, and the
/// other agent is restarted once it is back. The coordinator goes on learning: more updates
/// after its return, learning alive, nothing set aside, and both agents' batches arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learning_goes_on_when_agents_restart_around_a_coordinator_that_went_away() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path();
    let key = identity::Keypair::generate_ed25519();
    let (net, coord_addr) = tapfinger_tests::start_member(key.clone()).await;
    let cfg = CoordinatorConfig {
        data_dir: root.join("coordinator"),
        update_decisions: 16,
        eval_episodes: 1,
        ..CoordinatorConfig::default()
    };
    let coordinator = tapfinger_coordinator::serve::spawn(cfg.clone(), key.clone(), net).unwrap();
    let start = tapfinger_agent::policy::initial_checkpoint(None).unwrap();
    let keys: Vec<_> = (0..2)
        .map(|_| identity::Keypair::generate_ed25519())
        .collect();
    let local = |i: usize, incarnation: u64, addrs: Vec<libp2p::Multiaddr>| {
        let mut l = Local::new(&format!("n{i}"), Exec::Simulated(0.05)).bootstrap(addrs);
        l.keypair = keys[i].clone();
        l.incarnation = incarnation;
        l.journal = Some(root.join(format!("agent{i}.journal")));
        l.online = Some(learning(&key, root.join(format!("agent{i}")), &start));
        l
    };
    let (a0, addr0) = local(0, 1, vec![coord_addr.clone()]).start().await;
    let (a1, addr1) = local(1, 1, vec![coord_addr.clone(), addr0.clone()])
        .start()
        .await;
    let mut agents = [a0, a1];
    let submit = async |agents: &[tapfinger_agent::daemon::Agent]| {
        for i in 0..16 {
            agents[i % 2].submit(spec()).await.unwrap();
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    };
    submit(&agents).await;
    let updated = |c: &tapfinger_coordinator::serve::Coordinator, n: u64| {
        let s = c.snapshot();
        s.state.updates >= n && !s.updating
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !updated(&coordinator, 1) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no first update: {:?}",
            coordinator.snapshot().state
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = coordinator.snapshot().state.updates;
    // The coordinator goes away; agent 0 restarts on its data meanwhile.
    coordinator.kill();
    drop(coordinator);
    agents[0].kill();
    let (a0, addr0) = local(0, 2, vec![coord_addr.clone(), addr1.clone()])
        .start()
        .await;
    agents[0] = a0;
    submit(&agents).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    // Back on its data directory (on a new port: it dials the agents).
    let (net, _) =
        tapfinger_tests::start_member_dialing(key.clone(), vec![addr0.clone(), addr1.clone()])
            .await;
    let again = tapfinger_coordinator::serve::spawn(cfg, key.clone(), net).unwrap();
    assert_eq!(again.snapshot().state.updates, before);
    // Agent 1 restarts once it is back.
    tokio::time::sleep(Duration::from_secs(1)).await;
    agents[1].kill();
    let (a1, _) = local(1, 2, vec![addr0.clone()]).start().await;
    agents[1] = a1;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    while !updated(&again, before + 2) {
        let s = again.snapshot();
        assert!(s.learning.alive, "learning stopped: {:?}", s.learning);
        assert!(
            tokio::time::Instant::now() < deadline,
            "no update after the restarts: {:?} {:?}",
            s.state,
            s.learning
        );
        if s.inbox_batches == 0 && !s.updating {
            submit(&agents).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let s = again.snapshot();
    assert!(
        s.learning.alive && s.learning.stopped.is_none(),
        "{:?}",
        s.learning
    );
    assert_eq!(s.learning.set_aside, 0, "{:?}", s.learning);
    assert_eq!(s.received_live.len(), 2, "{:?}", s.received_live);
    eprintln!(
        "updates: {before} before the coordinator went away, {} after both restarts; batches set aside {}",
        s.state.updates, s.learning.set_aside
    );
    agents.iter().for_each(|a| a.kill());
    again.kill();
}
