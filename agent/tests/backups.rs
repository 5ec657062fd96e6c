//! A box's whole data directory restored from an older copy, with real agent processes on
//! 127.0.0.1: the agent of box `a` is killed (SIGKILL) while its supervisor keeps a task
//! running, its data directory is replaced by a copy taken before that task was submitted
//! (journal and counter consistent with each other, so nothing in them tells), and the agent is
//! started again beside its peer `b`, which knows the task runs on `a`. Five runs.
//!
//! Verdicts come from the records the tasks write themselves (start with node and epoch, a line
//! every 100 ms, end; `gone` from a watcher outside the task's process group): the copy left
//! running was alive when the restored agent started, no two copies of a task were ever alive
//! at once, every task acknowledged after the copy was taken (known to the peer) completed, and
//! none completed twice; the restored agent says its data directory was restored from an older
//! copy (its log).
#![allow(clippy::unwrap_used)]

#[path = "support/evidence.rs"]
mod evidence;
#[path = "support/process.rs"]
mod process;

use evidence::{Evidence, TASK};
use process::{http, json, peer_agent, peer_pair, start_agent, wait_until};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const BIN: &str = env!("CARGO_BIN_EXE_tapfinger-agent");

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Submit task `key` (running `tenths` × 100 ms) to `api`; only box `a` can run it, and it takes
/// both of its cores.
fn submit(api: &str, dir: &Path, key: &str, tenths: u32) {
    let spec = serde_json::json!({
        "name": key,
        "command": ["sh", dir.join("task.sh"), dir.join("rec"), key, tenths.to_string()],
        "min_demand": {"cpu": 2},
        "require_labels": {"site": "a"},
    });
    let (code, body) = http(api, "POST", "/v1/tasks", Some(spec.to_string())).unwrap();
    assert_eq!(code, 201, "{body}");
}

/// `cp -a from to` (the data directory with its modes and times, as a backup keeps them).
fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    let out = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Put the copy `backup` in the place of the data directory `dir`, whole: copied beside it,
/// then renamed over it. (Deleting `dir` first leaves its lease file missing for as long as the
/// copy takes, and a supervisor that finds no lease stops its task: the backstop for an agent
/// gone for good, which would end the copy this test is about before the agent restarts.)
fn restore(backup: &Path, dir: &Path) {
    let staged = dir.with_extension("restoring");
    copy_dir(backup, &staged);
    let old = dir.with_extension("replaced");
    std::fs::rename(dir, &old).unwrap();
    std::fs::rename(&staged, dir).unwrap();
    std::fs::remove_dir_all(&old).unwrap();
}

/// One run; returns the overlapping copies and the copies of the long task.
fn run_once(dir: &Path) -> (usize, usize) {
    let rec = dir.join("rec");
    std::fs::create_dir_all(&rec).unwrap();
    std::fs::write(dir.join("task.sh"), TASK).unwrap();
    let (a, b, [(pa, api_a), (pb, api_b)]) = peer_pair(BIN, dir);
    // Work before the copy, so that the copy's journal is not empty.
    submit(&api_a, dir, "early", 2);
    wait_until(Duration::from_secs(20), "the early task done", || {
        Evidence::read(&rec)
            .copies
            .get("early")
            .is_some_and(|c| c.iter().any(|c| c.ended))
    });
    std::thread::sleep(Duration::from_millis(500));
    copy_dir(&dir.join("a"), &dir.join("a.backup"));
    // After the copy: a long task that runs on a, and two that wait behind it.
    submit(&api_a, dir, "long", 60);
    submit(&api_a, dir, "q1", 3);
    submit(&api_a, dir, "q2", 3);
    wait_until(Duration::from_secs(20), "the long task running", || {
        Evidence::read(&rec).copies.contains_key("long")
    });
    wait_until(Duration::from_secs(5), "b knows the tasks", || {
        json(&api_b, "/v1/tasks").is_some_and(|v| v["total"] == 4)
    });
    // SIGKILL: the long task's supervisor keeps it running.
    drop(a);
    restore(&dir.join("a.backup"), &dir.join("a"));
    let restarted = now_ms();
    let a = start_agent(peer_agent(BIN, dir, "a", pa, &api_a, &[pb]), &api_a);
    let keys = ["long", "q1", "q2"];
    let t0 = std::time::Instant::now();
    loop {
        let ev = Evidence::read(&rec);
        let done = keys
            .iter()
            .all(|k| ev.copies.get(*k).is_some_and(|c| c.iter().any(|c| c.ended)));
        if done {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "not all completed: {:?}; logs in {}",
            ev.copies,
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Every copy's watcher has written its line.
    std::thread::sleep(Duration::from_millis(300));
    let ev = Evidence::read(&rec);
    let long = &ev.copies["long"];
    let first = long.iter().min_by_key(|c| c.start).unwrap();
    assert!(
        first.span().1 > restarted,
        "the copy left running had ended before the restored agent started: the run shows nothing ({long:?})"
    );
    let overlaps = ev.overlaps();
    assert!(
        overlaps.is_empty(),
        "two copies alive at once: {overlaps:?}; {long:?}; logs in {}",
        dir.display()
    );
    let twice = ev.completed_twice();
    assert!(twice.is_empty(), "completed twice: {twice:?}");
    // The restore is seen once the peer tells the tasks accepted after the copy, and said.
    let log = std::fs::read_to_string(dir.join("a.log")).unwrap();
    assert!(
        log.contains("the data directory was restored from an older copy"),
        "the restore went unsaid; logs in {}",
        dir.display()
    );
    drop((a, b));
    (overlaps.len(), long.len())
}

#[test]
fn a_data_directory_restored_from_an_older_copy_never_runs_two_copies_at_once() {
    for i in 0..5 {
        let tmp = tempfile::tempdir().unwrap();
        let (overlaps, copies) = run_once(tmp.path());
        println!(
            "run {i}: the copy left running stopped before another started: {overlaps} overlapping copies, {copies} copies of the long task, each acknowledged task completed once"
        );
    }
}
