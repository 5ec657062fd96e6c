//! Real agents on loopback: each runs the node core with the agent's default policy (the shipped
//! TapFinger model) in the agent's resource space (cores, GPUs, GiB), the libp2p network (with a
//! cluster key) and an executor — real child processes, or the simulated executor where many
//! tasks must run fast — in this process. Checked from the agents' own state: tasks submitted at
//! different agents all finish exactly once, no agent ever allocates more than its capacity (any
//! kind), no GPU device is handed to two tasks at once, and an agent killed mid-run loses no task.
#![allow(clippy::unwrap_used)]

use libp2p::identity;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;
use tapfinger::TaskId;
use tapfinger::spec::TaskSpec;
use tapfinger_agent::daemon::Agent;
use tapfinger_tests::{Exec, Local, finished, spec, statuses, wait};

async fn agent(
    name: &str,
    bootstrap: Vec<libp2p::Multiaddr>,
    rate: f64,
) -> (Agent, libp2p::Multiaddr) {
    Local::new(name, Exec::Simulated(rate))
        .bootstrap(bootstrap)
        .start()
        .await
}

/// A folder for this test process and an empty journal path in it.
/// A journal's path in a new folder, removed when the folder is dropped.
fn fresh_journal(tag: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix(&format!("{tag}-"))
        .tempdir()
        .unwrap();
    let journal = dir.path().join("tasks.jsonl");
    (dir, journal)
}

