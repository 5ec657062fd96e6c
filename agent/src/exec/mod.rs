//! Running tasks: the [`Executor`] trait, a process executor that enforces the allocation, and a
//! simulated executor (progress from a speed function, no process) for tests with many agents on
//! one machine.
//!
//! **Enforcement** (process executor). CPU: a cgroup per task with a CFS quota of `cores × period`
//! (v2 `cpu.max`, v1 `cpu.cfs_quota_us`/`cpu.cfs_period_us`); memory: `memory.max` (v2) or
//! `memory.limit_in_bytes` (v1); GPUs: whole devices, `CUDA_VISIBLE_DEVICES` with the indices
//! given and `CUDA_DEVICE_ORDER=PCI_BUS_ID`, so that CUDA numbers devices as NVML (which the
//! daemon asks) does rather than fastest first. Where the cluster's GPU step is below one device,
//! a task may hold a fraction of one device: it runs as an MPS client of that device's control
//! daemon (started by the agent, [`crate::mps`]) with its share of the device's compute and
//! memory in its environment ([`Allocation::gpu_env`]); a device holds shares or one
//! whole-device task, never both. The child joins its cgroup before
//! the task's program starts: it is launched as `sh -c 'echo $$ > <cgroup>/cgroup.procs && exec
//! "$@"'`, so no unsafe pre-exec hook is needed and nothing runs unconstrained. Where no cgroup
//! is writable the executor falls back to CPU affinity (`taskset -c`, when installed) and says so
//! in [`Enforcement`]; the node reports it in its status.
//!
//! **Progress.** A task may print lines `TAPFINGER progress=0.42 loss=1.7` on stdout (progress in
//! [0, 1]; other `key=value` pairs are metrics, e.g. `loss` and `accuracy`). A line without a
//! valid progress is not a progress line; a metric whose value is not a finite number is dropped
//! and the rest of the line kept. Every line of stdout and stderr also goes to the task's log
//! files `<log_dir>/<task>.stdout` / `.stderr`, appended: each attempt of a task (a restart after
//! a crash, a resume after a preemption) begins with a line [`crate::logs::ATTEMPT_MARK`]`…`, so what an earlier
//! attempt printed, and why it ended, stays to be read.

use std::collections::BTreeMap;
use std::path::PathBuf;
use tapfinger::TaskId;
use tapfinger::spec::TaskSpec;

mod cgroups;
mod process;
pub mod share_file;
#[cfg(feature = "dev")]
mod sim;
mod task_user;
pub use crate::devices::Devices;
pub use cgroups::{CFS_PERIOD_US, Cgroups};
pub use process::{ProcessExecutor, Supervision};
#[cfg(feature = "dev")]
pub use sim::{SimulatedExecutor, SpeedFn};
pub use task_user::TaskUser;

/// What a task is given, in natural units (the agent converts grid units with the kinds' steps).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Allocation {
    /// CPU cores (may be fractional, e.g. 1.5).
    pub cpus: f64,
    /// Memory limit in bytes, if memory is a scheduled resource.
    pub memory_bytes: Option<u64>,
    /// GPU device indices (NVML's numbering): whole devices, or the one device a share is of.
    pub gpus: Vec<u32>,
    /// The fraction of its one device a fractional task holds (an MPS client); `None`: whole
    /// devices.
    pub gpu_share: Option<f64>,
    /// Environment that makes the task an MPS client held to its share ([`crate::mps`]),
    /// set by the daemon once it has the device; it wins over the executor's GPU variables.
    pub gpu_env: Vec<(String, String)>,
}

/// How the allocation was enforced for a task.
#[derive(Debug, Clone, PartialEq)]
pub enum Enforcement {
    /// A cgroup (path) carries the CPU quota and memory limit.
    Cgroup(PathBuf),
    /// No writable cgroup: the task is pinned to this many CPUs with `taskset`; memory is not limited.
    Affinity(String),
    /// Nothing could be enforced (no cgroup, no taskset); the reason.
    None(String),
    /// A simulated task (no process).
    Simulated,
}

