//! The coordinator daemon: joins the agents' network, stores experience batches before it
//! acknowledges them, runs updates on a separate thread (so requests keep being answered), serves
//! the signed announcement and checkpoint, and a local HTTP API (`/v1/status`, `/metrics`).

use crate::config::CoordinatorConfig;
use crate::guard::{Guard, GuardState};
use crate::learner::{Batch, Learner, State};
use libp2p::identity::Keypair;
use std::sync::{Arc, Mutex};
use tapfinger_net::identity::node_id;
use tapfinger_net::learn::{Announcement, Checkpoint, Request, Response, Spool};
use tapfinger_net::swarm::{NetConfig, NetEvent, Network};
use tokio::sync::mpsc;

/// What the loop and the API share.
#[derive(Debug, Default, Clone)]
pub struct Shared {
    /// Counters and last evaluation.
    pub state: State,
    /// The published version.
    pub published: Option<(Announcement, Checkpoint)>,
    /// The latest candidate, signed as a trial.
    pub trial: Option<(Announcement, Checkpoint)>,
    /// Batches waiting for an update.
    pub inbox_batches: u64,
    /// Batches dropped because the inbox was full.
    pub inbox_dropped: u64,
    /// Decisions received since the start of this process, per node.
    pub received_live: std::collections::BTreeMap<u32, u64>,
    /// An update is running.
    pub updating: bool,
    /// Connections and requests refused from peers off the allowlist, by what they tried
    /// (`connect`, `experience`, ...).
    pub refused: std::collections::BTreeMap<String, u64>,
    /// The guard's state (the choice in force, counters, the last judgement).
    pub guard: GuardState,
    /// The share of one core the guard used since this process started.
    pub guard_busy_share: f64,
}

/// A running coordinator.
pub struct Coordinator {
    /// Shared state (for the API and tests).
    pub shared: Arc<Mutex<Shared>>,
    /// Our peer id.
    pub peer_id: libp2p::PeerId,
    /// The serving loop's task.
    task: tokio::task::JoinHandle<()>,
}

impl Coordinator {
    /// Stop abruptly (as a crash would).
    pub fn kill(&self) {
        self.task.abort();
    }

