//! Stopping, restarting and upgrading agents never costs a job. Real agent processes on
//! 127.0.0.1 (two, then three, on one host) run resumable jobs; every agent in turn gets SIGTERM
//! (what `systemctl stop` and the README tour's `kill` send), exits, and is started again on its
//! data directory, as an upgrade does (stop, replace the binary, start). Every verdict comes from
//! the records the jobs write themselves: each start with the step it resumes from, the box and
//! the epoch; each checkpoint written on SIGTERM; the end. A job must end exactly once, every run
//! after the first must resume from the checkpoint its predecessor wrote on SIGTERM (so no copy
//! was killed without its grace, by its own agent or by another agent on the host, and no two
//! copies overlapped), nothing may start after the end, and every agent must list every job as
//! succeeded, none failed, and show its logs (asked of the box that ran it, where another did).
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

/// SIGTERM to each of `agents` at once; their exit statuses, and how long each took.
fn stop(mut agents: Vec<Agent>) -> Vec<(std::process::ExitStatus, Duration)> {
    let t0 = Instant::now();
    for a in &agents {
        let pid = nix::unistd::Pid::from_raw(a.0.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    }
    let mut out: Vec<Option<(std::process::ExitStatus, Duration)>> = vec![None; agents.len()];
    while out.iter().any(Option::is_none) {
        for (a, o) in agents.iter_mut().zip(out.iter_mut()) {
            if o.is_none()
                && let Some(status) = a.0.try_wait().unwrap()
            {
                *o = Some((status, t0.elapsed()));
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "an agent did not exit within 60 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    out.into_iter().flatten().collect()
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

/// Until every box lists every job as succeeded (at most 2 minutes); then none lists a failed
/// one, and every box shows every job's logs (those of a job that ran on another box too,
/// asked of the box that ran it last).
fn every_job_succeeded_everywhere(
    nodes: &[Node],
    names: &[String],
    ids: &[u64],
    rec: &Path,
    dir: &Path,
) {
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
            records(rec, names),
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    for node in nodes {
        let failed = in_state(&node.api, "failed");
        assert!(
            failed.is_empty(),
            "{} lists failed jobs: {failed:?}",
            node.name
        );
    }
    for node in nodes {
        for id in ids {
            let (code, body) =
                http(&node.api, "GET", &format!("/v1/tasks/{id}/logs"), None).unwrap();
            assert_eq!(code, 200, "{}: logs of {id}: {body}", node.name);
            assert!(
                body.contains("TAPFINGER progress="),
                "{}: logs of {id}: {body}",
                node.name
            );
        }
    }
}

/// `n` agents on this host (2 CPUs each), `n + 1` jobs of one CPU; while they run, every agent
/// is stopped with SIGTERM and started again, in turn (`all_at_once`: all together, as the
/// README tour's `kill %1 %2` does).
fn restart(n: usize, all_at_once: bool) {
    // Kept when the test fails (the agents' logs are named in its messages).
    let kept = std::env::temp_dir().join(format!(
        "tf-restarts-{}-{n}-{all_at_once}",
        std::process::id()
    ));
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
    let mut ids = Vec::new();
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
        let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
            .as_u64()
            .unwrap();
        ids.push(id);
    }
    wait_until(Duration::from_secs(30), "every job running", || {
        records(&rec, &names).values().all(|l| !l.is_empty())
    });
    let mut stopped_with_jobs = 0;
    let turns: Vec<Vec<usize>> = if all_at_once {
        vec![(0..n).collect()]
    } else {
        (0..n).map(|i| vec![i]).collect()
    };
    for turn in turns {
        for &i in &turn {
            let here = json(&nodes[i].api, "/v1/tasks?limit=1000")
                .and_then(|v| v["tasks"].as_array().cloned())
                .unwrap_or_default()
                .iter()
                .filter(|t| t["state"] == "running" && t["box"] == nodes[i].name.as_str())
                .count();
            stopped_with_jobs += usize::from(here > 0);
            println!(
                "{}: stopping with {here} job(s) running on it",
                nodes[i].name
            );
        }
        let agents: Vec<Agent> = turn
            .iter()
            .map(|&i| nodes[i].agent.take().unwrap())
            .collect();
        for (&i, (status, took)) in turn.iter().zip(stop(agents)) {
            assert!(
                status.success(),
                "{} exited with {status} after SIGTERM; logs in {}",
                nodes[i].name,
                dir.display()
            );
            println!("{}: stopped in {took:?}", nodes[i].name);
        }
        // The upgrade: the same data directory, a new process.
        for &i in &turn {
            start(dir, &mut nodes, i);
        }
        connected(&nodes);
    }
    every_job_succeeded_everywhere(&nodes, &names, &ids, &rec, dir);
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
        "{n} agents restarted ({}): {} jobs succeeded once each, {resumed} resumed from their SIGTERM checkpoint, none failed",
        if all_at_once {
            "all at once"
        } else {
            "in turn"
        },
        names.len()
    );
    // With nothing running, a stop is prompt and clean.
    let agents: Vec<Agent> = nodes.iter_mut().filter_map(|n| n.agent.take()).collect();
    for (status, _) in stop(agents) {
        assert!(status.success(), "{status}");
    }
    if std::env::var_os("TAPFINGER_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn a_rolling_restart_of_two_agents_costs_no_job() {
    restart(2, false);
}

#[test]
fn a_rolling_restart_of_three_agents_on_one_host_costs_no_job() {
    restart(3, false);
}

/// The README tour's `kill %1 %2`, then both started again.
#[test]
fn two_agents_stopped_together_and_started_again_fail_no_job() {
    restart(2, true);
}

/// A task that ignores its checkpoint signal: a graceful stop waits for it at most
/// `stop_timeout_seconds`, then stops it at once; a second SIGTERM cuts the wait short. Either way
/// the agent exits 0, no process of the task outlives it, and the task goes back to the queue
/// rather than fail: started again after each restart, it ends once, `succeeded`.
#[test]
fn a_stop_is_bounded_and_a_second_signal_cuts_it_short() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let rec = dir.join("rec");
    let finish = dir.join("finish");
    let script = format!(
        "echo \"start $$\" >> {rec}; trap '' TERM; while [ ! -f {finish} ]; do sleep 0.1; done; echo end >> {rec}",
        rec = rec.display(),
        finish = finish.display()
    );
    let mut nodes = vec![Node {
        name: "solo".into(),
        p2p: free_port(),
        api: format!("127.0.0.1:{}", free_port()),
        agent: None,
    }];
    let starts = || -> Vec<i32> {
        std::fs::read_to_string(&rec)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("start ")?.parse().ok())
            .collect()
    };
    let alive = |pid: i32| Path::new(&format!("/proc/{pid}")).exists();
    // The first run: the bound on the wait is 2 s.
    let mut c = command(dir, &nodes, 0);
    c.args(["--set", "stop_timeout_seconds=2"]);
    nodes[0].agent = Some(Agent(c.spawn().unwrap()));
    let api = nodes[0].api.clone();
    wait_until(Duration::from_secs(30), "the API", || {
        json(&api, "/v1/node").is_some()
    });
    let spec = serde_json::json!({
        "name": "stubborn",
        "command": ["sh", "-c", script],
        "min_demand": {"cpu": 1},
        "grace_seconds": 600,
    });
    let (code, body) = http(&api, "POST", "/v1/tasks", Some(spec.to_string())).unwrap();
    assert_eq!(code, 201, "{body}");
    wait_until(Duration::from_secs(30), "the task running", || {
        starts().len() == 1
    });
    let (status, took) = stop(vec![nodes[0].agent.take().unwrap()]).remove(0);
    assert!(status.success(), "{status}");
    let first = starts()[0];
    assert!(!alive(first), "the task (pid {first}) outlived its agent");
    println!("stopped at its 2 s bound in {took:?}; the task was stopped at once then");
    // The second run: the default bound (60 s), cut short by a second SIGTERM.
    start(dir, &mut nodes, 0);
    wait_until(Duration::from_secs(30), "the task running again", || {
        starts().len() == 2
    });
    let mut agent = nodes[0].agent.take().unwrap();
    let pid = nix::unistd::Pid::from_raw(agent.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        agent.0.try_wait().unwrap().is_none(),
        "the agent did not wait for the task's grace"
    );
    let (status, took) = stop(vec![agent]).remove(0);
    assert!(status.success(), "{status}");
    let second = starts()[1];
    assert!(!alive(second), "the task (pid {second}) outlived its agent");
    println!("a second SIGTERM stopped it {took:?} after it was sent");
    // The third run: the task is let finish; it ends once and succeeded, never failed.
    start(dir, &mut nodes, 0);
    wait_until(
        Duration::from_secs(30),
        "the task running a third time",
        || starts().len() == 3,
    );
    std::fs::write(&finish, "").unwrap();
    wait_until(Duration::from_secs(30), "the task succeeded", || {
        in_state(&api, "succeeded") == ["stubborn"]
    });
    assert!(in_state(&api, "failed").is_empty());
    let ends = std::fs::read_to_string(&rec)
        .unwrap()
        .lines()
        .filter(|l| *l == "end")
        .count();
    assert_eq!(ends, 1);
}
