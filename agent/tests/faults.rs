//! The fault harness: five real agent processes, each in a network namespace of its own, joined by
//! a bridge in a namespace the test builds (nothing outside it is touched), running tasks that
//! write their own records. Scenarios: (a) SIGKILL two agents mid-run and restart them; (b) a 2|3
//! partition longer than the peer timeout, shorter than the autonomy time; (c) a 2|3 partition
//! longer than the autonomy time; (d) restart agents with their data directories and submit again;
//! (e) restart one with its data directory deleted.
//!
//! Every verdict comes from the records the tasks write (start, a line every 100 ms, end; with the
//! node and epoch the agent gave them; `gone` from a watcher the task starts outside its process
//! group, when a killed copy's shell has ended), never from the agents' own reports, except agreement,
//! which is about those reports: every task ran to completion at least once, no two copies of a
//! task were ever alive at the same time, no node ran more copies than its capacity, and, where
//! the scenario allows none, no task was started twice; then every agent reports the same outcome
//! for every task.
//!
//! It needs root, `ip` (iproute2) and network namespaces; without them it fails (CI has them).
//! It prints its figures per scenario (lost, overlapping, twice-run copies; agreement time).
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "support/evidence.rs"]
mod evidence;
#[path = "support/net.rs"]
mod net;
#[path = "support/process.rs"]
mod process;
use evidence::Evidence;
use net::Net;

const AGENTS: usize = 5;
const CPUS: u64 = 2;
const HEARTBEAT_MS: u64 = 200;
const PEER_TIMEOUT_MS: u64 = 1000;
const AUTONOMY_MS: u64 = 6000;

/// The task every scenario runs: it records its own life in `<rec>/<key>.<pid>.<ns>.log`. A killed
/// copy cannot write its own end, so a watcher it starts in a session of its own (out of reach of
/// the kill of the task's process group) writes `gone` once the task's shell no longer exists
/// (polled every 10 ms; a zombie still counts as alive, so `gone` is never early).
const TASK: &str = r#"#!/bin/sh
f="$1/$2.$$.$(date +%s%N).log"
echo "start $(date +%s%3N) $TAPFINGER_NODE $TAPFINGER_EPOCH" >> "$f"
setsid sh -c 'tail --pid="$0" -s 0.01 -f /dev/null; echo "gone $(date +%s%3N)" >> "$1"' "$$" "$f" </dev/null >/dev/null 2>&1 &
i=0
while [ "$i" -lt "$3" ]; do
  sleep 0.1
  echo "alive $(date +%s%3N)" >> "$f"
  i=$((i+1))
done
echo "end $(date +%s%3N)" >> "$f"
"#;

struct Cluster {
    net: Net,
    dir: PathBuf,
    bin: PathBuf,
    token: String,
    agents: Vec<Option<Child>>,
    /// Task key -> (agent it was submitted to, task id).
    submitted: BTreeMap<String, (usize, u64)>,
    seq: usize,
}

