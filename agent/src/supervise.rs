//! The task supervisor (`tapfinger-agent supervise ...`, started by the process executor for
//! every task): a small process between the agent and the task, so that a task never runs unknown
//! to the cluster.
//!
//! - The task runs under its guard ([`crate::guard`]), in a process group of its own that the
//!   guard records and kills should this supervisor die (its cgroup join happens in the command
//!   the executor gives), with its output going straight to its log files, so it does not depend
//!   on the agent being alive to write anything.
//! - The task starts only once the agent's journal holds its start (`--wait-start`: the agent
//!   says `start` on the supervisor's standard input after the write): an agent killed between
//!   the spawn and the write leaves a supervisor that ends without starting anything, where it
//!   would have left a copy its successor does not know of, kills, and runs again.
//! - The supervisor survives the agent (it is in its own process group too): an agent restarted
//!   with its data directory **adopts** the tasks still running (its journal records the
//!   supervisor's pid and start time) and no work is lost.
//! - It is the backstop for an agent that dies and does not come back: the agent touches its lease
//!   file while it holds a quorum ([`tapfinger::node::lease`]); when the file is older than the
//!   autonomy time, the supervisor kills the task's process group, exactly when the agent would
//!   have stopped the task itself, and before any peer may start the task elsewhere.
//! - SIGTERM (the agent stopping the task) kills the task's process group; SIGUSR1 (the agent
//!   preempting it) sends the group SIGTERM, its checkpoint signal, and kills it after the grace.
//! - When the task ends, the supervisor writes its exit record (exit code, or how it was stopped)
//!   atomically to the exit file, where the agent (or its successor) reads it.
//!
//! It makes no scheduling decision and talks to nobody but the files it is given.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Arguments of `tapfinger-agent supervise`.
#[derive(Debug, Clone, clap::Args)]
pub struct SuperviseArgs {
    /// The agent's lease file (its modification time: when the agent last held a quorum).
    #[arg(long)]
    pub lease: PathBuf,
    /// Kill the task when the lease file is older than this (ms).
    #[arg(long)]
    pub autonomy_ms: u64,
    /// Whose lease it is (the agent's node id): a lease file of another identity (a data
    /// directory that was lost and recreated) is no lease for this task.
    #[arg(long)]
    pub owner: String,
    /// Where to write the exit record.
    #[arg(long)]
    pub exit_file: PathBuf,
    /// A preempted task's grace (ms): SIGUSR1 to the supervisor sends SIGTERM to the task's
    /// group (its checkpoint signal) and kills it this long after, if it has not ended.
    #[arg(long, default_value_t = 0)]
    pub grace_ms: u64,
    /// The task's standard output log.
    #[arg(long)]
    pub stdout: PathBuf,
    /// The task's standard error log.
    #[arg(long)]
    pub stderr: PathBuf,
    /// A cgroup v2 group to attach the task's device filter to before it starts (it joins the
    /// group itself); the filter is held until the task ends ([`crate::devices`]).
    #[arg(long)]
    pub device_filter: Option<PathBuf>,
    /// The devices the filter allows, in the v1 `devices.allow` syntax (repeatable).
    #[arg(long = "device-rule", value_name = "RULE")]
    pub device_rules: Vec<String>,
    /// Start the task only once the line `start` arrives on standard input: the agent sends it
    /// once its journal holds the start. Input that ends first (the agent died before that, or
    /// could not journal it) ends this supervisor without starting the task, so that no copy
    /// runs that a restarted agent would not know of and start again.
    #[arg(long)]
    pub wait_start: bool,
    /// The task's command line.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// How a supervised task ended (the exit file's content, JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExitRecord {
    /// The task's exit code, if it exited by itself.
    pub code: Option<i32>,
    /// `exited`, `stopped` (SIGTERM to the supervisor), `preempted` (SIGUSR1: the task's
    /// checkpoint signal and grace first; `code` is the task's if it ended within its grace, and
    /// 0 there means it had finished), `lease` (the agent's lease ran out),
    /// `spawn` (the program could not be started; `message` says why), or `lost` (the task's
    /// guard was killed, and the task with it: no outcome, the task goes back to the queue). A
    /// task killed by a signal has exited with 128 + the signal, as shells report it.
    pub how: String,
    /// Details.
    #[serde(default)]
    pub message: String,
}

impl ExitRecord {
    /// Read an exit file; `None` if absent or unreadable.
    pub fn read(path: &Path) -> Option<Self> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }

    /// Write it whole, or on a full disk into the room the agent kept for it
    /// ([`crate::procs::reserve`]).
    fn write(&self, path: &Path) -> std::io::Result<()> {
        let mut r = self.clone();
        // A message is cut so that the record fits the room kept.
        r.message = r.message.chars().take(crate::procs::RESERVED / 2).collect();
        crate::procs::write_json(&r, path, "tmp")
    }
}

