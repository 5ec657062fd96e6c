//! The process executor: each task a child process (or, supervised, a supervisor's child that
//! outlives the agent, [`supervised`]) in its cgroups, kept to its devices, without the agent's
//! ambient capabilities; its output to its log files and its progress lines to the agent. The
//! enforcement is described in the parent module's doc; nothing here decides what a task gets.

use super::{
    Adopted, Allocation, Cgroups, Devices, Enforcement, ExecError, ExecEvent, Executor, Handle,
    parse_progress,
};
use crate::devices;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use tapfinger::TaskId;
use tapfinger::spec::TaskSpec;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

mod supervised;
mod wrapper;
use wrapper::{DROP_CAPS, Wrapper, ambient_caps};

/// Runs each task as a child process with its allocation enforced.
pub struct ProcessExecutor {
    /// Where tasks' cgroups go, if any is writable.
    cgroups: Cgroups,
    /// Each task's stdout and stderr files.
    log_dir: PathBuf,
    /// Where progress and exits go (bounded).
    events: mpsc::Sender<ExecEvent>,
    /// Running tasks: how to stop each, and the CPUs it is pinned to (taskset fallback). Shared
    /// with each task's waiter, which removes the entry when the process exits.
    running: Arc<Mutex<BTreeMap<TaskId, Running>>>,
    /// `taskset` is installed (the affinity fallback without cgroups).
    taskset: bool,
    /// CPUs of the box, for the affinity fallback's pinning.
    cpus: usize,
    /// Run every task under a supervisor process (the agent binary's `supervise`), so tasks
    /// survive the agent and can be adopted; `None`: tasks are children of the agent, each in a
    /// process group of its own, killed when the executor drops them.
    supervision: Option<Supervision>,
    /// How tasks are kept to their GPUs' device nodes ([`devices`]).
    devices: Devices,
    /// Each GPU's device node (major, minor) by its NVML index.
    gpu_nodes: BTreeMap<u32, (u32, u32)>,
    /// The control devices every GPU task may open as well.
    gpu_control: Vec<devices::DeviceRule>,
    /// Start tasks through `setpriv` without the agent's ambient capabilities (an agent given
    /// `CAP_BPF` and `CAP_NET_ADMIN` for device filters must not pass them on).
    drop_caps: bool,
    /// The user tasks run as, if not the agent's ([`super::TaskUser`]).
    task_user: Option<super::TaskUser>,
}

/// How tasks are supervised (see [`crate::supervise`]).
#[derive(Debug, Clone)]
pub struct Supervision {
    /// The program whose `supervise` subcommand runs a task (the agent binary).
    pub program: PathBuf,
    /// The agent's lease file.
    pub lease: PathBuf,
    /// The autonomy time (ms): the supervisor kills a task whose agent's lease is that old.
    pub autonomy_ms: u64,
    /// The agent's node id, written in its lease file.
    pub owner: String,
    /// Where exit records go (`<task>.exit`).
    pub run_dir: PathBuf,
}

struct Running {
    /// Asks the waiter to stop the task (taken by the first stop).
    /// `None`: at once; `Some(grace)`: SIGTERM first, the grace to end, then a kill.
    stop: Option<tokio::sync::oneshot::Sender<Option<std::time::Duration>>>,
    /// Its spec's grace after a checkpoint signal (a preemption).
    grace: std::time::Duration,
    /// CPUs it is pinned to (affinity fallback; empty with cgroups).
    pinned: Vec<usize>,
    /// The supervisor's process (supervised tasks only).
    handle: Option<Handle>,
    /// Where to say `start` to a supervisor that waits for the journal (taken by
    /// [`Executor::confirm`]; dropped unsaid, the supervisor ends without starting the task).
    confirm: Option<std::io::PipeWriter>,
    /// Its share file ([`super::share_file`]) and the shares written to it so far.
    share: (PathBuf, u64),
}

