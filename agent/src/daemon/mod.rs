//! The agent's event loop: binds the sans-IO [`NodeCore`] to the network ([`crate::net`]), an
//! [`Executor`] and the wall clock.
//!
//! One tokio task owns the core; everything reaches it through bounded channels (network events,
//! executor events, commands from the API or tests), and a 10 ms ticker drives its timers. Actions
//! are carried out in order: broadcasts go to the network, starts and stops to the executor. The
//! loop publishes a [`Status`] snapshot after every step for the API and tests to read.
//!
//! Here: the handle ([`Agent`]), what the loop needs ([`Parts`]) and publishes ([`Status`]); the
//! loop itself, one handler per source and one `execute` per action, is `event_loop`; the GPU
//! devices each task holds are `gpus`.

mod event_loop;
mod forecasting;
mod gang_start;

use crate::exec::{Allocation, ExecEvent, Executor};
use crate::net::Network;
use std::collections::BTreeMap;
use std::time::Duration;
use tapfinger::node::NodeCore;
use tapfinger::resources::ResourceSpace;
use tapfinger::spec::{Placement, SpecError, TaskSpec};
use tapfinger::{NodeId, Resources, TaskId};
use tokio::sync::{mpsc, oneshot, watch};

pub use crate::status::{Queued, Status};
pub use tapfinger_net::identity::node_id;

/// A command for the loop.
pub enum Command {
    /// Submit a task spec; the reply is its id or why it was refused.
    Submit(Box<TaskSpec>, oneshot::Sender<Result<TaskId, SpecError>>),
    /// Cancel a task; the reply says whether it was known and not finished.
    Cancel(TaskId, oneshot::Sender<bool>),
    /// Stop gracefully: checkpoint every task running here, hand each back once it has ended,
    /// tell the peers this box leaves, and stop (the reply says the loop has ended).
    Shutdown(oneshot::Sender<()>),
    /// During a graceful stop: stop the tasks still running at once (a second stop signal).
    StopNow,
    /// The logs of a task that ran on box `node`, asked of that box (byte offsets of standard
    /// output and error as in the API; the reply: its logs there, or why not).
    PeerLogs {
        /// The box that ran it.
        node: NodeId,
        /// The task.
        task: TaskId,
        /// Standard output and error from these bytes (`None`: their last MiB).
        from: (Option<u64>, Option<u64>),
        /// Where the answer goes.
        reply: oneshot::Sender<Result<crate::learn::TaskLogs, String>>,
    },
    /// Go back to the previous policy version; the reply is the version now in use.
    Rollback(oneshot::Sender<Result<u64, String>>),
    /// A task's spec as submitted (`None`: no such task here).
    Spec(TaskId, oneshot::Sender<Option<Box<TaskSpec>>>),
    /// The cluster's workload of the last so many slots as this agent observed it
    /// ([`crate::workload`]).
    Workload(u64, oneshot::Sender<Box<tapfinger::twin::Workload>>),
}

/// Converts grid units to what an executor needs (natural units of each kind). GPUs come out as a
/// count (`gpus` holds `0..n`); the daemon replaces them with the devices it hands the task.
pub type ToAllocation = Box<dyn Fn(&Resources) -> Allocation + Send>;

/// Why a submission was not accepted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SubmitError {
    /// The agent's loop has stopped.
    #[error("agent stopped")]
    Stopped,
    /// The spec was refused (the field is named).
    #[error(transparent)]
    Refused(#[from] SpecError),
}

/// A running agent.
pub struct Agent {
    /// Command channel.
    pub commands: mpsc::Sender<Command>,
    /// Status snapshots.
    pub status: watch::Receiver<std::sync::Arc<Status>>,
    /// Its metrics, kept current by the loop (the API renders them).
    pub metrics: std::sync::Arc<crate::metrics::AgentMetrics>,
    /// The last hour of the cluster as it sees it, a sample per slot (the dashboard's charts).
    pub history: std::sync::Arc<crate::history::History>,
    /// The loop's task (awaited on shutdown).
    task: tokio::task::JoinHandle<()>,
}

