//! The JSON the API sends and the CLI reads, as types both sides share (so a renamed field is a
//! compile error, not a blank column).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tapfinger::node::TaskState;

/// Any refusal: what went wrong, and the offending field where there is one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// For people.
    pub error: String,
    /// The field of the request at fault (`min_demand.cpu`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl ErrorBody {
    /// An error without a field.
    pub fn new(error: impl Into<String>) -> Self {
        Self {
            error: error.into(),
            field: None,
        }
    }
}

/// `POST /v1/tasks` accepted a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Submitted {
    /// Its id.
    pub id: u64,
}

/// Where a task stands, as the API reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum TaskStatus {
    /// Waiting for a node.
    Pending,
    /// Running on `node`.
    Running {
        /// Node id.
        node: u32,
        /// Allocation in grid units per kind.
        alloc: Vec<u32>,
        /// Progress in [0, 1].
        progress: f64,
    },
    /// A gang running as its members, in rank order.
    Gang {
        /// Each member's node id and allocation in grid units per kind.
        members: Vec<(u32, Vec<u32>)>,
        /// Progress in [0, 1].
        progress: f64,
    },
    /// Exited with code 0.
    Succeeded(Ended),
    /// Exited otherwise, or could not start.
    Failed(Ended),
    /// Cancelled by a user.
    Cancelled(Ended),
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ended {
    /// The node that ran it (or where it was cancelled).
    pub node: u32,
    /// Its exit code, if it exited.
    pub exit_code: Option<i32>,
    /// The epoch of the copy that ended.
    pub epoch: u64,
}

impl From<&TaskState> for TaskStatus {
    fn from(st: &TaskState) -> Self {
        match st {
            TaskState::Pending => TaskStatus::Pending,
            TaskState::Running {
                node,
                alloc,
                progress,
                ..
            } => TaskStatus::Running {
                node: node.0,
                alloc: alloc.0.clone(),
                progress: *progress,
            },
            TaskState::Gang {
                members, progress, ..
            } => TaskStatus::Gang {
                members: members.iter().map(|(n, a)| (n.0, a.0.clone())).collect(),
                progress: *progress,
            },
            TaskState::Done { node, code, epoch } => {
                let ended = Ended {
                    node: node.0,
                    exit_code: *code,
                    epoch: *epoch,
                };
                if *epoch == tapfinger::wire::CANCELLED {
                    TaskStatus::Cancelled(ended)
                } else if st.succeeded() {
                    TaskStatus::Succeeded(ended)
                } else {
                    TaskStatus::Failed(ended)
                }
            }
        }
    }
}

/// One task (`GET /v1/tasks/{id}`, and each entry of a page).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskInfo {
    /// Its id.
    pub id: u64,
    /// Its name (the spec's `name`, else its program's file name).
    #[serde(default)]
    pub name: String,
    /// Its class (the spec's `type`; empty: none).
    #[serde(default)]
    pub class: String,
    /// The name of the box it runs on or ran on (a gang: its first member's), where known.
    #[serde(default, rename = "box", skip_serializing_if = "Option::is_none")]
    pub box_name: Option<String>,
    /// Seconds since it was submitted (whole slots), while it has not finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_s: Option<f64>,
    /// Seconds since its run started (whole slots), while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_s: Option<f64>,
    /// Its priority class (0 is the highest).
    #[serde(default)]
    pub priority: u8,
    /// The latest metrics it reported besides progress (`loss`, `accuracy`, …), while it runs
    /// (on another box: as that box's last heartbeat told, at most 8 of them).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, f64>,
    /// Its loss (or accuracy) has plateaued (RLPTO's detector, judged by the box running it).
    #[serde(default)]
    pub converging: bool,
    /// Times the agent asked preempted it for a higher class.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub preempted: u32,
    /// Work those preemptions lost: its progress since its last `checkpoint=` report, summed
    /// (1: a whole run).
    #[serde(default, skip_serializing_if = "is_zero_f")]
    pub work_lost: f64,
    /// What it uses of its GPUs while it runs here (NVML: SM utilization and device memory
    /// of its processes); absent where no GPU process of it is seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_use: Option<crate::gpu_use::TaskGpuUse>,
    /// Seconds until it is expected to start (a waiting task), as the agent's ledger places
    /// the queue now: in queue order, at its minimum demand, for its expected work
    /// (`docs/AGENT.md`, "Start and finish estimates"); none where it cannot say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_start_s: Option<f64>,
    /// Seconds until it is expected to finish (a waiting or running task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_finish_s: Option<f64>,
    /// Where it stands.
    #[serde(flatten)]
    pub status: TaskStatus,
}

/// `GET /v1/tasks`: a page of tasks by id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskPage {
    /// The tasks of this page.
    pub tasks: Vec<TaskInfo>,
    /// Tasks known in all.
    pub total: usize,
    /// Where the next page starts, while more remain.
    pub next_offset: Option<usize>,
}

