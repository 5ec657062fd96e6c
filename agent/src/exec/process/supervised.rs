//! Supervised tasks: the process executor's side of [`crate::supervise`]. A task is started as a
//! supervisor process (its own process group, not killed with the agent), followed by polling:
//! its progress from the tail of its stdout log, its end from the supervisor's exit and exit
//! record. A restarted agent adopts a task the same way from the pid its journal recorded.

use super::{Adopted, ExecError, ExecEvent, Handle, ProcessExecutor, Running, Supervision};
use crate::procs::{alive, start_time};
use crate::supervise::ExitRecord;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tapfinger::TaskId;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::{mpsc, oneshot};

/// How often a supervised task's log and process are looked at.
const POLL: Duration = Duration::from_millis(200);

/// How long a restarted agent waits for a killed leftover of a task to be gone (SIGKILL takes
/// effect within milliseconds; a process in uninterruptible sleep can take longer).
const KILL_WAIT: Duration = Duration::from_secs(10);

/// Spawn the supervisor `cmd` (already the full `supervise` command line) for `task`.
pub(super) fn start(
    ex: &ProcessExecutor,
    sup: Supervision,
    task: TaskId,
    mut cmd: tokio::process::Command,
    log: PathBuf,
    pinned: Vec<usize>,
) -> Result<(), ExecError> {
    let spawn_err = |reason: String| ExecError::Spawn { task, reason };
    std::fs::create_dir_all(&sup.run_dir).map_err(|e| spawn_err(e.to_string()))?;
    let exit_file = sup.run_dir.join(format!("{}.exit", task.0));
    // A record from an earlier run of the same task here must not be read as this one's: both
    // records are replaced by room kept for them (blanks, read as none), so that the outcome
    // and the group can be written even if the disk fills while the task runs. No room now:
    // the task goes back to the queue rather than fail for want of a place to say how it ended.
    for file in [exit_file.clone(), exit_file.with_extension("group")] {
        if let Err(e) = crate::procs::reserve(&file) {
            let _ = std::fs::remove_file(&file);
            return Err(ExecError::NoStorage {
                task,
                dir: sup.run_dir.clone(),
                error: e,
            });
        }
    }
    // Earlier attempts' output stays in the log (appended): this one's progress is read from
    // what the log holds now on, before the supervisor writes this attempt's marker.
    let from = std::fs::metadata(log.with_extension("stdout")).map_or(0, |m| m.len());
    // The supervisor waits on this pipe for the journal's write (`--wait-start`). Both ends are
    // close-on-exec here, so no other child holds the writer: the agent's death ends its input.
    let (confirm_rx, confirm) = std::io::pipe().map_err(|e| spawn_err(e.to_string()))?;
    let mut child = cmd
        .stdin(Stdio::from(confirm_rx))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(false)
        // Its own group: a Ctrl-C or a signal to the agent's group does not reach it.
        .process_group(0)
        .spawn()
        .map_err(|e| spawn_err(format!("{}: {e}", sup.program.display())))?;
    let pid = child.id().unwrap_or(0);
    let handle = start_time(pid).map(|start| Handle { pid, start });
    let (stop_tx, stop_rx) = oneshot::channel();
    ex.running.lock().unwrap_or_else(|e| e.into_inner()).insert(
        task,
        Running {
            stop: Some(stop_tx),
            pinned,
            handle,
            // The supervisor has the task's grace (`--grace-ms`).
            grace: std::time::Duration::ZERO,
            confirm: Some(confirm),
            share: (super::super::share_file::path(&log), 1),
        },
    );
    let end = async move {
        let _ = child.wait().await;
    };
    let tail = Tail::new(log.with_extension("stdout"), from);
    follow(ex, task, pid, end, stop_rx, exit_file, tail);
    Ok(())
}

/// Adopt a task a previous run started.
pub(super) fn adopt(ex: &ProcessExecutor, sup: Supervision, task: TaskId, h: Handle) -> Adopted {
    let exit_file = sup.run_dir.join(format!("{}.exit", task.0));
    if !alive(h.pid, h.start) {
        // The supervisor is gone. Its guard kills the task's group when it goes, but a guard
        // killed with it leaves what the task started: that is killed here, from the group the
        // supervisor recorded and from the task's cgroup, before the task can be requeued and
        // start anywhere (the replay runs before this agent announces anything).
        if let Some(g) = crate::guard::Group::read(&exit_file.with_extension("group")) {
            let n = crate::guard::kill_recorded(g, KILL_WAIT);
            if n > 0 {
                tracing::warn!(%task, processes = n, pgid = g.pgid, "killed what was left of a task whose supervisor was gone");
            }
        }
        let n = ex.cgroups.kill_all(task);
        if n > 0 {
            tracing::warn!(%task, processes = n, "killed what was left in a task's cgroup");
        }
        let _ = std::fs::remove_file(exit_file.with_extension("group"));
        return match ExitRecord::read(&exit_file) {
            Some(r) => match outcome_of(&r) {
                (code, false) => Adopted::Exited(code),
                (_, true) => Adopted::Stopped,
            },
            None => Adopted::Lost,
        };
    }
    let (stop_tx, stop_rx) = oneshot::channel();
    let log = ex.log_dir.join(format!("{}", task.0));
    let share = super::super::share_file::path(&log);
    // The count goes on from the file the previous run of the agent wrote.
    let written = super::super::share_file::generation(&share);
    ex.running.lock().unwrap_or_else(|e| e.into_inner()).insert(
        task,
        Running {
            stop: Some(stop_tx),
            pinned: Vec::new(),
            handle: Some(h),
            grace: std::time::Duration::ZERO,
            confirm: None,
            share: (share, written),
        },
    );
    // Not our child: poll until the process is gone.
    let end = async move {
        while alive(h.pid, h.start) {
            tokio::time::sleep(POLL).await;
        }
    };
    // Read from the start: the attempt markers say which progress lines are this attempt's.
    let tail = Tail::new(log.with_extension("stdout"), 0);
    follow(ex, task, h.pid, end, stop_rx, exit_file, tail);
    Adopted::Running
}

