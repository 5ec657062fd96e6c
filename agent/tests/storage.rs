//! The agent binary and its disk: a data directory on a small tmpfs filled up while tasks are
//! submitted and run, a journal cut short under a real agent, and two agents on one data
//! directory. Verdicts come from the records the tasks write themselves (outside the data
//! directory): every acknowledged task reaches one outcome and none runs again after it
//! succeeded.
//!
//! The full-disk tests (a disk filled while tasks run; one page left free) mount a tmpfs, so
//! they need root (CI has it); without root they fail, saying so.
#![allow(clippy::unwrap_used)]

#[path = "support/process.rs"]
mod process;

use process::{
    Agent, agent_command, free_port, http, json, peer_agent, peer_pair, start_agent, wait_until,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_tapfinger-agent");

/// A task named `name` that writes `start`, sleeps `secs`, then writes `end` to `rec/name`.
fn recorder(rec: &Path, name: &str, secs: f64) -> String {
    let file = rec.join(name);
    let script = format!(
        "echo start >> {f}; sleep {secs}; echo end >> {f}",
        f = file.display()
    );
    serde_json::json!({
        "name": name,
        "command": ["sh", "-c", script],
        "min_demand": {"cpu": 1},
    })
    .to_string()
}

/// Submit; the status, the `Retry-After` header's presence is checked by the caller via body.
fn submit(api: &str, rec: &Path, name: &str, secs: f64) -> (u16, String) {
    http(api, "POST", "/v1/tasks", Some(recorder(rec, name, secs))).unwrap()
}

/// Starts and ends per task, from the tasks' own records.
fn records(rec: &Path) -> BTreeMap<String, (usize, usize)> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(rec).unwrap().flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        let starts = text.lines().filter(|l| *l == "start").count();
        let ends = text.lines().filter(|l| *l == "end").count();
        out.insert(e.file_name().to_string_lossy().to_string(), (starts, ends));
    }
    out
}