/// `DELETE /v1/tasks/{id}` cancelled a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CancelledTask {
    /// Its id.
    pub id: u64,
    /// Always `cancelled`.
    pub state: String,
}

/// `GET /v1/tasks/{id}/logs`: the end of a task's output on this agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskLogs {
    /// The task.
    pub id: u64,
    /// Its standard output (the last MiB).
    pub stdout: String,
    /// Its standard error (the last MiB).
    pub stderr: String,
    /// Where `stdout` ends in its file, in bytes: what to ask `?stdout_from=` next time to get
    /// only what follows.
    #[serde(default)]
    pub stdout_size: u64,
    /// Where `stderr` ends in its file (`?stderr_from=`).
    #[serde(default)]
    pub stderr_size: u64,
}

/// `GET /v1/node`: this agent's node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Its node id (before the network has started: none).
    pub id: Option<u32>,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Units offered per kind.
    pub capacity: Option<Vec<u32>>,
    /// Units allocated per kind.
    pub used: Option<Vec<u32>>,
    /// Live peers.
    pub peers: usize,
    /// Malformed or spoofed messages dropped.
    pub dropped_messages: u64,
    /// The task-volume forecast: expected arrivals (cluster-wide) in each of the next
    /// intervals, the interval's length in slots, and how it was made (RLPTO's ARIMA + GRU, or
    /// the last value while the history is short).
    #[serde(default)]
    pub forecast: Option<tapfinger::forecast::outlook::Outlook>,
    /// What protects this box ([`SecurityInfo`]).
    #[serde(default)]
    pub security: Option<SecurityInfo>,
    /// Its labels, its GPU model (`gpu_model`, NVML's name unless configured) among them: what
    /// a spec's `require_labels` can ask for.
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    /// Whether its journal takes writes: `full` is "storage full" (submissions are refused with
    /// 507 until space is freed), `backlog` the outcomes waiting in memory to be written.
    #[serde(default)]
    pub storage: Option<crate::store::Health>,
    /// What decides here ([`crate::online::policy_line`]: the learned policy and its version, or
    /// the baseline the coordinator's guard has the cluster run, and why).
    #[serde(default)]
    pub policy: String,
    /// How far this box's start estimates (`expected_start_s`) were from when the tasks
    /// started; none until a task it estimated has started.
    #[serde(default)]
    pub start_estimates: Option<StartEstimates>,
    /// The addresses it listens on, each with its peer id: what another box's `--bootstrap`
    /// takes, as printed.
    #[serde(default)]
    pub addresses: Vec<String>,
}

/// How far a box's start estimates were from the starts: each task's first estimate against
/// its start, over the latest 1,000 tasks this box saw wait and start.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StartEstimates {
    /// Tasks measured.
    pub tasks: usize,
    /// Median absolute error (s).
    pub median_abs_error_s: f64,
    /// 90th percentile of the absolute error (s).
    pub p90_abs_error_s: f64,
}

impl StartEstimates {
    /// The ledger's errors in slots of `slot_ms`, in seconds.
    pub fn of(e: tapfinger::ledger::StartError, slot_ms: u64) -> Self {
        let s = slot_ms as f64 / 1000.0;
        Self {
            tasks: e.tasks,
            median_abs_error_s: e.median * s,
            p90_abs_error_s: e.p90 * s,
        }
    }
}

/// What protects a box, as its configuration and its kernel allow (docs/SECURITY.md).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SecurityInfo {
    /// An open cluster (`insecure_open_cluster`): it listens beyond loopback without a cluster
    /// key, so any host that reaches it can have commands run here.
    pub open_cluster: bool,
    /// A cluster key closes the peer-to-peer network to boxes without it.
    pub cluster_key: bool,
    /// Peers on the allowlist (0: any holder of the key).
    pub allowlist: usize,
    /// The API asks for a bearer token.
    pub api_token: bool,
    /// Whether a task can open only the GPUs it was given, and how (or why not).
    pub gpu_isolation: String,
    /// How GPUs are shared between tasks here (MPS fractions of the cluster's `gpu_step`), or
    /// why this box gives whole devices only.
    #[serde(default)]
    pub gpu_sharing: String,
}

/// One live peer as its last heartbeat described it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerInfo {
    /// Its node id.
    pub id: u32,
    /// Its name.
    pub name: String,
    /// Units it offers per kind.
    pub capacity: Vec<u32>,
    /// Units it has free per kind.
    pub free: Vec<u32>,
}

/// `GET /v1/peers`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Peers {
    /// The live peers, by id.
    pub peers: Vec<PeerInfo>,
}

pub use crate::status::ClassInfo;

/// `GET /v1/classes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Classes {
    /// Every class the estimator has heard of, by id.
    pub classes: Vec<ClassInfo>,
}

/// `POST /v1/policy/rollback`: the version now in use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyVersion {
    /// The version.
    pub version: u64,
}

fn is_zero(x: &u32) -> bool {
    *x == 0
}

fn is_zero_f(x: &f64) -> bool {
    *x == 0.0
}