async fn agent_with(
    name: &str,
    bootstrap: Vec<libp2p::Multiaddr>,
    exec: Exec,
    keypair: identity::Keypair,
    journal: Option<&Path>,
) -> (Agent, libp2p::Multiaddr) {
    let mut l = Local::new(name, exec).bootstrap(bootstrap);
    l.keypair = keypair;
    l.journal = journal.map(Path::to_path_buf);
    l.start().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_real_tasks_finish_exactly_once_within_capacity() {
    // Real short processes: each reports progress, sleeps, and prints the GPU it was given.
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path();
    let proc = |n: &str| Exec::Processes(logs.join(n));
    let key = identity::Keypair::generate_ed25519;
    let (a, addr) = agent_with("a", vec![], proc("a"), key(), None).await;
    let (b, _) = agent_with("b", vec![addr.clone()], proc("b"), key(), None).await;
    let (c, _) = agent_with("c", vec![addr], proc("c"), key(), None).await;
    let all = [&a, &b, &c];
    let spec = || {
        TaskSpec::from_toml(
            "command = [\"sh\", \"-c\", \"echo 'TAPFINGER progress=0.5'; sleep 0.2; echo gpu=$CUDA_VISIBLE_DEVICES order=$CUDA_DEVICE_ORDER\"]\nmin_demand = { cpu = 1, mem = 1 }\n",
        )
        .unwrap()
    };
    wait(&all, Duration::from_secs(20), "peers", |s| {
        s.iter().all(|st| st.peers.len() == 2)
    })
    .await;
    let mut ids = BTreeSet::new();
    for i in 0..30 {
        let id = all[i % 3].submit(spec()).await.unwrap();
        assert!(ids.insert(id), "duplicate id {id}");
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    // A bad spec is refused with the field named.
    let bad = TaskSpec::from_toml("command = [\"x\"]\nmin_demand = { cpu = 9 }\n").unwrap();
    let e = a.submit(bad).await.unwrap_err();
    assert!(
        matches!(&e, tapfinger_agent::daemon::SubmitError::Refused(s) if s.field.starts_with("min_demand")),
        "{e}"
    );
    wait(&all, Duration::from_secs(60), "30 tasks", |s| {
        finished(s).len() >= 30
    })
    .await;
    // Let late notices arrive, then check: each task finished once, on one agent.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let f = finished(&statuses(&all));
    let unique: BTreeSet<TaskId> = f.iter().copied().collect();
    assert_eq!(f.len(), 30, "some task ran to completion twice: {f:?}");
    assert_eq!(unique, ids);
    let per_agent: Vec<usize> = statuses(&all)
        .iter()
        .map(|s| s.finished_here.len())
        .collect();
    assert!(
        per_agent.iter().filter(|n| **n > 0).count() >= 2,
        "the work was not shared: {per_agent:?}"
    );
    // Every task ran as a process and saw either no GPU or the node's device 7, never a count,
    // numbered as NVML numbers devices (PCI bus order).
    let mut seen = 0;
    for entry in std::fs::read_dir(logs).unwrap() {
        for log in std::fs::read_dir(entry.unwrap().path()).unwrap() {
            let text = std::fs::read_to_string(log.unwrap().path()).unwrap();
            if let Some(line) = text.lines().find(|l| l.starts_with("gpu=")) {
                assert!(
                    line == "gpu= order=PCI_BUS_ID" || line == "gpu=7 order=PCI_BUS_ID",
                    "{line}"
                );
                seen += 1;
            }
        }
    }
    assert_eq!(seen, 30, "every task writes its log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agent_loses_no_task() {
    let (a, addr) = agent("a", vec![], 0.05).await;
    let (b, _) = agent("b", vec![addr.clone()], 0.05).await;
    let (c, _) = agent("c", vec![addr], 0.05).await;
    let all = [&a, &b, &c];
    wait(&all, Duration::from_secs(20), "peers", |s| {
        s.iter().all(|st| st.peers.len() == 2)
    })
    .await;
    let mut ids = BTreeSet::new();
    for i in 0..18 {
        ids.insert(all[i % 3].submit(spec()).await.unwrap());
    }
    let c_id = c.status.borrow().id.unwrap();
    // Wait until c runs something, then kill it (no hand-back, like SIGKILL).
    wait(&all, Duration::from_secs(20), "c to run a task", |s| {
        s[2].used.as_ref().is_some_and(|u| u.get(0) > 0)
    })
    .await;
    let on_c: BTreeSet<TaskId> = c
        .status
        .borrow()
        .tasks
        .iter()
        .filter(|(_, st)| matches!(st, tapfinger::node::TaskState::Running { node, .. } if *node == c_id))
        .map(|(id, _)| *id)
        .collect();
    let done_by_c: BTreeSet<TaskId> = c.status.borrow().finished_here.iter().copied().collect();
    c.kill();
    assert!(!on_c.is_empty());
    let survivors = [&a, &b];
    wait(&survivors, Duration::from_secs(60), "every task", |s| {
        let mut f: BTreeSet<TaskId> = finished(s).into_iter().collect();
        f.extend(done_by_c.iter().copied());
        f == ids
    })
    .await;
    let f = finished(&statuses(&survivors));
    for t in &on_c {
        assert!(
            f.contains(t),
            "{t} was running on the killed agent and never finished"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_recovers_its_journaled_tasks() {
    let (_dir, journal) = fresh_journal("tf-journal");
    let key = identity::Keypair::generate_ed25519();
    // Alone, slow tasks: accept 6, let a few start, then die without a word.
    let (mut a, _) = agent_with(
        "a",
        vec![],
        Exec::Simulated(0.02),
        key.clone(),
        Some(&journal),
    )
    .await;
    wait(&[&a], Duration::from_secs(10), "first heartbeat", |s| {
        s[0].capacity.is_some()
    })
    .await;
    let mut ids = BTreeSet::new();
    for _ in 0..6 {
        ids.insert(a.submit(spec()).await.unwrap());
    }
    wait(&[&a], Duration::from_secs(20), "a task to start", |s| {
        s[0].used.as_ref().is_some_and(|u| u.get(0) > 0)
    })
    .await;
    a.killed().await;
    drop(a);
    // The same identity and journal: every accepted task comes back and finishes.
    let (a2, _) = agent_with("a", vec![], Exec::Simulated(0.2), key, Some(&journal)).await;
    wait(
        &[&a2],
        Duration::from_secs(30),
        "the recovered tasks",
        |s| s[0].finished_here.iter().copied().collect::<BTreeSet<_>>() == ids,
    )
    .await;
    // Numbering continues after the recovered ids.
    let next = a2.submit(spec()).await.unwrap();
    assert!(
        ids.iter().all(|id| *id < next),
        "{next} reuses an id of {ids:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_rejoins_its_live_peers() {
    let (_dir, journal) = fresh_journal("tf-rejoin");
    let (a, addr) = agent("a", vec![], 0.05).await;
    let (b, _) = agent("b", vec![addr.clone()], 0.05).await;
    let key = identity::Keypair::generate_ed25519();
    let mut lc = Local::new("c", Exec::Simulated(0.05)).bootstrap(vec![addr.clone()]);
    lc.keypair = key.clone();
    lc.journal = Some(journal.clone());
    let (c, _) = lc.clone().start().await;
    wait(&[&a, &b, &c], Duration::from_secs(20), "peers", |s| {
        s.iter().all(|st| st.peers.len() == 2)
    })
    .await;
    let mut ids = BTreeSet::new();
    for _ in 0..6 {
        ids.insert(c.submit(spec()).await.unwrap());
    }
    wait(
        &[&a, &b, &c],
        Duration::from_secs(20),
        "c to run a task",
        |s| s[2].used.as_ref().is_some_and(|u| u.get(0) > 0),
    )
    .await;
    let done_by_c: Vec<TaskId> = c.status.borrow().finished_here.clone();
    c.kill();
    wait(
        &[&a, &b],
        Duration::from_secs(20),
        "the survivors to drop c",
        |s| s.iter().all(|st| st.peers.len() == 1),
    )
    .await;
    // Back with the same identity and journal, a new incarnation, dialing a live peer.
    lc.incarnation = 2;
    let (c2, _) = lc.start().await;
    let all = [&a, &b, &c2];
    wait(&all, Duration::from_secs(30), "c to rejoin", |s| {
        s.iter().all(|st| st.peers.len() == 2)
    })
    .await;
    for i in 0..6 {
        ids.insert(all[i % 3].submit(spec()).await.unwrap());
    }
    wait(&all, Duration::from_secs(60), "every task", |s| {
        let f: BTreeSet<TaskId> = finished(s)
            .into_iter()
            .chain(done_by_c.iter().copied())
            .collect();
        f == ids
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut f = finished(&statuses(&all));
    f.extend(done_by_c.iter().copied());
    let unique: BTreeSet<TaskId> = f.iter().copied().collect();
    assert_eq!(
        f.len(),
        unique.len(),
        "a task ran to completion twice: {f:?}"
    );
    assert_eq!(unique, ids);
}

/// A spec refused as too big for every box heard says so when a box this agent knows is not
/// heard at the time (down, or not back yet): the refusal was judged without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_judged_without_a_known_box_says_so() {
    let (a, addr) = agent("a", vec![], 1.0).await;
    let (b, _) = agent("b", vec![addr], 1.0).await;
    wait(&[&a, &b], Duration::from_secs(20), "peers", |s| {
        s.iter().all(|st| st.peers.len() == 1)
    })
    .await;
    let big = || TaskSpec::from_toml("command = [\"x\"]\nmin_demand = { cpu = 9 }\n").unwrap();
    let refused = |e: tapfinger_agent::daemon::SubmitError| match e {
        tapfinger_agent::daemon::SubmitError::Refused(s) => s,
        other => panic!("not a refusal: {other}"),
    };
    let heard_all = refused(a.submit(big()).await.unwrap_err());
    assert_eq!(heard_all.field, "min_demand");
    assert!(!heard_all.message.contains("not heard"), "{heard_all}");
    b.kill();
    wait(&[&a], Duration::from_secs(20), "b gone", |s| {
        s[0].peers.is_empty()
    })
    .await;
    let without_b = refused(a.submit(big()).await.unwrap_err());
    assert_eq!(without_b.field, "min_demand");
    assert!(
        without_b.message.contains("1 known box(es) not heard now"),
        "{without_b}"
    );
    // A refusal that no box could change says nothing of the boxes.
    let no_program = TaskSpec::from_toml("command = [\" \"]\n").unwrap();
    let e = refused(a.submit(no_program).await.unwrap_err());
    assert!(!e.message.contains("not heard"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_task_shows_its_latest_loss_and_that_it_is_converging() {
    use tapfinger_agent::api::router;
    use tapfinger_agent::client::http;
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().to_path_buf();
    let (a, _) = agent_with(
        "a",
        vec![],
        Exec::Processes(logs),
        identity::Keypair::generate_ed25519(),
        None,
    )
    .await;
    let app = router(tapfinger_tests::api_state(&a, None, None));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = l.local_addr().unwrap().to_string();
    tokio::spawn(tapfinger_agent::api::serve_with(
        l,
        app,
        Duration::from_millis(300),
    ));
    wait(&[&a], Duration::from_secs(10), "first heartbeat", |s| {
        s[0].capacity.is_some()
    })
    .await;
    // A loss that falls, then stays flat (one malformed report among them, which is dropped);
    // then the task waits to be looked at.
    let script = "for l in 2.0 1.5 1.2 1.0 0.9 0.9 0.9 bad 0.9 0.9 0.9; do \
                  echo \"TAPFINGER progress=0.5 loss=$l accuracy=0.7\"; sleep 0.1; done; sleep 20";
    let spec = serde_json::json!({"command": ["sh", "-c", script], "min_demand": {"cpu": 1}});
    let (code, body) = http(&api, "POST", "/v1/tasks", Some(spec.to_string()), None)
        .await
        .unwrap();
    assert_eq!(code, 201, "{body}");
    let id: serde_json::Value = serde_json::from_str(&body).unwrap();
    let path = format!("/v1/tasks/{}", id["id"]);
    let converging = |_, body: &str| {
        serde_json::from_str::<serde_json::Value>(body).is_ok_and(|v| v["converging"] == true)
    };
    let (ok, body) = tapfinger_tests::poll_get(&api, &path, 100, converging).await;
    assert!(ok, "never shown converging: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["metrics"]["loss"], 0.9, "{body}");
    assert_eq!(v["metrics"]["accuracy"], 0.7, "{body}");
    let counted = |_, m: &str| m.contains("tapfinger_tasks_converging 1");
    let (ok, _) = tapfinger_tests::poll_get(&api, "/metrics", 30, counted).await;
    assert!(ok, "the metric never showed the converging task");
    let (code, _) = http(&api, "DELETE", &path, None, None).await.unwrap();
    assert_eq!(code, 200);
}

/// The task-volume forecast on a running agent: with an interval of one slot, it shows the
/// last-value fallback (saying why) while the history is short, and RLPTO's ARIMA (+ GRU) once
/// 40 intervals of arrivals have been seen; every outlook is finite and never negative.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_forecasts_arrivals_from_the_series_its_ledger_counts() {
    let mut local = Local::new("a", Exec::Simulated(10.0));
    local.forecast_interval_slots = 1;
    let (a, _) = local.start().await;
    wait(&[&a], Duration::from_secs(10), "first heartbeat", |s| {
        s[0].capacity.is_some()
    })
    .await;
    let mut early = None;
    for i in 0..80 {
        // Two tasks in every other interval (slots of 150 ms), none in between.
        if i % 2 == 0 {
            a.submit(spec()).await.unwrap();
            a.submit(spec()).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        if early.is_none() {
            early = a.status.borrow().forecast.clone();
        }
    }
    let early = early.expect("no forecast while the history was short");
    assert!(early.model.starts_with("last value ("), "{early:?}");
    wait(&[&a], Duration::from_secs(30), "a fitted forecast", |s| {
        s[0].forecast
            .as_ref()
            .is_some_and(|f| f.model.starts_with("arima("))
    })
    .await;
    let f = a.status.borrow().forecast.clone().unwrap();
    eprintln!("{f:?}");
    assert_eq!(f.interval_slots, 1);
    assert!(f.history >= 40, "{f:?}");
    assert_eq!(f.next.len(), 6);
    assert!(f.next.iter().all(|v| v.is_finite() && *v >= 0.0), "{f:?}");
}

/// A task's loss and convergence are shown by every agent, not only the one running it: its
/// runner's heartbeats carry its latest report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_shows_the_loss_and_convergence_of_a_task_running_elsewhere() {
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path();
    let key = identity::Keypair::generate_ed25519;
    let (a, addr) = agent_with("a", vec![], Exec::Processes(logs.join("a")), key(), None).await;
    let (b, _) = agent_with(
        "b",
        vec![addr],
        Exec::Processes(logs.join("b")),
        key(),
        None,
    )
    .await;
    wait(&[&a, &b], Duration::from_secs(20), "peers", |s| {
        s.iter().all(|st| st.peers.len() == 1)
    })
    .await;
    let script = "for l in 2.0 1.5 1.2 0.9 0.9 0.9 0.9 0.9 0.9 0.9; do \
                  echo \"TAPFINGER progress=0.5 loss=$l accuracy=0.7\"; sleep 0.1; done; sleep 20";
    let spec: TaskSpec = serde_json::from_value(serde_json::json!({
        "command": ["sh", "-c", script],
        "min_demand": {"cpu": 1},
        "nodes": ["b"],
    }))
    .unwrap();
    let id = a.submit(spec).await.unwrap();
    wait(
        &[&a],
        Duration::from_secs(30),
        "b's report heard at a",
        |s| {
            s[0].shared_reports
                .get(&id)
                .is_some_and(|r| r.converging && r.metrics.get("loss") == Some(&0.9))
        },
    )
    .await;
    let st = a.status.borrow().clone();
    assert!(!st.reports.contains_key(&id), "a runs the task itself");
    assert_eq!(st.shared_reports[&id].metrics.get("accuracy"), Some(&0.7));
    // The task sleeps on: the agents' shutdown ends it.
    a.shutdown().await;
    b.shutdown().await;
}
