//! The web dashboard in a real headless browser: three agents on loopback, each serving its API
//! and page; Chromium (Debian's `chromium`, driven through `chromedriver` over the WebDriver
//! protocol) opens one agent's page **once** and the test reads what the page itself shows as it
//! updates: the three boxes, and a submitted task moving from the queue to running to done.
//! The browser and its driver are installed by `.ci/run`; without them the test fails, saying so.
#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tapfinger::spec::TaskSpec;
use tapfinger_agent::client::http;
use tapfinger_tests::{Exec, Local, serve_api, wait};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A WebDriver session with a headless Chromium; the driver is killed on drop.
struct Browser {
    driver: std::process::Child,
    addr: String,
    session: String,
    profile: std::path::PathBuf,
}

impl Browser {
    async fn start() -> Self {
        for bin in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                std::path::Path::new(bin).exists(),
                "{bin} is missing: this test needs Debian's chromium and chromium-driver (CI installs them)"
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = std::process::Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let addr = format!("127.0.0.1:{port}");
        let profile = std::env::temp_dir().join(format!("tf-chromium-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&profile);
        // The flags keep Chromium off the network (a CI box may have none) and out of a sandbox
        // that needs privileges a test runner may not have.
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--disable-background-networking", "--disable-component-update",
                         "--disable-sync", "--no-first-run", "--disable-quic",
                         format!("--user-data-dir={}", profile.display())]
            }
        }}});
        let t0 = Instant::now();
        let session = loop {
            match http(&addr, "POST", "/session", Some(caps.to_string()), None).await {
                Ok((200, body)) => {
                    let v: Value = serde_json::from_str(&body).unwrap();
                    break v["value"]["sessionId"].as_str().unwrap().to_string();
                }
                Ok((code, body)) => panic!("chromedriver refused a session: {code} {body}"),
                Err(e) if t0.elapsed() < Duration::from_secs(20) => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("chromedriver did not come up: {e}"),
            }
        };
        Self {
            driver,
            addr,
            session,
            profile,
        }
    }

    async fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let path = format!("/session/{}{path}", self.session);
        let (code, text) = http(&self.addr, method, &path, Some(body.to_string()), None)
            .await
            .unwrap();
        assert_eq!(code, 200, "{method} {path}: {text}");
        serde_json::from_str::<Value>(&text).unwrap()["value"].clone()
    }

    async fn open(&self, url: &str) {
        self.call("POST", "/url", json!({ "url": url })).await;
    }

    /// Run `script` in the page (no reload) and return its value.
    async fn eval(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            json!({ "script": script, "args": [] }),
        )
        .await
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ending the session makes chromedriver close Chromium; killing the driver alone left
        // Chromium's processes running, orphaned, after every run of this test.
        use std::io::{Read as _, Write as _};
        if let Ok(mut s) = std::net::TcpStream::connect(&self.addr) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let _ = write!(
                s,
                "DELETE /session/{} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                self.session, self.addr
            );
            let _ = s.read_to_end(&mut Vec::new());
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

