//! The agent's local HTTP API (axum): submit, list and show tasks, this node, its peers, what
//! the speed estimator holds of each task class, and Prometheus metrics. It only talks to the event loop through its command channel and status
//! snapshots, so a slow client never blocks scheduling.
//!
//! Bound to 127.0.0.1 by default; when a bearer token is configured every request but the
//! read-only dashboard (`GET /`, `GET /v1/dashboard`, [`dashboard`]) must carry
//! `Authorization: Bearer <token>` (the configuration requires a token for non-loopback binds),
//! checked before anything else is looked at (so a caller without it learns nothing, not even
//! that a body was too large). A task spec that cannot be accepted gets a 400 whose JSON names the
//! field. A client must send its headers within [`HEADER_TIMEOUT`] and its whole request within
//! [`REQUEST_TIMEOUT`] ([`serve`]), so a half-sent request cannot hold a connection forever. A
//! body over [`MAX_BODY`] gets a 413 that the client can read: what it sends is read and dropped
//! first (within bounds), so it is not cut off mid-write. The checks and the connection loop
//! are `serve`.
//!
//! A task's `state` is `pending`, `running`, `succeeded` (exit code 0), `failed` (any other exit,
//! a program that could not be started, a task stopped by a crash) or `cancelled`.

pub mod dashboard;
mod serve;
pub mod types;
pub use serve::{HEADER_TIMEOUT, MAX_BODY, REQUEST_TIMEOUT, serve, serve_with};
pub use types::{
    CancelledTask, ClassInfo, Classes, Ended, ErrorBody, NodeInfo, PeerInfo, Peers, PolicyVersion,
    SecurityInfo, StartEstimates, Submitted, TaskInfo, TaskLogs, TaskPage, TaskStatus,
};

use crate::daemon::{Command, Status};
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tapfinger::TaskId;
use tapfinger::spec::TaskSpec;
use tokio::sync::{mpsc, oneshot, watch};

/// Tasks per page of `GET /v1/tasks` (`?offset=N&limit=M`, at most this many).
pub const MAX_PAGE: usize = 1000;

/// What the handlers share.
#[derive(Clone)]
pub struct ApiState {
    /// Commands to the event loop.
    pub commands: mpsc::Sender<Command>,
    /// Status snapshots from the event loop.
    pub status: watch::Receiver<std::sync::Arc<Status>>,
    /// Required bearer token, if any.
    pub token: Option<String>,
    /// Where the executor writes task logs (`<id>.stdout`, `<id>.stderr`; appended, one marked
    /// part per attempt).
    pub log_dir: Option<std::path::PathBuf>,
    /// The agent's metrics, which its event loop keeps current.
    pub metrics: std::sync::Arc<crate::metrics::AgentMetrics>,
    /// What protects this box (fixed at start).
    pub security: std::sync::Arc<SecurityInfo>,
    /// The dashboard's history of the cluster.
    pub history: std::sync::Arc<crate::history::History>,
}

/// The routes.
pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/v1/tasks", get(list).post(submit))
        .route("/v1/tasks/{id}", get(show).delete(cancel))
        .route("/v1/tasks/{id}/logs", get(logs))
        .route("/v1/tasks/{id}/spec", get(spec))
        .route("/v1/node", get(node))
        .route("/v1/peers", get(peers))
        .route("/v1/classes", get(classes))
        .route("/v1/policy", get(policy))
        .route("/v1/workload", get(workload))
        .route("/v1/policy/rollback", axum::routing::post(rollback))
        .route("/metrics", get(metrics))
        .route("/", get(dashboard::page))
        .route("/v1/dashboard", get(dashboard::dashboard))
        .route("/v1/history", get(dashboard::history))
        .route("/v1/tasks/{id}/history", get(dashboard::task_history))
        .route("/assets/uPlot.min.js", get(dashboard::uplot_js))
        .route("/assets/uPlot.min.css", get(dashboard::uplot_css))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        // Outermost: runs before any extractor can answer 400 or 413.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            serve::guard,
        ))
        .with_state(state)
}

fn bad(field: &str, message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(ErrorBody {
            error: format!("{field}: {message}"),
            field: Some(field.to_string()),
        }),
    )
        .into_response()
}