/// Report progress until `end` completes (or a stop is asked: SIGTERM to the supervisor, which
/// kills the task's group), then the exit.
fn follow(
    ex: &ProcessExecutor,
    task: TaskId,
    pid: u32,
    end: impl std::future::Future<Output = ()> + Send + 'static,
    stop: oneshot::Receiver<Option<std::time::Duration>>,
    exit_file: PathBuf,
    mut tail: Tail,
) {
    let registry = ex.running.clone();
    let events = ex.events.clone();
    let cgroups = (ex.cgroups.clone(), ex.devices.clone());
    tokio::spawn(async move {
        let mut end = std::pin::pin!(end);
        let mut stop = std::pin::pin!(stop);
        let mut tick = tokio::time::interval(POLL);
        let mut stopping = false;
        loop {
            tokio::select! {
                _ = &mut end => break,
                r = &mut stop, if !stopping => {
                    stopping = true;
                    // SIGTERM: stop the task at once; SIGUSR1: preempt it (the checkpoint signal
                    // and the grace the supervisor was started with, then a kill).
                    let signal = match r {
                        Ok(Some(_)) => Some(nix::sys::signal::Signal::SIGUSR1),
                        Ok(None) => Some(nix::sys::signal::Signal::SIGTERM),
                        Err(_) => None,
                    };
                    if let (Some(signal), Ok(p)) = (signal, i32::try_from(pid)) {
                        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), signal);
                    }
                }
                _ = tick.tick() => tail.report(task, &events).await,
            }
        }
        tail.report(task, &events).await;
        let record = ExitRecord::read(&exit_file);
        let (code, stopped) = match &record {
            Some(r) => {
                if r.how != "exited" && !r.message.is_empty() {
                    tracing::warn!(%task, how = %r.how, message = %r.message, "task ended");
                }
                outcome_of(r)
            }
            None => (None, stopping),
        };
        super::ended(&registry, &cgroups, &events, task, code, stopped).await;
    });
}

/// What an exit record says of the run: its exit code, and whether it ended without an outcome
/// (stopped, preempted, its lease lapsed, its guard killed: the task goes back to the queue,
/// it did not fail). A program that could not start failed; a preempted copy that exited 0
/// within its grace finished.
fn outcome_of(r: &ExitRecord) -> (Option<i32>, bool) {
    match r.how.as_str() {
        "exited" => (r.code, false),
        "preempted" if r.code == Some(0) => (Some(0), false),
        "stopped" | "lease" | "preempted" | "lost" => (None, true),
        _ => (None, false),
    }
}

/// Follows a growing log file and reports its progress lines.
struct Tail {
    /// The log file.
    path: PathBuf,
    /// Bytes read so far.
    offset: u64,
    /// An unfinished last line, kept until its newline comes.
    partial: Vec<u8>,
}

impl Tail {
    /// Follows `path` from byte `offset` on.
    fn new(path: PathBuf, offset: u64) -> Self {
        Self {
            path,
            offset,
            partial: Vec::new(),
        }
    }

    async fn report(&mut self, task: TaskId, events: &mpsc::Sender<ExecEvent>) {
        let Ok(mut f) = tokio::fs::File::open(&self.path).await else {
            return;
        };
        if f.seek(std::io::SeekFrom::Start(self.offset)).await.is_err() {
            return;
        }
        let mut buf = Vec::new();
        let Ok(n) = f.read_to_end(&mut buf).await else {
            return;
        };
        self.offset += n as u64;
        self.partial.extend_from_slice(&buf);
        // Only the latest complete progress line matters.
        let mut last = None;
        while let Some(i) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=i).collect();
            let line = String::from_utf8_lossy(&line);
            if line.starts_with(crate::logs::ATTEMPT_MARK) {
                // What came before was an earlier attempt's.
                last = None;
            } else if let Some(p) = super::parse_progress(&line) {
                last = Some(p);
            }
        }
        if let Some((progress, metrics)) = last {
            let _ = events
                .send(ExecEvent::Progress {
                    task,
                    progress,
                    metrics,
                })
                .await;
        }
    }
}

