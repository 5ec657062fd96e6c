//! The web dashboard: `GET /` serves one self-contained page (no scripts from elsewhere) that
//! polls `GET /v1/dashboard` every second and shows every box with its GPU model, capacity and free units,
//! the cluster's queue (each task's position and wait so far), the running tasks with their
//! shares and progress, the latest finished tasks, the negotiation counters (rounds, conflicts,
//! lost claims, missing proposals, and how many of each in the last ten seconds), the policy
//! version in use, what the speed estimator holds of each task class, and what protects the
//! box (a warning across the page for an open cluster; whether GPUs are isolated).
//!
//! Both routes are **read-only and readable without the API token**: they show names (of boxes
//! and of task classes), capacities, task ids, states, shares and speed estimates, never a
//! task's command, environment or logs. The
//! page's only action, cancelling a task, goes through `DELETE /v1/tasks/{id}` with the token
//! the operator types into the page (kept in the browser tab's session storage).

use super::ApiState;
use crate::api::{PeerInfo, TaskStatus};
use axum::extract::State;
use axum::response::{Html, IntoResponse, Response};
use serde::{Deserialize, Serialize};
use tapfinger::node::TaskState;

/// The page.
const PAGE: &str = include_str!("dashboard.html");

/// Finished tasks shown (the most recent by id).
pub const FINISHED_SHOWN: usize = 50;

/// `GET /v1/dashboard`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dashboard {
    /// The agent answering.
    pub node: String,
    /// Resource kinds, in the order of every unit vector below.
    pub kinds: Vec<String>,
    /// Each kind's grid step in its natural unit (a unit vector's entry times its step is the
    /// amount: GPUs shared in quarters have a step of 0.25); empty: 1 each.
    #[serde(default)]
    pub steps: Vec<f64>,
    /// Slot length (ms).
    pub slot_ms: u64,
    /// This box and every live peer.
    pub boxes: Vec<BoxInfo>,
    /// Pending tasks in the order boxes take them.
    pub queue: Vec<QueueEntry>,
    /// Running tasks.
    pub running: Vec<RunningEntry>,
    /// The latest finished tasks (most recent first).
    pub finished: Vec<FinishedEntry>,
    /// Negotiation counters of this agent.
    pub rounds: Rounds,
    /// Policy version in use (0: the model the agent started with).
    pub policy_version: u64,
    /// Policy name or model.
    pub policy_hash: String,
    /// What decides here ([`crate::online::policy_line`]: the learned policy and its version, or
    /// the baseline the coordinator's guard chose for the cluster, and why).
    #[serde(default)]
    pub policy_line: String,
    /// What the speed estimator holds of each task class (`GET /v1/classes`).
    #[serde(default)]
    pub classes: Vec<crate::api::ClassInfo>,
    /// What protects this box: an open cluster is shown as a warning across the page.
    #[serde(default)]
    pub security: crate::api::SecurityInfo,
    /// Whether this box's journal takes writes: a full disk is shown as a warning across the
    /// page.
    #[serde(default)]
    pub storage: Option<crate::store::Health>,
    /// How far this box's start estimates were from the starts (`GET /v1/node`'s).
    #[serde(default)]
    pub start_estimates: Option<crate::api::StartEstimates>,
}

/// A box: what `GET /v1/peers` shows of a peer, and whether it is the agent answering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoxInfo {
    /// Id, name, capacity and free units.
    #[serde(flatten)]
    pub info: PeerInfo,
    /// Whether it is the agent answering.
    pub me: bool,
    /// Its GPU model (its `gpu_model` label), if it has one.
    #[serde(default)]
    pub gpu_model: Option<String>,
}

/// A queued task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueEntry {
    /// Task id, as a string: ids use all 64 bits, more than a JavaScript number holds exactly.
    pub id: String,
    /// Task name (its spec's, else its program's file name).
    #[serde(default)]
    pub name: String,
    /// 1-based position in the cluster's queue.
    pub position: usize,
    /// Priority class (0 highest).
    pub priority: u8,
    /// Time since its submission (whole slots, seconds).
    pub wait_s: f64,
    /// Minimum demand.
    pub min_demand: Vec<u32>,
    /// Seconds until it is expected to start, and to finish (the ledger's estimate: queue
    /// order, minimum demand, expected work); none where the agent cannot say.
    #[serde(default)]
    pub expected_start_s: Option<f64>,
    /// Seconds until it is expected to finish.
    #[serde(default)]
    pub expected_finish_s: Option<f64>,
}

/// A running task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunningEntry {
    /// Task id, as a string: ids use all 64 bits, more than a JavaScript number holds exactly.
    pub id: String,
    /// Task name (its spec's, else its program's file name).
    #[serde(default)]
    pub name: String,
    /// Node id it runs on.
    pub node: u32,
    /// Its share.
    pub alloc: Vec<u32>,
    /// Progress in [0, 1].
    pub progress: f64,
    /// What it uses of its GPUs (NVML), if a GPU process of it is seen.
    #[serde(default)]
    pub gpu_use: Option<crate::gpu_use::TaskGpuUse>,
    /// Seconds until it is expected to finish ([`QueueEntry::expected_start_s`]).
    #[serde(default)]
    pub expected_finish_s: Option<f64>,
}

/// A finished task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinishedEntry {
    /// Task id, as a string: ids use all 64 bits, more than a JavaScript number holds exactly.
    pub id: String,
    /// Task name (its spec's, else its program's file name).
    #[serde(default)]
    pub name: String,
    /// `succeeded`, `failed` or `cancelled`.
    pub state: String,
    /// Node id that ran (or cancelled) it.
    pub node: u32,
}

