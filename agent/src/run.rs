//! `tapfinger-agent run`: assemble the daemon from its configuration — discovery and offer, the
//! persistent identity, the network, the node core with its policy, the process executor, the
//! HTTP API — and run it until SIGINT or SIGTERM, when running tasks are handed back to the
//! cluster before exiting.
//!
//! Resource kinds of a real node: `cpu` (cores), `gpu` (devices), `mem` (GiB), in that order.

use crate::api::{ApiState, router};
use crate::config::AgentConfig;
use crate::daemon::{self, Parts, node_id};
use crate::exec::{Allocation, Cgroups, ProcessExecutor};
use crate::net::{NetConfig, Network};
use anyhow::Context;
use libp2p::identity::Keypair;
use std::collections::BTreeSet;
use tapfinger::node::{NodeConfig, NodeCore};
use tapfinger::{Resources, TaskId};

pub use crate::config::space;

/// Grid units of the agent's space (cores, GPUs, GiB) → what the executor enforces. GPUs are a
/// count here; the daemon picks the devices.
pub fn to_allocation(r: &Resources) -> Allocation {
    Allocation {
        cpus: f64::from(r.get(0)),
        memory_bytes: (r.get(2) > 0).then(|| u64::from(r.get(2)) << 30),
        gpus: (0..r.get(1)).collect(),
    }
}

pub use tapfinger_net::log::init_logging;

/// The persistent identity key in `dir` (`identity.key`), created on first use.
pub fn identity(dir: &std::path::Path) -> anyhow::Result<Keypair> {
    Ok(tapfinger_net::identity::identity(dir)?)
}

/// Run the daemon until a signal.
pub async fn run(mut cfg: AgentConfig) -> anyhow::Result<()> {
    cfg.validate()?;
    // Before anything is opened or bound: an open cluster nobody asked for never starts.
    let open_cluster = cfg.open_cluster()?;
    if let Some(warning) = &open_cluster {
        tracing::warn!("{warning}");
    }
    let discovered = crate::discovery::discover()?;
    if let Some(note) = &discovered.gpu_note {
        tracing::info!("{note}");
    }
    let offer = cfg.offer(&discovered)?;
    // The box's GPU model, as NVML names it unless configured: peers learn speeds per model.
    cfg.labels = discovered.labels_with_gpu_model(&cfg.labels, offer.gpus);
    // The offered GPUs are the first `offer.gpus` devices NVML lists.
    let gpu_devices: Vec<u32> = discovered
        .gpus
        .iter()
        .map(|g| g.index)
        .take(offer.gpus as usize)
        .collect();
    let capacity = Resources(vec![
        offer.cpus.floor() as u32,
        offer.gpus,
        (offer.memory_bytes >> 30) as u32,
    ]);
    std::fs::create_dir_all(&cfg.data_dir)
        .with_context(|| format!("cannot create data_dir {}", cfg.data_dir.display()))?;
    let journal = cfg.data_dir.join("tasks.jsonl");
    let opts = crate::store::StoreOptions {
        keep_finished: cfg.journal_keep_finished,
        ..Default::default()
    };
    // A damaged journal stops the agent before it joins the cluster, with the line and the
    // repair command.
    let (store, recovered) = crate::store::Store::open_with(&journal, opts)?;
    let (net, token) = start_network(&cfg).await?;
    let me = node_id(&net.peer_id);
    tracing::info!(peer_id = %net.peer_id, node = me.0, %capacity, "agent starting");
    let window = 10;
    let policy = crate::policy::build(&cfg.policy, cfg.model.as_deref(), window)?;
    // A model that reads the arrival forecast (RLPTO's) runs with the interval it was trained
    // with: its features mean arrivals per interval of that many slots.
    let forecast_interval_slots = match policy.forecast_interval() {
        Some(slots) => {
            if slots != cfg.forecast_interval_slots() {
                tracing::info!(
                    slots,
                    configured = cfg.forecast_interval_slots(),
                    "the model reads a forecast per interval of its own training: forecasting per {slots} slot(s)"
                );
            }
            slots
        }
        None => cfg.forecast_interval_slots(),
    };
    let lease_file = cfg.data_dir.join("lease");
    let members_file = cfg.data_dir.join("members.json");
    let mut core = node_core(
        &cfg,
        me,
        capacity,
        policy,
        window,
        &lease_file,
        &members_file,
    );
    if cfg.reserve_for_urgent {
        core.set_reservation(Some(forecast_interval_slots));
    }
    let online = online_link(&cfg, window, &mut core)?;
    let (tx, rx) = tokio::sync::mpsc::channel(1024);
    let run_dir = cfg.data_dir.join("runs");
    let (executor, gpu_isolation) = executor(
        &cfg,
        &discovered,
        !gpu_devices.is_empty(),
        tx,
        crate::exec::Supervision {
            program: std::env::current_exe().context("cannot find the agent's own binary")?,
            lease: lease_file.clone(),
            autonomy_ms: cfg.autonomy_ms,
            owner: me.0.to_string(),
            run_dir: run_dir.clone(),
        },
    );
    let security = crate::api::SecurityInfo {
        open_cluster: open_cluster.is_some(),
        cluster_key: cfg.cluster_key_file.is_some(),
        allowlist: cfg.allow_peers.len(),
        api_token: cfg.api_token_file.is_some(),
        gpu_isolation,
    };
    let agent = daemon::spawn(Parts {
        core,
        net,
        executor: Box::new(executor),
        exec_events: rx,
        to_allocation: Box::new(to_allocation),
        space: space(),
        types: vec!["default".into()],
        store: Some(store),
        recovered,
        files: Some(crate::daemon::Files {
            lease: lease_file,
            members: members_file,
            sweep: vec![cfg.data_dir.join("logs"), run_dir],
            retention: (cfg.log_retention_hours > 0)
                .then(|| std::time::Duration::from_secs(3600 * cfg.log_retention_hours)),
        }),
        gpu_devices,
        online,
        forecast_interval_slots,
        plateau: cfg.plateau(),
    });
    let listener = tokio::net::TcpListener::bind(&cfg.api)
        .await
        .with_context(|| format!("api: cannot bind {}", cfg.api))?;
    tracing::info!(api = %cfg.api, "HTTP API listening");
    let app = router(ApiState {
        commands: agent.commands.clone(),
        status: agent.status.clone(),
        metrics: agent.metrics.clone(),
        token,
        log_dir: Some(cfg.data_dir.join("logs")),
        security: std::sync::Arc::new(security),
    });
    let server = tokio::spawn(crate::api::serve(listener, app));
    wait_for_signal().await;
    tracing::info!("shutting down: handing running tasks back");
    agent.shutdown().await;
    server.abort();
    Ok(())
}