    /// A snapshot of the shared state.
    pub fn snapshot(&self) -> Shared {
        self.shared.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the learner's thread is given.
enum Job {
    /// An update from the agents' batches (numbered in the inbox), gated on the twin of the
    /// workload the guard judged last, where there is one.
    Update(Vec<(u64, Batch)>, Option<Box<tapfinger::twin::Workload>>),
    /// A fine-tune on the twin of a judged workload.
    Tune(Box<tapfinger::twin::Workload>),
}

/// Start the coordinator on an already started network.
pub fn spawn(cfg: CoordinatorConfig, key: Keypair, net: Network) -> anyhow::Result<Coordinator> {
    let guard = Guard::open(cfg.clone(), key.clone())?;
    // The learned policy agents run before the first publication: the start model.
    let (bytes, json, _) = crate::learner::start_checkpoint(&cfg.start)?;
    let learner = Learner::open(cfg.clone(), key)?;
    let shared = Arc::new(Mutex::new(Shared {
        guard: guard.state.clone(),
        state: learner.state.clone(),
        published: learner
            .announcement()
            .and_then(|a| learner.checkpoint_of(a.version).map(|c| (a, c))),
        trial: learner.trial(),
        ..Shared::default()
    }));
    let inbox: Spool<Batch> = Spool::open(&cfg.data_dir.join("inbox"), cfg.inbox_max_batches)?;
    let peer_id = net.peer_id;
    let task = tokio::spawn(run(
        cfg,
        learner,
        inbox,
        net,
        shared.clone(),
        (guard, (bytes, json)),
    ));
    Ok(Coordinator {
        shared,
        peer_id,
        task,
    })
}

async fn run(
    cfg: CoordinatorConfig,
    learner: Learner,
    mut inbox: Spool<Batch>,
    mut net: Network,
    shared: Arc<Mutex<Shared>>,
    (mut guard, start_model): (Guard, (Vec<u8>, String)),
) {
    let (judge_tx, mut judged_rx) = crate::guard::spawn_judge();
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    // Updates and fine-tunes run on a blocking thread; it owns the learner and reports back the
    // batches used.
    let (work_tx, mut done_rx) = spawn_learner(learner, shared.clone());
    let mut busy = false;
    let mut waiting_decisions: usize = inbox
        .waiting()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|n| inbox.read(n).ok().flatten())
        .map(|b| b.exp.records.len())
        .sum();
    loop {
        tokio::select! {
            _ = tick.tick() => {
                // The learned policy judged is the one agents run: the published version.
                let model = shared
                    .lock()
                    .ok()
                    .and_then(|s| s.published.as_ref().map(|(_, c)| (c.model.clone(), c.train_json.clone())))
                    .unwrap_or_else(|| start_model.clone());
                if let Some(work) = guard.due(model)
                    && judge_tx.try_send(work).is_err()
                {
                    guard.judging = false;
                }
            }
            judged = judged_rx.recv() => {
                let Some(j) = judged else { return };
                if let Err(e) = guard.apply(j) {
                    tracing::warn!(error = %e, "guard: cannot record the judgement");
                }
                if let Ok(mut s) = shared.lock() {
                    s.guard = guard.state.clone();
                    s.guard_busy_share = guard.busy_share();
                }
                // Fine-tuning on the twin of what was just judged, when due and the learner is free.
                if !busy
                    && let Some(w) = guard.tune_due()
                    && work_tx.try_send(Job::Tune(Box::new(w))).is_ok()
                {
                    busy = true;
                    if let Ok(mut s) = shared.lock() {
                        s.updating = true;
                    }
                }
            }
            done = done_rx.recv() => {
                let Some(ids) = done else { return };
                for n in ids {
                    if let Err(e) = inbox.ack(n) {
                        tracing::warn!(error = %e, "cannot drop a used batch");
                    }
                }
                busy = false;
                if let Ok(mut s) = shared.lock() {
                    s.updating = false;
                }
            }
            ev = net.next_event() => match ev {
                None => return,
                Some(NetEvent::Request { from, request, channel }) => {
                    let answer = answer(*request, &from, &mut inbox, &mut waiting_decisions, &mut guard, &shared);
                    if let Err(e) = net.respond(channel, answer).await {
                        tracing::warn!(error = %e, "cannot answer");
                    }
                }
                Some(NetEvent::Refused { from, what }) => {
                    tracing::warn!(peer = %from, what, "refused a peer off the allowlist");
                    if let Ok(mut s) = shared.lock() {
                        *s.refused.entry(what).or_default() += 1;
                    }
                }
                Some(NetEvent::Listening(addr)) => {
                    tracing::info!(address = %format!("{addr}/p2p/{}", net.peer_id), "listening");
                }
                Some(_) => {}
            },
        }
        if let Ok(mut s) = shared.lock() {
            s.inbox_batches = inbox.waiting().map_or(0, |w| w.len() as u64);
        }
        if !busy && waiting_decisions >= cfg.update_decisions {
            let work: Vec<(u64, Batch)> = inbox
                .waiting()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|n| inbox.read(n).ok().flatten().map(|b| (n, b)))
                .collect();
            if work_tx
                .try_send(Job::Update(work, guard.judged().cloned().map(Box::new)))
                .is_ok()
            {
                busy = true;
                waiting_decisions = 0;
                if let Ok(mut s) = shared.lock() {
                    s.updating = true;
                }
            }
        }
    }
}