/// Negotiation counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rounds {
    /// Rounds decided.
    pub rounds: u64,
    /// Tasks claimed by more than one agent in a round.
    pub conflicts: u64,
    /// Claims of this agent that lost.
    pub claims_lost: u64,
    /// Peers whose proposal missed a deadline.
    pub missing: u64,
}

pub(super) async fn page() -> Response {
    Html(PAGE).into_response()
}

pub(super) async fn dashboard(State(s): State<ApiState>) -> Response {
    let st = s.status.borrow().clone();
    let me = st.id.map_or(0, |i| i.0);
    let gpu_model = |id: u32| {
        st.labels
            .get(&tapfinger::NodeId(id))
            .and_then(|l| l.get(tapfinger::estimate::GPU_MODEL_LABEL))
            .cloned()
    };
    let mut boxes = Vec::new();
    if let (Some(cap), Some(used)) = (&st.capacity, &st.used) {
        boxes.push(BoxInfo {
            info: PeerInfo {
                id: me,
                name: st.name.clone(),
                capacity: cap.0.clone(),
                free: cap
                    .0
                    .iter()
                    .zip(&used.0)
                    .map(|(c, u)| c.saturating_sub(*u))
                    .collect(),
            },
            me: true,
            gpu_model: gpu_model(me),
        });
    }
    for (id, name, cap, free) in &st.peer_table {
        boxes.push(BoxInfo {
            info: PeerInfo {
                id: id.0,
                name: name.clone(),
                capacity: cap.0.clone(),
                free: free.0.clone(),
            },
            me: false,
            gpu_model: gpu_model(id.0),
        });
    }
    boxes.sort_by(|a, b| (a.info.name.as_str(), a.info.id).cmp(&(b.info.name.as_str(), b.info.id)));
    let name_of = |id: tapfinger::TaskId| {
        st.names
            .get(&id)
            .map(|n| n.name.clone())
            .unwrap_or_default()
    };
    let seconds = |slots: f64| (slots * st.slot_ms as f64 / 1e3 * 10.0).round() / 10.0;
    let queue = st
        .queue
        .iter()
        .enumerate()
        .map(|(i, q)| QueueEntry {
            id: q.id.0.to_string(),
            name: name_of(q.id),
            position: i + 1,
            priority: q.priority,
            wait_s: st.slot.saturating_sub(q.arrival) as f64 * st.slot_ms as f64 / 1e3,
            min_demand: q.min_demand.0.clone(),
            expected_start_s: st.expected.get(&q.id).map(|e| seconds(e.start)),
            expected_finish_s: st.expected.get(&q.id).map(|e| seconds(e.finish)),
        })
        .collect();
    let mut running = Vec::new();
    let mut finished = Vec::new();
    for (id, t) in st.tasks.iter().rev() {
        match t {
            TaskState::Running {
                node,
                alloc,
                progress,
                ..
            } => running.push(RunningEntry {
                id: id.0.to_string(),
                name: name_of(*id),
                node: node.0,
                alloc: alloc.0.clone(),
                progress: *progress,
                gpu_use: st.gpu_use.get(id).cloned(),
                expected_finish_s: st.expected.get(id).map(|e| seconds(e.finish)),
            }),
            TaskState::Done { node, .. } if finished.len() < FINISHED_SHOWN => {
                let state = match TaskStatus::from(t) {
                    TaskStatus::Succeeded(_) => "succeeded",
                    TaskStatus::Cancelled(_) => "cancelled",
                    _ => "failed",
                };
                finished.push(FinishedEntry {
                    id: id.0.to_string(),
                    name: name_of(*id),
                    state: state.into(),
                    node: node.0,
                });
            }
            _ => {}
        }
    }
    running.reverse();
    let policy = st.policy.clone().unwrap_or_default();
    axum::Json(Dashboard {
        node: st.name.clone(),
        kinds: crate::config::space(1.0).kind_names(),
        steps: st.steps.clone(),
        slot_ms: st.slot_ms,
        boxes,
        queue,
        running,
        finished,
        rounds: Rounds {
            rounds: st.stats.rounds,
            conflicts: st.stats.conflicts,
            claims_lost: st.stats.claims_lost,
            missing: st.stats.missing,
        },
        policy_version: policy.version,
        policy_hash: policy.hash.clone(),
        policy_line: crate::online::policy_line(&st.deciding, st.policy.as_ref()),
        classes: st.estimates.clone(),
        security: (*s.security).clone(),
        storage: st.storage.clone().map(|mut h| {
            h.free_bytes = crate::store::free_bytes(&h.data_dir);
            h
        }),
        start_estimates: st
            .start_error
            .map(|e| crate::api::StartEstimates::of(e, st.slot_ms)),
    })
    .into_response()
}

/// `GET /v1/history`: the samples of the last hour, oldest first ([`crate::history`]).
pub async fn history(State(s): State<ApiState>) -> Response {
    axum::Json(s.history.samples()).into_response()
}

/// `GET /v1/tasks/{id}/history`: a task's points while it ran on this box, oldest first.
pub async fn task_history(
    State(s): State<ApiState>,
    axum::extract::Path(id): axum::extract::Path<u64>,
) -> Response {
    axum::Json(s.history.task(tapfinger::TaskId(id))).into_response()
}

/// uPlot, the charting library the page draws with, shipped in the binary (`vendor/`).
pub async fn uplot_js() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "text/javascript")],
        include_str!("vendor/uPlot.iife.min.js"),
    )
        .into_response()
}

/// uPlot's style sheet.
pub async fn uplot_css() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "text/css")],
        include_str!("vendor/uPlot.min.css"),
    )
        .into_response()
}