async fn submit(State(s): State<ApiState>, body: String) -> Response {
    let t0 = std::time::Instant::now();
    let r = submit_inner(&s, body).await;
    s.metrics.admission(t0.elapsed().as_secs_f64() * 1e3);
    r
}

async fn submit_inner(s: &ApiState, body: String) -> Response {
    let spec = match TaskSpec::from_json(&body) {
        Ok(spec) => spec,
        Err(e) => return bad(&e.field, &e.message),
    };
    let (tx, rx) = oneshot::channel();
    if s.commands
        .send(Command::Submit(Box::new(spec), tx))
        .await
        .is_err()
    {
        return (StatusCode::SERVICE_UNAVAILABLE, "agent stopping").into_response();
    }
    match rx.await {
        Ok(Ok(id)) => (StatusCode::CREATED, axum::Json(Submitted { id: id.0 })).into_response(),
        Ok(Err(e)) if e.field == crate::store::REFUSED_FULL => {
            storage_refusal(StatusCode::INSUFFICIENT_STORAGE, &e)
        }
        Ok(Err(e)) if e.field == crate::store::REFUSED_FAILING => {
            storage_refusal(StatusCode::SERVICE_UNAVAILABLE, &e)
        }
        Ok(Err(e)) => bad(&e.field, &e.message),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "agent stopping").into_response(),
    }
}

/// A submission the journal could not record: the server's condition, not the request's, so a
/// 5xx a client retries, with when to.
fn storage_refusal(code: StatusCode, e: &tapfinger::spec::SpecError) -> Response {
    (
        code,
        [(axum::http::header::RETRY_AFTER, STORAGE_RETRY_AFTER_S)],
        axum::Json(ErrorBody {
            error: e.message.clone(),
            field: Some(e.field.clone()),
        }),
    )
        .into_response()
}

/// Seconds a client refused for storage is told to wait (`Retry-After`): the agent tries its
/// journal again every second, and an operator freeing space takes longer than that.
const STORAGE_RETRY_AFTER_S: &str = "5";

/// `?offset=N&limit=M` of `GET /v1/tasks`.
#[derive(Debug, serde::Deserialize)]
struct Page {
    /// First task to list.
    #[serde(default)]
    offset: usize,
    /// Most tasks to list (`None`: the default page).
    #[serde(default)]
    limit: Option<usize>,
    /// Only tasks in this state (`pending`, `running`, `gang`, `succeeded`, `failed`,
    /// `cancelled`).
    #[serde(default)]
    state: Option<String>,
    /// Only tasks of this name.
    #[serde(default)]
    name: Option<String>,
    /// Only tasks of this class.
    #[serde(default)]
    class: Option<String>,
    /// Only tasks on (or that ran on) the box of this name.
    #[serde(default, rename = "box")]
    box_name: Option<String>,
}

/// The states a listing can be filtered by.
const STATES: [&str; 6] = [
    "pending",
    "running",
    "gang",
    "succeeded",
    "failed",
    "cancelled",
];

impl Page {
    /// Whether `t` passes the filters.
    fn keeps(&self, t: &TaskInfo) -> bool {
        let state = serde_json::to_value(&t.status)
            .ok()
            .and_then(|v| v["state"].as_str().map(str::to_string));
        self.state
            .as_ref()
            .is_none_or(|s| state.as_ref() == Some(s))
            && self.name.as_ref().is_none_or(|n| *n == t.name)
            && self.class.as_ref().is_none_or(|c| *c == t.class)
            && self
                .box_name
                .as_ref()
                .is_none_or(|b| t.box_name.as_ref() == Some(b))
    }
}

