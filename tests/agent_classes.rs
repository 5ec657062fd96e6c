//! What the speed estimator holds of each task class, on a real agent (`GET /v1/classes`): the
//! tasks of a named class run on the simulated executor at a speed that grows with the cores
//! they hold, and the agent's API then names the class, counts the samples its progress gave and
//! estimates its speed at its minimum and at twice it close to the executor's. Before any task of
//! a class has run, the class is not listed.
#![allow(clippy::unwrap_used)]

use std::time::Duration;
use tapfinger::spec::TaskSpec;
use tapfinger_agent::api::Classes;
use tapfinger_tests::{Exec, Local, finished, serve_api, wait};

/// A task of class `class` needing one core and one memory unit, that may use the box's four.
fn task(class: &str) -> TaskSpec {
    TaskSpec::from_toml(&format!(
        "command = [\"x\"]\ntype = \"{class}\"\nmin_demand = {{ cpu = 1, mem = 1 }}\n\
         max_demand = {{ cpu = 4, mem = 1 }}\n"
    ))
    .unwrap()
}

/// `GET /v1/classes` of the agent's API served on `api`.
async fn classes(api: &str) -> Classes {
    let (code, body) = tapfinger_agent::client::http(api, "GET", "/v1/classes", None, None)
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_shows_what_the_estimator_learned_of_a_class() {
    // Progress per 20 ms tick: a slot (150 ms) alone at one core does 0.04 of a task, at four
    // 0.16 (linear in cores), so a task takes a few slots and is re-shared as others come.
    let speed: tapfinger_agent::exec::SpeedFn =
        std::sync::Arc::new(|_: &TaskSpec, a: &tapfinger_agent::exec::Allocation| {
            0.04 / 7.5 * a.cpus
        });
    let (a, _) = Local::new("a", Exec::Speed(speed)).start().await;
    let api = serve_api(&a, None).await;
    assert!(
        classes(&api).await.classes.is_empty(),
        "a class listed before any task was submitted"
    );

    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(a.submit(task("resnet-finetune")).await.unwrap());
        // Arrivals a slot or two apart, so that the running tasks' shares change.
        tokio::time::sleep(Duration::from_millis(150 * (1 + i % 2))).await;
    }
    wait(&[&a], Duration::from_secs(60), "the tasks", |s| {
        ids.iter().all(|id| finished(s).contains(id))
    })
    .await;

    let got = classes(&api).await.classes;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].name, "resnet-finetune");
    let c = &got[0].estimate;
    assert_eq!(c.min, [1.0, 0.0, 1.0]);
    assert!(c.fitted && c.samples > 0 && c.hints == 0, "{c:?}");
    eprintln!("{c:?}");
    // Alone at one core a task takes 25 slots, at two 12.5. A run's first slot holds the time
    // from the decision to the task's first progress (the slot's rounds, the launch), which the
    // estimator measures as its start-up (`start_cost`) and keeps out of the speed samples and
    // pairs: counted, it made the class look several times slower at its minimum.
    assert!(
        (c.slots_at_min - 25.0).abs() < 0.25 * 25.0,
        "alone at one core: {c:?}"
    );
    let scale = c.slots_at_double / c.slots_at_min;
    assert!(
        (0.4..0.6).contains(&scale),
        "twice the cores not estimated about twice as fast: {c:?}"
    );
    // The status the loop publishes is what the API served.
    assert_eq!(a.status.borrow().estimates, got);
}
