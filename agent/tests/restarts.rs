//! Stopping, restarting and upgrading agents never costs a job. Real agent processes on
//! 127.0.0.1 (two, then three, on one host) run resumable jobs; every agent in turn gets SIGTERM
//! (what `systemctl stop` and the README tour's `kill` send), exits, and is started again on its
//! data directory, as an upgrade does (stop, replace the binary, start). Every verdict comes from
//! the records the jobs write themselves: each start with the step it resumes from, the box and
//! the epoch; each checkpoint written on SIGTERM; the end. A job must end exactly once, every run
//! after the first must resume from the checkpoint its predecessor wrote on SIGTERM (so no copy
//! was killed without its grace, by its own agent or by another agent on the host, and no two
//! copies overlapped), nothing may start after the end, and every agent must list every job as
//! succeeded, none failed.
#![allow(clippy::unwrap_used)]

#[path = "support/process.rs"]
mod process;

use process::{Agent, free_port, http, json, wait_until};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tapfinger-agent");

/// A resumable job: `job.sh <records dir> <name> <steps>`. It resumes from its checkpoint file if
/// there is one, does a step every 100 ms, reports its progress, writes its checkpoint only on
/// SIGTERM (so a resume from anything but the checkpoint of the SIGTERM shows), and records
/// `start <step> <box> <epoch>`, `checkpoint <step>` and `end <step>` lines.
const JOB: &str = r#"rec="$1/$2"; ckpt="$1/$2.ckpt"; steps=$3
step=0
[ -f "$ckpt" ] && step=$(cat "$ckpt")
echo "start $step $TAPFINGER_NODE $TAPFINGER_EPOCH" >> "$rec"
trap 'echo $step > "$ckpt.tmp"; mv "$ckpt.tmp" "$ckpt"; echo "checkpoint $step" >> "$rec"; exit 143' TERM
while [ "$step" -lt "$steps" ]; do
  sleep 0.1 & wait $!
  step=$((step + 1))
  echo "TAPFINGER progress=$(awk "BEGIN { print $step / $steps }")"
done
echo "end $step" >> "$rec"
"#;

/// One box of the test's cluster.
struct Node {
    name: String,
    p2p: u16,
    api: String,
    agent: Option<Agent>,
}

/// The agent command of box `i` of `nodes`, its data in `dir/<name>`, dialling the others.
fn command(dir: &Path, nodes: &[Node], i: usize) -> std::process::Command {
    let n = &nodes[i];
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{}.log", n.name)))
        .unwrap();
    let mut c = std::process::Command::new(BIN);
    c.args(["run", "--name", &n.name])
        .arg("--data-dir")
        .arg(dir.join(&n.name))
        .args(["--listen", &format!("/ip4/127.0.0.1/tcp/{}", n.p2p)])
        .args(["--api", &n.api, "--policy", "min"])
        .args(["--set", "slot_ms=300", "--set", "round_ms=100"])
        .args(["--set", "heartbeat_ms=100", "--set", "offer.cpu=2"])
        .env("RUST_LOG", "info,libp2p=warn")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    for (j, other) in nodes.iter().enumerate() {
        if j != i {
            c.args(["--bootstrap", &format!("/ip4/127.0.0.1/tcp/{}", other.p2p)]);
        }
    }
    c
}

/// Start box `i` and wait until its API answers.
fn start(dir: &Path, nodes: &mut [Node], i: usize) {
    let child = command(dir, nodes, i).spawn().unwrap();
    nodes[i].agent = Some(Agent(child));
    let api = nodes[i].api.clone();
    wait_until(Duration::from_secs(30), "the API", || {
        json(&api, "/v1/node").is_some()
    });
}

/// Until every box hears every other.
fn connected(nodes: &[Node]) {
    let want = nodes.len() - 1;
    wait_until(
        Duration::from_secs(30),
        "every box hearing the others",
        || {
            nodes.iter().all(|n| {
                json(&n.api, "/v1/node").is_some_and(|v| v["peers"].as_u64() == Some(want as u64))
            })
        },
    );
}