/// The tasks this agent knows (its own finished history included, from the journal after a
/// restart), by id, a page at a time: `next_offset` is set while more remain. `?state=`,
/// `?name=`, `?class=` and `?box=` keep only the tasks that match (exactly), before paging; an
/// unknown state is a 400 naming the field.
async fn list(
    State(s): State<ApiState>,
    axum::extract::Query(page): axum::extract::Query<Page>,
) -> Response {
    let limit = page.limit.unwrap_or(MAX_PAGE).clamp(1, MAX_PAGE);
    if let Some(s) = &page.state
        && !STATES.contains(&s.as_str())
    {
        let mut e = ErrorBody::new(format!("unknown state {s:?}; one of {}", STATES.join(", ")));
        e.field = Some("state".into());
        return (StatusCode::BAD_REQUEST, axum::Json(e)).into_response();
    }
    let st = s.status.borrow();
    let filtered = page.state.is_some()
        || page.name.is_some()
        || page.class.is_some()
        || page.box_name.is_some();
    let (tasks, total): (Vec<TaskInfo>, usize) = if filtered {
        let all: Vec<TaskInfo> = st
            .tasks
            .iter()
            .map(|(id, t)| info(&st, *id, t))
            .filter(|t| page.keeps(t))
            .collect();
        let total = all.len();
        (
            all.into_iter().skip(page.offset).take(limit).collect(),
            total,
        )
    } else {
        let tasks = st
            .tasks
            .iter()
            .skip(page.offset)
            .take(limit)
            .map(|(id, t)| info(&st, *id, t))
            .collect();
        (tasks, st.tasks.len())
    };
    let next_offset = (page.offset + tasks.len() < total).then_some(page.offset + tasks.len());
    axum::Json(TaskPage {
        tasks,
        total,
        next_offset,
    })
    .into_response()
}

/// A task as the API shows it: its state, class, and what it reports while it runs here.
fn info(st: &crate::status::Status, id: TaskId, t: &tapfinger::node::TaskState) -> TaskInfo {
    // Its runner's report: this agent's own if it runs the task, else the one its runner's
    // heartbeats carry.
    let (metrics, converging) = match (st.reports.get(&id), st.shared_reports.get(&id)) {
        (Some(r), _) => (r.last.clone(), r.converging),
        (None, Some(r)) => (r.metrics.clone(), r.converging),
        (None, None) => Default::default(),
    };
    let names = st.names.get(&id).cloned().unwrap_or_default();
    let node = match t {
        tapfinger::node::TaskState::Pending => None,
        tapfinger::node::TaskState::Running { node, .. }
        | tapfinger::node::TaskState::Done { node, .. } => Some(*node),
        tapfinger::node::TaskState::Gang { members, .. } => members.first().map(|(n, _)| *n),
    };
    let secs = |slots: u64| (slots * st.slot_ms) as f64 / 1000.0;
    let slots_s = |slots: f64| (slots * st.slot_ms as f64 / 1000.0 * 10.0).round() / 10.0;
    let expected = st.expected.get(&id);
    let age_s = (!matches!(t, tapfinger::node::TaskState::Done { .. }))
        .then(|| secs(st.slot.saturating_sub(names.arrival)));
    let running_s = match t {
        tapfinger::node::TaskState::Running { started, .. } => {
            Some(secs(st.slot.saturating_sub(*started)))
        }
        _ => None,
    };
    TaskInfo {
        id: id.0,
        age_s,
        running_s,
        name: names.name,
        class: names.class,
        box_name: node.and_then(|n| st.box_names.get(&n).cloned()),
        priority: st.classes.get(&id).copied().unwrap_or(0),
        metrics,
        converging,
        preempted: st.preempted_everywhere.get(&id).map_or(0, |p| p.times),
        work_lost: st
            .preempted_everywhere
            .get(&id)
            .map_or(0.0, |p| p.work_lost),
        gpu_use: st.gpu_use.get(&id).cloned(),
        expected_start_s: expected
            .filter(|_| matches!(t, tapfinger::node::TaskState::Pending))
            .map(|e| slots_s(e.start)),
        expected_finish_s: expected.map(|e| slots_s(e.finish)),
        status: t.into(),
    }
}

async fn show(State(s): State<ApiState>, Path(id): Path<u64>) -> Response {
    let st = s.status.borrow().clone();
    match st.tasks.get(&TaskId(id)) {
        Some(t) => axum::Json(info(&st, TaskId(id), t)).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            axum::Json(ErrorBody::new(format!("no task {id}"))),
        )
            .into_response(),
    }
}

async fn cancel(State(s): State<ApiState>, Path(id): Path<u64>) -> Response {
    let (tx, rx) = oneshot::channel();
    if s.commands
        .send(Command::Cancel(TaskId(id), tx))
        .await
        .is_err()
    {
        return (StatusCode::SERVICE_UNAVAILABLE, "agent stopping").into_response();
    }
    match rx.await {
        Ok(true) => axum::Json(CancelledTask {
            id,
            state: "cancelled".into(),
        })
        .into_response(),
        Ok(false) => (
            StatusCode::NOT_FOUND,
            axum::Json(ErrorBody::new(format!("no unfinished task {id}"))),
        )
            .into_response(),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "agent stopping").into_response(),
    }
}

