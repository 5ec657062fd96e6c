//! The task's guard (`tapfinger-agent guard`, started by the supervisor for every task): what
//! makes a task die with its supervisor, so that no copy of a task runs on unknown to the cluster
//! once its fence is gone (an OOM kill or a `kill -9` of the agent and the supervisor together).
//!
//! Two stages, both this binary, because the workspace forbids `unsafe` and so a `pre_exec` hook
//! in the supervisor that would set the task's parent-death signal:
//!
//! 1. **The guard** asks the kernel for a signal when its parent dies (`PR_SET_PDEATHSIG`),
//!    checks that its parent is still the supervisor that started it (else it starts nothing),
//!    and runs the second stage as its child, in a process group of its own: the task's group,
//!    which it records (`--group-file`, pid and start time) before the task's program starts and
//!    which the supervisor signals from then on. On the signal, or when a check every 100 ms
//!    finds its parent changed, it kills the task's whole group with SIGKILL, reaps the task and
//!    exits. Being outside that group, it outlives every kill of the group long enough to reap
//!    the task at once (a task whose parent died with it would stay a zombie until `init`
//!    reaped it, and counted as alive meanwhile). It exits with the task's exit code, or by
//!    SIGKILL when the task died of a signal (the supervisor then records no code, as for any
//!    task killed by a signal).
//! 2. **`guard --exec`** asks for SIGKILL when *its* parent (the guard) dies, checks that parent,
//!    and replaces itself with the task's command (`execve` keeps the parent-death signal). So
//!    the task's first process dies even when the guard is killed with the supervisor.
//!
//! What remains for a process the task started that left the group (`setsid`) or that survived
//! both stages (the guard, the supervisor and the agent all killed at once): the recorded group
//! is killed by a restarted agent before the task is requeued ([`kill_recorded`]).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Arguments of `tapfinger-agent guard`.
#[derive(Debug, Clone, clap::Args)]
pub struct GuardArgs {
    /// The process that must stay this one's parent (the supervisor; for `--exec`, the guard).
    #[arg(long)]
    pub parent: u32,
    /// Where to write why the task's program could not be started.
    #[arg(long)]
    pub spawn_error: PathBuf,
    /// Where the first stage records the task's process group ([`Group`]).
    #[arg(long)]
    pub group_file: Option<PathBuf>,
    /// The second stage: set the parent-death signal and replace this process with the command.
    #[arg(long)]
    pub exec: bool,
    /// The task's command line.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// The program both stages run: this very binary, by the kernel's link to it, which still
/// works when the file was replaced on disk (an upgrade while tasks run).
pub const SELF_EXE: &str = "/proc/self/exe";

/// The signal the guard asks for when its parent dies (not SIGKILL: the guard must live to kill
/// the task's group).
const PARENT_GONE: nix::sys::signal::Signal = nix::sys::signal::Signal::SIGHUP;

/// Whether this process's parent is still `parent`.
fn parent_is(parent: u32) -> bool {
    u32::try_from(nix::unistd::getppid().as_raw()) == Ok(parent)
}

fn write_spawn_error(path: &Path, message: &str) {
    if let Err(e) = std::fs::write(path, message) {
        eprintln!("tapfinger guard: cannot write {}: {e}", path.display());
    }
}

/// Run either stage; returns the exit code (the first stage's: the task's).
pub async fn run(a: GuardArgs) -> i32 {
    use nix::sys::prctl::set_pdeathsig;
    use nix::sys::signal::Signal;
    if a.exec {
        // Second stage: die with the guard, then become the task.
        if let Err(e) = set_pdeathsig(Signal::SIGKILL) {
            write_spawn_error(
                &a.spawn_error,
                &format!("cannot set the parent-death signal: {e}"),
            );
            return 1;
        }
        if !parent_is(a.parent) {
            return 1;
        }
        let e = std::os::unix::process::CommandExt::exec(
            std::process::Command::new(&a.command[0]).args(&a.command[1..]),
        );
        write_spawn_error(&a.spawn_error, &format!("{}: {e}", a.command[0]));
        return 127;
    }
    if let Err(e) = set_pdeathsig(PARENT_GONE) {
        write_spawn_error(
            &a.spawn_error,
            &format!("cannot set the parent-death signal: {e}"),
        );
        return 1;
    }
    // The supervisor died before the signal was asked for: the task must not start at all.
    if !parent_is(a.parent) {
        write_spawn_error(
            &a.spawn_error,
            "the supervisor was gone before the task started",
        );
        return 1;
    }
    guard(&a).await
}

async fn guard(a: &GuardArgs) -> i32 {
    use tokio::signal::unix::{SignalKind, signal};
    // Registered before the task starts; the task itself gets the default handling (a handler
    // is not inherited through exec). SIGTERM and SIGINT to the guard (a signal to the group it
    // leads) are not for the task: its own group gets the supervisor's signals.
    let (Ok(mut gone), Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::from_raw(PARENT_GONE as i32)),
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        write_spawn_error(&a.spawn_error, "cannot handle SIGHUP, SIGTERM and SIGINT");
        return 1;
    };
    let me = std::process::id().to_string();
    let mut child = match tokio::process::Command::new(SELF_EXE)
        .args(["guard", "--exec", "--parent", &me, "--spawn-error"])
        .arg(&a.spawn_error)
        .arg("--")
        .args(&a.command)
        .process_group(0)
        .kill_on_drop(false)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            write_spawn_error(
                &a.spawn_error,
                &format!("cannot start the guard's second stage: {e}"),
            );
            return 1;
        }
    };
    let task = child.id().unwrap_or(0);
    let kill_task = || {
        if let Ok(p) = i32::try_from(task) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(p),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    };
    // Recorded before the task's program runs (the second stage's pid and start time stay the
    // same through its exec). A stage that is gone already has nothing to record.
    if let (Some(path), Some(start)) = (&a.group_file, crate::procs::start_time(task))
        && let Err(e) = (Group { pgid: task, start }).write(path)
    {
        kill_task();
        let _ = child.wait().await;
        write_spawn_error(
            &a.spawn_error,
            &format!("cannot record the task's process group: {e}"),
        );
        return 1;
    }
    let mut check = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            status = child.wait() => {
                use std::os::unix::process::ExitStatusExt;
                return match status.as_ref().ok().map(|s| (s.code(), s.signal())) {
                    Some((Some(code), _)) => code,
                    Some((None, Some(sig))) => {
                        // The task died of a signal: the shell's convention (128 + the signal),
                        // and the signal named in its log. The guard itself dying of a signal
                        // is another thing (its supervisor takes that copy for lost).
                        let name = nix::sys::signal::Signal::try_from(sig)
                            .map_or_else(|_| sig.to_string(), |s| s.as_str().to_string());
                        eprintln!("tapfinger: the task was killed by signal {name}");
                        128 + sig
                    }
                    _ => 1,
                };
            }
            _ = gone.recv() => {}
            _ = check.tick() => {}
            _ = term.recv() => continue,
            _ = int.recv() => continue,
        }
        if !parent_is(a.parent) {
            // The supervisor is gone, and with it the task's fence: the task's whole group goes
            // now; the guard reaps the task and ends.
            kill_task();
        }
    }
}