/// The answer to an agent's request: batches stored before they are acknowledged (and counted
/// towards the next update in `waiting`), workloads offered to the guard, announcements, trials,
/// checkpoints and the guard's choice from the shared state.
fn answer(
    request: Request,
    from: &libp2p::PeerId,
    inbox: &mut Spool<Batch>,
    waiting: &mut usize,
    guard: &mut Guard,
    shared: &Arc<Mutex<Shared>>,
) -> Response {
    match request {
        Request::Experience { node, batch, exp } => {
            if node != node_id(from) {
                Response::Error("the batch's node is not the sender".into())
            } else {
                let n = exp.records.len();
                match inbox.push(&Batch { node, exp: *exp }) {
                    Ok(_) => {
                        *waiting += n;
                        if let Ok(mut s) = shared.lock() {
                            *s.received_live.entry(node.0).or_default() += n as u64;
                            s.inbox_dropped = inbox.dropped;
                        }
                        Response::Ack { batch }
                    }
                    Err(e) => Response::Error(format!("cannot store the batch: {e}")),
                }
            }
        }
        Request::Trial { after } => Response::Trial(
            shared
                .lock()
                .ok()
                .and_then(|s| s.trial.clone())
                .filter(|(a, _)| a.version > after)
                .map(Box::new),
        ),
        Request::Announcement => Response::Announcement(
            shared
                .lock()
                .ok()
                .and_then(|s| s.published.as_ref().map(|(a, _)| a.clone())),
        ),
        Request::Guard => Response::Guard(guard.state.choice.clone().map(Box::new)),
        Request::Logs { .. } => Response::Error("a coordinator runs no tasks".into()),
        Request::Workload {
            node,
            seq,
            workload,
        } => {
            if node != node_id(from) {
                Response::Error("the workload's node is not the sender".into())
            } else {
                match guard.offer(node.0, seq, *workload) {
                    Ok(()) => Response::Received,
                    Err(e) => Response::Error(format!("workload not taken: {e}")),
                }
            }
        }
        Request::Checkpoint { version } => {
            let c = shared.lock().ok().and_then(|s| {
                s.published
                    .as_ref()
                    .filter(|(a, _)| a.version == version)
                    .map(|(_, c)| c.clone())
            });
            match c {
                Some(c) => Response::Checkpoint(Box::new(c)),
                None => Response::Error(format!("version {version} is not the published one")),
            }
        }
    }
}

/// The learner's thread: it runs each job (an update from batches, a fine-tune on the twin),
/// updates the shared state, and answers with the inbox numbers of the batches it used.
fn spawn_learner(
    learner: Learner,
    shared: Arc<Mutex<Shared>>,
) -> (mpsc::Sender<Job>, mpsc::Receiver<Vec<u64>>) {
    let (work_tx, mut work_rx) = mpsc::channel::<Job>(1);
    let (done_tx, done_rx) = mpsc::channel::<Vec<u64>>(1);
    std::thread::spawn(move || {
        let mut l = learner;
        while let Some(job) = work_rx.blocking_recv() {
            let ids = match job {
                Job::Update(work, judged) => {
                    let ids: Vec<u64> = work.iter().map(|(n, _)| *n).collect();
                    let batches = work.into_iter().map(|(_, b)| b).collect();
                    match l.update(batches, judged.as_deref()) {
                        Ok(eval) => tracing::info!(?eval, "update done"),
                        Err(e) => tracing::warn!(error = %e, "update failed"),
                    }
                    ids
                }
                Job::Tune(w) => {
                    if let Err(e) = l.tune_on(&w) {
                        tracing::warn!(error = %e, "fine-tune on the twin failed");
                    }
                    Vec::new()
                }
            };
            if let Ok(mut s) = shared.lock() {
                s.state = l.state.clone();
                s.published = l
                    .announcement()
                    .and_then(|a| l.checkpoint_of(a.version).map(|c| (a, c)));
                s.trial = l.trial();
            }
            if done_tx.blocking_send(ids).is_err() {
                return;
            }
        }
    });
    (work_tx, done_rx)
}

/// Start the network from the configuration (identity in `data_dir`).
pub async fn start_network(cfg: &CoordinatorConfig) -> anyhow::Result<(Keypair, Network)> {
    std::fs::create_dir_all(&cfg.data_dir)?;
    let key = tapfinger_net::identity::identity(&cfg.data_dir)?;
    let psk = match &cfg.cluster_key_file {
        Some(p) => Some(
            tapfinger_net::secret::read_swarm_key(p)
                .map_err(|e| anyhow::anyhow!("cluster_key_file: {e}"))?,
        ),
        None => None,
    };
    let allow = (!cfg.allow_peers.is_empty()).then(|| cfg.allow_peers.iter().copied().collect());
    let net = Network::start(NetConfig {
        keypair: key.clone(),
        cluster: cfg.cluster.clone(),
        listen: cfg.listen.clone(),
        bootstrap: cfg.bootstrap.clone(),
        psk,
        allow,
        mdns: false,
        peer_exchange: true,
        channel: 256,
    })
    .await?;
    Ok((key, net))
}

