//! Gangs launched for real: three agent processes on 127.0.0.1 (ephemeral ports), each offering
//! room for exactly one member of a three-member gang, so every box runs one. The gang is the
//! demo job (`tapfinger-agent demo-gang`): its members really rendezvous over TCP via
//! `MASTER_ADDR:MASTER_PORT`, and each writes records the agents cannot fake (its pid and box at
//! start, the sum of the ranks it agreed on at the end). Verdicts come from those records and
//! from the process table; the agents' API is asked only what they hold and where the job
//! stands.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tapfinger-agent");

#[path = "support/process.rs"]
mod process;
use process::free_port;

struct Cluster {
    dir: PathBuf,
    p2p: Vec<u16>,
    apis: Vec<String>,
    agents: Vec<Option<Child>>,
}

impl Cluster {
    fn start(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("tf-gangs-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("rec")).unwrap();
        let p2p: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let apis: Vec<String> = (0..3)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let mut c = Cluster {
            dir,
            p2p,
            apis,
            agents: (0..3).map(|_| None).collect(),
        };
        for i in 0..3 {
            c.spawn(i);
        }
        // Connected is not enough: a spec is checked against the boxes an agent has heard
        // describe themselves, so every agent must have both peers' heartbeats.
        c.wait_until(
            Duration::from_secs(60),
            "every agent to hear its two peers' heartbeats",
            |c| {
                (0..3).all(|i| {
                    c.json(i, "/v1/peers")
                        .and_then(|v| v["peers"].as_array().map(|p| p.len()))
                        == Some(2)
                })
            },
        );
        c
    }

    /// Start agent `i` (again: with its data directory, so it replays its journal).
    fn spawn(&mut self, i: usize) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("a{i}.log")))
            .unwrap();
        let mut cmd = Command::new(BIN);
        cmd.args(["run", "--name", &format!("a{i}")])
            .arg("--data-dir")
            .arg(self.dir.join(format!("a{i}")))
            .args(["--listen", &format!("/ip4/127.0.0.1/tcp/{}", self.p2p[i])])
            .args(["--api", &self.apis[i]])
            .args(["--policy", "first-fit-max"])
            .args(["--set", "heartbeat_ms=100", "--set", "peer_timeout_ms=1000"])
            .args(["--set", "autonomy_ms=3000", "--set", "slot_ms=500"])
            .args(["--set", "round_ms=200"])
            // Room for one member (2 cores) per box.
            .args(["--set", "offer.cpu=2", "--set", "offer.gpu=0"])
            .args(["--set", "offer.mem_gb=2"])
            .env("RUST_LOG", "info,libp2p=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        for j in (0..3).filter(|j| *j != i) {
            cmd.args([
                "--bootstrap",
                &format!("/ip4/127.0.0.1/tcp/{}", self.p2p[j]),
            ]);
        }
        self.agents[i] = Some(cmd.spawn().unwrap());
    }

    fn http(
        &self,
        i: usize,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Option<(u16, String)> {
        process::http(&self.apis[i], method, path, body)
    }

    fn json(&self, i: usize, path: &str) -> Option<serde_json::Value> {
        process::json(&self.apis[i], path)
    }

    fn alive(&self) -> Vec<usize> {
        (0..3).filter(|i| self.agents[*i].is_some()).collect()
    }

    fn wait_until(&self, limit: Duration, what: &str, done: impl Fn(&Self) -> bool) {
        let end = Instant::now() + limit;
        while !done(self) {
            assert!(
                Instant::now() < end,
                "timed out waiting for {what}; logs in {}",
                self.dir.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Submit the demo gang (one PS and two workers of 2 cores each) to agent 0; `hold`:
    /// seconds its members stay connected after the exchange.
    fn submit(&self, hold: f64) -> u64 {
        let spec = serde_json::json!({
            "name": "demo-gang",
            "command": [BIN, "demo-gang", "--hold", hold.to_string(), "--timeout", "20",
                        "--out", self.dir.join("rec")],
            // A small model (1 MB of gradients): the host's link carries both remote workers.
            "gang": {"workers": 2, "ps": 1, "worker_demand": {"cpu": 2}, "ps_demand": {"cpu": 2},
                     "gradient_mb": 1},
        });
        let (code, body) = self
            .http(0, "POST", "/v1/tasks", Some(spec.to_string()))
            .unwrap();
        assert_eq!(code, 201, "{body}");
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
            .as_u64()
            .unwrap()
    }

    fn state(&self, i: usize, task: u64) -> String {
        self.json(i, &format!("/v1/tasks/{task}"))
            .map(|v| v["state"].as_str().unwrap_or("").to_string())
            .unwrap_or_default()
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.agents[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..3 {
            self.kill(i);
        }
        // The agents' logs and the records stay for a failed run only.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A member's start record: its rank, pid and box.
type Start = (u32, u32, String);

/// One run of a gang: its epoch, its members' starts, and (rank, sum) of those that ended.
type Run = (String, Vec<Start>, Vec<(u32, String)>);

/// The members' records in `rec`: their starts, and (rank, sum) at the end.
fn records(rec: &Path) -> (Vec<Start>, Vec<(u32, String)>) {
    records_of(rec, "")
}

/// [`records`] of the task whose id starts the file names with `prefix`.
fn records_of(rec: &Path, prefix: &str) -> (Vec<Start>, Vec<(u32, String)>) {
    let mut starts = Vec::new();
    let mut done = Vec::new();
    for e in std::fs::read_dir(rec).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.starts_with(prefix) {
            continue;
        }
        let Some((stem, ext)) = name.rsplit_once('.') else {
            continue;
        };
        // A member writes a record under a temporary `.tmp` name, then renames it into place.
        if ext != "start" && ext != "done" {
            continue;
        }
        let rank: u32 = stem.rsplit('-').next().unwrap().parse().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        match ext {
            "start" => {
                let mut w = text.split_whitespace();
                let pid = w.next().unwrap().parse().unwrap();
                starts.push((rank, pid, w.next().unwrap_or("").to_string()));
            }
            "done" => done.push((rank, text.trim().to_string())),
            _ => {}
        }
    }
    starts.sort();
    done.sort();
    (starts, done)
}

/// The run (epoch) of task `task` whose every started member wrote its end, with its starts and
/// ends; `None` while there is none. A run whose members did not all start (boxes that decided
/// a round out of step: the gang module's doc) fails at rendezvous and the gang starts again
/// under a new epoch, so that only the complete run counts; and no other run may have ended a
/// member (two runs that each got as far as an end would be the gang run twice).
fn finished_run(rec: &Path, task: u64) -> Option<Run> {
    let mut epochs: Vec<String> = std::fs::read_dir(rec)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().to_string();
            let rest = name.strip_prefix(&format!("{task}-"))?;
            Some(rest.split('-').next()?.to_string())
        })
        .collect();
    epochs.sort();
    epochs.dedup();
    let runs: Vec<Run> = epochs
        .into_iter()
        .map(|e| {
            let (s, d) = records_of(rec, &format!("{task}-{e}-"));
            (e, s, d)
        })
        .collect();
    let ended: Vec<&String> = runs
        .iter()
        .filter(|(_, _, d)| !d.is_empty())
        .map(|r| &r.0)
        .collect();
    assert!(
        ended.len() <= 1,
        "task {task}: members ended in runs {ended:?}"
    );
    runs.into_iter()
        .find(|(_, s, d)| !s.is_empty() && d.len() == s.len())
}

/// The runs (epochs) in `rec` whose three members all started, in name order, each with
/// its epoch and starts. A run whose members did not all start (boxes that decided a round out
/// of step: the gang module's doc) fails at rendezvous and the gang starts again under a new
/// epoch, so a test waits for a complete run rather than for a count of start records.
fn full_runs(rec: &Path) -> Vec<(String, Vec<Start>)> {
    let mut epochs: Vec<String> = std::fs::read_dir(rec)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().to_string();
            let stem = name.strip_suffix(".start")?;
            Some(stem.rsplit_once('-')?.0.to_string())
        })
        .collect();
    epochs.sort();
    epochs.dedup();
    epochs
        .into_iter()
        .map(|e| {
            let (s, _) = records_of(rec, &format!("{e}-"));
            (e, s)
        })
        .filter(|(_, s)| s.len() == 3)
        .collect()
}

fn running(pid: u32) -> bool {
    // A zombie (exited, not yet reaped by its parent) does not run.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, r)| !r.starts_with('Z')))
        .unwrap_or(false)
}

#[test]
fn a_three_member_gang_rendezvouses_across_three_agents_and_finishes() {
    let c = Cluster::start("run");
    // A gang that can never fit is refused at submit, with why.
    let big = serde_json::json!({
        "command": ["true"],
        "gang": {"workers": 3, "worker_demand": {"cpu": 2}, "ps_demand": {"cpu": 2}},
    });
    let (code, body) = c
        .http(0, "POST", "/v1/tasks", Some(big.to_string()))
        .unwrap();
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("whole cluster") && body.contains("\"gang\""),
        "{body}"
    );

    let task = c.submit(1.0);
    let rec = c.dir.join("rec");
    c.wait_until(
        Duration::from_secs(60),
        "the three members to finish",
        |_| finished_run(&rec, task).is_some(),
    );
    let (_, starts, done) = finished_run(&rec, task).unwrap();
    // In the run that finished, every member ran once, each on its own box, and all agreed on
    // 0 + 1 + 2 (a run some boxes started without the others is retried: `finished_run`).
    assert_eq!(
        starts.iter().map(|s| s.0).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    let mut boxes: Vec<&str> = starts.iter().map(|s| s.2.as_str()).collect();
    boxes.sort();
    assert_eq!(boxes, vec!["a0", "a1", "a2"], "{starts:?}");
    assert!(done.iter().all(|(_, sum)| sum == "3"), "{done:?}");
    c.wait_until(
        Duration::from_secs(30),
        "every agent to see the gang succeed and hold nothing",
        |c| {
            (0..3).all(|i| {
                c.state(i, task) == "succeeded"
                    && c.json(i, "/v1/node")
                        .is_some_and(|v| v["used"] == serde_json::json!([0, 0, 0]))
            })
        },
    );
    c.wait_until(
        Duration::from_secs(10),
        "no member process to be left",
        |_| {
            records_of(&rec, &format!("{task}-"))
                .0
                .iter()
                .all(|s| !running(s.1))
        },
    );

    // A layer chain: a target no plan meets on these boxes is refused, with the best reachable.
    let pipeline = |throughput: f64| {
        serde_json::json!({
            "command": [BIN, "demo-gang", "--hold", "0.5", "--timeout", "20",
                        "--out", c.dir.join("rec")],
            "pipeline": {"batches": 1000, "throughput": throughput, "prices": {"cpu": 0.05},
                         "layer": [{"time": {"cpu": 0.01}, "out_bytes": 1e5},
                                   {"time": {"cpu": 0.2}}]},
        })
        .to_string()
    };
    let (code, body) = c
        .http(0, "POST", "/v1/tasks", Some(pipeline(1000.0)))
        .unwrap();
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("pipeline.throughput") && body.contains("no plan reaches"),
        "{body}"
    );
    // One that needs 5-6 cores runs as a stage split over the three boxes of 2 cores, and its
    // members rendezvous too.
    let (code, body) = c
        .http(0, "POST", "/v1/tasks", Some(pipeline(20.0)))
        .unwrap();
    assert_eq!(code, 201, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
        .as_u64()
        .unwrap();
    c.wait_until(
        Duration::from_secs(60),
        "the pipeline's members to finish",
        |_| finished_run(&rec, id).is_some(),
    );
    let (_, s, d) = finished_run(&rec, id).unwrap();
    let world = s.len() as u32;
    assert!(world >= 3, "{s:?}");
    let sum = (world * (world - 1) / 2).to_string();
    assert!(d.iter().all(|(_, x)| *x == sum), "{d:?}");
    c.wait_until(Duration::from_secs(30), "the pipeline to succeed", |c| {
        c.state(0, id) == "succeeded"
    });
}

#[test]
fn killing_one_members_agent_stops_the_gang_everywhere_and_requeues_it() {
    let mut c = Cluster::start("kill");
    let task = c.submit(120.0);
    let rec = c.dir.join("rec");
    c.wait_until(
        Duration::from_secs(60),
        "the three members of one run to start",
        |_| !full_runs(&rec).is_empty(),
    );
    // Let them rendezvous, then kill the agent of a worker (rank 2) with SIGKILL.
    std::thread::sleep(Duration::from_secs(2));
    let (_, starts) = full_runs(&rec).remove(0);
    let started = records(&rec).0;
    let victim: usize = starts[2].2.trim_start_matches('a').parse().unwrap();
    c.kill(victim);
    // Every member ends: the survivors stop theirs when the box goes silent, and the killed
    // box's member sees its partners go.
    c.wait_until(
        Duration::from_secs(30),
        "every member process to end",
        |_| started.iter().all(|s| !running(s.1)),
    );
    assert!(
        records(&rec).1.is_empty(),
        "a member finished a broken gang"
    );
    // The survivors hold nothing for it and have put it back in the queue (it needs three
    // boxes, so it waits for the third).
    let alive = c.alive();
    c.wait_until(
        Duration::from_secs(30),
        "the survivors to free the gang's units and requeue it",
        |c| {
            alive.iter().all(|i| {
                c.state(*i, task) == "pending"
                    && c.json(*i, "/v1/node")
                        .is_some_and(|v| v["used"] == serde_json::json!([0, 0, 0]))
            })
        },
    );
    // And it stays that way: no partial gang starts on the two boxes left.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        records(&rec).0,
        started,
        "a member started again on two boxes"
    );
    for i in &alive {
        assert_eq!(c.state(*i, task), "pending");
    }
}