/// `GET /v1/tasks/{id}/spec`: the task's spec as submitted (its command and environment:
/// behind the token like every route but the dashboard's).
async fn spec(State(s): State<ApiState>, Path(id): Path<u64>) -> Response {
    let (tx, rx) = oneshot::channel();
    if s.commands
        .send(Command::Spec(TaskId(id), tx))
        .await
        .is_err()
    {
        return (StatusCode::SERVICE_UNAVAILABLE, "agent stopping").into_response();
    }
    match rx.await {
        Ok(Some(spec)) => axum::Json(*spec).into_response(),
        Ok(None) => (
            StatusCode::NOT_FOUND,
            axum::Json(ErrorBody::new(format!("no task {id}"))),
        )
            .into_response(),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "agent stopping").into_response(),
    }
}

/// Where to read a task's logs from (`GET /v1/tasks/{id}/logs?stdout_from=N&stderr_from=M`):
/// byte offsets, as the sizes of an earlier answer give them, so that a follower gets only what
/// was written since. Without them: the last MiB of each.
#[derive(Debug, Default, serde::Deserialize)]
struct LogsFrom {
    #[serde(default)]
    stdout_from: Option<u64>,
    #[serde(default)]
    stderr_from: Option<u64>,
}

async fn logs(
    State(s): State<ApiState>,
    Path(id): Path<u64>,
    axum::extract::Query(from): axum::extract::Query<LogsFrom>,
) -> Response {
    let Some(dir) = &s.log_dir else {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(ErrorBody::new("this agent keeps no logs")),
        )
            .into_response();
    };
    // The logs of the box that ran the task last: asked of it where that is another box (an
    // earlier attempt here is not what a follower wants), this box's own otherwise, or where
    // the other box cannot answer.
    let offsets = (from.stdout_from, from.stderr_from);
    let elsewhere = match last_runner(&s, TaskId(id)) {
        Some(node) => Some(from_peer(&s, node, TaskId(id), offsets).await),
        None => None,
    };
    if let Some(Ok(l)) = elsewhere {
        return axum::Json(TaskLogs {
            id,
            stdout: l.stdout,
            stderr: l.stderr,
            stdout_size: l.stdout_size,
            stderr_size: l.stderr_size,
        })
        .into_response();
    }
    let out = crate::logs::read_log(&dir.join(format!("{id}.stdout")), from.stdout_from);
    let err = crate::logs::read_log(&dir.join(format!("{id}.stderr")), from.stderr_from);
    match (out, err) {
        (None, None) => (
            StatusCode::NOT_FOUND,
            axum::Json(ErrorBody::new(match elsewhere {
                Some(Err(why)) => format!("task {id} has no logs here: {why}"),
                _ => format!("task {id} has no logs on this agent"),
            })),
        )
            .into_response(),
        (out, err) => axum::Json(TaskLogs {
            id,
            stdout_size: out.as_ref().map_or(0, |o| o.1),
            stderr_size: err.as_ref().map_or(0, |e| e.1),
            stdout: out.map(|o| o.0).unwrap_or_default(),
            stderr: err.map(|e| e.0).unwrap_or_default(),
        })
        .into_response(),
    }
}

/// How long the box that ran a task may take to send its logs.
const PEER_LOGS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The box that runs or ran `id` last, if it is another box than this one (a cancelled task
/// that never ran names the box that cancelled it: asked, it has no logs).
fn last_runner(s: &ApiState, id: TaskId) -> Option<tapfinger::NodeId> {
    let st = s.status.borrow();
    let ran = st.tasks.get(&id).and_then(|t| match t {
        tapfinger::node::TaskState::Running { node, .. }
        | tapfinger::node::TaskState::Done { node, .. } => Some(*node),
        _ => None,
    });
    ran.filter(|n| Some(*n) != st.id)
}

/// The logs of `id` on box `node`, asked of it through the agent's loop.
async fn from_peer(
    s: &ApiState,
    node: tapfinger::NodeId,
    id: TaskId,
    from: (Option<u64>, Option<u64>),
) -> Result<crate::learn::TaskLogs, String> {
    let (tx, rx) = oneshot::channel();
    let ask = Command::PeerLogs {
        node,
        task: id,
        from,
        reply: tx,
    };
    s.commands
        .send(ask)
        .await
        .map_err(|_| "the agent is stopping".to_string())?;
    match tokio::time::timeout(PEER_LOGS_TIMEOUT, rx).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => Err("the agent is stopping".into()),
        Err(_) => Err(format!(
            "the box that ran it did not answer within {} s",
            PEER_LOGS_TIMEOUT.as_secs()
        )),
    }
}