/// The status as JSON (the API's `/v1/status`).
pub fn status_json(s: &Shared) -> serde_json::Value {
    serde_json::json!({
        "policy_version": s.state.version,
        "hash": s.state.hash,
        "published_jct": s.state.published_jct,
        "updates": s.state.updates,
        "decisions_received": s.state.received,
        "decisions_received_since_start": s.received_live,
        "critic_loss": s.state.critic_loss,
        "critic_rounds_assembled": s.state.rounds_assembled,
        "critic_rounds_merged": s.state.rounds_merged,
        "critic_reports_per_round": s.state.reports_per_round,
        "policy_loss": s.state.policy_loss,
        "candidates_refused": s.state.refused,
        "last_evaluation": s.state.last_evaluation,
        "inbox_batches": s.inbox_batches,
        "inbox_dropped": s.inbox_dropped,
        "refused": s.refused,
        "tunes": s.state.tunes,
        "last_tune": s.state.last_tune,
        "guard": {
            "policy": s.guard.choice.as_ref().map_or(tapfinger_net::guard::LEARNED, |c| c.policy.as_str()),
            "seq": s.guard.choice.as_ref().map_or(0, |c| c.seq),
            "reason": s.guard.choice.as_ref().map(|c| c.reason.clone()),
            "judged": s.guard.judged,
            "switches": s.guard.switches,
            "busy_share": s.guard_busy_share,
            "last": s.guard.last,
        },
    })
}

/// The coordinator's metrics (`/metrics`), in a registry of its own.
pub struct Metrics(tapfinger_net::metrics::Registry);

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every metric described.
    pub fn new() -> Self {
        use metrics::{describe_counter, describe_gauge};
        let r = tapfinger_net::metrics::Registry::new(&[]);
        r.with(|| {
            describe_gauge!(
                "tapfinger_coordinator_policy_version",
                "Published policy version."
            );
            describe_gauge!("tapfinger_coordinator_updates", "Training updates run.");
            describe_gauge!(
                "tapfinger_coordinator_critic_loss",
                "Value loss of the last update."
            );
            describe_gauge!(
                "tapfinger_coordinator_critic_rounds_assembled",
                "Rounds whose global state (all agents' reports merged) the critic trained on."
            );
            describe_gauge!(
                "tapfinger_coordinator_critic_reports_per_round",
                "Mean agents' reports per round in the last update."
            );
            describe_gauge!(
                "tapfinger_coordinator_published_jct",
                "Validation average JCT of the published policy (slots)."
            );
            describe_gauge!(
                "tapfinger_coordinator_candidates_refused",
                "Candidates the evaluation gate refused."
            );
            describe_gauge!(
                "tapfinger_coordinator_inbox_batches",
                "Experience batches waiting for an update."
            );
            describe_counter!(
                "tapfinger_coordinator_decisions_received",
                "Decisions received per agent."
            );
            describe_gauge!(
                "tapfinger_coordinator_guard_choice",
                "1 for the policy the guard has the cluster run (label policy), 0 for the others."
            );
            describe_gauge!(
                "tapfinger_coordinator_guard_seq",
                "Number of the guard's choice in force (grows by one per switch)."
            );
            describe_counter!(
                "tapfinger_coordinator_guard_switches_total",
                "Times the guard switched the cluster's policy."
            );
            describe_counter!(
                "tapfinger_coordinator_guard_judgements_total",
                "Workloads the guard judged."
            );
            describe_gauge!(
                "tapfinger_coordinator_guard_busy_share",
                "Share of one core the guard's judgements used since the coordinator started."
            );
            describe_counter!(
                "tapfinger_coordinator_refused_total",
                "Connections and requests refused from peers off the allowlist, by what they tried."
            );
        });
        Self(r)
    }

    /// The Prometheus text for the state `s`.
    pub fn render(&self, s: &Shared) -> String {
        use metrics::{counter, gauge};
        self.0.with(|| {
            gauge!("tapfinger_coordinator_policy_version").set(s.state.version as f64);
            gauge!("tapfinger_coordinator_updates").set(s.state.updates as f64);
            gauge!("tapfinger_coordinator_critic_loss").set(s.state.critic_loss);
            gauge!("tapfinger_coordinator_critic_rounds_assembled")
                .set(s.state.rounds_assembled as f64);
            gauge!("tapfinger_coordinator_critic_reports_per_round").set(s.state.reports_per_round);
            gauge!("tapfinger_coordinator_published_jct").set(s.state.published_jct);
            gauge!("tapfinger_coordinator_candidates_refused").set(s.state.refused as f64);
            gauge!("tapfinger_coordinator_inbox_batches").set(s.inbox_batches as f64);
            let (seq, policy) = s
                .guard
                .choice
                .as_ref()
                .map_or((0, tapfinger_net::guard::LEARNED), |c| {
                    (c.seq, c.policy.as_str())
                });
            // Every candidate has a series, so the one that was in force reads 0 after a switch.
            for name in tapfinger_sim::guard::candidates() {
                gauge!("tapfinger_coordinator_guard_choice", "policy" => name)
                    .set(if name == policy { 1.0 } else { 0.0 });
            }
            gauge!("tapfinger_coordinator_guard_seq").set(seq as f64);
            counter!("tapfinger_coordinator_guard_switches_total").absolute(s.guard.switches);
            counter!("tapfinger_coordinator_guard_judgements_total").absolute(s.guard.judged);
            gauge!("tapfinger_coordinator_guard_busy_share").set(s.guard_busy_share);
            for (what, n) in &s.refused {
                counter!("tapfinger_coordinator_refused_total", "what" => what.clone())
                    .absolute(*n);
            }
            for (node, n) in &s.state.received {
                counter!("tapfinger_coordinator_decisions_received", "node" => node.to_string())
                    .absolute(*n);
            }
        });
        self.0.render()
    }
}