/// A task's process group as its guard records it (`<run dir>/<task>.group`): its leader (the
/// task's first process) and the leader's start time, so that a reused pid is never taken for
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Group {
    /// The group id (the task's first process's pid).
    pub pgid: u32,
    /// The guard's start time ([`crate::procs::start_time`]).
    pub start: u64,
}

impl Group {
    /// Record the group at `path` (written whole or not at all).
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        crate::procs::write_json(self, path, "group-tmp")
    }

    /// The group recorded at `path`, if any.
    pub fn read(path: &Path) -> Option<Self> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }
}

/// The processes whose process group is `pgid` (from `/proc`).
fn members(pgid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| group_of(*pid) == Some(pgid))
        .collect()
}

/// The process group of `pid` (field 5 of `/proc/<pid>/stat`); `None` for a zombie or no
/// process.
fn group_of(pid: u32) -> Option<u32> {
    u32::try_from(crate::procs::stat_field(pid, 5)?).ok()
}

/// Kill what is left of a recorded group, and wait (up to `limit`) until none of it is alive;
/// returns how many processes it found. The group is ours when its leader is alive with the
/// recorded start time, or when the leader is gone but processes still carry its group id: the
/// kernel does not hand a pid out again while a process group of that id exists, so those are
/// the task's. A leader's pid taken by another process (the whole group ended long ago) is left
/// alone.
pub fn kill_recorded(g: Group, limit: Duration) -> usize {
    let leader = crate::procs::start_time(g.pgid);
    if leader.is_some_and(|s| s != g.start) {
        return 0;
    }
    let found = members(g.pgid);
    if found.is_empty() {
        return 0;
    }
    if let Ok(p) = i32::try_from(g.pgid) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(p),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let end = std::time::Instant::now() + limit;
    while !members(g.pgid).is_empty() && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
    }
    found.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    /// A group whose leader and members outlived their supervisor is killed whole from its
    /// record; a record whose leader's pid now belongs to another process touches nothing.
    #[test]
    fn a_recorded_group_is_killed_whole_and_a_reused_pid_is_left_alone() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let pidfile = tmp.path().join("child");
        let script = format!(
            "sleep 300 & echo $! > {}; exec sleep 300",
            pidfile.display()
        );
        let mut leader = std::process::Command::new("sh")
            .args(["-c", &script])
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"));
        let pgid = leader.id();
        while std::fs::read_to_string(&pidfile).map_or(true, |s| s.trim().is_empty()) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let child: u32 = std::fs::read_to_string(&pidfile)
            .unwrap_or_default()
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        let start = crate::procs::start_time(pgid).unwrap_or_else(|| panic!("no leader"));
        let path = tmp.path().join("7.group");
        Group { pgid, start }
            .write(&path)
            .unwrap_or_else(|e| panic!("{e}"));
        let g = Group::read(&path).unwrap_or_else(|| panic!("no record"));
        // Another start time: a reused pid, not ours.
        let other = Group {
            start: start + 1,
            ..g
        };
        assert_eq!(kill_recorded(other, Duration::from_secs(5)), 0);
        assert!(
            crate::procs::start_time(child).is_some(),
            "a stranger was killed"
        );
        assert_eq!(kill_recorded(g, Duration::from_secs(10)), 2);
        let _ = leader.wait();
        assert_eq!(
            group_of(child),
            None,
            "the task's child outlived its group's kill"
        );
        assert!(members(pgid).is_empty());
    }
}