/// What an executor reports.
#[derive(Debug, Clone, PartialEq)]
pub enum ExecEvent {
    /// A progress line.
    Progress {
        /// Task.
        task: TaskId,
        /// Progress in [0, 1].
        progress: f64,
        /// Other `key=value` pairs of the line.
        metrics: BTreeMap<String, f64>,
    },
    /// The task ended (exit code; `None` if killed by a signal or stopped).
    Exited {
        /// Task.
        task: TaskId,
        /// Exit code.
        code: Option<i32>,
        /// It was stopped (asked by the agent, or by its supervisor when the agent's lease ran
        /// out) rather than ending by itself: not an outcome of the task.
        stopped: bool,
    },
}

/// Errors of an executor.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The process could not be started.
    #[error("cannot start task {task}: {reason}")]
    Spawn {
        /// Task.
        task: TaskId,
        /// Cause.
        reason: String,
    },
    /// No single GPU has room for the task's share, though the node's units do (shares of
    /// several devices): the task goes back to the queue.
    #[error("cannot start task {task}: {reason}")]
    NoRoom {
        /// Task.
        task: TaskId,
        /// Cause.
        reason: String,
    },
    /// The data directory has no room for the task's records (its exit record and process
    /// group): the task goes back to the queue, and the agent counts its storage as full.
    #[error("cannot start task {task}: no room for its records in {}: {error}", dir.display())]
    NoStorage {
        /// Task.
        task: TaskId,
        /// Where.
        dir: std::path::PathBuf,
        /// What the write said.
        error: std::io::Error,
    },
    /// The task is already running here.
    #[error("task {0} is already running")]
    AlreadyRunning(TaskId),
    /// The task does not run here.
    #[error("task {0} is not running here")]
    NotRunning(TaskId),
}

/// Runs tasks; events arrive on the channel given at construction.
pub trait Executor: Send {
    /// Start a task with its allocation.
    fn start(
        &mut self,
        task: TaskId,
        spec: &TaskSpec,
        alloc: &Allocation,
    ) -> Result<Enforcement, ExecError>;
    /// The start of `task` is journaled: its program may begin. A supervised task waits for
    /// this, so that no copy runs whose start a restarted agent could not know; executors whose
    /// tasks begin at [`Executor::start`] ignore it.
    fn confirm(&mut self, _task: TaskId) {}
    /// Stop a task (its `Exited` event follows with code `None`); unknown tasks are ignored.
    fn stop(&mut self, task: TaskId);
    /// Preempt a task: SIGTERM to it (its checkpoint signal), its spec's `grace_seconds` to end,
    /// then a stop. Executors without processes stop it at once.
    fn preempt(&mut self, task: TaskId) {
        self.stop(task);
    }
    /// Change a running task's CPU and memory shares while it runs (elastic sharing; its GPUs
    /// stay those it started with). Returns how the new shares are enforced.
    fn resize(&mut self, task: TaskId, alloc: &Allocation) -> Result<Enforcement, ExecError>;
    /// The process to record in the journal for a task running here, so that a restarted agent
    /// can adopt it (`None`: this executor's tasks do not outlive the agent).
    fn handle(&self, _task: TaskId) -> Option<Handle> {
        None
    }
    /// Adopt a task that a previous run of the agent started (see [`Handle`]): its events follow
    /// as if this executor had started it. Executors whose tasks do not outlive the agent answer
    /// [`Adopted::Lost`].
    fn adopt(&mut self, _task: TaskId, _handle: &Handle) -> Adopted {
        Adopted::Lost
    }
    /// After a restart's adoptions: remove what earlier runs left of tasks other than `keep`
    /// (empty cgroups of tasks that ended while the agent was away); returns how many.
    fn sweep_leftovers(&mut self, _keep: &std::collections::BTreeSet<TaskId>) -> usize {
        0
    }
}

/// A supervised task's process, as the journal records it: the supervisor's pid and its start
/// time (so that a later process reusing the pid is not mistaken for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Handle {
    /// Supervisor pid.
    pub pid: u32,
    /// Its start time (clock ticks since boot).
    pub start: u64,
}