/// Serve the HTTP API on `addr` until the process ends; with `token`, every request must carry
/// `Authorization: Bearer <token>` (compared in constant time).
pub async fn api(
    addr: &str,
    shared: Arc<Mutex<Shared>>,
    token: Option<String>,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("api: cannot bind {addr}: {e}"))?;
    axum::serve(listener, router(shared, token)).await?;
    Ok(())
}

/// The HTTP API's routes (`/v1/status`, `/metrics`) behind the token check.
pub fn router(shared: Arc<Mutex<Shared>>, token: Option<String>) -> axum::Router {
    use axum::routing::get;
    let s1 = shared.clone();
    let registry = Arc::new(Metrics::new());
    let app = axum::Router::new()
        .route(
            "/v1/status",
            get(move || {
                let s = s1.lock().map(|s| s.clone()).unwrap_or_default();
                async move { axum::Json(status_json(&s)) }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let s = shared.lock().map(|s| s.clone()).unwrap_or_default();
                let text = registry.render(&s);
                async move { text }
            }),
        );
    let token = Arc::new(token);
    app.layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            let token = token.clone();
            async move {
                use axum::response::IntoResponse;
                if let Some(t) = token.as_ref() {
                    let given = req
                        .headers()
                        .get(axum::http::header::AUTHORIZATION)
                        .and_then(|v| v.to_str().ok());
                    if !tapfinger_net::secret::bearer_matches(t, given) {
                        return (
                            axum::http::StatusCode::UNAUTHORIZED,
                            "missing or wrong bearer token",
                        )
                            .into_response();
                    }
                }
                next.run(req).await
            }
        },
    ))
}

#[cfg(test)]
mod metrics_tests {
    use super::*;

    #[test]
    fn the_state_renders_as_prometheus_metrics() {
        let mut s = Shared::default();
        s.state.version = 3;
        s.state.received.insert(7, 120);
        s.refused.insert("experience".into(), 2);
        let text = Metrics::new().render(&s);
        for line in [
            "# TYPE tapfinger_coordinator_policy_version gauge",
            "tapfinger_coordinator_policy_version 3",
            "tapfinger_coordinator_decisions_received{node=\"7\"} 120",
            "tapfinger_coordinator_refused_total{what=\"experience\"} 2",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
    }
}