async fn node(State(s): State<ApiState>) -> Response {
    let st = s.status.borrow().clone();
    axum::Json(NodeInfo {
        id: st.id.map(|i| i.0),
        name: st.name.clone(),
        capacity: st.capacity.as_ref().map(|c| c.0.clone()),
        used: st.used.as_ref().map(|u| u.0.clone()),
        peers: st.peers.len(),
        dropped_messages: st.dropped,
        forecast: st.forecast.clone(),
        security: Some((*s.security).clone()),
        labels: st
            .id
            .and_then(|me| st.labels.get(&me).cloned())
            .unwrap_or_default(),
        storage: st.storage.clone().map(|mut h| {
            h.free_bytes = crate::store::free_bytes(&h.data_dir);
            h
        }),
        policy: crate::online::policy_line(&st.deciding, st.policy.as_ref()),
        start_estimates: st.start_error.map(|e| StartEstimates::of(e, st.slot_ms)),
        addresses: st.listening.clone(),
    })
    .into_response()
}

async fn peers(State(s): State<ApiState>) -> Response {
    let st = s.status.borrow().clone();
    let peers = st
        .peer_table
        .iter()
        .map(|(id, name, cap, free)| PeerInfo {
            id: id.0,
            name: name.clone(),
            capacity: cap.0.clone(),
            free: free.0.clone(),
        })
        .collect();
    axum::Json(Peers { peers }).into_response()
}

async fn classes(State(s): State<ApiState>) -> Response {
    let st = s.status.borrow().clone();
    axum::Json(Classes {
        classes: st.estimates.clone(),
    })
    .into_response()
}

async fn policy(State(s): State<ApiState>) -> Response {
    let st = s.status.borrow().clone();
    match &st.policy {
        Some(p) => axum::Json(p).into_response(),
        // No coordinator configured: the start model, version 0.
        None => axum::Json(crate::online::PolicyStatus::default()).into_response(),
    }
}

/// `?since_s=N` of `GET /v1/workload`.
#[derive(serde::Deserialize)]
struct Since {
    /// Seconds back (default: 6 hours).
    #[serde(default = "six_hours")]
    since_s: u64,
}

fn six_hours() -> u64 {
    6 * 3600
}

/// The cluster's observed workload of the last `since_s` seconds ([`crate::workload`]).
async fn workload(
    State(s): State<ApiState>,
    axum::extract::Query(q): axum::extract::Query<Since>,
) -> Response {
    let slot_ms = s.status.borrow().slot_ms.max(1);
    let slots = q.since_s.saturating_mul(1000).div_ceil(slot_ms);
    let (tx, rx) = oneshot::channel();
    if s.commands.send(Command::Workload(slots, tx)).await.is_err() {
        return (StatusCode::SERVICE_UNAVAILABLE, "agent stopping").into_response();
    }
    match rx.await {
        Ok(w) => axum::Json(*w).into_response(),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "agent stopping").into_response(),
    }
}

async fn rollback(State(s): State<ApiState>) -> Response {
    let (tx, rx) = oneshot::channel();
    if s.commands.send(Command::Rollback(tx)).await.is_err() {
        return (StatusCode::SERVICE_UNAVAILABLE, "agent stopping").into_response();
    }
    match rx.await {
        Ok(Ok(v)) => axum::Json(PolicyVersion { version: v }).into_response(),
        Ok(Err(e)) => (StatusCode::CONFLICT, axum::Json(ErrorBody::new(e))).into_response(),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "agent stopping").into_response(),
    }
}

async fn metrics(State(s): State<ApiState>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        s.metrics.render(),
    )
        .into_response()
}