/// The persistent identity, the cluster key and the allowlist, on the network; and the API's
/// token, read before the network starts so that a bad token file stops the agent before it
/// joins.
async fn start_network(cfg: &AgentConfig) -> anyhow::Result<(Network, Option<String>)> {
    let keypair = identity(&cfg.data_dir)?;
    let psk = match &cfg.cluster_key_file {
        Some(p) => Some(tapfinger_net::secret::read_swarm_key(p).context("cluster_key_file")?),
        None => None,
    };
    // Read before the network starts, so that a bad token file stops the agent before it joins.
    let token = match &cfg.api_token_file {
        Some(p) => Some(tapfinger_net::secret::read_token(p).context("api_token_file")?),
        None => None,
    };
    let allow = (!cfg.allow_peers.is_empty())
        .then(|| cfg.allow_peers.iter().copied().collect::<BTreeSet<_>>());
    let net = Network::start(NetConfig {
        keypair,
        cluster: cfg.cluster.clone(),
        listen: cfg.listen.clone(),
        bootstrap: cfg.bootstrap.clone(),
        psk,
        allow,
        mdns: cfg.mdns,
        peer_exchange: cfg.peer_exchange,
        channel: 1024,
    })
    .await?;
    Ok((net, token))
}

/// This box's node state machine with its policy: who it is, what it offers, its timing, the
/// members and lease its data directory remembers.
fn node_core(
    cfg: &AgentConfig,
    me: tapfinger::NodeId,
    capacity: Resources,
    policy: Box<dyn tapfinger::Policy>,
    window: usize,
    lease_file: &std::path::Path,
    members_file: &std::path::Path,
) -> NodeCore {
    let lease_age_ms = crate::supervise::lease_age(lease_file).map(|d| d.as_millis() as u64);
    NodeCore::new(
        NodeConfig {
            me,
            name: cfg.name.clone(),
            capacity,
            kind_names: space().kind_names(),
            labels: cfg.labels.clone(),
            incarnation: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_secs()),
            num_types: 1,
            window,
            service_kind: crate::policy::SERVICE_KIND,
            slot_ms: cfg.slot_ms,
            round_ms: cfg.round_ms,
            heartbeat_ms: cfg.heartbeat_ms,
            peer_timeout_ms: cfg.peer_timeout(),
            autonomy_ms: cfg.autonomy_ms,
            forget_ms: cfg.forget_ms,
            known: crate::store::load_members(members_file),
            lease_age_ms,
            addr: cfg.gang_address(),
            priorities: cfg.priorities(),
            shrink_kind: cfg
                .shrink_converging
                .then(|| space().index_of("cpu"))
                .flatten(),
            preempt: cfg.preempt,
        },
        policy,
        u64::from(me.0),
    )
}