#[test]
fn a_restarted_agent_stops_the_members_it_ran_and_the_gang_runs_again() {
    let mut c = Cluster::start("restart");
    c.submit(120.0);
    let rec = c.dir.join("rec");
    c.wait_until(
        Duration::from_secs(60),
        "the three members of one run to start",
        |_| !full_runs(&rec).is_empty(),
    );
    std::thread::sleep(Duration::from_secs(1));
    let (epoch, first) = full_runs(&rec).remove(0);
    let started = records(&rec).0;
    // Kill the agent that accepted the gang (every box runs one member) and start it again at
    // once, with its journal: its member still runs under its supervisor, and the new run must
    // stop it rather than adopt it. (Also: the box that forgot it accepted the gang must not
    // leave it unproposed.)
    let victim = 0;
    let member = first.iter().find(|s| s.2 == "a0").unwrap().1;
    c.kill(victim);
    assert!(running(member), "the member died with its agent");
    c.spawn(victim);
    // The first run's members all end; the gang goes back to the queue (a member failed, within
    // its restarts) and runs again on the three boxes.
    c.wait_until(
        Duration::from_secs(60),
        "the first run's members to end",
        |_| started.iter().all(|s| !running(s.1)),
    );
    c.wait_until(
        Duration::from_secs(60),
        "a second run of three members",
        |_| full_runs(&rec).iter().any(|(e, _)| *e != epoch),
    );
    assert!(records(&rec).1.is_empty(), "a member finished a broken run");
}

