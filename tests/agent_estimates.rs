//! Start and finish estimates from a real agent (simulated executor) on loopback: after three
//! runs of a recurring job finished, three more are submitted to a box that holds one at a
//! time; `GET /v1/tasks` shows the running one's expected finish, and each waiting one's
//! expected start and finish, one after the other, each as long as the other (the ledger's
//! estimate: `tapfinger::ledger::Ledger::expected`); once they ran, the box says how far its
//! start estimates were from the starts (`GET /v1/node`). These tasks ask for no GPU, so their
//! expected work is their class's mean, not a learned history (`docs/AGENT.md`, "Sizes").
#![allow(clippy::unwrap_used)]

use std::time::Duration;
use tapfinger_tests::{Exec, Local, poll_get, serve_api, wait};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_tasks_show_when_they_are_expected_to_start_and_finish() {
    let (a, _) = Local::new("a", Exec::Simulated(0.004)).start().await;
    let api = serve_api(&a, None).await;
    wait(&[&a], Duration::from_secs(10), "first heartbeat", |s| {
        s[0].capacity.is_some()
    })
    .await;
    // The whole box (4 cores) each: they run one at a time.
    let job = r#"{"command": ["train"], "min_demand": {"cpu": 4, "mem": 1},
                  "submitter": "ada", "job": "nightly"}"#;
    let submit = || async {
        let (code, body) =
            tapfinger_agent::client::http(&api, "POST", "/v1/tasks", Some(job.into()), None)
                .await
                .unwrap();
        assert_eq!(code, 201, "{body}");
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
            .as_u64()
            .unwrap()
    };
    for _ in 0..3 {
        submit().await;
    }
    wait(
        &[&a],
        Duration::from_secs(60),
        "three runs of the job",
        |s| s[0].finished_here.len() == 3,
    )
    .await;
    let ids = [submit().await, submit().await, submit().await];
    // One of them runs (which one: the box's own order among tasks of one slot), the other
    // two wait.
    let split = |b: &str| {
        let v: serde_json::Value = serde_json::from_str(b).unwrap();
        let ours: Vec<serde_json::Value> = v["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| ids.iter().any(|id| t["id"] == *id))
            .cloned()
            .collect();
        let running: Vec<_> = ours
            .iter()
            .filter(|t| t["state"] == "running")
            .cloned()
            .collect();
        let mut waiting: Vec<_> = ours
            .iter()
            .filter(|t| t["state"] == "pending" && t["expected_start_s"].is_number())
            .cloned()
            .collect();
        waiting.sort_by(|a, b| {
            a["expected_start_s"]
                .as_f64()
                .unwrap()
                .total_cmp(&b["expected_start_s"].as_f64().unwrap())
        });
        (running, waiting)
    };
    let (ok, body) = poll_get(&api, "/v1/tasks", 100, |_, b| {
        let (r, w) = split(b);
        r.len() == 1 && w.len() == 2
    })
    .await;
    assert!(ok, "no estimates shown: {body}");
    let (running, waiting) = split(&body);
    let (run, next, last) = (&running[0], &waiting[0], &waiting[1]);
    assert!(run["expected_start_s"].is_null(), "started: {run}");
    let f = |t: &serde_json::Value, k: &str| t[k].as_f64().unwrap();
    // One after the other: the next starts when the running one is expected to end, the last
    // when the next does; each waiting run as long as the other (one class, one estimate).
    assert!(
        (f(next, "expected_start_s") - f(run, "expected_finish_s")).abs() < 0.11,
        "{body}"
    );
    assert!(
        (f(last, "expected_start_s") - f(next, "expected_finish_s")).abs() < 0.11,
        "{body}"
    );
    let took = |t: &serde_json::Value| f(t, "expected_finish_s") - f(t, "expected_start_s");
    assert!(
        took(next) > 0.0 && (took(next) - took(last)).abs() < 0.11,
        "{body}"
    );
    // Once the two that waited have started, the box says how far its start estimates were
    // from their starts (`GET /v1/node`, as `tapfinger-agent node` and the dashboard show it).
    wait(&[&a], Duration::from_secs(60), "the six runs", |s| {
        s[0].finished_here.len() == 6
    })
    .await;
    let (code, node) = tapfinger_agent::client::http(&api, "GET", "/v1/node", None, None)
        .await
        .unwrap();
    assert_eq!(code, 200, "{node}");
    let node: serde_json::Value = serde_json::from_str(&node).unwrap();
    let e = &node["start_estimates"];
    assert!(e["tasks"].as_u64().unwrap() >= 2, "{node}");
    let median = e["median_abs_error_s"].as_f64().unwrap();
    assert!(median.is_finite() && median >= 0.0, "{node}");
    assert!(e["p90_abs_error_s"].as_f64().unwrap() >= median, "{node}");
    let lines = tapfinger_agent::client::node_lines(&node).unwrap();
    assert!(lines.contains("start_estimates"), "{lines}");
    // A submitter name longer than any field may be is refused, naming it.
    let long = format!(
        r#"{{"command": ["train"], "min_demand": {{"cpu": 1}}, "submitter": "{}"}}"#,
        "x".repeat(5000)
    );
    let (code, body) = tapfinger_agent::client::http(&api, "POST", "/v1/tasks", Some(long), None)
        .await
        .unwrap();
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("submitter"), "{body}");
}
