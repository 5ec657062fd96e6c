//! The fault harness's cluster: five real agent processes in namespaces of their own
//! ([`super::net`]), their APIs, and what the harness asks of them (submit, kill, restart,
//! settle, agree, heal). Verdicts on the tasks' own records are in the scenarios
//! (`agent/tests/faults.rs`); this module only drives the agents and reads their reports.

use super::evidence::Evidence;
use super::net::Net;
use super::process;
use super::{AGENTS, AUTONOMY_MS, CPUS, HEARTBEAT_MS, PEER_TIMEOUT_MS, TASK};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) struct Cluster {
    pub(crate) net: Net,
    pub(crate) dir: PathBuf,
    pub(crate) bin: PathBuf,
    pub(crate) token: String,
    pub(crate) agents: Vec<Option<Child>>,
    /// Task key -> (agent it was submitted to, task id).
    pub(crate) submitted: BTreeMap<String, (usize, u64)>,
    pub(crate) seq: usize,
    /// The agents' autonomy time (ms).
    pub(crate) autonomy_ms: u64,
}

impl Cluster {
    /// A cluster for scenario `name` (its first word names the directory).
    pub(crate) fn start(name: &str) -> Self {
        Self::start_with(name, AUTONOMY_MS)
    }

    /// [`Cluster::start`] with agents whose autonomy time is `autonomy_ms`.
    pub(crate) fn start_with(name: &str, autonomy_ms: u64) -> Self {
        let name = name.split_whitespace().next().unwrap_or("x");
        let net = Net::build().unwrap_or_else(|e| {
            panic!("the fault harness needs root and network namespaces (CI has both): {e}")
        });
        let dir = std::env::temp_dir().join(format!("tf-faults-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("rec")).unwrap();
        std::fs::write(dir.join("task.sh"), TASK).unwrap();
        std::fs::write(
            dir.join("cluster.key"),
            format!("/key/swarm/psk/1.0.0/\n/base16/\n{}\n", "ab".repeat(32)),
        )
        .unwrap();
        std::fs::write(dir.join("token"), "harness-token-0123456789").unwrap();
        let mut c = Cluster {
            net,
            dir,
            bin: PathBuf::from(env!("CARGO_BIN_EXE_tapfinger-agent")),
            token: "harness-token-0123456789".into(),
            agents: (0..AGENTS).map(|_| None).collect(),
            submitted: BTreeMap::new(),
            seq: 0,
            autonomy_ms,
        };
        for i in 0..AGENTS {
            c.spawn(i);
        }
        c.wait_peers();
        c
    }

    pub(crate) fn data(&self, i: usize) -> PathBuf {
        self.dir.join(format!("a{i}"))
    }

    pub(crate) fn api(&self, i: usize) -> String {
        format!("{}:7601", self.net.addr(i))
    }

    pub(crate) fn spawn(&mut self, i: usize) {
        let bootstrap: Vec<String> = (0..AGENTS)
            .filter(|j| *j != i)
            .map(|j| format!("/ip4/{}/tcp/7600", self.net.addr(j)))
            .collect();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("a{i}.log")))
            .unwrap();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.net.ns(i)])
            .arg(&self.bin)
            .args(["run", "--name", &format!("a{i}")])
            .arg("--data-dir")
            .arg(self.data(i))
            .args(["--listen", &format!("/ip4/{}/tcp/7600", self.net.addr(i))])
            .args(["--api", &self.api(i)])
            .arg("--cluster-key-file")
            .arg(self.dir.join("cluster.key"))
            .args(["--policy", "min"])
            .args([
                "--set",
                &format!(
                    "api_token_file={:?}",
                    self.dir.join("token").display().to_string()
                ),
            ])
            .args(["--set", &format!("heartbeat_ms={HEARTBEAT_MS}")])
            .args(["--set", &format!("peer_timeout_ms={PEER_TIMEOUT_MS}")])
            .args(["--set", &format!("autonomy_ms={}", self.autonomy_ms)])
            .args(["--set", "slot_ms=1000", "--set", "round_ms=300"])
            .args(["--set", &format!("offer.cpu={CPUS}")])
            .args(["--set", "offer.gpu=0", "--set", "offer.mem_gb=4"])
            // TAPFINGER_FAULTS_LOG: the agents' log filter, for debugging a scenario.
            .env(
                "RUST_LOG",
                std::env::var("TAPFINGER_FAULTS_LOG").unwrap_or("info,libp2p=warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        for b in bootstrap {
            cmd.args(["--bootstrap", &b]);
        }
        self.agents[i] = Some(cmd.spawn().expect("starting an agent"));
    }

    pub(crate) fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.agents[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Deletes box `i`'s data directory as an operator's `rm -rf` would, once its agent is
    /// killed. The supervisors it left behind may still write their exit records into it while
    /// it goes (they see their lease vanish), so a removal that meets a file created under it
    /// tries again; a directory that cannot be removed in 10 s fails the test.
    pub(crate) fn wipe(&self, i: usize) {
        let dir = self.data(i);
        let mut last = None;
        for _ in 0..200 {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => return,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{} could not be removed: {last:?}", dir.display());
    }

    pub(crate) fn http(
        &self,
        i: usize,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Option<(u16, String)> {
        process::http_with(&self.api(i), method, path, body, Some(&self.token))
    }

    pub(crate) fn json(&self, i: usize, path: &str) -> Option<serde_json::Value> {
        let (code, body) = self.http(i, "GET", path, None)?;
        (code == 200).then(|| serde_json::from_str(&body).ok())?
    }

    /// Until every running agent answers and is connected to every other running one.
    pub(crate) fn wait_peers(&self) {
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            if self.mesh_whole() {
                return;
            }
            assert!(
                Instant::now() < end,
                "the agents did not all connect; logs in {}",
                self.dir.display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Submit a task of `tenths` × 100 ms to agent `i`.
    pub(crate) fn submit(&mut self, i: usize, tenths: u32) -> String {
        self.seq += 1;
        let key = format!("k{}", self.seq);
        let spec = serde_json::json!({
            "name": key,
            "command": ["sh", self.dir.join("task.sh"), self.dir.join("rec"), key, tenths.to_string()],
            "min_demand": {"cpu": 1},
        });
        let (code, body) = self
            .http(i, "POST", "/v1/tasks", Some(spec.to_string()))
            .expect("the API answers");
        assert_eq!(code, 201, "submit to a{i}: {body}");
        let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
            .as_u64()
            .unwrap();
        self.submitted.insert(key.clone(), (i, id));
        key
    }

    pub(crate) fn evidence(&self) -> Evidence {
        Evidence::read(&self.dir.join("rec"))
    }

    /// Until the records show every submitted task completed and every agent reports all of
    /// them finished with the same outcome; returns how long that took.
    pub(crate) fn settle(&self, limit: Duration) -> Duration {
        let t0 = Instant::now();
        loop {
            let ev = self.evidence();
            let done = self
                .submitted
                .keys()
                .all(|k| ev.copies.get(k).is_some_and(|c| c.iter().any(|c| c.ended)));
            if done && self.agreement().is_ok() {
                return t0.elapsed();
            }
            assert!(
                t0.elapsed() < limit,
                "not settled after {limit:?}: {:?}; records {:?}; logs in {}",
                self.agreement().err(),
                self.submitted
                    .keys()
                    .filter(|k| !ev.copies.get(*k).is_some_and(|c| c.iter().any(|c| c.ended)))
                    .collect::<Vec<_>>(),
                self.dir.display()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Every running agent's report of every task it lists.
    pub(crate) fn views(&self) -> Result<Vec<(usize, View)>, String> {
        let mut views = Vec::new();
        for i in (0..AGENTS).filter(|i| self.live(*i)) {
            let mut all = BTreeMap::new();
            let mut offset = 0u64;
            loop {
                let v = self
                    .json(i, &format!("/v1/tasks?offset={offset}"))
                    .ok_or(format!("a{i} does not answer"))?;
                for t in v["tasks"].as_array().into_iter().flatten() {
                    all.insert(
                        t["id"].as_u64().unwrap_or(0),
                        (
                            t["state"].as_str().unwrap_or("?").to_string(),
                            t["node"].as_u64(),
                            t["exit_code"].as_i64(),
                        ),
                    );
                }
                match v["next_offset"].as_u64() {
                    Some(n) => offset = n,
                    None => break,
                }
            }
            views.push((i, all));
        }
        Ok(views)
    }

    /// Every running agent's report of every submitted task: equal, and finished.
    pub(crate) fn agreement(&self) -> Result<(), String> {
        let views = self.views()?;
        let (a, first_view) = &views[0];
        for (key, (_, id)) in &self.submitted {
            let first = first_view.get(id);
            if first.is_none_or(|s| s.0 != "succeeded") {
                return Err(format!("{key} (t{id}) on a{a}: {first:?}"));
            }
            for (i, v) in &views {
                if v.get(id) != first {
                    return Err(format!(
                        "{key} (t{id}): a{i} says {:?}, a{a} {first:?}",
                        v.get(id)
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every running agent lists the same tasks, each in the same state on the same node: the
    /// views are one (whatever the tasks' progress).
    pub(crate) fn same_views(&self) -> Result<(), String> {
        let views = self.views()?;
        let (a, first) = &views[0];
        for (i, v) in &views[1..] {
            if v != first {
                let ids: BTreeSet<&u64> = v.keys().chain(first.keys()).collect();
                let differ: Vec<String> = ids
                    .into_iter()
                    .filter(|id| v.get(id) != first.get(id))
                    .take(5)
                    .map(|id| format!("t{id}: a{i} {:?}, a{a} {:?}", v.get(id), first.get(id)))
                    .collect();
                return Err(format!(
                    "a{i} lists {} tasks, a{a} {}; {}",
                    v.len(),
                    first.len(),
                    differ.join("; ")
                ));
            }
        }
        Ok(())
    }

    /// Whether agent `i` runs.
    pub(crate) fn live(&self, i: usize) -> bool {
        self.agents[i].is_some()
    }

    /// Every running agent is connected to every other running one.
    pub(crate) fn mesh_whole(&self) -> bool {
        let live = (0..AGENTS).filter(|i| self.live(*i)).count() as u64;
        (0..AGENTS).filter(|i| self.live(*i)).all(|i| {
            self.json(i, "/v1/node")
                .and_then(|v| v["peers"].as_u64())
                .is_some_and(|n| n + 1 == live)
        })
    }

    /// After a link came back: how long until the mesh was whole, and until every agent's view
    /// was the same, measured from now (polled every 100 ms, each for at most `limit`; `None`
    /// where it did not happen within it).
    pub(crate) fn heal(&self, limit: Duration) -> (Option<Duration>, Option<Duration>) {
        let t0 = Instant::now();
        let (mut mesh, mut agree) = (None, None);
        while t0.elapsed() < limit && (mesh.is_none() || agree.is_none()) {
            if mesh.is_none() && self.mesh_whole() {
                mesh = Some(t0.elapsed());
            }
            if agree.is_none() && self.same_views().is_ok() {
                agree = Some(t0.elapsed());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        (mesh, agree)
    }

    /// SIGKILL agent `i` and every task supervisor it started (an OOM kill, or `kill -9` of
    /// the agent's processes); returns how many supervisors were killed. Their guards see
    /// them gone and kill the tasks.
    pub(crate) fn kill_with_supervisors(&mut self, i: usize) -> usize {
        let supervisors = self.net.pids_running(i, "supervise");
        self.kill(i);
        for p in &supervisors {
            let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
        }
        supervisors.len()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..AGENTS {
            self.kill(i);
        }
        // The agents' logs and the records stay for a failed run only.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// What an agent reports of a task: state, node, exit code.
type Report = (String, Option<u64>, Option<i64>);

/// An agent's report of every task it lists, by id.
type View = BTreeMap<u64, Report>;