/// SIGTERM to box `i`'s agent; its exit status, and how long it took.
fn stop(nodes: &mut [Node], i: usize) -> (std::process::ExitStatus, Duration) {
    let mut agent = nodes[i].agent.take().unwrap();
    let pid = nix::unistd::Pid::from_raw(agent.0.id() as i32);
    let t0 = Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    loop {
        if let Some(status) = agent.0.try_wait().unwrap() {
            return (status, t0.elapsed());
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{} did not exit within 60 s of SIGTERM",
            nodes[i].name
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Each job's record lines, by name.
fn records(rec: &Path, names: &[String]) -> BTreeMap<String, Vec<String>> {
    names
        .iter()
        .map(|n| {
            let text = std::fs::read_to_string(rec.join(n)).unwrap_or_default();
            (n.clone(), text.lines().map(str::to_string).collect())
        })
        .collect()
}

/// The jobs box `api` lists in `state`, by name.
fn in_state(api: &str, state: &str) -> Vec<String> {
    json(api, "/v1/tasks?limit=1000")
        .and_then(|v| v["tasks"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter(|t| t["state"] == state)
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect()
}

/// The verdicts on one job's own records (module doc); returns how many times it was resumed.
fn judge(name: &str, lines: &[String], steps: u32) -> usize {
    let ends: Vec<&String> = lines.iter().filter(|l| l.starts_with("end ")).collect();
    assert_eq!(ends.len(), 1, "{name} did not end exactly once: {lines:?}");
    assert_eq!(
        lines.last().map(String::as_str),
        Some(format!("end {steps}").as_str()),
        "{name}: something after its end, or it ended short: {lines:?}"
    );
    assert!(lines[0].starts_with("start 0 "), "{name}: {lines:?}");
    let mut resumed = 0;
    let mut last_checkpoint = None;
    for l in &lines[1..] {
        let words: Vec<&str> = l.split_whitespace().collect();
        match words[0] {
            "checkpoint" => {
                assert!(
                    last_checkpoint.is_none(),
                    "{name}: two checkpoints without a start between (two copies?): {lines:?}"
                );
                last_checkpoint = Some(words[1].to_string());
            }
            "start" => {
                // A run after the first resumes from the checkpoint the previous one wrote on
                // SIGTERM: a copy killed without its grace wrote none, and two copies alive at
                // once would show two starts in a row.
                let from = last_checkpoint.take().unwrap_or_else(|| {
                    panic!("{name}: started again without a checkpoint before: {lines:?}")
                });
                assert_eq!(words[1], from, "{name}: resumed from elsewhere: {lines:?}");
                resumed += 1;
            }
            "end" => assert!(
                last_checkpoint.is_none(),
                "{name}: ended after a checkpoint without a start: {lines:?}"
            ),
            other => panic!("{name}: unexpected record {other:?}: {lines:?}"),
        }
    }
    resumed
}

/// `n` agents on this host (2 CPUs each), `n + 1` jobs of one CPU, every agent stopped with SIGTERM and started again in
/// turn while they run.
fn rolling_restart(n: usize) {
    // Kept when the test fails (the agents' logs are named in its messages).
    let kept = std::env::temp_dir().join(format!("tf-restarts-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&kept);
    std::fs::create_dir_all(&kept).unwrap();
    let dir = kept.as_path();
    let rec = dir.join("rec");
    std::fs::create_dir_all(&rec).unwrap();
    let job = dir.join("job.sh");
    std::fs::write(&job, JOB).unwrap();
    let mut nodes: Vec<Node> = (0..n)
        .map(|i| Node {
            name: format!("box{i}"),
            p2p: free_port(),
            api: format!("127.0.0.1:{}", free_port()),
            agent: None,
        })
        .collect();
    for i in 0..n {
        start(dir, &mut nodes, i);
    }
    connected(&nodes);
    // Long enough that every job still runs when the last box stops (about 4 s a box).
    let steps = 150 + 50 * n as u32;
    let names: Vec<String> = (0..n + 1).map(|j| format!("job{j}")).collect();
    for (j, name) in names.iter().enumerate() {
        let spec = serde_json::json!({
            "name": name,
            "command": ["sh", job.display().to_string(), rec.display().to_string(), name, steps.to_string()],
            "min_demand": {"cpu": 1},
            "resumable": true,
            "grace_seconds": 10,
        });
        let (code, body) = http(
            &nodes[j % n].api,
            "POST",
            "/v1/tasks",
            Some(spec.to_string()),
        )
        .unwrap();
        assert_eq!(code, 201, "{body}");
    }
    wait_until(Duration::from_secs(30), "every job running", || {
        records(&rec, &names).values().all(|l| !l.is_empty())
    });
    let mut stopped_with_jobs = 0;
    for i in 0..n {
        let running: Vec<String> = in_state(&nodes[i].api, "running");
        let here = json(&nodes[i].api, "/v1/tasks?limit=1000")
            .and_then(|v| v["tasks"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter(|t| t["state"] == "running" && t["box"] == nodes[i].name.as_str())
            .count();
        stopped_with_jobs += usize::from(here > 0);
        let (status, took) = stop(&mut nodes, i);
        assert!(
            status.success(),
            "{} exited with {status} after SIGTERM; logs in {}",
            nodes[i].name,
            dir.display()
        );
        println!(
            "{}: stopped in {took:?} with {here} job(s) running on it ({} running in the cluster)",
            nodes[i].name,
            running.len()
        );
        // The upgrade: the same data directory, a new process.
        start(dir, &mut nodes, i);
        connected(&nodes);
    }
    let t0 = Instant::now();
    loop {
        let all = nodes.iter().all(|node| {
            names
                .iter()
                .all(|j| in_state(&node.api, "succeeded").contains(j))
        });
        if all {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "not every job succeeded everywhere: {:?}; records {:?}; logs in {}",
            nodes
                .iter()
                .map(|node| (node.name.clone(), json(&node.api, "/v1/tasks?limit=1000")))
                .collect::<Vec<_>>(),
            records(&rec, &names),
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    for node in &nodes {
        let failed = in_state(&node.api, "failed");
        assert!(
            failed.is_empty(),
            "{} lists failed jobs: {failed:?}",
            node.name
        );
    }
    let all = records(&rec, &names);
    let resumed: usize = all.iter().map(|(name, l)| judge(name, l, steps)).sum();
    println!("records: {all:?}");
    // The test must have done its real part: boxes stopped under running jobs, and those jobs
    // checkpointed on SIGTERM and resumed.
    assert!(
        stopped_with_jobs > 0 && resumed >= stopped_with_jobs,
        "{stopped_with_jobs} box(es) stopped with jobs, {resumed} resume(s): {all:?}"
    );
    println!(
        "{n} agents restarted in turn: {} jobs succeeded once each, {resumed} resumed from their SIGTERM checkpoint, none failed",
        names.len()
    );
    // With nothing running, a stop is prompt and clean.
    for i in 0..n {
        let (status, _) = stop(&mut nodes, i);
        assert!(status.success(), "{}: {status}", nodes[i].name);
    }
    if std::env::var_os("TAPFINGER_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn a_rolling_restart_of_two_agents_costs_no_job() {
    rolling_restart(2);
}

#[test]
fn a_rolling_restart_of_three_agents_on_one_host_costs_no_job() {
    rolling_restart(3);
}
