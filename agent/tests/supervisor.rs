//! The task supervisor and its guard as the agent starts them (`tapfinger-agent supervise`), with
//! tasks that record their own processes: a preemption gives the checkpoint signal and the grace;
//! a supervisor killed with SIGKILL takes its task's whole process group with it; the guard
//! killed with it still takes the task's first process, and what is left is found and killed from
//! the group the supervisor recorded; a supervisor told to wait for the agent's journal starts
//! its task only when told, and never if the agent is gone first. Every verdict is read from `/proc` and the task's own files.
#![allow(clippy::unwrap_used)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tapfinger_agent::guard::{Group, kill_recorded};
use tapfinger_agent::procs::start_time;
use tapfinger_agent::supervise::ExitRecord;

const BIN: &str = env!("CARGO_BIN_EXE_tapfinger-agent");

/// A supervisor running `script` under `sh -c`, with a lease that stays fresh for a minute.
fn supervise(dir: &Path, script: &str, grace_ms: u64) -> Child {
    supervise_command(dir, &["sh", "-c", script], grace_ms)
}

/// A supervisor running `command`, with a lease that stays fresh for a minute.
fn supervise_command(dir: &Path, command: &[&str], grace_ms: u64) -> Child {
    supervise_with(dir, command, grace_ms, &[], Stdio::null())
}

/// A supervisor running `command` with `extra` arguments and `stdin`.
fn supervise_with(
    dir: &Path,
    command: &[&str],
    grace_ms: u64,
    extra: &[&str],
    stdin: Stdio,
) -> Child {
    let lease = dir.join("lease");
    std::fs::write(&lease, "me").unwrap();
    Command::new(BIN)
        .arg("supervise")
        .arg("--lease")
        .arg(&lease)
        .args(["--autonomy-ms", "60000", "--owner", "me"])
        .args(["--grace-ms", &grace_ms.to_string()])
        .arg("--exit-file")
        .arg(dir.join("t.exit"))
        .arg("--stdout")
        .arg(dir.join("t.stdout"))
        .arg("--stderr")
        .arg(dir.join("t.stderr"))
        .args(extra)
        .arg("--")
        .args(command)
        .stdin(stdin)
        .process_group(0)
        .spawn()
        .unwrap()
}

/// Wait until `f` holds, for at most `limit` (a bound on a liveness wait, not a speed claim).
fn until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < end, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A pid the task wrote to `dir/name`, once it has.
fn pid_in(dir: &Path, name: &str) -> u32 {
    let p: PathBuf = dir.join(name);
    until(Duration::from_secs(20), name, || {
        std::fs::read_to_string(&p).is_ok_and(|s| s.ends_with('\n'))
    });
    std::fs::read_to_string(&p).unwrap().trim().parse().unwrap()
}

/// The processes whose parent is `pid` (field 4 of `/proc/<pid>/stat`).
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|st| {
                st.rfind(')')
                    .and_then(|i| st[i + 2..].split_whitespace().nth(1)?.parse().ok())
                    == Some(pid)
            })
        })
        .collect()
}

fn alive(pid: u32) -> bool {
    start_time(pid).is_some()
}

/// A task that records its shell's pid and a background child's, then waits.
const TREE: &str = "sleep 300 & echo $! > child.tmp; mv child.tmp child; echo $$ > leader.tmp; mv leader.tmp leader; wait";

fn task_in(dir: &Path) -> String {
    format!("cd '{}' || exit 1; {TREE}", dir.display())
}

/// Start `script` under a supervisor with `grace_ms`, preempt it (SIGUSR1 to the supervisor)
/// once it has written `up`, and return the supervisor's exit record.
fn preempted(dir: &Path, script: &str, grace_ms: u64) -> ExitRecord {
    let _ = std::fs::remove_file(dir.join("up"));
    let script = format!("echo up > {}/up; {script}", dir.display());
    let mut sup = supervise(dir, &script, grace_ms);
    until(Duration::from_secs(20), "the task started", || {
        dir.join("up").exists()
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sup.id() as i32),
        nix::sys::signal::Signal::SIGUSR1,
    )
    .unwrap();
    sup.wait().unwrap();
    ExitRecord::read(&dir.join("t.exit")).unwrap()
}

/// SIGUSR1 to the supervisor (a preemption): the task gets SIGTERM, its checkpoint signal, and
/// ends by itself within its grace; one that ignores it is killed after the grace.
#[test]
fn a_preempted_task_gets_its_checkpoint_signal_then_its_grace() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let marker = dir.join("term");
    let polite = format!(
        "trap 'echo term > {}; exit 0' TERM; while true; do sleep 0.05; done",
        marker.display(),
    );
    let r = preempted(dir, &polite, 5_000);
    assert_eq!(r.how, "preempted");
    // It exited 0 within its grace: the record says so (done is done), as it says 143 for a
    // task that saved and stopped.
    assert_eq!(r.code, Some(0));
    assert_eq!(std::fs::read_to_string(&marker).unwrap().trim(), "term");
    let saved = "trap 'exit 143' TERM; while true; do sleep 0.05; done";
    assert_eq!(preempted(dir, saved, 5_000).code, Some(143));
    // One that ignores the signal is killed once its grace is up (else this never returns),
    // with no code of its own.
    let deaf = "trap '' TERM; while true; do sleep 0.05; done";
    let r = preempted(dir, deaf, 200);
    assert_eq!(r.how, "preempted");
    assert_eq!(r.code, None);
}