fn big() -> TaskSpec {
    // A whole box's CPUs (Local boxes have 4 cores, 1 GPU, 8 GiB).
    TaskSpec::from_toml("command = [\"train\"]\nmin_demand = { cpu = 4, mem = 1 }\n").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_boxes_and_a_task_from_queue_to_done() {
    // About 5 s per 4-core task: progress 0.001 × 4 cores per 20 ms tick.
    let locals = ["box-a", "box-b", "box-c"].map(|name| {
        let mut local = Local::new(name, Exec::Simulated(0.001));
        if name == "box-b" {
            local.labels = [("gpu_model".to_string(), "Test GPU".to_string())].into();
        }
        local
    });
    let agents = tapfinger_tests::start_all(locals.into()).await;
    let all: Vec<_> = agents.iter().collect();
    // Agent a's API, with a token: the page must read without it.
    let a = &agents[0];
    let api = serve_api(a, Some("secret".into())).await;
    let (code, _) = http(&api, "GET", "/v1/tasks", None, None).await.unwrap();
    assert_eq!(code, 401, "the rest of the API still needs the token");

    let browser = Browser::start().await;
    browser.open(&format!("http://{api}/")).await;
    let boxes = "return [...document.querySelectorAll('#boxes tbody tr')].map(r => r.dataset.box)";
    let t0 = Instant::now();
    loop {
        let v = browser.eval(boxes).await;
        if v == json!(["box-a", "box-b", "box-c"]) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "boxes shown: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Each box's GPU model, from its labels (box-b's, as its heartbeats carry them).
    let models =
        "return [...document.querySelectorAll('#boxes tbody tr')].map(r => r.cells[1].textContent)";
    assert_eq!(browser.eval(models).await, json!(["", "Test GPU", ""]));

    let before = charts_drawn(&browser).await;

    // Running tasks show their share and what they use of their GPUs.
    let heads =
        "return [...document.querySelectorAll('#running thead th')].map(h => h.textContent)";
    assert_eq!(
        browser.eval(heads).await,
        json!([
            "task",
            "name",
            "box",
            "share",
            "GPU use",
            "progress",
            "ends in (est.)",
            ""
        ])
    );

    // Fill every box, then submit the task to follow: it must queue until a box is free.
    for _ in 0..3 {
        a.submit(big()).await.unwrap();
    }
    wait(&all, Duration::from_secs(20), "the boxes to fill", |s| {
        s[0].tasks
            .values()
            .filter(|t| matches!(t, tapfinger::node::TaskState::Running { .. }))
            .count()
            == 3
    })
    .await;
    task_view(&browser, a).await;
    let id = a.submit(big()).await.unwrap();
    let state = format!(
        "const r = document.querySelector('tr[data-task=\"{}\"]'); return r ? r.dataset.state : null",
        id.0
    );
    // While it waits, its row says when it is expected to start (the agent's estimate).
    let starts = format!(
        "const r = document.querySelector('tr[data-task=\"{}\"][data-state=\"queued\"]'); \
         return r ? r.cells[6].textContent : null",
        id.0
    );
    let mut seen: Vec<String> = Vec::new();
    let mut estimates: Vec<String> = Vec::new();
    let t0 = Instant::now();
    while seen.last().map(String::as_str) != Some("succeeded") {
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "states seen: {seen:?}"
        );
        if let Value::String(s) = browser.eval(&state).await
            && seen.last() != Some(&s)
        {
            seen.push(s);
        }
        if let Value::String(e) = browser.eval(&starts).await {
            estimates.push(e);
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert!(
        estimates.iter().any(|e| e.starts_with('~')),
        "no start estimate shown while it queued: {estimates:?}"
    );
    assert_eq!(
        seen,
        ["queued", "running", "succeeded"],
        "one page, updating by itself"
    );
    charts_moved(&browser, before).await;

    // Its row names it (no name in its spec: its program's) and the box that ran it.
    let cells = format!(
        "return [...document.querySelector('tr[data-task=\"{}\"]').cells].map(c => c.textContent)",
        id.0
    );
    let v = browser.eval(&cells).await;
    assert_eq!(v[1], json!("train"), "{v}");
    assert!(
        ["box-a", "box-b", "box-c"].contains(&v[3].as_str().unwrap_or("")),
        "{v}"
    );
    // The queue row gave its position and wait; the page shows the policy deciding too.
    let policy = browser
        .eval("return document.getElementById('policy').textContent")
        .await;
    assert_eq!(policy, json!("tapfinger"));
    // The tasks' class (they name none) with what the estimator learned of it from their
    // progress.
    let classes = "return [...document.querySelectorAll('#classes tbody tr')].map(r => \
                   [r.dataset.class, Number(r.children[1].textContent)])";
    let v = browser.eval(classes).await;
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 1, "classes shown: {v}");
    assert_eq!(rows[0][0], json!(""), "classes shown: {v}");
    assert!(rows[0][1].as_f64().unwrap() > 0.0, "no samples shown: {v}");
}

/// The six charts of the last hour, drawn from the agent's history (uPlot, served by the
/// agent); how many samples the tasks chart has so far.
async fn charts_drawn(browser: &Browser) -> u64 {
    // The charts of the last hour, drawn from the agent's history (uPlot, served by the agent).
    let drawn = "return typeof charts === 'undefined' ? [] : Object.keys(charts).sort()";
    let t0 = Instant::now();
    loop {
        let v = browser.eval(drawn).await;
        if v.as_array().is_some_and(|a| a.len() == 6) {
            assert_eq!(
                v,
                json!([
                    "chart-cpu",
                    "chart-gpu",
                    "chart-jct",
                    "chart-mem",
                    "chart-queue",
                    "chart-tasks"
                ])
            );
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "charts drawn: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let canvases = "return document.querySelectorAll('.chart canvas').length";
    assert!(browser.eval(canvases).await.as_u64().unwrap_or(0) >= 6);
    let points = "return charts['chart-tasks'].plot.data[0].length";
    browser.eval(points).await.as_u64().unwrap()
}

/// The charts moved while the tasks ran: more samples than `before`, and tasks seen running and
/// finishing.
async fn charts_moved(browser: &Browser, before: u64) {
    // The charts moved while the tasks ran: more samples, and tasks seen running and finishing.
    let moved = "const d = charts['chart-tasks'].plot.data; \
                 return [d[0].length, Math.max(...d[1]), d[2].reduce((a, b) => a + b, 0)]";
    let t0 = Instant::now();
    loop {
        let v = browser.eval(moved).await;
        let n = |i: usize| v[i].as_f64().unwrap_or(0.0);
        if n(0) > before as f64 && n(1) > 0.0 && n(2) > 0.0 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "charts: {v} (before: {before})"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A task running on agent `a`'s box: its own view, from its row's link, with its progress
/// over time.
async fn task_view(browser: &Browser, a: &tapfinger_agent::daemon::Agent) {
    // A task running on this box: its own view, from its row's link, with its progress over time.
    let st = a.status.borrow().clone();
    let here = st
        .tasks
        .iter()
        .find_map(|(id, t)| match t {
            tapfinger::node::TaskState::Running { node, .. } if Some(*node) == st.id => Some(*id),
            _ => None,
        })
        .expect("one of the three runs on box-a");
    let click = format!(
        "const a = document.querySelector('a[href=\"#task-{}\"]'); if (a) a.click(); return !!a",
        here.0
    );
    let shown = "const c = charts['chart-task-progress']; \
                 return !document.getElementById('task').hidden && !!c && c.plot.data[0].length > 0";
    let t0 = Instant::now();
    loop {
        if browser.eval(&click).await == json!(true) && browser.eval(shown).await == json!(true) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "the task's own view"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Its spec (its command) only with the token, which the page is then given.
    let spec = "return document.getElementById('task-spec').textContent";
    let v = browser.eval(spec).await;
    assert!(v.as_str().unwrap_or("").contains("API token"), "{v}");
    browser
        .eval("sessionStorage.setItem('tapfinger-token', 'secret'); showTask(); return true")
        .await;
    let t0 = Instant::now();
    loop {
        let v = browser.eval(spec).await;
        if v.as_str().unwrap_or("").contains("\"train\"") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "spec shown: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Forget the token again: cancel buttons appear with it, and the rest of the test reads
    // the page as anyone would.
    browser
        .eval("sessionStorage.removeItem('tapfinger-token'); return true")
        .await;
}
