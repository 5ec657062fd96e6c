//! What the tests that run agent processes on 127.0.0.1 share: free ports, one HTTP request to
//! an agent's API, waiting for a condition, and agent processes killed when the test ends.
// Each test file uses some of them.
#![allow(dead_code)]

use std::process::Child;
use std::time::{Duration, Instant};

/// A port the system had free, never one handed out before in this process: the port is
/// released before an agent binds it, so the system may offer it again, and two agents of one
/// cluster given the same port fail to start. Another process may still take it meanwhile; that
/// this does not prevent.
pub(crate) fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if GIVEN.lock().unwrap().insert(port) {
            return port;
        }
    }
}

/// One request to the API at `api` (no token): its status and body, or `None` when it did not
/// answer within 5 s.
pub(crate) fn http(
    api: &str,
    method: &str,
    path: &str,
    body: Option<String>,
) -> Option<(u16, String)> {
    http_with(api, method, path, body, None)
}

/// [`http`] with a bearer token.
pub(crate) fn http_with(
    api: &str,
    method: &str,
    path: &str,
    body: Option<String>,
    token: Option<&str>,
) -> Option<(u16, String)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(5),
            tapfinger_agent::client::http(api, method, path, body, token),
        )
        .await
        .ok()?
        .ok()
    })
}

/// `GET path` as JSON, if it answered 200.
pub(crate) fn json(api: &str, path: &str) -> Option<serde_json::Value> {
    let (code, body) = http(api, "GET", path, None)?;
    (code == 200).then(|| serde_json::from_str(&body).ok())?
}

/// Wait up to `limit` for `done`, polling every 100 ms; a timeout fails the test, naming `what`.
pub(crate) fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The agent binary `bin` as box `name` on 127.0.0.1 (libp2p on `p2p`, the API at `api`), its
/// data directory `dir/data`, short slots and heartbeats, deciding with `policy`, its output
/// appended to `dir/agent.log`; the API answering once started ([`start_agent`]).
pub(crate) fn agent_command(
    bin: &str,
    name: &str,
    dir: &std::path::Path,
    p2p: u16,
    api: &str,
    policy: &str,
) -> std::process::Command {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("agent.log"))
        .unwrap();
    let mut c = std::process::Command::new(bin);
    c.args(["run", "--name", name])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--listen", &format!("/ip4/127.0.0.1/tcp/{p2p}")])
        .args(["--api", api, "--policy", policy])
        .args(["--set", "slot_ms=300", "--set", "round_ms=100"])
        .args(["--set", "heartbeat_ms=100"])
        .env("RUST_LOG", "info,libp2p=warn")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    c
}

/// The agent binary `bin` as box `name` on `p2p`/`api` with data in `dir/<name>`, the label `site=<name>`, dialling
/// `peers`.
pub(crate) fn peer_agent(
    bin: &str,
    dir: &std::path::Path,
    name: &str,
    p2p: u16,
    api: &str,
    peers: &[u16],
) -> std::process::Command {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{name}.log")))
        .unwrap();
    let mut c = std::process::Command::new(bin);
    c.args(["run", "--name", name])
        .arg("--data-dir")
        .arg(dir.join(name))
        .args(["--listen", &format!("/ip4/127.0.0.1/tcp/{p2p}")])
        .args(["--api", api, "--policy", "first-fit-max"])
        .args(["--set", "slot_ms=300", "--set", "round_ms=100"])
        .args([
            "--set",
            "heartbeat_ms=100",
            "--set",
            &format!("labels.site=\"{name}\""),
        ])
        .env("RUST_LOG", "info,libp2p=warn")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    for p in peers {
        c.args(["--bootstrap", &format!("/ip4/127.0.0.1/tcp/{p}")]);
    }
    c
}

/// Two boxes `a` and `b` ([`peer_agent`], data in `dir/a` and `dir/b`) dialling each other, once
/// connected: the agents, and each one's libp2p port and API address (to start it again).
pub(crate) fn peer_pair(bin: &str, dir: &std::path::Path) -> (Agent, Agent, [(u16, String); 2]) {
    let (pa, pb) = (free_port(), free_port());
    let (api_a, api_b) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let a = start_agent(peer_agent(bin, dir, "a", pa, &api_a, &[pb]), &api_a);
    let b = start_agent(peer_agent(bin, dir, "b", pb, &api_b, &[pa]), &api_b);
    wait_until(Duration::from_secs(20), "a and b connected", || {
        json(&api_a, "/v1/node").is_some_and(|n| n["peers"] == 1)
    });
    (a, b, [(pa, api_a), (pb, api_b)])
}

/// Start `cmd` (an agent) and wait up to 30 s for its API at `api` to answer.
pub(crate) fn start_agent(mut cmd: std::process::Command, api: &str) -> Agent {
    let agent = Agent(cmd.spawn().unwrap());
    wait_until(Duration::from_secs(30), "the API", || {
        json(api, "/v1/node").is_some()
    });
    agent
}

/// An agent process, killed (and reaped) when dropped.
pub(crate) struct Agent(pub(crate) Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