/// The Python gang example (`examples/python/gang_sgd.py`, on the task kit) across the three
/// agents: its members average their gradients through the rendezvous every step, so all end
/// with the same weights; judged from the digests each member wrote itself. Needs python3 with
/// NumPy (`.ci/run` installs it) and fails, saying so, without.
#[test]
fn a_python_gang_trains_data_parallel_and_its_members_agree() {
    let numpy = Command::new("python3")
        .args(["-c", "import numpy"])
        .status();
    assert!(
        numpy.is_ok_and(|s| s.success()),
        "this test needs python3 with NumPy (.ci/run installs it)"
    );
    let c = Cluster::start("python");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let rec = c.dir.join("rec");
    let spec = serde_json::json!({
        "name": "gang-sgd",
        "command": ["python3", repo.join("examples/python/gang_sgd.py")],
        "env": {"PYTHONPATH": repo.join("python"), "OUT": rec, "STEPS": "100", "ROWS": "5000",
                "OPENBLAS_NUM_THREADS": "1"},
        "gang": {"workers": 2, "ps": 1, "worker_demand": {"cpu": 2}, "ps_demand": {"cpu": 2},
                 "gradient_mb": 1},
    });
    let (code, body) = c
        .http(0, "POST", "/v1/tasks", Some(spec.to_string()))
        .unwrap();
    assert_eq!(code, 201, "{body}");
    let task = serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
        .as_u64()
        .unwrap();
    c.wait_until(Duration::from_secs(90), "the gang to succeed", |c| {
        c.state(0, task) == "succeeded"
    });
    // The members of the run that succeeded: one epoch, three ranks.
    let mut by_epoch: std::collections::BTreeMap<String, Vec<serde_json::Value>> =
        Default::default();
    for f in std::fs::read_dir(&rec).unwrap().flatten() {
        let name = f.file_name().to_string_lossy().to_string();
        let Some(rest) = name.strip_prefix(&format!("{task}-")) else {
            continue;
        };
        if !name.ends_with(".json") {
            continue;
        }
        let epoch = rest.split('-').next().unwrap().to_string();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(f.path()).unwrap()).unwrap();
        by_epoch.entry(epoch).or_default().push(v);
    }
    let full: Vec<&Vec<serde_json::Value>> = by_epoch.values().filter(|m| m.len() == 3).collect();
    assert_eq!(full.len(), 1, "{by_epoch:?}");
    let members = full[0];
    let mut ranks: Vec<u64> = members
        .iter()
        .map(|m| m["rank"].as_u64().unwrap())
        .collect();
    ranks.sort();
    assert_eq!(ranks, vec![0, 1, 2]);
    assert!(
        members
            .iter()
            .all(|m| m["weights"] == members[0]["weights"]),
        "the members disagree: {members:?}"
    );
    let mut boxes: Vec<&str> = members
        .iter()
        .map(|m| m["node"].as_str().unwrap())
        .collect();
    boxes.sort();
    assert_eq!(boxes, vec!["a0", "a1", "a2"], "{members:?}");
}