/// Every task the API lists as succeeded, by name.
fn finished(api: &str) -> Vec<String> {
    let Some(v) = json(api, "/v1/tasks?limit=1000") else {
        return Vec::new();
    };
    v["tasks"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .filter(|t| t["state"] == "succeeded")
                .filter_map(|t| t["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Wait up to `limit` for the API to list every task of `acked` as succeeded, then check from
/// the tasks' own records that each started and ended once; the records.
fn each_succeeded_once(
    api: &str,
    rec: &Path,
    acked: &[String],
    limit: Duration,
) -> BTreeMap<String, (usize, usize)> {
    wait_until(limit, "every acknowledged task finished", || {
        let done = finished(api);
        acked.iter().all(|n| done.contains(n))
    });
    let r = records(rec);
    for name in acked {
        let (starts, ends) = r.get(name).copied().unwrap_or_default();
        assert_eq!(ends, 1, "{name}: {starts} starts, {ends} ends ({r:?})");
        assert_eq!(starts, 1, "{name} ran again after it succeeded ({r:?})");
    }
    r
}

fn storage(api: &str) -> serde_json::Value {
    json(api, "/v1/node").map_or(serde_json::Value::Null, |n| n["storage"].clone())
}

/// Mounts a tmpfs of `size` at `at`; unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Self {
        std::fs::create_dir_all(at).unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "this test mounts a tmpfs and needs root (CI runs it as root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Fill the file system of `dir` until a write fails; returns the filler's path.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let block = vec![0u8; 4096];
    while f.write_all(&block).and_then(|()| f.sync_data()).is_ok() {}
    path
}

/// An agent whose data directory (`dir/data`) is a 4 MiB tmpfs, with `rec` made for the tasks'
/// records: the mount (unmounted when dropped), its ports and the agent.
fn on_a_small_disk(dir: &Path, rec: &Path) -> (Tmpfs, u16, String, Agent) {
    std::fs::create_dir_all(rec).unwrap();
    let fs = Tmpfs::mount(&dir.join("data"), "4m");
    let (p2p, api) = (free_port(), format!("127.0.0.1:{}", free_port()));
    let a = agent(dir, p2p, &api);
    (fs, p2p, api, a)
}

fn agent(dir: &Path, p2p: u16, api: &str) -> Agent {
    start_agent(agent_command(BIN, "a", dir, p2p, api, "first-fit-max"), api)
}

#[test]
fn a_full_disk_refuses_submissions_with_507_and_loses_no_acknowledged_task() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let rec = dir.join("rec");
    let (_fs, p2p, api, a) = on_a_small_disk(dir, &rec);
    let mut acked = Vec::new();
    for i in 0..4 {
        let name = format!("before-{i}");
        let (code, body) = submit(&api, &rec, &name, 3.0);
        assert_eq!(code, 201, "{body}");
        acked.push(name);
    }
    wait_until(Duration::from_secs(30), "a task running", || {
        records(&rec).values().any(|(s, _)| *s > 0)
    });

    // The disk fills while tasks run.
    let filler = fill(&dir.join("data"));
    // The journal's last page may still take a record or two: those are acknowledged, and
    // count like any other.
    let mut first_refusal = None;
    for i in 0..50 {
        let name = format!("during-{i}");
        let (code, body) = submit(&api, &rec, &name, 0.1);
        if code == 201 {
            acked.push(name);
        } else {
            first_refusal = Some((code, body));
            break;
        }
    }
    let (code, body) = first_refusal.expect("no submission refused on a full disk");
    assert_eq!(code, 507, "{body}");
    let while_filling = acked.len() - 4;
    for i in 0..3 {
        let (code, body) = submit(&api, &rec, &format!("refused-{i}"), 0.1);
        assert_eq!(code, 507, "a submission on a full disk: {body}");
        assert!(
            (body.contains("No space left") || body.contains("bytes free"))
                && body.contains(&dir.join("data").display().to_string()),
            "the refusal names the cause and the data directory: {body}"
        );
    }
    // The status is published a few times a second.
    wait_until(Duration::from_secs(5), "storage full in /v1/node", || {
        storage(&api)["full"] == true
    });
    let metrics = http(&api, "GET", "/metrics", None).unwrap().1;
    assert!(
        metrics.contains("tapfinger_storage_full 1"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("storage"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The task running goes on and finishes while the disk is full (nothing new starts: a
    // start that could not be journaled would not be adopted after a restart); the agent stays
    // up.
    let running: Vec<String> = records(&rec)
        .into_iter()
        .filter(|(_, (s, e))| *s > 0 && *e == 0)
        .map(|(n, _)| n)
        .collect();
    assert!(!running.is_empty());
    wait_until(Duration::from_secs(60), "the running task's end", || {
        let r = records(&rec);
        running
            .iter()
            .all(|n| r.get(n).is_some_and(|(_, e)| *e > 0))
    });
    std::thread::sleep(Duration::from_secs(2));
    let started: usize = records(&rec).values().map(|(s, _)| s).sum();
    assert_eq!(
        started,
        running.len(),
        "a task started on a full disk: {:?}",
        records(&rec)
    );
    assert!(
        json(&api, "/v1/node").is_some(),
        "the agent is up on a full disk"
    );

    // Space comes back: the backlog is written, submissions are taken again.
    std::fs::remove_file(&filler).unwrap();
    wait_until(Duration::from_secs(20), "storage writable again", || {
        let s = storage(&api);
        s["failing"].is_null() && s["backlog"] == 0
    });
    for i in 0..3 {
        let name = format!("after-{i}");
        let (code, body) = submit(&api, &rec, &name, 0.5);
        assert_eq!(code, 201, "{body}");
        acked.push(name);
    }
    // Killed and restarted on the same data directory: it starts, and every acknowledged task
    // reaches its outcome.
    drop(a);
    let a = agent(dir, p2p, &api);
    let r = each_succeeded_once(&api, &rec, &acked, Duration::from_secs(90));
    assert!(
        r.keys().all(|n| !n.starts_with("refused")),
        "a refused task ran: {r:?}"
    );
    println!(
        "full disk: {} acknowledged ({while_filling} into the journal's last page after the disk \
         filled), 4 refused with 507 once it was full, {} running task(s) finished while full, 0 \
         started while full; after freeing space, a SIGKILL and a restart: {} of {} succeeded, \
         each started once (tasks' own records)",
        acked.len(),
        running.len(),
        acked.iter().filter(|n| r.get(*n) == Some(&(1, 1))).count(),
        acked.len()
    );
    drop(a);
}

/// The states the API lists the tasks named `names` in.
fn states(api: &str, names: &[String]) -> Vec<(String, String)> {
    let Some(v) = json(api, "/v1/tasks?limit=1000") else {
        return Vec::new();
    };
    v["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            let name = t["name"].as_str()?.to_string();
            names
                .contains(&name)
                .then(|| (name, t["state"].as_str().unwrap_or("?").to_string()))
        })
        .collect()
}

/// One page free: the store counts itself full before any write fails (`/v1/node` says so,
/// with the free space), acknowledged tasks queued behind a running one wait instead of failing
/// at their start, new submissions are refused with 507, and once space is freed every
/// acknowledged task runs once.
#[test]
fn with_one_page_free_acknowledged_tasks_wait_and_none_fails_unrun() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let rec = dir.join("rec");
    let (_fs, _, api, a) = on_a_small_disk(dir, &rec);
    // A blocker that takes both cores, and five small tasks acknowledged behind it.
    let mut blocker: serde_json::Value =
        serde_json::from_str(&recorder(&rec, "blocker", 3.0)).unwrap();
    blocker["min_demand"] = serde_json::json!({"cpu": 2});
    let (code, body) = http(&api, "POST", "/v1/tasks", Some(blocker.to_string())).unwrap();
    assert_eq!(code, 201, "{body}");
    wait_until(Duration::from_secs(30), "the blocker running", || {
        records(&rec).contains_key("blocker")
    });
    let mut acked: Vec<String> = Vec::new();
    for i in 0..5 {
        let name = format!("queued-{i}");
        let (code, body) = submit(&api, &rec, &name, 0.2);
        assert_eq!(code, 201, "{body}");
        acked.push(name);
    }
    // Everything but one page filled.
    let filler = fill(&dir.join("data"));
    let len = std::fs::metadata(&filler).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&filler)
        .unwrap()
        .set_len(len.saturating_sub(4096))
        .unwrap();
    wait_until(Duration::from_secs(5), "storage full in /v1/node", || {
        storage(&api)["full"] == true
    });
    let said = storage(&api)["failing"].to_string();
    assert!(
        said.contains("bytes free"),
        "full before a write failed: {said}"
    );
    for i in 0..3 {
        let (code, body) = submit(&api, &rec, &format!("refused-{i}"), 0.1);
        assert_eq!(code, 507, "{body}");
    }
    // The blocker ends; the queued tasks wait (none starts, none fails) while the room is short.
    wait_until(Duration::from_secs(30), "the blocker's end", || {
        records(&rec).get("blocker").is_some_and(|(_, e)| *e > 0)
    });
    std::thread::sleep(Duration::from_secs(3));
    let r = records(&rec);
    assert!(
        acked.iter().all(|n| !r.contains_key(n)),
        "a task started with one page free: {r:?}"
    );
    let st = states(&api, &acked);
    assert!(
        st.len() == acked.len() && st.iter().all(|(_, s)| s == "pending"),
        "every acknowledged task waits: {st:?}"
    );
    // Room again: every acknowledged task runs, once.
    std::fs::remove_file(&filler).unwrap();
    let r = each_succeeded_once(&api, &rec, &acked, Duration::from_secs(60));
    assert!(r.keys().all(|n| !n.starts_with("refused")), "{r:?}");
    println!(
        "one page free: storage full before any write failed ({said}); {} acknowledged tasks waited and then ran once each, 3 submissions refused with 507",
        acked.len()
    );
    drop(a);
}

#[test]
fn a_journal_cut_short_under_a_real_agent_is_refused_until_the_loss_is_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let rec = dir.join("rec");
    std::fs::create_dir_all(&rec).unwrap();
    let (p2p, api) = (free_port(), format!("127.0.0.1:{}", free_port()));
    let a = agent(dir, p2p, &api);
    for i in 0..4 {
        let (code, body) = submit(&api, &rec, &format!("t{i}"), 0.2);
        assert_eq!(code, 201, "{body}");
    }
    wait_until(Duration::from_secs(60), "four tasks finished", || {
        finished(&api).len() == 4
    });
    drop(a);
    let journal = dir.join("data/tasks.journal");
    let bytes = std::fs::read(&journal).unwrap();
    std::fs::write(&journal, &bytes[..bytes.len() / 2]).unwrap();
    let said = refused_then_repaired(
        agent_command(BIN, "a", dir, p2p, &api, "first-fit-max"),
        &journal,
    );
    assert!(said.contains("missing  commits"), "{said}");
    // The cut took outcomes with it; the tasks' exit records in the run directory tell them.
    assert!(said.contains("outcomes "), "{said}");
    println!("repair of a journal cut in half:\n{said}");
    // The loss accepted, it starts; nothing that had succeeded runs again.
    let a = agent(dir, p2p, &api);
    std::thread::sleep(Duration::from_secs(3));
    let done = finished(&api);
    assert!(done.len() >= 2, "the history kept: {done:?}");
    let r = records(&rec);
    assert!(r.values().all(|(s, _)| *s == 1), "a task ran again: {r:?}");
    drop(a);
}

#[test]
fn a_second_agent_on_one_data_directory_exits_1_naming_the_first() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (p2p, api) = (free_port(), format!("127.0.0.1:{}", free_port()));
    let a = agent(dir, p2p, &api);
    let pid = a.0.id();
    let api2 = format!("127.0.0.1:{}", free_port());
    let out = agent_command(BIN, "b", dir, free_port(), &api2, "first-fit-max")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("pid {pid}")), "{err}");
    assert!(
        json(&api, "/v1/node").is_some(),
        "the first agent is unharmed"
    );
    drop(a);
}