/// What became of a task a previous run of the agent started.
#[derive(Debug, Clone, PartialEq)]
pub enum Adopted {
    /// Still running: adopted (its `Exited` event follows when it ends).
    Running,
    /// It ended while the agent was away, with this exit code (`None`: its program could not
    /// start).
    Exited(Option<i32>),
    /// It ended while the agent was away without an outcome: stopped or preempted (the agent
    /// handed it back, or stopped on purpose), its lease lapsed, or its guard was killed. It
    /// goes back to the queue; it did not fail.
    Stopped,
    /// Nothing is known of it (the box rebooted, or the executor does not supervise).
    Lost,
}

/// Parse a progress line; `None` if the line is not one.
pub fn parse_progress(line: &str) -> Option<(f64, BTreeMap<String, f64>)> {
    let rest = line.trim().strip_prefix("TAPFINGER ")?;
    let mut progress = None;
    let mut metrics = BTreeMap::new();
    for kv in rest.split_whitespace() {
        let (k, v) = kv.split_once('=')?;
        let v: Option<f64> = v.parse().ok().filter(|x: &f64| x.is_finite());
        if k == "progress" {
            progress = Some(v?.clamp(0.0, 1.0));
        } else if let Some(v) = v {
            metrics.insert(k.to_string(), v);
        }
    }
    Some((progress?, metrics))
}

/// What the executors' unit tests share: a spec of a command line, and waiting for a task's end.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use std::time::Duration;
    use tokio::sync::mpsc;

    /// A spec running `cmd`, asking for one core.
    pub(crate) fn spec(cmd: &[&str]) -> TaskSpec {
        TaskSpec::from_toml(&format!(
            "command = [{}]\nmin_demand = {{ cpu = 1 }}\n",
            cmd.iter()
                .map(|c| format!("{c:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .unwrap()
    }

    /// The progress a task reported until it exited, and its exit code.
    pub(crate) async fn until_exit(rx: &mut mpsc::Receiver<ExecEvent>) -> (Vec<f64>, Option<i32>) {
        let mut seen = Vec::new();
        loop {
            match tokio::time::timeout(Duration::from_secs(20), rx.recv()).await {
                Ok(Some(ExecEvent::Progress { progress, .. })) => seen.push(progress),
                Ok(Some(ExecEvent::Exited { code, .. })) => return (seen, code),
                other => panic!("no exit event: {other:?}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{spec, until_exit};
    use super::*;
    use std::time::Duration;
    use tokio::sync::mpsc;

    #[tokio::test]
    async fn simulated_tasks_progress_with_their_speed() {
        let (tx, mut rx) = mpsc::channel(64);
        let speed = std::sync::Arc::new(|_: &TaskSpec, a: &Allocation| 0.25 * a.cpus);
        let mut ex = SimulatedExecutor::new(tx, Duration::from_millis(5), speed);
        let s = spec(&["x"]);
        ex.start(
            TaskId(1),
            &s,
            &Allocation {
                cpus: 2.0,
                ..Default::default()
            },
        )
        .unwrap();
        let (p, code) = until_exit(&mut rx).await;
        assert_eq!(p, vec![0.5, 1.0]);
        assert_eq!(code, Some(0));
        assert!(
            ex.start(TaskId(2), &s, &Allocation::default()).is_err(),
            "zero speed"
        );
    }

    #[test]
    fn progress_lines() {
        let (p, m) = parse_progress("TAPFINGER progress=0.42 loss=1.7").unwrap();
        assert_eq!(p, 0.42);
        assert_eq!(m["loss"], 1.7);
        assert_eq!(parse_progress("TAPFINGER progress=7").unwrap().0, 1.0);
        assert!(parse_progress("progress=0.4").is_none());
        assert!(parse_progress("TAPFINGER loss=1").is_none());
        assert!(parse_progress("TAPFINGER progress=NaN").is_none());
        assert!(parse_progress("TAPFINGER progress=0.1 junk").is_none());
        // A malformed metric is dropped, the progress and the other metrics kept.
        let (p, m) = parse_progress("TAPFINGER progress=0.3 loss=abc accuracy=0.8").unwrap();
        assert_eq!(p, 0.3);
        assert_eq!(m.get("loss"), None);
        assert_eq!(m.get("accuracy"), Some(&0.8));
        assert!(parse_progress("TAPFINGER progress=abc loss=1").is_none());
    }
}
