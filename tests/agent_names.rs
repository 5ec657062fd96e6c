//! Tasks and boxes by name: three agents on loopback, eight named tasks of two classes (and two
//! of one name). Every listing carries each task's name, class and the name of the box it ran
//! on; the listing filters by state, name, class and box; the CLI finds a task by a name only
//! it has, and refuses an ambiguous or unknown one, listing the ids.
#![allow(clippy::unwrap_used)]

use std::time::Duration;
use tapfinger::spec::TaskSpec;
use tapfinger_agent::api::TaskPage;
use tapfinger_agent::client::{http, resolve, tasks_table};
use tapfinger_tests::{Exec, Local, finished, serve_api, statuses, wait};

fn named(name: &str, class: &str) -> TaskSpec {
    TaskSpec::from_toml(&format!(
        "name = \"{name}\"\ntype = \"{class}\"\ncommand = [\"train\"]\nmin_demand = {{ cpu = 1, mem = 1 }}\n"
    ))
    .unwrap()
}

async fn page(api: &str, query: &str) -> TaskPage {
    let (code, body) = http(api, "GET", &format!("/v1/tasks?{query}"), None, None)
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_listed_filtered_and_found_by_name() {
    let locals = ["box-1", "box-2", "box-3"].map(|name| Local::new(name, Exec::Simulated(0.05)));
    let agents = tapfinger_tests::start_all(locals.into()).await;
    let all: Vec<_> = agents.iter().collect();
    let a = &agents[0];
    let mut ids = Vec::new();
    for i in 0..8 {
        let class = if i % 2 == 0 { "etl" } else { "train-mlp" };
        ids.push(a.submit(named(&format!("job{i}"), class)).await.unwrap());
    }
    let dups = [
        a.submit(named("dup", "etl")).await.unwrap(),
        a.submit(named("dup", "etl")).await.unwrap(),
    ];
    // Finished, and known as finished to the agent asked below.
    wait(&all, Duration::from_secs(60), "every task to finish", |s| {
        finished(s).len() == 10
            && s[0].tasks.len() == 10
            && s[0]
                .tasks
                .values()
                .all(|t| matches!(t, tapfinger::node::TaskState::Done { .. }))
    })
    .await;
    let api = serve_api(a, None).await;
    // Names, classes and boxes in every entry.
    let p = page(&api, "").await;
    assert_eq!(p.tasks.len(), 10);
    let boxes = ["box-1", "box-2", "box-3"];
    for t in &p.tasks {
        assert!(t.name.starts_with("job") || t.name == "dup", "{t:?}");
        assert!(["etl", "train-mlp"].contains(&t.class.as_str()), "{t:?}");
        let b = t.box_name.as_deref().unwrap_or("");
        assert!(boxes.contains(&b), "ran on a named box: {t:?}");
    }
    // Every box ran some (the evidence that names are the runners', not the answering box's).
    let st = statuses(&all);
    for (i, b) in boxes.iter().enumerate() {
        let ran = st[i].finished_here.len();
        let listed = p
            .tasks
            .iter()
            .filter(|t| t.box_name.as_deref() == Some(b))
            .count();
        assert_eq!(listed, ran, "{b}");
    }
    // Filters.
    let one = page(&api, "name=job3").await;
    assert_eq!(
        (one.total, one.tasks[0].id, one.tasks[0].class.as_str()),
        (1, ids[3].0, "train-mlp")
    );
    assert_eq!(page(&api, "class=etl").await.total, 6);
    let ok = page(&api, "state=succeeded").await;
    assert_eq!(
        ok.total,
        10,
        "{:?}",
        p.tasks.iter().map(|t| &t.status).collect::<Vec<_>>()
    );
    assert_eq!(page(&api, "state=pending").await.total, 0);
    let on_1 = page(&api, "box=box-1").await;
    assert_eq!(on_1.total, st[0].finished_here.len());
    let (code, body) = http(&api, "GET", "/v1/tasks?state=lost", None, None)
        .await
        .unwrap();
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("\"state\""), "{body}");
    // The table shows names and boxes.
    let table = tasks_table(&serde_json::to_value(&one).unwrap()).unwrap();
    assert!(
        table.contains("job3") && table.contains("train-mlp"),
        "{table}"
    );
    assert!(boxes.iter().any(|b| table.contains(b)), "{table}");
    // The CLI's lookup: by id, by a name only one task has, and not by an ambiguous one.
    assert_eq!(resolve(&api, None, "job3").await.unwrap(), ids[3]);
    assert_eq!(
        resolve(&api, None, &ids[5].0.to_string()).await.unwrap(),
        ids[5]
    );
    let e = resolve(&api, None, "dup").await.unwrap_err().to_string();
    assert!(
        e.contains(&dups[0].0.to_string()) && e.contains(&dups[1].0.to_string()),
        "{e}"
    );
    let e = resolve(&api, None, "job99").await.unwrap_err().to_string();
    assert!(e.contains("job99"), "{e}");
}

/// `logs --follow`: what a running task writes arrives as it writes it, each line once and in
/// order, until the task ends; its end (succeeded or failed) is what the follower returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_task_s_output_arrives_once_and_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let logs = tmp.path().join("logs");
    let mut local = Local::new("box-1", Exec::Processes(logs.clone()));
    local.policy = "min".into();
    let (agent, _) = local.start().await;
    let app = tapfinger_agent::api::router(tapfinger_tests::api_state(&agent, None, Some(logs)));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = l.local_addr().unwrap().to_string();
    tokio::spawn(tapfinger_agent::api::serve(l, app));
    let task = |name: &str, exit: i32| {
        let mut s = named(name, "etl");
        s.command = vec![
            "sh".into(),
            "-c".into(),
            format!(
                "for i in 1 2 3 4 5 6; do echo line $i; sleep 0.2; done; echo oops >&2; exit {exit}"
            ),
        ];
        s
    };
    let ok = agent.submit(task("talker", 0)).await.unwrap();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = tapfinger_agent::client::follow_logs(
        &api,
        None,
        ok,
        Duration::from_millis(100),
        &mut out,
        &mut err,
    )
    .await
    .unwrap();
    assert!(
        matches!(status, tapfinger_agent::api::TaskStatus::Succeeded(_)),
        "{status:?}"
    );
    let out = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("line")).collect();
    assert_eq!(
        lines,
        ["line 1", "line 2", "line 3", "line 4", "line 5", "line 6"],
        "{out}"
    );
    assert!(String::from_utf8(err).unwrap().contains("oops"));
    let bad = agent.submit(task("failer", 3)).await.unwrap();
    let status = tapfinger_agent::client::follow_logs(
        &api,
        None,
        bad,
        Duration::from_millis(100),
        &mut Vec::new(),
        &mut Vec::new(),
    )
    .await
    .unwrap();
    assert!(
        matches!(&status, tapfinger_agent::api::TaskStatus::Failed(e) if e.exit_code == Some(3)),
        "{status:?}"
    );
    agent.shutdown().await;
}