/// Start `agent` on a journal that lost records: it must exit 1 naming the loss and the repair
/// command; then accept the loss with `repair-journal` and return what the repair printed.
fn refused_then_repaired(mut agent: std::process::Command, journal: &Path) -> String {
    let out = agent
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "started on a journal that lost records: {err}"
    );
    assert!(
        err.contains("records are missing") && err.contains("repair-journal"),
        "{err}"
    );
    let rep = std::process::Command::new(BIN)
        .arg("repair-journal")
        .arg(journal)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&rep.stdout).to_string();
    assert!(
        rep.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&rep.stderr)
    );
    said
}

#[test]
fn a_box_whose_journal_was_deleted_relearns_its_unfinished_tasks_from_its_peer() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let rec = dir.join("rec");
    std::fs::create_dir_all(&rec).unwrap();
    let (a, b, [(pa, api_a), (pb, api_b)]) = peer_pair(BIN, dir);
    // Tasks only box a can run, each taking all of it: a blocker that runs, then three that
    // wait behind it, acknowledged by a and known to b.
    let only_a = |name: &str, secs: f64| {
        let mut spec: serde_json::Value =
            serde_json::from_str(&recorder(&rec, name, secs)).unwrap();
        spec["require_labels"] = serde_json::json!({"site": "a"});
        spec["min_demand"] = serde_json::json!({"cpu": 2});
        // Each copy's shell appends its pid outside the records (which name tasks only).
        let pids = dir.join(format!("{name}.pids"));
        let script = spec["command"][2].as_str().unwrap().to_string();
        let script = if secs < 0.0 {
            let first = format!("[ $(wc -l < {}) -eq 1 ] && sleep 300", pids.display());
            script.replace("sleep -1", &first)
        } else {
            script
        };
        spec["command"][2] = serde_json::json!(format!("echo $$ >> {}; {script}", pids.display()));
        let (code, body) = http(&api_a, "POST", "/v1/tasks", Some(spec.to_string())).unwrap();
        assert_eq!(code, 201, "{body}");
    };
    // Its first copy runs long enough that, left running, it would hold the box past the
    // test's wait; a copy started again after it was killed ends at once.
    only_a("blocker", -1.0);
    wait_until(Duration::from_secs(20), "the blocker running", || {
        records(&rec).contains_key("blocker")
    });
    let names = ["r0", "r1", "r2"];
    for n in names {
        only_a(n, 0.2);
    }
    wait_until(Duration::from_secs(5), "b knows the four tasks", || {
        json(&api_b, "/v1/tasks").is_some_and(|v| v["total"] == 4)
    });
    drop(a);
    // The journal deleted: refused, the loss accepted, then relearned from b.
    let journal = dir.join("a/tasks.journal");
    std::fs::remove_file(&journal).unwrap();
    refused_then_repaired(peer_agent(BIN, dir, "a", pa, &api_a, &[pb]), &journal);
    let a = start_agent(peer_agent(BIN, dir, "a", pa, &api_a, &[pb]), &api_a);
    let t0 = std::time::Instant::now();
    while !names
        .iter()
        .all(|n| finished(&api_b).iter().any(|d| d == n))
    {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "not all succeeded: a {:?} b {:?}; logs in {}",
            json(&api_a, "/v1/tasks"),
            json(&api_b, "/v1/tasks"),
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let r = records(&rec);
    for n in names {
        assert_eq!(r.get(n), Some(&(1, 1)), "{n}: {r:?}");
    }
    // The copy of the blocker left running before the loss was killed at the restart (its
    // start was no longer journaled), not left to run beside a new one.
    let first: u32 = std::fs::read_to_string(dir.join("blocker.pids"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        !Path::new(&format!("/proc/{first}")).exists(),
        "the blocker's first copy (pid {first}) still runs"
    );
    println!(
        "relearned from the peer: {r:?} (name: (starts, ends)); the copy left running, pid {first}, killed"
    );
    // The journal holds them again (relearned), so a later loss of the peer would not drop them.
    let dump = std::process::Command::new(BIN)
        .args(["journal", "dump"])
        .arg(&journal)
        .output()
        .unwrap();
    let dump = String::from_utf8_lossy(&dump.stdout);
    for n in names {
        assert!(
            dump.contains(&format!("\"name\":\"{n}\"")),
            "{n} not journaled again: {dump}"
        );
    }
    drop((a, b));
}