/// The link to the coordinator, if one is configured (checked against the policy and the
/// learning settings).
fn online_link(
    cfg: &AgentConfig,
    window: usize,
    core: &mut NodeCore,
) -> anyhow::Result<Option<crate::online::Online>> {
    anyhow::ensure!(
        !cfg.coordinator.explore_candidates || cfg.coordinator.learning,
        "coordinator.explore_candidates: only in learning mode (coordinator.learning = true)"
    );
    Ok(match &cfg.coordinator.peer {
        None => {
            anyhow::ensure!(
                !cfg.coordinator.learning,
                "coordinator.learning: needs coordinator.peer (where experience goes)"
            );
            None
        }
        Some(peer) => {
            anyhow::ensure!(
                cfg.policy == "tapfinger",
                "coordinator.peer: only the learned policy (`tapfinger`) takes weights from a coordinator (policy is `{}`)",
                cfg.policy
            );
            Some(crate::online::Online::open(
                crate::online::OnlineConfig {
                    coordinator: *peer,
                    learning: cfg.coordinator.learning,
                    dir: cfg.data_dir.join("online"),
                    spool_max: cfg.coordinator.spool_max_batches,
                    batch_decisions: cfg.coordinator.batch_decisions,
                    poll_ms: cfg.coordinator.poll_ms,
                    explore_candidates: cfg.coordinator.explore_candidates,
                    window,
                    start: crate::policy::initial_checkpoint(cfg.model.as_deref())?,
                },
                core,
            )?)
        }
    })
}

