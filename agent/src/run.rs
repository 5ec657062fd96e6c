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
use tapfinger::Resources;
use tapfinger::node::{NodeConfig, NodeCore};

pub use crate::config::space;

/// Grid units of the agent's space (cores, GPUs, GiB) → what the executor enforces, where a GPU
/// device is `per_device` grid units: fewer units than a device are a share of one device
/// (`gpu_share`); more are whole devices (specs allow no others,
/// `tapfinger::spec::units_per_device`). GPUs are a count here; the daemon picks the devices.
pub fn to_allocation_in(r: &Resources, per_device: u32) -> Allocation {
    let per = per_device.max(1);
    let units = r.get(1);
    let (count, share) = if units > 0 && units < per {
        (1, Some(f64::from(units) / f64::from(per)))
    } else {
        (units / per, None)
    };
    Allocation {
        cpus: f64::from(r.get(0)),
        memory_bytes: (r.get(2) > 0).then(|| u64::from(r.get(2)) << 30),
        gpus: (0..count).collect(),
        gpu_share: share,
        gpu_env: Vec::new(),
    }
}

pub use tapfinger_net::log::init_logging;

/// How this box shares its first `offered` GPUs (MPS where the cluster's `gpu_step` divides a
/// device and the control program is there; whole devices otherwise), said in the log; the box
/// carries [`tapfinger::spec::GPU_SHARES_LABEL`] exactly when it runs fractional tasks (the
/// agent sets it, whatever the configuration says).
fn gpu_shares(
    cfg: &mut AgentConfig,
    discovered: &crate::discovery::Discovered,
    offered: usize,
) -> crate::mps::GpuShares {
    let gpus: Vec<(u32, u64)> = discovered
        .gpus
        .iter()
        .take(offered)
        .map(|g| (g.index, g.memory_bytes))
        .collect();
    let shares = crate::mps::GpuShares::setup(
        cfg.gpu_units().unwrap_or(1),
        &cfg.mps_control,
        &cfg.data_dir.join("mps"),
        &gpus,
    );
    let label = tapfinger::spec::GPU_SHARES_LABEL.to_string();
    if shares.mps.is_some() {
        cfg.labels
            .insert(label, tapfinger::spec::GPU_SHARES_MPS.to_string());
        tracing::info!("GPUs: {}", shares.note);
    } else {
        if cfg.labels.remove(&label).is_some() {
            tracing::warn!("labels.{label} is the agent's to set: removed");
        }
        if shares.per_device > 1 && offered > 0 {
            tracing::warn!("GPUs: {}", shares.note);
        } else if shares.per_device > 1 {
            tracing::info!("GPUs: {}", shares.note);
        }
    }
    shares
}

/// The persistent identity key in `dir` (`identity.key`), created on first use.
pub fn identity(dir: &std::path::Path) -> anyhow::Result<Keypair> {
    Ok(tapfinger_net::identity::identity(dir)?)
}