/// Kill the copies a restarted agent cannot account for: every task this agent's data directory
/// or the host itself shows ran here, but that the journal's replay did not adopt (`keep`).
/// What shows it, so that a journal that says nothing (lost, or restored from an older copy
/// with its run directory) cannot hide a live copy: the records in the run directory (the
/// group a guard recorded), the task groups under this agent's cgroup (named after the agent,
/// so every one is this agent's), and the supervisors alive on the host whose exit file lies in
/// this agent's run directory. A supervisor is stopped (SIGTERM: it kills its task's group and
/// records the stop), then what the recorded group and the cgroup still hold is killed. Left
/// running, such a copy would run beside the one that replaces it. Returns the tasks found, for
/// the cgroup sweep.
pub(super) fn kill_unaccounted(
    sup: &Supervision,
    cgroups: &crate::exec::Cgroups,
    keep: &std::collections::BTreeSet<TaskId>,
) -> std::collections::BTreeSet<TaskId> {
    let recorded = std::fs::read_dir(&sup.run_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let task = e.path().file_stem()?.to_str()?.parse::<u64>().ok()?;
            Some(TaskId(task))
        });
    let supervisors = crate::procs::supervisors_in(&sup.run_dir);
    let mut mine: std::collections::BTreeSet<TaskId> = recorded.collect();
    mine.extend(cgroups.task_groups());
    mine.extend(supervisors.iter().map(|(t, _, _)| TaskId(*t)));
    for task in mine.iter().filter(|t| !keep.contains(t)) {
        for (_, pid, start) in supervisors.iter().filter(|(t, _, _)| *t == task.0) {
            stop_supervisor(*task, *pid, *start);
        }
        let group = sup.run_dir.join(format!("{}.group", task.0));
        if let Some(g) = crate::guard::Group::read(&group) {
            let n = crate::guard::kill_recorded(g, KILL_WAIT);
            if n > 0 {
                tracing::warn!(%task, processes = n, pgid = g.pgid,
                    "killed a copy the journal does not know (its start was not recorded)");
            }
        }
        let n = cgroups.kill_all(*task);
        if n > 0 {
            tracing::warn!(%task, processes = n, "killed what a task's cgroup held that the journal does not know");
            // Gone within milliseconds of SIGKILL; the group is removed once empty.
            let end = std::time::Instant::now() + Duration::from_secs(1);
            while cgroups.kill_all(*task) > 0 && std::time::Instant::now() < end {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = std::fs::remove_file(&group);
    }
    mine
}

/// Stop a supervisor the journal does not know of and wait (at most [`KILL_WAIT`]) for it to be
/// gone; past that it is killed, and its guard kills the task's group.
fn stop_supervisor(task: TaskId, pid: u32, start: u64) {
    use nix::sys::signal::{Signal, kill};
    let Ok(raw) = i32::try_from(pid) else { return };
    let pid_ = nix::unistd::Pid::from_raw(raw);
    tracing::warn!(%task, pid, "stopping a copy the journal does not know (a supervisor of this agent's still running)");
    let _ = kill(pid_, Signal::SIGTERM);
    let end = std::time::Instant::now() + KILL_WAIT;
    while alive(pid, start) {
        if std::time::Instant::now() >= end {
            let _ = kill(pid_, Signal::SIGKILL);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    async fn reported(tail: &mut Tail) -> Vec<f64> {
        let (tx, mut rx) = mpsc::channel(16);
        tail.report(TaskId(1), &tx).await;
        drop(tx);
        let mut seen = Vec::new();
        while let Some(ExecEvent::Progress { progress, .. }) = rx.recv().await {
            seen.push(progress);
        }
        seen
    }

    /// An adopted task's log is read from its start: an earlier attempt's progress, before the
    /// current attempt's marker, is not reported as the current attempt's.
    #[tokio::test]
    async fn progress_before_the_latest_attempt_mark_is_not_this_attempts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.stdout");
        drop(crate::logs::open_attempt_log(&path).unwrap());
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        writeln!(f, "TAPFINGER progress=0.9").unwrap();
        drop(f);
        let mut f = crate::logs::open_attempt_log(&path).unwrap();
        let mut tail = Tail::new(path.clone(), 0);
        assert_eq!(reported(&mut tail).await, Vec::<f64>::new());
        writeln!(f, "TAPFINGER progress=0.2").unwrap();
        assert_eq!(reported(&mut tail).await, vec![0.2]);
        // A tail started where the log ended (a fresh start) never sees the old lines at all.
        let len = std::fs::metadata(&path).unwrap().len();
        let mut fresh = Tail::new(path.clone(), len);
        writeln!(f, "TAPFINGER progress=0.3").unwrap();
        assert_eq!(reported(&mut fresh).await, vec![0.3]);
    }
}
