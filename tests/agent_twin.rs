//! The cluster's twin from real agents: three agents with the simulated executor (its speeds
//! hidden from them: they see progress only) run two classes of tasks; one agent's observed
//! workload (`Command::Workload`, what `GET /v1/workload` and `tapfinger-agent workload export`
//! serve) holds every task with its runs and outcome, every box, and the estimator's figures
//! for both classes, and `GET /v1/workload` serves the same tasks to a client with the token;
//! `tapfinger-sim import --format tapfinger`'s scenario of it loads, and
//! replaying it with the policy the agents ran gives an average JCT near the one they measured.
//! Each task keeps its submitter and job, and the workload carries the agent's size history.
#![allow(clippy::unwrap_used)]

use std::time::Duration;
use tapfinger::spec::TaskSpec;
use tapfinger_agent::daemon::Command;
use tapfinger_tests::{Exec, Local, finished, start_all, statuses, wait};

/// How far the twin's replay may be from what the agents measured (average JCT, in slots):
/// the agents' slots are wall-clock rounds whose length jitters on a loaded test machine, and
/// each task's size is inferred from its progress reports (measured 2026-12-02: 36.9 slots
/// measured, 36.4 on the twin).
const TOLERANCE: f64 = 0.3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_twin_an_agent_exports_replays_what_the_cluster_ran() {
    let agents = start_all(
        ["a", "b", "c"]
            .map(|n| Local::new(n, Exec::Simulated(0.004)))
            .to_vec(),
    )
    .await;
    let all: Vec<&_> = agents.iter().collect();
    // The big class holds each box's GPU: its work is counted in GPUs, the kind the size
    // history learns in (a CPU-only class's is not counted on a GPU cluster).
    let spec = |class: &str, cpu: u32, gpu: u32| {
        TaskSpec::from_toml(&format!(
            "command = [\"train\"]\ntype = \"{class}\"\nsubmitter = \"ml-team\"\njob = \"{class}-nightly\"\nmin_demand = {{ cpu = {cpu}, gpu = {gpu}, mem = 1 }}\nmax_demand = {{ cpu = 4, gpu = {gpu}, mem = 1 }}\n"
        ))
        .unwrap()
    };
    for i in 0..24 {
        let s = if i % 2 == 0 {
            spec("small", 1, 0)
        } else {
            spec("big", 2, 1)
        };
        all[i % 3].submit(s).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait(&all, Duration::from_secs(120), "24 tasks", |s| {
        finished(s).len() >= 24
    })
    .await;
    // A slot or two for the last outcomes to reach every ledger.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    agents[0]
        .commands
        .send(Command::Workload(1_000_000, tx))
        .await
        .unwrap();
    let w = *rx.await.unwrap();
    assert_eq!(w.tasks.len(), 24, "every task, whichever agent took it");
    assert_eq!(w.nodes.len(), 3, "every box");
    assert!(
        w.tasks
            .iter()
            .all(|t| t.finished.is_some() && !t.runs.is_empty())
    );
    // Who submitted each task and its recurring job, and the size history the agent learned
    // of the finished ones: the GPU job's twelve runs.
    assert!(w.tasks.iter().all(|t| {
        t.identity
            .as_ref()
            .is_some_and(|i| i.submitter.as_deref() == Some("ml-team"))
    }));
    let book = w
        .sizes
        .as_ref()
        .expect("the workload carries the size book");
    assert_eq!(book.keys(tapfinger::sizes::Level::Job), 1);
    assert!(book.learned() >= 12, "{} sizes learned", book.learned());
    let names: Vec<&str> = w.classes.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    for c in &w.classes {
        let m = &c.speeds[0];
        assert!(
            m.samples > 0,
            "{}: the estimator learned from progress",
            c.name
        );
        assert!(m.rows.iter().all(|(_, s)| s.is_finite() && *s > 0.0));
    }
    // The API serves the same workload, and asks for the token it is given.
    let api = tapfinger_tests::serve_api(&agents[0], Some("secret".into())).await;
    let (status, _) = tapfinger_agent::client::http(&api, "GET", "/v1/workload", None, None)
        .await
        .unwrap();
    assert_eq!(status, 401, "the workload needs the token");
    let (status, body) = tapfinger_agent::client::http(
        &api,
        "GET",
        "/v1/workload?since_s=86400",
        None,
        Some("secret"),
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let served: tapfinger::twin::Workload = serde_json::from_str(&body).unwrap();
    assert_eq!(served.format, tapfinger::twin::FORMAT);
    let ids = |w: &tapfinger::twin::Workload| w.tasks.iter().map(|t| t.id).collect::<Vec<_>>();
    assert_eq!(ids(&served), ids(&w));
    let measured = w.jcts().iter().sum::<u64>() as f64 / w.tasks.len() as f64;
    // The file form crosses from the agent to the simulator.
    let w: tapfinger::twin::Workload =
        serde_json::from_str(&serde_json::to_string(&w).unwrap()).unwrap();
    let toml = tapfinger_sim::twin::scenario_toml(&w, "twin").unwrap();
    let sc = tapfinger_sim::Scenario::from_toml(&toml, "twin", None)
        .unwrap_or_else(|e| panic!("{e}\n{toml}"));
    let sim = tapfinger_sim::Simulator::new(sc);
    let ps = tapfinger_sim::policies::learned(&sim, None).unwrap();
    let r = sim.run(ps, 0).unwrap();
    let twin = tapfinger_sim::metrics::summarize(&r, &sim.scenario().kind_names()).avg_jct;
    eprintln!("average JCT: {measured:.2} slots measured by the agents, {twin:.2} on their twin");
    assert!(
        (twin / measured - 1.0).abs() <= TOLERANCE,
        "{measured:.2} measured vs {twin:.2} on the twin\n{toml}"
    );
    drop(statuses(&all));
}