/// How old a file's modification time is; `None` if it cannot be read (no lease file: the agent
/// never held a quorum, which counts as expired).
fn age(path: &Path) -> Option<Duration> {
    let m = std::fs::metadata(path).ok()?.modified().ok()?;
    Some(SystemTime::now().duration_since(m).unwrap_or_default())
}

fn kill_group(pgid: u32) {
    let Ok(pid) = i32::try_from(pgid) else { return };
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// The device filter `a` asks for, attached to its group and held while it lives (`None`: none
/// asked for); why not, where it cannot be.
fn device_filter(a: &SuperviseArgs) -> Result<Option<crate::devices::Filter>, String> {
    let Some(group) = &a.device_filter else {
        return Ok(None);
    };
    let rules: Option<Vec<_>> = a
        .device_rules
        .iter()
        .map(|l| crate::devices::DeviceRule::parse(l))
        .collect();
    let rules = rules.ok_or_else(|| format!("a device rule is not one: {:?}", a.device_rules))?;
    crate::devices::Filter::attach(&crate::devices::DevicePolicy { rules }, group)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Wait for the agent's `start` line on standard input (`--wait-start`); a stop or the end of
/// input first is the record of a task that never started.
async fn confirmed(term: &mut tokio::signal::unix::Signal) -> Result<(), ExitRecord> {
    use tokio::io::AsyncBufReadExt;
    let mut line = String::new();
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
    let never = |message: &str| ExitRecord {
        code: None,
        how: "stopped".into(),
        message: message.into(),
    };
    tokio::select! {
        r = stdin.read_line(&mut line) => match r {
            Ok(_) if line.trim() == "start" => Ok(()),
            _ => Err(never("not started: the agent did not confirm the start (it ended first)")),
        },
        _ = term.recv() => Err(never("")),
    }
}

/// Run the supervisor; returns its exit code (the task's, or 1).
pub async fn run(a: SuperviseArgs) -> i32 {
    let record = supervise(&a).await;
    // The group is dead by now (every way out of `supervise` kills it): nothing left to find.
    let _ = std::fs::remove_file(a.exit_file.with_extension("group"));
    if let Err(e) = record.write(&a.exit_file) {
        eprintln!(
            "tapfinger supervise: cannot write {}: {e}",
            a.exit_file.display()
        );
    }
    record.code.unwrap_or(1)
}

async fn supervise(a: &SuperviseArgs) -> ExitRecord {
    // Appended, each attempt after its marker line: an earlier attempt's output stays.
    let open = |p: &Path| crate::logs::open_attempt_log(p);
    let (out, err) = match (open(&a.stdout), open(&a.stderr)) {
        (Ok(o), Ok(e)) => (o, e),
        (Err(e), _) | (_, Err(e)) => {
            return ExitRecord {
                code: None,
                how: "spawn".into(),
                message: format!("cannot open the task's log files: {e}"),
            };
        }
    };
    // The device filter first: a task that could not be kept to its devices does not start.
    let _filter = match device_filter(a) {
        Ok(f) => f,
        Err(message) => {
            return ExitRecord {
                code: None,
                how: "spawn".into(),
                message,
            };
        }
    };
    use tokio::signal::unix::{SignalKind, signal};
    // SIGTERM: the agent stops the task; SIGUSR1: it preempts it. Handled from before the task
    // starts, so that a stop sent at any moment is a stop (not the default action, which would
    // end this supervisor without an exit record). Without both no stop could reach the task,
    // so it does not start.
    let (mut term, mut usr1) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::user_defined1()),
    ) {
        (Ok(t), Ok(u)) => (t, u),
        (Err(e), _) | (_, Err(e)) => {
            return ExitRecord {
                code: None,
                how: "spawn".into(),
                message: format!("cannot handle SIGTERM and SIGUSR1: {e}"),
            };
        }
    };
    if a.wait_start
        && let Err(record) = confirmed(&mut term).await
    {
        return record;
    }
    // The task runs under its guard ([`crate::guard`]), which starts it in a process group of
    // its own, records that group (so that an agent restarted after this supervisor was killed
    // can find and stop what is left of the task) and kills it if this supervisor dies; a
    // program that cannot start is reported in the spawn file.
    let spawn_file = a.exit_file.with_extension("spawn");
    let group_file = a.exit_file.with_extension("group");
    let _ = std::fs::remove_file(&spawn_file);
    // The group file holds the room the agent kept for it (blanks: no group yet); it is
    // overwritten, not removed.
    let mut child = match tokio::process::Command::new(crate::guard::SELF_EXE)
        .args(["guard", "--parent", &std::process::id().to_string()])
        .arg("--spawn-error")
        .arg(&spawn_file)
        .arg("--group-file")
        .arg(&group_file)
        .arg("--")
        .args(&a.command)
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            return ExitRecord {
                code: None,
                how: "spawn".into(),
                message: format!("cannot start the task's guard: {e}"),
            };
        }
    };
    // The task's group, once the guard has recorded it; a guard that ended first (a program
    // that could not start, or ended at once) leaves its own group to kill.
    let guard_group = child.id().unwrap_or(0);
    let pgid = loop {
        if let Some(g) = crate::guard::Group::read(&group_file) {
            break g.pgid;
        }
        if !matches!(child.try_wait(), Ok(None)) {
            break guard_group;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let limit = Duration::from_millis(a.autonomy_ms);
    let mut check = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            status = child.wait() => {
                // The group may hold processes the task left behind: they end with it.
                kill_group(pgid);
                if let Some(r) = spawn_failure(&spawn_file) {
                    return r;
                }
                return guard_ended(status.ok());
            }
            _ = term.recv() => {
                kill_group(pgid);
                let _ = child.wait().await;
                return ExitRecord { code: None, how: "stopped".into(), message: String::new() };
            }
            _ = usr1.recv() => {
                if let Ok(pid) = i32::try_from(pgid) {
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGTERM,
                    );
                }
                // Its grace, cut short by a stop (SIGTERM: the agent escalates its own stop).
                let ended = tokio::select! {
                    r = tokio::time::timeout(Duration::from_millis(a.grace_ms), child.wait()) => {
                        r.ok().and_then(Result::ok)
                    }
                    _ = term.recv() => None,
                };
                kill_group(pgid);
                let _ = child.wait().await;
                // A task that ended by itself within its grace says how: exit 0 means it had
                // finished (done is done), anything else that it saved and stopped.
                let code = ended.filter(|s| std::os::unix::process::ExitStatusExt::signal(s).is_none()).and_then(|s| s.code());
                return ExitRecord { code, how: "preempted".into(), message: String::new() };
            }
            _ = check.tick() => {
                let theirs = std::fs::read_to_string(&a.lease).ok().filter(|o| *o == a.owner);
                if theirs.is_none() || age(&a.lease).is_none_or(|d| d > limit) {
                    kill_group(pgid);
                    let _ = child.wait().await;
                    return ExitRecord {
                        code: None,
                        how: "lease".into(),
                        message: "the agent's lease ran out (no quorum within the autonomy time)".into(),
                    };
                }
            }
        }
    }
}