/// A task's exit code and a program that cannot start come through the guard as before.
#[test]
fn exit_codes_and_spawn_failures_pass_through_the_guard() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut sup = supervise(dir, "exit 3", 0);
    sup.wait().unwrap();
    let r = ExitRecord::read(&dir.join("t.exit")).unwrap();
    assert_eq!((r.how.as_str(), r.code), ("exited", Some(3)));
    assert!(
        !dir.join("t.group").exists(),
        "the group record outlived its group"
    );
    // A task killed by a signal: 128 + the signal, as a shell says it, and the signal named.
    let mut sup = supervise(dir, "kill -9 $$", 0);
    sup.wait().unwrap();
    let r = ExitRecord::read(&dir.join("t.exit")).unwrap();
    assert_eq!((r.how.as_str(), r.code), ("exited", Some(137)), "{r:?}");
    assert!(r.message.contains("signal 9"), "{r:?}");
    let log = std::fs::read_to_string(dir.join("t.stderr")).unwrap();
    assert!(log.contains("killed by signal SIGKILL"), "{log}");
    // The guard killed (the task with it): a lost copy, not an outcome.
    let mut sup = supervise(dir, &task_in(dir), 0);
    let _ = pid_in(dir, "leader");
    let guard = children_of(sup.id())[0];
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(guard as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    sup.wait().unwrap();
    let r = ExitRecord::read(&dir.join("t.exit")).unwrap();
    assert_eq!((r.how.as_str(), r.code), ("lost", None), "{r:?}");
    let mut sup = supervise_command(dir, &["/no/such/program"], 0);
    sup.wait().unwrap();
    let r = ExitRecord::read(&dir.join("t.exit")).unwrap();
    assert_eq!(r.how, "spawn", "{r:?}");
    assert!(r.message.contains("/no/such/program"), "{r:?}");
}

/// SIGKILL to the supervisor (an OOM kill, `kill -9`): the task's whole process group dies
/// with it, its shell and the child it started both.
#[test]
fn a_task_dies_with_its_killed_supervisor() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut sup = supervise(dir, &task_in(dir), 0);
    let (leader, child) = (pid_in(dir, "leader"), pid_in(dir, "child"));
    assert!(alive(leader) && alive(child));
    let group = Group::read(&dir.join("t.group")).expect("the supervisor records the group");
    sup.kill().unwrap();
    sup.wait().unwrap();
    until(Duration::from_secs(20), "the task's group died", || {
        !alive(leader) && !alive(child) && !alive(group.pgid)
    });
}

/// SIGKILL to the supervisor and the guard at once: the task's first process dies with the
/// guard (its parent-death signal survives `exec`); the child it started outlives both, and is
/// what a restarted agent kills from the recorded group before the task may run again.
#[test]
fn what_outlives_a_killed_supervisor_and_guard_is_killed_from_the_record() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut sup = supervise(dir, &task_in(dir), 0);
    let (leader, child) = (pid_in(dir, "leader"), pid_in(dir, "child"));
    let group = Group::read(&dir.join("t.group")).unwrap();
    assert_eq!(
        (group.pgid, start_time(group.pgid)),
        (leader, Some(group.start))
    );
    let guard = children_of(sup.id());
    assert_eq!(
        guard.len(),
        1,
        "the supervisor's one child is the guard: {guard:?}"
    );
    // Both stopped first, so that neither can act on the other's death (the supervisor kills
    // the task's group when its guard ends): killed "at once".
    use nix::sys::signal::Signal::{SIGKILL, SIGSTOP};
    let signal = |pid: u32, s| nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), s);
    signal(sup.id(), SIGSTOP).unwrap();
    signal(guard[0], SIGSTOP).unwrap();
    signal(guard[0], SIGKILL).unwrap();
    sup.kill().unwrap();
    sup.wait().unwrap();
    until(
        Duration::from_secs(20),
        "the task's first process died",
        || !alive(leader),
    );
    assert!(alive(child), "the scenario needs a process left over");
    assert_eq!(kill_recorded(group, Duration::from_secs(20)), 1);
    assert!(!alive(child), "the recorded group's kill left a process");
}

/// `--wait-start`: the task starts only once `start` arrives on the supervisor's input (the
/// agent's journal holds the start); input that ends first (the agent died before its write)
/// ends the supervisor with the task never started.
#[test]
fn a_supervisor_starts_its_task_only_once_the_agent_confirms_the_start() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let up = dir.join("up");
    let script = format!("echo up > '{}'", up.display());
    let command = ["sh", "-c", script.as_str()];
    let wait = ["--wait-start"];
    // Never confirmed: the input ends (as when the agent is killed) and nothing ran.
    let mut sup = supervise_with(dir, &command, 0, &wait, Stdio::piped());
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !up.exists(),
        "the task started before its start was confirmed"
    );
    drop(sup.stdin.take());
    sup.wait().unwrap();
    let r = ExitRecord::read(&dir.join("t.exit")).unwrap();
    assert_eq!((r.how.as_str(), r.code), ("stopped", None), "{r:?}");
    assert!(r.message.contains("not started"), "{r:?}");
    assert!(!up.exists(), "an unconfirmed task ran");
    // Confirmed: it runs and its exit is recorded as usual.
    let mut sup = supervise_with(dir, &command, 0, &wait, Stdio::piped());
    sup.stdin.take().unwrap().write_all(b"start\n").unwrap();
    sup.wait().unwrap();
    let r = ExitRecord::read(&dir.join("t.exit")).unwrap();
    assert_eq!((r.how.as_str(), r.code), ("exited", Some(0)), "{r:?}");
    assert!(up.exists(), "the confirmed task did not run");
}