/// The process executor with what this box can enforce: CPU and memory in cgroups, each task
/// kept to its GPUs' device nodes ([`crate::devices`]), every task under a supervisor; and how
/// GPUs are isolated, for the node's status.
fn executor(
    cfg: &AgentConfig,
    discovered: &crate::discovery::Discovered,
    has_gpus: bool,
    tx: tokio::sync::mpsc::Sender<crate::exec::ExecEvent>,
    supervision: crate::exec::Supervision,
) -> (ProcessExecutor, String) {
    let cgroups = Cgroups::detect_for_agent(
        std::path::Path::new("/sys/fs/cgroup"),
        &std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default(),
        "tapfinger",
    );
    if let Cgroups::Unavailable(why) = &cgroups {
        tracing::warn!(
            "cgroups unavailable ({why}): CPU shares fall back to affinity, memory is not limited"
        );
    }
    let devices = match &cgroups {
        Cgroups::V1 { .. } => {
            crate::exec::Devices::detect(std::path::Path::new("/sys/fs/cgroup"), "tapfinger", false)
        }
        Cgroups::V2(_) => {
            crate::exec::Devices::detect(std::path::Path::new("/sys/fs/cgroup"), "tapfinger", true)
        }
        Cgroups::Unavailable(why) => {
            crate::exec::Devices::Unavailable(format!("no writable cgroup ({why})"))
        }
    };
    match &devices {
        crate::exec::Devices::Unavailable(_) if has_gpus => {
            tracing::warn!(
                "{}: a task can open every GPU of this box",
                devices.describe()
            );
        }
        d => tracing::info!("{}", d.describe()),
    }
    // Each offered GPU's device node: NVIDIA's major, NVML's minor number (else its index).
    let gpu_nodes = discovered
        .gpus
        .iter()
        .map(|g| {
            (
                g.index,
                (crate::devices::NVIDIA_MAJOR, g.minor.unwrap_or(g.index)),
            )
        })
        .collect();
    let control = crate::devices::nvidia_control(
        &std::fs::read_to_string("/proc/devices").unwrap_or_default(),
    );
    let gpu_isolation = devices.describe();
    let executor = ProcessExecutor::new(cgroups, cfg.data_dir.join("logs"), tx)
        .with_devices(devices, gpu_nodes, control)
        .supervised(supervision);
    (executor, gpu_isolation)
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// One request to the agent's API for the CLI subcommands (HTTP/1.1 over TCP, no TLS: the API
/// listens on loopback or behind a token), with hyper's client: any framing the server chooses
/// (length or chunked) is read. Returns the status code and the body.
pub async fn http(
    api: &str,
    method: &str,
    path: &str,
    body: Option<String>,
    token: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    use http_body_util::{BodyExt, Full};
    let stream = tokio::net::TcpStream::connect(api).await.with_context(|| {
        format!("cannot reach the agent's API at {api} (is `tapfinger-agent run` running?)")
    })?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .context("HTTP handshake with the agent's API")?;
    let conn = tokio::spawn(conn);
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, api)
        .header(hyper::header::CONTENT_TYPE, "application/json");
    if let Some(t) = token {
        req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req
        .body(Full::new(hyper::body::Bytes::from(
            body.unwrap_or_default(),
        )))
        .context("building the request")?;
    let resp = sender
        .send_request(req)
        .await
        .context("the agent's API did not answer")?;
    let status = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .context("reading the agent's answer")?
        .to_bytes();
    conn.abort();
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}

/// Parse a task id as printed by `submit`.
pub fn task_id(s: &str) -> anyhow::Result<TaskId> {
    Ok(TaskId(
        s.parse()
            .with_context(|| format!("{s:?} is not a task id"))?,
    ))
}

/// `GET /v1/tasks` as a table for people (`tapfinger-agent tasks`); None if the body is not a
/// [`crate::api::TaskPage`], in which case the CLI prints the JSON as is.
pub fn tasks_table(body: &serde_json::Value) -> Option<String> {
    use crate::api::{TaskPage, TaskStatus};
    let page: TaskPage = serde_json::from_value(body.clone()).ok()?;
    let mut out = format!(
        "{:<22} {:<10} {:<11} {:<14} {:>8}\n",
        "ID", "STATE", "NODE", "ALLOC c,g,m", "PROGRESS"
    );
    for t in &page.tasks {
        let (state, node, alloc, progress) = match &t.status {
            TaskStatus::Pending => ("pending", None, String::new(), String::new()),
            TaskStatus::Running {
                node,
                alloc,
                progress,
            } => (
                "running",
                Some(*node),
                alloc
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                format!("{:.0}%", progress * 100.0),
            ),
            TaskStatus::Gang { members, progress } => (
                "gang",
                members.first().map(|(n, _)| *n),
                format!("{} members", members.len()),
                format!("{:.0}%", progress * 100.0),
            ),
            TaskStatus::Succeeded(e) => ("succeeded", Some(e.node), String::new(), String::new()),
            TaskStatus::Failed(e) => ("failed", Some(e.node), String::new(), String::new()),
            TaskStatus::Cancelled(e) => ("cancelled", Some(e.node), String::new(), String::new()),
        };
        out.push_str(&format!(
            "{:<22} {:<10} {:<11} {:<14} {:>8}\n",
            t.id,
            state,
            node.map_or(String::new(), |n| n.to_string()),
            alloc,
            progress
        ));
    }
    out.push_str(&format!("{} task(s)", page.tasks.len()));
    if let Some(next) = page.next_offset {
        out.push_str(&format!(" of {}; more with --offset {next}", page.total));
    }
    Some(out)
}

/// `GET /v1/peers` as a table for people (`tapfinger-agent peers`); None if the body is not a
/// [`crate::api::Peers`].
pub fn peers_table(body: &serde_json::Value) -> Option<String> {
    let page: crate::api::Peers = serde_json::from_value(body.clone()).ok()?;
    let units = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let mut out = format!(
        "{:<11} {:<20} {:<14} {:<14}\n",
        "NODE", "NAME", "CAPACITY c,g,m", "FREE c,g,m"
    );
    for p in &page.peers {
        out.push_str(&format!(
            "{:<11} {:<20} {:<14} {:<14}\n",
            p.id,
            p.name,
            units(&p.capacity),
            units(&p.free)
        ));
    }
    out.push_str(&format!("{} peer(s)", page.peers.len()));
    Some(out)
}

/// `GET /v1/classes` as an aligned table (`tapfinger-agent classes`); None if the body is not
/// a [`crate::api::Classes`]. A class the estimator has no sample of shows the prior's figures,
/// marked `prior`.
pub fn classes_table(body: &serde_json::Value) -> Option<String> {
    let page: crate::api::Classes = serde_json::from_value(body.clone()).ok()?;
    let mut out = format!(
        "{:<20} {:<14} {:>7} {:<12} {:>9} {:>9} {:>7} {:>7}\n",
        "CLASS", "GPU MODEL", "SAMPLES", "MIN c,g,m", "T@MIN", "T@2xMIN", "SWITCH", "START"
    );
    for c in &page.classes {
        let name = if c.name.is_empty() {
            "(unnamed)"
        } else {
            &c.name
        };
        let e = &c.estimate;
        let min = e.min.map(|m| format!("{m}")).join(",");
        let prior = if e.fitted { "" } else { " prior" };
        // A class is learned per GPU model its tasks ran on: a row per model.
        let model = if c.gpu_model.is_empty() {
            "-"
        } else {
            &c.gpu_model
        };
        out.push_str(&format!(
            "{:<20} {:<14} {:>7} {:<12} {:>9.2} {:>9.2} {:>7.2} {:>7.2}{prior}\n",
            name,
            model,
            e.samples,
            min,
            e.slots_at_min,
            e.slots_at_double,
            e.switch_cost,
            e.start_cost
        ));
    }
    out.push_str(&format!(
        "{} row(s); T: estimated slots alone; SWITCH, START: fraction of a slot lost",
        page.classes.len()
    ));
    Some(out)
}

/// `GET /v1/node` as aligned `key  value` lines (`tapfinger-agent node`); None if the body is not
/// a [`crate::api::NodeInfo`].
pub fn node_lines(body: &serde_json::Value) -> Option<String> {
    let n: crate::api::NodeInfo = serde_json::from_value(body.clone()).ok()?;
    let units = |v: &Option<Vec<u32>>| {
        v.as_ref().map_or("-".to_string(), |v| {
            v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
        })
    };
    let mut text = format!(
        "{:<18} {}\n{:<18} {}\n{:<18} {}\n{:<18} {}\n{:<18} {}",
        "id",
        n.id.map_or("-".to_string(), |i| i.to_string()),
        "capacity",
        units(&n.capacity),
        "used",
        units(&n.used),
        "peers",
        n.peers,
        "dropped_messages",
        n.dropped_messages
    );
    if let Some(model) = n.labels.get(tapfinger::estimate::GPU_MODEL_LABEL) {
        text.push_str(&format!("\n{:<18} {model}", "gpu_model"));
    }
    let others: Vec<String> = n
        .labels
        .iter()
        .filter(|(k, _)| k.as_str() != tapfinger::estimate::GPU_MODEL_LABEL)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if !others.is_empty() {
        text.push_str(&format!("\n{:<18} {}", "labels", others.join(" ")));
    }
    if let Some(sec) = &n.security {
        let network = if sec.open_cluster {
            "OPEN CLUSTER (no cluster key: any host that reaches it can run commands here)"
                .to_string()
        } else if sec.cluster_key {
            match sec.allowlist {
                0 => "cluster key".to_string(),
                n => format!("cluster key, {n} peer(s) allowed"),
            }
        } else {
            "loopback only".to_string()
        };
        text.push_str(&format!(
            "\n{:<18} {network}\n{:<18} {}\n{:<18} {}",
            "network",
            "api_token",
            if sec.api_token {
                "required"
            } else {
                "none (loopback)"
            },
            "gpu_isolation",
            sec.gpu_isolation
        ));
    }
    Some(text)
}

#[cfg(test)]
mod table_tests {
    #[test]
    fn classes_render_as_a_table() {
        let v = serde_json::json!({"classes": [
            {"name": "bert-finetune", "class": 1030, "gpu_model": 7, "gpu_model_name": "NVIDIA H200",
             "samples": 12, "hints": 0,
             "min": [2.0, 1.0, 1.0], "fitted": true, "slots_at_min": 12.0,
             "slots_at_double": 9.0, "switch_cost": 0.25, "start_cost": 0.5},
            {"name": "", "class": 0, "samples": 0, "hints": 0, "min": [1.0, 0.0, 1.0],
             "fitted": false, "slots_at_min": 10.0, "slots_at_double": 8.5,
             "switch_cost": 0.0, "start_cost": 0.0}
        ]});
        let t = super::classes_table(&v).unwrap();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(lines[0].starts_with("CLASS"));
        assert!(lines[1].starts_with("bert-finetune") && lines[1].contains("2,1,1"));
        assert!(
            lines[1].contains("NVIDIA H200") && lines[2].contains(" - "),
            "{t}"
        );
        assert!(
            lines[1].contains("12.00") && lines[1].contains("0.25") && lines[1].contains("0.50")
        );
        assert!(lines[2].starts_with("(unnamed)") && lines[2].ends_with("prior"));
        assert!(lines[3].starts_with("2 row(s)"));
        assert!(super::classes_table(&serde_json::json!({"peers": []})).is_none());
    }

    #[test]
    fn tasks_render_as_a_table() {
        let v = serde_json::json!({"tasks": [
            {"id": 7, "state": "running", "node": 3, "alloc": [2, 0, 2], "progress": 0.25},
            {"id": 8, "state": "pending"}
        ], "total": 2, "next_offset": null});
        let t = super::tasks_table(&v).unwrap();
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("ID"));
        assert!(
            lines[1].contains("running") && lines[1].contains("2,0,2") && lines[1].contains("25%")
        );
        assert!(lines[2].starts_with("8 ") && lines[2].contains("pending"));
        assert_eq!(lines[3], "2 task(s)");
        assert!(super::tasks_table(&serde_json::json!({"x": 1})).is_none());
        let p = serde_json::json!({"peers": [{"id": 5, "name": "box-b", "capacity": [4, 1, 8], "free": [2, 1, 6]}]});
        let t = super::peers_table(&p).unwrap();
        assert!(
            t.contains("box-b") && t.contains("4,1,8") && t.contains("2,1,6"),
            "{t}"
        );
        assert!(t.ends_with("1 peer(s)"));
        let n = super::node_lines(&serde_json::json!({
            "id": 3, "capacity": [4, 1, 8], "used": null, "peers": 2, "dropped_messages": 0
        }))
        .unwrap();
        assert_eq!(n.lines().count(), 5);
        assert!(n.contains("4,1,8") && n.contains("peers"), "{n}");
        // The box's GPU model on a line of its own; its other labels after.
        let n = super::node_lines(&serde_json::json!({
            "id": 3, "capacity": [4, 1, 8], "used": null, "peers": 2, "dropped_messages": 0,
            "labels": {"gpu_model": "NVIDIA H200", "site": "plant-3"}
        }))
        .unwrap();
        assert_eq!(n.lines().count(), 7, "{n}");
        assert!(n.contains("gpu_model          NVIDIA H200"), "{n}");
        assert!(n.contains("labels             site=plant-3"), "{n}");
    }
}

#[cfg(test)]
mod client_tests {
    use super::http;

    /// The CLI's client reads a chunked answer (a streamed body has no Content-Length).
    #[tokio::test]
    async fn the_client_reads_chunked_responses() {
        let chunks = futures::stream::iter(
            ["{\"a\":", "1,", "\"b\":2}"]
                .map(|c| Ok::<_, std::io::Error>(axum::body::Bytes::from_static(c.as_bytes()))),
        );
        let body = std::sync::Arc::new(std::sync::Mutex::new(Some(axum::body::Body::from_stream(
            chunks,
        ))));
        let app = axum::Router::new().route(
            "/x",
            axum::routing::get(move || {
                let b = body
                    .lock()
                    .ok()
                    .and_then(|mut b| b.take())
                    .unwrap_or_default();
                async move { b }
            }),
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move { axum::serve(l, app).await });
        let (code, text) = http(&addr, "GET", "/x", None, None).await.unwrap();
        assert_eq!((code, text.as_str()), (200, "{\"a\":1,\"b\":2}"));
    }
}
