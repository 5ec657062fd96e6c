//! The coordinator daemon: joins the agents' network, stores experience batches before it
//! acknowledges them, runs updates on a separate thread (so requests keep being answered), serves
//! the signed announcement and checkpoint, and a local HTTP API (`/v1/status`, `/metrics`).

use crate::config::CoordinatorConfig;
use crate::guard::Guard;
use crate::learner::{Batch, Learner};
use crate::learning::{Job, spawn_learner};
use libp2p::identity::Keypair;
use std::sync::{Arc, Mutex};
use tapfinger_net::identity::node_id;
use tapfinger_net::learn::{Request, Response, Spool};
use tapfinger_net::swarm::{NetConfig, NetEvent, Network};

pub use crate::state::{Learning, Shared};

/// A running coordinator.
pub struct Coordinator {
    /// Shared state (for the API and tests).
    pub shared: Arc<Mutex<Shared>>,
    /// Our peer id.
    pub peer_id: libp2p::PeerId,
    /// The serving loop's task; it ends only when something it needs has ended (why).
    task: tokio::task::JoinHandle<String>,
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

    /// Wait until the serving loop has stopped (the learner's thread, the guard's judge or the
    /// network ended); why. The binary exits non-zero then, so that its supervisor restarts
    /// it rather than leave it up with learning dead.
    pub async fn stopped(&mut self) -> String {
        match (&mut self.task).await {
            Ok(why) => why,
            Err(e) => format!("the serving loop ended: {e}"),
        }
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        self.task.abort();
    }
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
        learning: Learning {
            alive: true,
            ..Learning::default()
        },
        ..Shared::default()
    }));
    let inbox: Spool<Batch> = Spool::open(&cfg.data_dir.join("inbox"), cfg.inbox_max_batches)?;
    let peer_id = net.peer_id;
    let state = shared.clone();
    let task = tokio::spawn(async move {
        let why = run(
            cfg,
            learner,
            inbox,
            net,
            state.clone(),
            (guard, (bytes, json)),
        )
        .await;
        tracing::error!(reason = %why, "the coordinator stops serving");
        if let Ok(mut s) = state.lock() {
            s.learning.alive = false;
            s.learning.stopped = Some(why.clone());
        }
        why
    });
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
) -> String {
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
                let Some(j) = judged else { return "the guard's judge ended".into() };
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
                let Some(done) = done else { return "the learner's thread ended".into() };
                for n in done.used {
                    if let Err(e) = inbox.ack(n) {
                        tracing::warn!(error = %e, "cannot drop a used batch");
                    }
                }
                set_aside(&mut inbox, &done.set_aside, done.why, &shared);
                busy = false;
                if let Ok(mut s) = shared.lock() {
                    s.updating = false;
                }
            }
            ev = net.next_event() => match ev {
                None => return "the network ended".into(),
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
                Some(NetEvent::Message { from, envelope }) => {
                    // The gossip every agent hears, by its proven author: the guard checks the
                    // boxes' workloads against it.
                    guard.hear(node_id(&from), &envelope.body);
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
            let mut work: Vec<(u64, Batch)> = Vec::new();
            let mut unreadable = Vec::new();
            for n in inbox.waiting().unwrap_or_default() {
                match inbox.read(n) {
                    Ok(Some(b)) => work.push((n, b)),
                    Ok(None) => {}
                    Err(_) => unreadable.push(n),
                }
            }
            // A batch file that does not read would be skipped at every update, forever.
            set_aside(
                &mut inbox,
                &unreadable,
                Some("the batch file does not read".into()),
                &shared,
            );
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

/// Move the batches `ids` out of the inbox (into its `set-aside` folder, for a person to look
/// at), counted in the status and the metrics, with `why`.
fn set_aside(
    inbox: &mut Spool<Batch>,
    ids: &[u64],
    why: Option<String>,
    shared: &Arc<Mutex<Shared>>,
) {
    if ids.is_empty() {
        return;
    }
    for n in ids {
        match inbox.set_aside(*n) {
            Ok(to) => {
                tracing::warn!(batch = n, to = %to.display(), reason = ?why, "experience batch set aside")
            }
            Err(e) => tracing::warn!(batch = n, error = %e, "cannot set a batch aside"),
        }
    }
    if let Ok(mut s) = shared.lock() {
        s.learning.set_aside += ids.len() as u64;
        s.learning.last_set_aside = why;
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