/// The journal in `data_dir` (`tasks.journal`); a journal of an older agent
/// (`tasks.jsonl`) is moved there first, and migrated when opened.
pub fn journal_path(data_dir: &std::path::Path) -> anyhow::Result<std::path::PathBuf> {
    let journal = data_dir.join("tasks.journal");
    let old = data_dir.join("tasks.jsonl");
    if !journal.exists() && old.exists() {
        std::fs::rename(&old, &journal)
            .with_context(|| format!("cannot move {} to {}", old.display(), journal.display()))?;
        tracing::info!(from = %old.display(), to = %journal.display(), "journal of an older agent moved");
    }
    Ok(journal)
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
    let gpu_shares = gpu_shares(&mut cfg, &discovered, offer.gpus as usize);
    let capacity = Resources(vec![
        offer.cpus.floor() as u32,
        offer.gpus * gpu_shares.per_device,
        (offer.memory_bytes >> 30) as u32,
    ]);
    std::fs::create_dir_all(&cfg.data_dir)
        .with_context(|| format!("cannot create data_dir {}", cfg.data_dir.display()))?;
    // One agent per data directory, held until this process ends: two would share a node id
    // and hand out the same task ids.
    let _lock = crate::store::lock::lock(&cfg.data_dir)?;
    let journal = journal_path(&cfg.data_dir)?;
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
    let executor = as_task_user(executor, &cfg)?;
    let gpu_sharing = gpu_shares.note.clone();
    let per_device = gpu_shares.per_device;
    let security = crate::api::SecurityInfo {
        open_cluster: open_cluster.is_some(),
        cluster_key: cfg.cluster_key_file.is_some(),
        allowlist: cfg.allow_peers.len(),
        api_token: cfg.api_token_file.is_some(),
        gpu_isolation,
        gpu_sharing,
    };
    let agent = daemon::spawn(Parts {
        core,
        net,
        executor: Box::new(executor),
        exec_events: rx,
        to_allocation: Box::new(move |r| to_allocation_in(r, per_device)),
        space: space(cfg.gpu_step),
        types: vec!["default".into()],
        store: Some(store),
        recovered,
        files: Some(crate::daemon::Files {
            logs: cfg.data_dir.join("logs"),
            lease: lease_file,
            members: members_file,
            sweep: vec![cfg.data_dir.join("logs"), run_dir],
            retention: (cfg.log_retention_hours > 0)
                .then(|| std::time::Duration::from_secs(3600 * cfg.log_retention_hours)),
            sizes: cfg.data_dir.join(SIZES_FILE),
        }),
        gpus: crate::daemon::Gpus {
            probe: crate::gpu_use::probe(&gpu_devices),
            devices: gpu_devices,
            shares: gpu_shares,
            pack: cfg.pack_shares,
        },
        online,
        forecast_interval_slots,
        plateau: cfg.plateau(),
        stop_timeout: std::time::Duration::from_secs(cfg.stop_timeout_seconds),
    });
    let listener = tokio::net::TcpListener::bind(&cfg.api)
        .await
        .with_context(|| format!("api: cannot bind {}", cfg.api))?;
    tracing::info!(api = %cfg.api, "HTTP API listening");
    let app = router(ApiState {
        history: agent.history.clone(),
        commands: agent.commands.clone(),
        status: agent.status.clone(),
        metrics: agent.metrics.clone(),
        token,
        log_dir: Some(cfg.data_dir.join("logs")),
        security: std::sync::Arc::new(security),
    });
    let server = tokio::spawn(crate::api::serve(listener, app));
    wait_for_signal().await;
    stop_gracefully(&agent).await;
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
/// members and lease its data directory remembers, and the size history it saved.
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
    let mut core = NodeCore::new(
        NodeConfig {
            me,
            name: cfg.name.clone(),
            capacity,
            kind_names: space(cfg.gpu_step).kind_names(),
            steps: space(cfg.gpu_step).kinds().iter().map(|k| k.step).collect(),
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
                .then(|| space(cfg.gpu_step).index_of("cpu"))
                .flatten(),
            preempt: cfg.preempt,
        },
        policy,
        u64::from(me.0),
    );
    core.set_gangs(cfg.gangs.placement());
    core.restore_sizes(load_sizes(&cfg.data_dir.join(SIZES_FILE)));
    core
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
                    workload_push_ms: cfg.coordinator.workload_push_ms,
                    workload_window_s: cfg.coordinator.workload_window_s,
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
    // Named after this agent's node id: other agents on the host have groups of their own.
    let agent_group = format!("node-{}", supervision.owner);
    let cgroups = Cgroups::detect_for_agent(
        std::path::Path::new("/sys/fs/cgroup"),
        &std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default(),
        "tapfinger",
    )
    .of_agent(&agent_group);
    let devices_prefix = format!("tapfinger/{agent_group}");
    if let Cgroups::Unavailable(why) = &cgroups {
        tracing::warn!(
            "cgroups unavailable ({why}): CPU shares fall back to affinity, memory is not limited"
        );
    }
    let devices = match &cgroups {
        Cgroups::V1 { .. } => crate::exec::Devices::detect(
            std::path::Path::new("/sys/fs/cgroup"),
            &devices_prefix,
            false,
        ),
        Cgroups::V2(_) => crate::exec::Devices::detect(
            std::path::Path::new("/sys/fs/cgroup"),
            &devices_prefix,
            true,
        ),
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

/// The executor running tasks as `task_user`, where one is set ([`crate::exec::TaskUser`]): an
/// agent that cannot start tasks as that user does not start (running them as itself instead
/// would hand them its keys).
fn as_task_user(executor: ProcessExecutor, cfg: &AgentConfig) -> anyhow::Result<ProcessExecutor> {
    let Some(name) = cfg.task_user.as_deref().filter(|n| !n.is_empty()) else {
        return Ok(executor);
    };
    let user = crate::exec::TaskUser::resolve(name).map_err(anyhow::Error::msg)?;
    tracing::info!(user = %user.name, uid = user.uid, "tasks run as their own user");
    executor
        .with_task_user(user)
        .context("task_user: cannot make the logs folder passable for tasks")
}

/// The graceful stop (the daemon's `leaving`): tasks checkpoint and go back to the cluster; a
/// second signal stops them at once.
async fn stop_gracefully(agent: &daemon::Agent) {
    tracing::info!(
        "stopping gracefully: tasks checkpoint and go back to the cluster (a second signal stops them at once)"
    );
    let stop = agent.shutdown();
    tokio::pin!(stop);
    tokio::select! {
        () = &mut stop => {}
        () = wait_for_signal() => {
            agent.stop_now().await;
            stop.await;
        }
    }
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

/// The size history an earlier run saved at `path` (none: an empty one; unreadable: an empty
/// one, said in the log, since it is a prediction's input, not a record of work).
/// The size history's file in the data directory.
const SIZES_FILE: &str = "sizes.json";

fn load_sizes(path: &std::path::Path) -> tapfinger::sizes::SizeBook {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            tracing::warn!(path = %path.display(), error = %e, "the saved size history does not read: starting without it");
            Default::default()
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Default::default(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the saved size history: starting without it");
            Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::{Discovered, Gpu};

    fn one_gpu() -> Discovered {
        Discovered {
            cpus: 8,
            memory_bytes: 32 << 30,
            gpus: vec![Gpu {
                index: 0,
                model: "NVIDIA H200".into(),
                memory_bytes: 80 << 30,
                minor: Some(0),
            }],
            gpu_note: None,
        }
    }

    /// A restarted agent starts from the size history it saved; a file that does not read
    /// (a torn write by hand, another format) starts it empty, never stops it.
    #[test]
    fn the_saved_size_history_is_read_back_and_a_bad_one_is_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SIZES_FILE);
        assert_eq!(load_sizes(&path).learned(), 0, "none saved");
        let mut b = tapfinger::sizes::SizeBook::new();
        let who = tapfinger::sizes::Identity::default();
        let min = Resources(vec![1, 0, 1]);
        let q = tapfinger::sizes::Query {
            identity: &who,
            class: tapfinger::TaskTypeId(0),
            min_demand: &min,
        };
        for s in [4.0, 5.0, 6.0] {
            b.observe(&q, s);
        }
        std::fs::write(&path, serde_json::to_vec(&b).unwrap()).unwrap();
        let back = load_sizes(&path);
        assert_eq!(back.learned(), 3);
        assert_eq!(back.predict(&q).unwrap().median(), 5.0);
        std::fs::write(&path, b"{\"levels\": [tor").unwrap();
        assert_eq!(load_sizes(&path).learned(), 0);
    }

    /// Fewer units than a device are a share of one device; more are whole devices.
    #[test]
    fn units_below_a_device_are_a_share_of_one() {
        let a = to_allocation_in(&Resources(vec![2, 1, 4]), 4);
        assert_eq!((a.gpus.len(), a.gpu_share), (1, Some(0.25)));
        let a = to_allocation_in(&Resources(vec![2, 8, 4]), 4);
        assert_eq!((a.gpus.len(), a.gpu_share), (2, None));
        let a = to_allocation_in(&Resources(vec![2, 0, 4]), 4);
        assert_eq!((a.gpus.len(), a.gpu_share), (0, None));
        assert_eq!(to_allocation_in(&Resources(vec![1, 1, 1]), 1).gpus.len(), 1);
    }

    /// The box carries `gpu_shares = mps` exactly when it can run fractions: a configured label
    /// on a box without the control program is removed.
    #[test]
    fn the_sharing_label_is_the_agent_s_to_set() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let program = tmp.path().join("mps-control");
        std::fs::write(&program, "#!/bin/sh\n").unwrap_or_else(|e| panic!("{e}"));
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("{e}"));
        let label = tapfinger::spec::GPU_SHARES_LABEL;
        let mut cfg = AgentConfig {
            gpu_step: 0.25,
            mps_control: program,
            data_dir: tmp.path().to_path_buf(),
            ..AgentConfig::default()
        };
        let shares = gpu_shares(&mut cfg, &one_gpu(), 1);
        assert_eq!(shares.per_device, 4);
        assert!(shares.mps.is_some(), "{}", shares.note);
        assert_eq!(cfg.labels.get(label).map(String::as_str), Some("mps"));
        cfg.mps_control = tmp.path().join("missing");
        let shares = gpu_shares(&mut cfg, &one_gpu(), 1);
        assert!(shares.mps.is_none() && shares.note.contains("whole devices only"));
        assert_eq!(shares.per_device, 4, "the step stays the cluster's");
        assert!(!cfg.labels.contains_key(label));
        cfg.gpu_step = 1.0;
        let shares = gpu_shares(&mut cfg, &one_gpu(), 1);
        assert!(shares.mps.is_none() && shares.per_device == 1);
    }
}