impl ProcessExecutor {
    /// What `f` takes from `task`'s entry in the registry, if it runs here.
    fn take<T>(&self, task: TaskId, f: impl FnOnce(&mut Running) -> Option<T>) -> Option<T> {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&task)
            .and_then(f)
    }

    /// An executor writing logs into `log_dir`, creating cgroups as `cgroups` allows.
    pub fn new(cgroups: Cgroups, log_dir: PathBuf, events: mpsc::Sender<ExecEvent>) -> Self {
        let taskset = crate::procs::installed("taskset");
        let ambient = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|t| ambient_caps(&t))
            .unwrap_or(0);
        let setpriv = crate::procs::installed("setpriv");
        if ambient != 0 && !setpriv {
            tracing::warn!(
                ambient = format!("{ambient:#x}"),
                "the agent has ambient capabilities and setpriv (util-linux) is not installed: tasks inherit them"
            );
        }
        Self {
            drop_caps: ambient != 0 && setpriv,
            cgroups,
            log_dir,
            events,
            running: Arc::new(Mutex::new(BTreeMap::new())),
            taskset,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            supervision: None,
            devices: Devices::Unavailable("not set up".into()),
            gpu_nodes: BTreeMap::new(),
            gpu_control: Vec::new(),
            task_user: None,
        }
    }

    /// Run every task as `user` ([`super::TaskUser`]): the logs folder is made one others may
    /// pass through but not list (a task reads its own share file there, by its path).
    pub fn with_task_user(mut self, user: super::TaskUser) -> std::io::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(&self.log_dir)?;
        std::fs::set_permissions(&self.log_dir, std::fs::Permissions::from_mode(0o711))?;
        self.task_user = Some(user);
        Ok(self)
    }

    /// Keep every task to the device nodes of the GPUs it is given (`nodes`: each GPU's
    /// (major, minor) by NVML index), the `control` devices and those every process needs, by
    /// `devices`. A task given GPU `i` with no node in `nodes` fails to start.
    pub fn with_devices(
        mut self,
        devices: Devices,
        nodes: BTreeMap<u32, (u32, u32)>,
        control: Vec<devices::DeviceRule>,
    ) -> Self {
        self.devices = devices;
        self.gpu_nodes = nodes;
        self.gpu_control = control;
        self
    }

    /// How GPU devices are isolated (for the node's status).
    pub fn devices(&self) -> &Devices {
        &self.devices
    }

    /// The device policy of a task given the GPUs `gpus`.
    fn device_policy(&self, gpus: &[u32]) -> Result<devices::DevicePolicy, String> {
        let nodes = gpus
            .iter()
            .map(|g| {
                self.gpu_nodes
                    .get(g)
                    .copied()
                    .ok_or_else(|| format!("GPU {g} has no known device node"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(devices::DevicePolicy::for_task(&nodes, &self.gpu_control))
    }

    /// Run every task under a supervisor (see [`Supervision`]).
    pub fn supervised(mut self, s: Supervision) -> Self {
        self.supervision = Some(s);
        self
    }

    /// The cgroup situation (for the node's status).
    pub fn cgroups(&self) -> &Cgroups {
        &self.cgroups
    }
}

impl Executor for ProcessExecutor {
    fn start(
        &mut self,
        task: TaskId,
        spec: &TaskSpec,
        alloc: &Allocation,
    ) -> Result<Enforcement, ExecError> {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if running.contains_key(&task) {
            return Err(ExecError::AlreadyRunning(task));
        }
        let grace = std::time::Duration::from_secs(spec.grace_seconds.clamp(0, 3600) as u64);
        let spawn_err = |reason: String| ExecError::Spawn { task, reason };
        std::fs::create_dir_all(&self.log_dir).map_err(|e| spawn_err(e.to_string()))?;
        let Wrapper {
            enforcement,
            mut argv,
            pinned,
            filter_at,
        } = self.wrapper(
            task,
            alloc,
            running.values().flat_map(|r| r.pinned.iter().copied()),
        )?;
        if let Some(user) = &self.task_user {
            argv.extend(user.setpriv());
        } else if self.drop_caps {
            argv.extend(DROP_CAPS.iter().map(|a| (*a).to_string()));
        }
        argv.extend(spec.command.iter().cloned());
        let log = self.log_dir.join(format!("{}", task.0));
        let share = super::share_file::path(&log);
        if let Err(e) = super::share_file::write(&share, alloc, &enforcement, 1) {
            self.devices.remove(&format!("task-{}", task.0));
            self.cgroups.remove(task);
            // No room for it: the task goes back to the queue (and the agent counts its storage
            // as full) rather than fail unrun.
            return Err(if e.raw_os_error() == Some(nix::libc::ENOSPC) {
                ExecError::NoStorage {
                    task,
                    dir: self.log_dir.clone(),
                    error: e,
                }
            } else {
                spawn_err(format!("cannot write {}: {e}", share.display()))
            });
        }
        if let Some(sup) = &self.supervision {
            // The supervisor runs the same command line; it owns the task's output and outlives
            // the agent (see `supervise`).
            argv = sup.argv(task, grace, &log, filter_at.as_ref(), argv);
        }
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .envs(&spec.env)
            .env(super::share_file::ENV, &share)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // NVML numbers devices by PCI bus; CUDA's default order is fastest first.
        cmd.env("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
        if !alloc.gpus.is_empty() {
            let ids: Vec<String> = alloc.gpus.iter().map(u32::to_string).collect();
            cmd.env("CUDA_VISIBLE_DEVICES", ids.join(","));
        } else {
            cmd.env("CUDA_VISIBLE_DEVICES", "");
        }
        // An MPS client sees its device through the daemon (see `crate::mps`).
        cmd.envs(alloc.gpu_env.iter().map(|(k, v)| (k, v)));
        if let Some(sup) = &self.supervision {
            drop(running);
            return supervised::start(self, sup.clone(), task, cmd, log, pinned)
                .map(|()| enforcement);
        }
        let cleanup = |ex: &Self| {
            ex.devices.remove(&format!("task-{}", task.0));
            ex.cgroups.remove(task);
        };
        let filter = match filter_at
            .map(|(g, p)| devices::Filter::attach(&p, &g))
            .transpose()
        {
            Ok(f) => f,
            Err(e) => {
                cleanup(self);
                return Err(spawn_err(e.to_string()));
            }
        };
        let mut child = cmd.process_group(0).spawn().map_err(|e| {
            cleanup(self);
            spawn_err(unstarted(&log, format!("{}: {e}", argv[0])))
        })?;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        running.insert(
            task,
            Running {
                stop: Some(stop_tx),
                pinned,
                handle: None,
                grace,
                confirm: None,
                share: (share, 1),
            },
        );
        drop(running);
        let registry = self.running.clone();
        let events = self.events.clone();
        let cgroups = (self.cgroups.clone(), self.devices.clone());
        tokio::spawn(async move {
            let out = tokio::spawn(pump(
                stdout,
                log.with_extension("stdout"),
                Some((task, events.clone())),
            ));
            let err = tokio::spawn(pump(stderr, log.with_extension("stderr"), None));
            let (code, stopped) = tokio::select! {
                status = child.wait() => (status.ok().and_then(|s| s.code()), false),
                r = stop_rx => {
                    // A preemption: the checkpoint signal to the task's group, its grace to end.
                    let mut in_grace = None;
                    if let (Ok(Some(grace)), Some(pid)) = (r, child.id())
                        && let Ok(pid) = i32::try_from(pid)
                    {
                        let _ = nix::sys::signal::killpg(
                            nix::unistd::Pid::from_raw(pid),
                            nix::sys::signal::Signal::SIGTERM,
                        );
                        in_grace = tokio::time::timeout(grace, child.wait()).await.ok().and_then(Result::ok);
                    }
                    let _ = child.kill().await;
                    // Exit 0 within its grace: it had finished (done is done).
                    match in_grace.and_then(|s| s.code()) {
                        Some(0) => (Some(0), false),
                        _ => (None, true),
                    }
                }
            };
            let _ = out.await;
            let _ = err.await;
            // Held until the task's process is gone.
            drop(filter);
            ended(&registry, &cgroups, &events, task, code, stopped).await;
        });
        Ok(enforcement)
    }

    fn confirm(&mut self, task: TaskId) {
        let pipe = self.take(task, |r| r.confirm.take());
        // A few bytes into an empty pipe: never blocks. A supervisor gone already cannot read
        // it (the write fails) and its exit follows as for any supervisor that ended.
        if let Some(mut pipe) = pipe
            && let Err(e) = std::io::Write::write_all(&mut pipe, b"start\n")
        {
            tracing::warn!(%task, error = %e, "cannot confirm a start to its supervisor");
        }
    }

    fn stop(&mut self, task: TaskId) {
        // The entry stays until the process has exited (its waiter removes it).
        let (stop, supervisor) = self
            .take(task, |r| Some((r.stop.take(), r.handle)))
            .unwrap_or_default();
        if let Some(tx) = stop {
            let _ = tx.send(None);
        } else if let Some(h) = supervisor
            && crate::procs::alive(h.pid, h.start)
            && let Ok(pid) = i32::try_from(h.pid)
        {
            // Asked before (a preemption in its grace): a stop cuts the grace short; the
            // supervisor kills the task's group at once.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }

    fn preempt(&mut self, task: TaskId) {
        let stop = self.take(task, |r| Some((r.stop.take()?, r.grace)));
        if let Some((tx, grace)) = stop {
            let _ = tx.send(Some(grace));
        }
    }

    fn resize(&mut self, task: TaskId, alloc: &Allocation) -> Result<Enforcement, ExecError> {
        let pinned = match self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&task)
        {
            Some(r) => r.pinned.len(),
            None => return Err(ExecError::NotRunning(task)),
        };
        if pinned > 0 {
            // The affinity fallback pins a task's process when it starts; re-pinning a running
            // process tree is not done, so the start's CPUs stay.
            return Ok(Enforcement::None(format!(
                "cgroups not writable: the task stays pinned to {pinned} CPU(s) as it started"
            )));
        }
        let how = match self.cgroups.resize(task, alloc) {
            Ok(()) => Enforcement::Cgroup(match &self.cgroups {
                Cgroups::V2(d) => d.join(format!("task-{}", task.0)),
                Cgroups::V1 { cpu, .. } => cpu.join(format!("task-{}", task.0)),
                Cgroups::Unavailable(_) => PathBuf::new(),
            }),
            Err(e) => Enforcement::None(format!("new shares not enforced: {e}")),
        };
        // The task is told its new share whether or not a cgroup holds it to it: without
        // cgroups nothing else limits it, and its threads should follow what it was given.
        let share = self.take(task, |r| {
            r.share.1 += 1;
            Some(r.share.clone())
        });
        if let Some((path, generation)) = share
            && let Err(e) = super::share_file::write(&path, alloc, &how, generation)
        {
            tracing::warn!(%task, error = %e, "cannot tell the task its new share");
        }
        Ok(how)
    }

    fn handle(&self, task: TaskId) -> Option<Handle> {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&task)
            .and_then(|r| r.handle)
    }

    fn adopt(&mut self, task: TaskId, handle: &Handle) -> Adopted {
        match self.supervision.clone() {
            Some(sup) => supervised::adopt(self, sup, task, *handle),
            None => Adopted::Lost,
        }
    }

    fn sweep_leftovers(&mut self, keep: &std::collections::BTreeSet<TaskId>) -> usize {
        let Some(sup) = &self.supervision else {
            return 0;
        };
        let mine = supervised::kill_unaccounted(sup, &self.cgroups, keep);
        let kept = keep.iter().map(|t| t.0).collect();
        self.cgroups.sweep(&mine, keep) + self.devices.sweep(&kept)
    }
}

/// A task's process is gone: free its cgroup and its registry entry, then report the exit.
async fn ended(
    registry: &Mutex<BTreeMap<TaskId, Running>>,
    (cgroups, devices): &(Cgroups, Devices),
    events: &mpsc::Sender<ExecEvent>,
    task: TaskId,
    code: Option<i32>,
    stopped: bool,
) {
    devices.remove(&format!("task-{}", task.0));
    cgroups.remove(task);
    registry
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&task);
    let _ = events
        .send(ExecEvent::Exited {
            task,
            code,
            stopped,
        })
        .await;
}

/// Copy a child's output to its log file, reporting progress lines.
async fn pump<R: tokio::io::AsyncRead + Unpin>(
    src: Option<R>,
    path: PathBuf,
    progress: Option<(TaskId, mpsc::Sender<ExecEvent>)>,
) {
    let Some(src) = src else { return };
    let Ok(file) = crate::logs::open_attempt_log(&path) else {
        return;
    };
    let mut file = tokio::fs::File::from_std(file);
    let mut lines = BufReader::new(src).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let _ = file.write_all(line.as_bytes()).await;
        let _ = file.write_all(b"\n").await;
        if let Some((task, tx)) = &progress
            && let Some((p, metrics)) = parse_progress(&line)
        {
            let _ = tx
                .send(ExecEvent::Progress {
                    task: *task,
                    progress: p,
                    metrics,
                })
                .await;
        }
    }
    let _ = file.flush().await;
}

/// Note in the task's standard error file (`log` without its extension) why it could not
/// start, and return the reason: the user looks there (`logs`, `show`), not in the agent's
/// log, and a command that is not there (a missing interpreter) fails before it writes.
fn unstarted(log: &std::path::Path, reason: String) -> String {
    use std::io::Write as _;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log.with_extension("stderr"))
    {
        let _ = writeln!(f, "tapfinger-agent: cannot start the task: {reason}");
    }
    reason
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testing::{spec, until_exit};
    use std::path::Path;
    use std::time::Duration;

    /// The task itself reads its share file, after a re-share: it sees the new share (or,
    /// pinned by the affinity fallback, the CPUs it started with, which stay in force).
    #[tokio::test]
    async fn a_task_reads_its_new_share_from_its_share_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (tx, mut rx) = mpsc::channel(16);
        let mut ex = ProcessExecutor::new(Cgroups::Unavailable("test".into()), dir.into(), tx);
        let stop = dir.join("stop");
        let script = format!(
            "while [ ! -e {} ]; do sleep 0.05; done; cat \"${}\"",
            stop.display(),
            super::super::share_file::ENV
        );
        let alloc = |cpus| Allocation {
            cpus,
            memory_bytes: Some(1 << 30),
            ..Default::default()
        };
        let how = ex
            .start(TaskId(1), &spec(&["sh", "-c", &script]), &alloc(1.0))
            .unwrap();
        ex.resize(TaskId(1), &alloc(3.0)).unwrap();
        std::fs::write(&stop, "").unwrap();
        assert_eq!(until_exit(&mut rx).await.1, Some(0));
        let out = std::fs::read_to_string(dir.join("1.stdout")).unwrap();
        let seen: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        let (cpus, generation) = match how {
            Enforcement::Affinity(_) => (1.0, 1),
            _ => (3.0, 2),
        };
        assert_eq!(seen["cpus"].as_f64(), Some(cpus), "{out}");
        assert_eq!(seen["generation"].as_u64(), Some(generation), "{out}");
        assert_eq!(seen["memory_bytes"].as_u64(), Some(1 << 30), "{out}");
    }

    /// A command that is not there fails, and says so where the user reads the task's output
    /// (its standard error file), not only in the agent's log: the program that runs it (the
    /// CPU pinning's, here) says it, or, with nothing in between, the agent itself.
    #[tokio::test]
    async fn a_missing_command_fails_with_its_reason_in_the_task_s_stderr() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (tx, mut rx) = mpsc::channel(16);
        let mut ex = ProcessExecutor::new(Cgroups::Unavailable("test".into()), dir.into(), tx);
        let started = ex.start(
            TaskId(7),
            &spec(&["no-such-interpreter-tf", "x.py"]),
            &Allocation {
                cpus: 1.0,
                ..Default::default()
            },
        );
        match started {
            Ok(_) => assert_ne!(until_exit(&mut rx).await.1, Some(0)),
            Err(e) => assert!(matches!(e, ExecError::Spawn { .. }), "{e:?}"),
        }
        let err = std::fs::read_to_string(dir.join("7.stderr")).unwrap();
        assert!(err.contains("no-such-interpreter-tf"), "{err}");
    }

    #[tokio::test]
    async fn a_process_runs_reports_progress_and_logs() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (tx, mut rx) = mpsc::channel(16);
        let mut ex = ProcessExecutor::new(Cgroups::Unavailable("test".into()), dir.into(), tx);
        let s = spec(&[
            "sh",
            "-c",
            "echo TAPFINGER progress=0.5 loss=2; echo hello; echo oops >&2; exit 3",
        ]);
        let enforcement = ex
            .start(
                TaskId(1),
                &s,
                &Allocation {
                    cpus: 1.0,
                    ..Default::default()
                },
            )
            .unwrap();
        assert!(
            matches!(enforcement, Enforcement::Affinity(_) | Enforcement::None(_)),
            "{enforcement:?}"
        );
        let (progress, code) = until_exit(&mut rx).await;
        assert_eq!(progress, vec![0.5]);
        assert_eq!(code, Some(3));
        let out = std::fs::read_to_string(dir.join("1.stdout")).unwrap();
        assert!(out.contains("hello"), "{out}");
        let err = std::fs::read_to_string(dir.join("1.stderr")).unwrap();
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 2, "{err}");
        assert!(lines[0].starts_with(crate::logs::ATTEMPT_MARK), "{err}");
        assert_eq!(lines[1], "oops");
        // A task that exited (e.g. failed and was re-queued) can be started here again, and
        // its first attempt's output stays in the logs, before the second's marker.
        let again = ex.start(
            TaskId(1),
            &spec(&["sh", "-c", "echo second"]),
            &Allocation::default(),
        );
        assert!(again.is_ok(), "{again:?}");
        assert_eq!(until_exit(&mut rx).await.1, Some(0));
        let out = std::fs::read_to_string(dir.join("1.stdout")).unwrap();
        let marks: Vec<usize> = out
            .lines()
            .enumerate()
            .filter(|(_, l)| l.starts_with(crate::logs::ATTEMPT_MARK))
            .map(|(i, _)| i)
            .collect();
        let at = |what: &str| out.lines().position(|l| l == what).unwrap();
        assert_eq!(marks.len(), 2, "{out}");
        assert!(marks[0] < at("hello") && at("hello") < marks[1] && marks[1] < at("second"));
        // A missing program is an error at start, or (behind a taskset wrapper) a failed exit.
        if ex
            .start(
                TaskId(2),
                &spec(&["/no/such/program"]),
                &Allocation::default(),
            )
            .is_ok()
        {
            let code = until_exit(&mut rx).await.1;
            assert!(code.is_some_and(|c| c != 0), "{code:?}");
        }
        // A stopped task exits with no code.
        ex.start(TaskId(3), &spec(&["sleep", "30"]), &Allocation::default())
            .unwrap();
        ex.stop(TaskId(3));
        assert_eq!(until_exit(&mut rx).await.1, None);
    }

    #[tokio::test]
    async fn the_cpu_quota_is_written_to_the_cgroup() {
        let prefix = format!("tapfinger-test-{}", std::process::id());
        let cg = Cgroups::detect(Path::new("/sys/fs/cgroup"), &prefix);
        // Never a silent pass: a machine without writable cgroups fails here, and says why (CI
        // has them; CONTRIBUTING.md tells how to leave this test out elsewhere).
        if let Cgroups::Unavailable(why) = &cg {
            panic!("this test needs writable cgroups (v1 `cpu` or v2), as CI has: {why}");
        }
        let (tx, mut rx) = mpsc::channel(16);
        let dir = tempfile::tempdir().unwrap();
        let mut ex = ProcessExecutor::new(cg.clone(), dir.path().into(), tx);
        let enforcement = ex
            .start(
                TaskId(7),
                &spec(&["sleep", "5"]),
                &Allocation {
                    cpus: 1.5,
                    ..Default::default()
                },
            )
            .unwrap();
        let Enforcement::Cgroup(group) = enforcement else {
            panic!("expected a cgroup, got {enforcement:?}");
        };
        // The shell joins the group and execs `sleep`: wait for the pid to appear.
        let mut procs = String::new();
        for _ in 0..50 {
            procs = std::fs::read_to_string(group.join("cgroup.procs")).unwrap_or_default();
            if !procs.trim().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(!procs.trim().is_empty(), "the task never joined its cgroup");
        match &cg {
            Cgroups::V2(_) => assert_eq!(
                std::fs::read_to_string(group.join("cpu.max"))
                    .unwrap()
                    .trim(),
                "150000 100000"
            ),
            _ => {
                assert_eq!(
                    std::fs::read_to_string(group.join("cpu.cfs_quota_us"))
                        .unwrap()
                        .trim(),
                    "150000"
                );
                assert_eq!(
                    std::fs::read_to_string(group.join("cpu.cfs_period_us"))
                        .unwrap()
                        .trim(),
                    "100000"
                );
            }
        }
        ex.stop(TaskId(7));
        assert_eq!(until_exit(&mut rx).await.1, None);
        // The task's group is removed once it has exited; then the agent's parent group.
        assert!(!group.exists(), "{} left behind", group.display());
        match &cg {
            Cgroups::V2(d) => {
                let _ = std::fs::remove_dir(d);
            }
            Cgroups::V1 { cpu, memory } => {
                let _ = std::fs::remove_dir(cpu);
                if let Some(m) = memory {
                    let _ = std::fs::remove_dir(m);
                }
            }
            Cgroups::Unavailable(_) => {}
        }
    }
}