impl Agent {
    /// Submit a task and wait for its id.
    pub async fn submit(&self, spec: TaskSpec) -> Result<TaskId, SubmitError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Submit(Box::new(spec), tx))
            .await
            .map_err(|_| SubmitError::Stopped)?;
        Ok(rx.await.map_err(|_| SubmitError::Stopped)??)
    }

    /// Stop abruptly, as a SIGKILL would: no hand-back, no goodbye.
    pub fn kill(&self) {
        self.task.abort();
    }

    /// [`Agent::kill`], and return once its loop is gone, its journal with it. An agent started
    /// again on the same journal in the same process must wait for this: an aborted loop runs
    /// on to its next await (on another worker thread it may be writing a record), and the
    /// data directory's lock, which keeps a second agent process off, is not taken in-process.
    pub async fn killed(&mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }

    /// Stop gracefully ([`Command::Shutdown`]): returns once the loop has ended.
    pub async fn shutdown(&self) {
        let (tx, rx) = oneshot::channel();
        if self.commands.send(Command::Shutdown(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }

    /// During a graceful stop, stop the tasks still running at once ([`Command::StopNow`]).
    pub async fn stop_now(&self) {
        let _ = self.commands.send(Command::StopNow).await;
    }
}

/// Everything the loop needs.
pub struct Parts {
    /// The node core.
    pub core: NodeCore,
    /// The network.
    pub net: Network,
    /// The executor and its events.
    pub executor: Box<dyn Executor>,
    /// Executor events.
    pub exec_events: mpsc::Receiver<ExecEvent>,
    /// Grid units → executor allocation.
    pub to_allocation: ToAllocation,
    /// Resource kinds (for validating specs).
    pub space: ResourceSpace,
    /// Task type names (for validating specs).
    pub types: Vec<String>,
    /// The durable journal (None: tasks are kept in memory only, as in tests).
    pub store: Option<crate::store::Store>,
    /// What the journal held at start (replayed before anything else: see [`crate::recover`]).
    pub recovered: crate::store::Recovered,
    /// Files beside the journal (None: kept in memory only).
    pub files: Option<Files>,
    /// This box's GPUs.
    pub gpus: Gpus,
    /// Online learning and policy rollout (None: no coordinator configured).
    pub online: Option<crate::online::Online>,
    /// The plateau detector judging the tasks' loss (or accuracy) reports.
    pub plateau: tapfinger::plateau::Plateau,
    /// Slots per interval of the task-volume forecast (0: none; the agent's `forecast_interval_ms`).
    pub forecast_interval_slots: u64,
    /// The longest a graceful stop waits for its tasks' grace (the agent's
    /// `stop_timeout_seconds`).
    pub stop_timeout: Duration,
}

/// This box's GPUs as the loop drives them.
pub struct Gpus {
    /// GPU device indices this node offers (their count × `shares.per_device` is the GPU
    /// capacity).
    pub devices: Vec<u32>,
    /// How devices are shared: grid units per device, MPS where fractions run here.
    pub shares: crate::mps::GpuShares,
    /// What tasks use of their GPUs (NVML; `None`: nothing to show).
    pub probe: Option<Box<dyn crate::gpu_use::GpuProbe>>,
    /// Whether claims state the packing prior (the configuration's `pack_shares`).
    pub pack: bool,
}

impl Gpus {
    /// The device pool, with the devices and shares of the tasks adopted after a restart
    /// (`held`: task, devices, GPU units) held again and their MPS daemons adopted; daemons a
    /// previous run left with no client (its tasks ended while it was down) are stopped.
    pub(crate) fn pool(&mut self, held: crate::recover::Held) -> tapfinger::gpu_pool::GpuPool {
        let mut pool =
            tapfinger::gpu_pool::GpuPool::with_shares(&self.devices, self.shares.per_device);
        for (task, devices, units) in held {
            match (&devices[..], &mut self.shares.mps) {
                ([device], Some(mps)) if units < self.shares.per_device => {
                    pool.hold_share(task, *device, units);
                    mps.adopt(*device);
                }
                _ => pool.hold(task, devices),
            }
        }
        if let Some(mps) = &mut self.shares.mps {
            mps.stop_idle(&self.devices);
        }
        pool
    }
}

/// The data directory's files the loop keeps up to date.
#[derive(Debug, Clone)]
pub struct Files {
    /// Task logs (`<task>.stdout|.stderr`), which peers may ask for.
    pub logs: std::path::PathBuf,
    /// The lease file: touched while this node holds a quorum (task supervisors read it).
    pub lease: std::path::PathBuf,
    /// The members counted for the quorum.
    pub members: std::path::PathBuf,
    /// Task logs and exit records, swept after `retention` (None: kept forever).
    pub sweep: Vec<std::path::PathBuf>,
    /// How long logs of tasks that ended are kept.
    pub retention: Option<Duration>,
    /// The size history learned from the tasks the cluster finished (`sizes.json`), kept
    /// across restarts.
    pub sizes: std::path::PathBuf,
}

/// Start the loop.
pub fn spawn(parts: Parts) -> Agent {
    let (cmd_tx, cmd_rx) = mpsc::channel(64);
    let (status_tx, status_rx) = watch::channel(std::sync::Arc::new(Status::default()));
    let metrics = std::sync::Arc::new(crate::metrics::AgentMetrics::new());
    let history = std::sync::Arc::new(crate::history::History::new(parts.core.config().slot_ms));
    let task = tokio::spawn(event_loop::run(
        parts,
        cmd_rx,
        status_tx,
        metrics.clone(),
        history.clone(),
    ));
    Agent {
        commands: cmd_tx,
        status: status_rx,
        metrics,
        history,
        task,
    }
}

/// The id of this node's `local`-th task.
fn task_id(me: NodeId, local: u32) -> TaskId {
    TaskId((u64::from(me.0) << 32) | u64::from(local))
}

/// Validate a submitted spec against the nodes this agent knows (itself and its peers).
fn validate(
    p: &Parts,
    spec: &TaskSpec,
    me: NodeId,
    local: u32,
) -> Result<tapfinger::Task, SpecError> {
    let view = p.core.view();
    let names = p.core.node_names();
    let labels = p.core.node_labels();
    let empty = BTreeMap::new();
    let placements: Vec<Placement<'_>> = view
        .nodes
        .iter()
        .map(|n| Placement {
            id: n.id,
            name: names.get(&n.id).map_or("", String::as_str),
            labels: labels.get(&n.id).unwrap_or(&empty),
            // This box's own capacity as offered: its ledger's is lowered while a stopped copy
            // ends (`NodeCore::draining`), which must not refuse a task as too big.
            capacity: if n.id == me {
                p.core.capacity()
            } else {
                &n.capacity
            },
        })
        .collect();
    let id = task_id(me, local);
    spec.validate(&p.space, &p.types, &placements, id, p.core.slot())
        .map_err(|mut e| {
            // Judged on the boxes heard now: say so when a box this agent knows is not among
            // them (it may be down for good, or back in a moment), rather than leave the user
            // to think the cluster can never run it.
            let unheard = p
                .core
                .known()
                .iter()
                .filter(|k| !placements.iter().any(|n| n.id == **k))
                .count();
            if e.by_boxes && unheard > 0 {
                e.message.push_str(&format!(
                    " ({unheard} known box(es) not heard now, so not counted: submit again once \
                     they are back if they can run it)"
                ));
            }
            e
        })
}