impl Cluster {
    /// A cluster for scenario `name` (its first word names the directory).
    fn start(name: &str) -> Self {
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
        };
        for i in 0..AGENTS {
            c.spawn(i);
        }
        c.wait_peers();
        c
    }

    fn data(&self, i: usize) -> PathBuf {
        self.dir.join(format!("a{i}"))
    }

    fn api(&self, i: usize) -> String {
        format!("{}:7601", self.net.addr(i))
    }

    fn spawn(&mut self, i: usize) {
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
            .args(["--set", &format!("autonomy_ms={AUTONOMY_MS}")])
            .args(["--set", "slot_ms=1000", "--set", "round_ms=300"])
            .args(["--set", &format!("offer.cpu={CPUS}")])
            .args(["--set", "offer.gpu=0", "--set", "offer.mem_gb=4"])
            .env("RUST_LOG", "info,libp2p=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        for b in bootstrap {
            cmd.args(["--bootstrap", &b]);
        }
        self.agents[i] = Some(cmd.spawn().expect("starting an agent"));
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.agents[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn http(
        &self,
        i: usize,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Option<(u16, String)> {
        process::http_with(&self.api(i), method, path, body, Some(&self.token))
    }

    fn json(&self, i: usize, path: &str) -> Option<serde_json::Value> {
        let (code, body) = self.http(i, "GET", path, None)?;
        (code == 200).then(|| serde_json::from_str(&body).ok())?
    }

    /// Until every agent answers and sees its four peers.
    fn wait_peers(&self) {
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            let ok = (0..AGENTS).all(|i| {
                self.json(i, "/v1/node")
                    .and_then(|v| v["peers"].as_u64())
                    .is_some_and(|n| n as usize == AGENTS - 1)
            });
            if ok {
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
    fn submit(&mut self, i: usize, tenths: u32) -> String {
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

    fn evidence(&self) -> Evidence {
        Evidence::read(&self.dir.join("rec"))
    }

    /// Until the records show every submitted task completed and every agent reports all of
    /// them finished with the same outcome; returns how long that took.
    fn settle(&self, limit: Duration) -> Duration {
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

    /// Every agent's report of every submitted task: equal, and finished.
    fn agreement(&self) -> Result<(), String> {
        let mut views: Vec<BTreeMap<u64, Report>> = Vec::new();
        for i in 0..AGENTS {
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
            views.push(all);
        }
        for (key, (_, id)) in &self.submitted {
            let first = views[0].get(id);
            if first.is_none_or(|s| s.0 != "succeeded") {
                return Err(format!("{key} (t{id}) on a0: {first:?}"));
            }
            for (i, v) in views.iter().enumerate() {
                if v.get(id) != first {
                    return Err(format!(
                        "{key} (t{id}): a{i} says {:?}, a0 {first:?}",
                        v.get(id)
                    ));
                }
            }
        }
        Ok(())
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

/// What a scenario allows beyond the shared verdicts.
#[derive(Clone, Copy, PartialEq)]
enum Runs {
    /// No task may start twice.
    Once,
    /// A task may start again after its copy was killed, but completes once.
    CompletedOnce,
    /// A task may complete twice (never at the same time): a partition longer than the
    /// autonomy time, where the cut-off side finished what the other side then ran again.
    Any,
}

/// The verdicts every scenario shares, and what `runs` allows.
fn verdict(name: &str, c: &Cluster, runs: Runs, settled: Duration) {
    let ev = c.evidence();
    let lost: Vec<&String> = c
        .submitted
        .keys()
        .filter(|k| {
            !ev.copies
                .get(*k)
                .is_some_and(|cs| cs.iter().any(|x| x.ended))
        })
        .collect();
    let overlaps = ev.overlaps();
    let peaks = ev.peak_per_node();
    let breaches: Vec<_> = peaks.iter().filter(|(_, p)| **p > CPUS).collect();
    let twice = ev.started_twice();
    let done_twice = ev.completed_twice();
    let (killed, timed) = ev.killed();
    println!(
        "scenario {name}: {} tasks, {} lost, {} overlapping copies, {} started twice, {} completed twice, {} capacity breaches (peak copies per node {:?}), {killed} copies killed ({timed} timed by their watcher, the rest counted alive 150 ms past their last line), agreement after {:.1} s",
        c.submitted.len(),
        lost.len(),
        overlaps.len(),
        twice.len(),
        done_twice.len(),
        breaches.len(),
        peaks,
        settled.as_secs_f64()
    );
    assert!(lost.is_empty(), "{name}: lost {lost:?}");
    assert!(
        overlaps.is_empty(),
        "{name}: copies overlapped {overlaps:?}"
    );
    assert!(breaches.is_empty(), "{name}: over capacity {breaches:?}");
    if runs != Runs::Any {
        assert!(
            done_twice.is_empty(),
            "{name}: completed twice {done_twice:?}"
        );
    }
    if runs == Runs::Once {
        assert!(twice.is_empty(), "{name}: started twice {twice:?}");
    }
    let ids: BTreeSet<u64> = c.submitted.values().map(|(_, id)| *id).collect();
    assert_eq!(
        ids.len(),
        c.submitted.len(),
        "{name}: an id was given twice"
    );
}

fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

fn scenario_a() {
    let mut c = Cluster::start("a");
    for k in 0..15 {
        c.submit(k % AGENTS, 40);
    }
    sleep_ms(2500);
    c.kill(1);
    c.kill(3);
    // Back well within the autonomy time: they adopt what their supervisors kept running.
    sleep_ms(2500);
    c.spawn(1);
    c.spawn(3);
    let t = c.settle(Duration::from_secs(120));
    verdict("a (SIGKILL 2 of 5, restart)", &c, Runs::Once, t);
}

fn partition(name: &str, cut_ms: u64, runs: Runs) {
    let mut c = Cluster::start(name);
    for k in 0..10 {
        c.submit(k % AGENTS, 50);
    }
    sleep_ms(1500);
    let cutting = Instant::now();
    c.net.cut(&[0, 1]);
    // The cut lasts `cut_ms` from the moment it is in place, whatever the submissions below
    // take: on a loaded machine ten of them took seconds, and a "3 s" cut outlasted the
    // autonomy time (the cut-off side then rightly stopped its copies and ran them again).
    let cut = Instant::now();
    // Work submitted on both sides while they are apart.
    for k in 0..10 {
        c.submit(k % AGENTS, 30);
    }
    std::thread::sleep(Duration::from_millis(cut_ms).saturating_sub(cut.elapsed()));
    c.net.cut(&[]);
    let apart = cutting.elapsed();
    println!(
        "scenario {name}: apart for {:.1} s (the cut took {:.1} s to set up)",
        apart.as_secs_f64(),
        (cut - cutting).as_secs_f64()
    );
    if runs == Runs::Once {
        // The scenario's premise: shorter than the autonomy time (the lease lapses one peer
        // timeout after the cut, plus the autonomy time). Otherwise it tests something else.
        assert!(
            apart < Duration::from_millis(AUTONOMY_MS),
            "{name}: the harness could not keep the cut under the autonomy time ({apart:?}): \
             the machine is too loaded for this scenario"
        );
    }
    let t = c.settle(Duration::from_secs(150));
    verdict(name, &c, runs, t);
}

fn scenario_d() {
    let mut c = Cluster::start("d");
    for k in 0..10 {
        c.submit(k % AGENTS, 30);
    }
    sleep_ms(1500);
    for i in [0, 2] {
        c.kill(i);
        c.spawn(i);
    }
    c.wait_peers();
    // The restarted agents number new tasks after every id they gave before.
    for k in 0..10 {
        c.submit([0, 2][k % 2], 10);
    }
    let t = c.settle(Duration::from_secs(120));
    verdict("d (restart with data, submit again)", &c, Runs::Once, t);
}

fn scenario_e() {
    let mut c = Cluster::start("e");
    for k in 0..10 {
        c.submit(k % AGENTS, 30);
    }
    sleep_ms(1500);
    c.kill(4);
    std::fs::remove_dir_all(c.data(4)).unwrap();
    c.spawn(4);
    c.wait_peers();
    for _ in 0..5 {
        c.submit(4, 10);
    }
    let t = c.settle(Duration::from_secs(150));
    // Its running copies die with the lost lease file (their supervisors see no lease of theirs)
    // and run again elsewhere after the takeover time: started twice, never at once, completed
    // once.
    verdict(
        "e (restart with the data directory deleted)",
        &c,
        Runs::CompletedOnce,
        t,
    );
}

#[test]
fn the_cluster_never_loses_nor_overlaps_a_task_under_crashes_and_partitions() {
    if std::env::var_os("TAPFINGER_FAULTS_ONLY").is_some_and(|s| !s.is_empty()) {
        // A single scenario, for debugging: TAPFINGER_FAULTS_ONLY=c.
        let which = std::env::var("TAPFINGER_FAULTS_ONLY").unwrap_or_default();
        match which.as_str() {
            "a" => scenario_a(),
            "b" => partition("b (partition 2|3, 3 s)", 3000, Runs::Once),
            "c" => partition("c (partition 2|3, 14 s)", 14_000, Runs::Any),
            "d" => scenario_d(),
            _ => scenario_e(),
        }
        return;
    }
    scenario_a();
    // Longer than the peer timeout (1 s), shorter than the autonomy time (6 s).
    partition("b (partition 2|3, 3 s)", 3000, Runs::Once);
    // Longer than the takeover time (1 + 6 + 1.4 s).
    partition("c (partition 2|3, 14 s)", 14_000, Runs::Any);
    scenario_d();
    scenario_e();
}