/// How the task ended, from its guard's exit status.
fn guard_ended(status: Option<std::process::ExitStatus>) -> ExitRecord {
    use std::os::unix::process::ExitStatusExt;
    if let Some(sig) = status.and_then(|s| s.signal()) {
        // The guard passes a task's death by a signal on as 128 + the signal; dying of one
        // itself (a `kill -9` of the guard) took the task with it: the copy is gone without an
        // outcome, and the agent puts the task back in the queue.
        return ExitRecord {
            code: None,
            how: "lost".into(),
            message: format!("the task's guard was killed by signal {sig}, and the task with it"),
        };
    }
    let code = status.and_then(|s| s.code());
    ExitRecord {
        code,
        how: "exited".into(),
        message: code
            .filter(|c| (129..=192).contains(c))
            .map(|c| format!("exit code {c}: killed by signal {} (or exited so)", c - 128))
            .unwrap_or_default(),
    }
}

/// The guard's report that the task's program could not be started, if it wrote one.
fn spawn_failure(path: &Path) -> Option<ExitRecord> {
    let message = std::fs::read_to_string(path).ok()?;
    let _ = std::fs::remove_file(path);
    Some(ExitRecord {
        code: None,
        how: "spawn".into(),
        message,
    })
}

/// Touch the lease file of `owner` (the agent's node id, its content): the agent holds a quorum
/// now.
pub fn touch(path: &Path, owner: &str) -> std::io::Result<()> {
    if std::fs::read_to_string(path).ok().as_deref() != Some(owner) {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, owner)?;
        std::fs::rename(&tmp, path)?;
    }
    let f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.set_modified(SystemTime::now())
}

/// How long ago the lease file was touched (`None`: never).
pub fn lease_age(path: &Path) -> Option<Duration> {
    age(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_records_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let p = dir.join("t.exit");
        let r = ExitRecord {
            code: Some(3),
            how: "exited".into(),
            message: String::new(),
        };
        r.write(&p).unwrap();
        assert_eq!(ExitRecord::read(&p), Some(r));
        assert_eq!(ExitRecord::read(&dir.join("none")), None);
    }
}
