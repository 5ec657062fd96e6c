//! Helpers shared by the cross-crate integration tests (the `[[test]]` targets of this crate) and
//! the cluster benchmark (`benches/cluster.rs`): networks on ephemeral loopback ports, and whole
//! agents (node core + libp2p + an executor) started in this process.
//!
//! Everything binds 127.0.0.1 only. Helpers panic on setup failures: they serve tests, where a
//! panic with a message is the right report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use libp2p::pnet::PreSharedKey;
use libp2p::{Multiaddr, identity};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tapfinger::node::{NodeConfig, NodeCore};
use tapfinger::spec::TaskSpec;
use tapfinger::{Resources, TaskId};
use tapfinger_agent::daemon::{self, Agent, Parts, Status, node_id};
use tapfinger_agent::exec::{Allocation, Cgroups, Executor, ProcessExecutor, SimulatedExecutor};
use tapfinger_agent::net::{NetConfig, NetEvent, Network};
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};

/// `cfg` with `listen` set to an ephemeral loopback port; panics if it does not come up in 10 s.
///
/// The listen address must be the network's first event: anything before it would be consumed
/// here and never reach the agent (a lost `PeerUp` of the coordinator once left an agent believing
/// it had no coordinator), so any other event first is a failure.
pub async fn start_listening(mut cfg: NetConfig) -> (Network, Multiaddr) {
    cfg.listen = vec!["/ip4/127.0.0.1/tcp/0".parse().expect("a valid multiaddr")];
    let mut net = Network::start(cfg).await.expect("network starts");
    let addr = match timeout(Duration::from_secs(10), net.next_event()).await {
        Ok(Some(NetEvent::Listening(a))) => a,
        other => panic!("the listen address was not the first event: {other:?}"),
    };
    let full = format!("{addr}/p2p/{}", net.peer_id)
        .parse()
        .expect("a dialable address");
    (net, full)
}

/// A network for a coordinator (or any non-agent member) of the test cluster: its key, the test
/// cluster's name and pre-shared key, an ephemeral loopback port.
pub async fn start_member(keypair: identity::Keypair) -> (Network, Multiaddr) {
    start_listening(NetConfig {
        keypair,
        cluster: "it".into(),
        listen: Vec::new(),
        bootstrap: Vec::new(),
        psk: Some(PreSharedKey::new([42; 32])),
        allow: None,
        mdns: false,
        peer_exchange: true,
        channel: 256,
    })
    .await
}

/// What every local agent offers: 4 cores, 1 GPU (device 7, so that a test sees that the daemon
/// names the device rather than passing a count) and 8 GiB.
pub fn capacity() -> Resources {
    Resources(vec![4, 1, 8])
}

/// How an agent runs its tasks.
#[derive(Clone)]
pub enum Exec {
    /// The simulated executor: progress `rate × cores` per 20 ms tick.
    Simulated(f64),
    /// The simulated executor with a speed function of its own (progress per 20 ms tick).
    Speed(tapfinger_agent::exec::SpeedFn),
    /// Real child processes, logs under the path.
    Processes(PathBuf),
    /// Real child processes in cgroups (created under `/sys/fs/cgroup`, the group named by the
    /// string), logs under the path.
    Cgroups(PathBuf, String),
}

impl std::fmt::Debug for Exec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exec::Simulated(r) => write!(f, "Simulated({r})"),
            Exec::Speed(_) => write!(f, "Speed(..)"),
            Exec::Processes(p) => write!(f, "Processes({})", p.display()),
            Exec::Cgroups(p, g) => write!(f, "Cgroups({}, {g})", p.display()),
        }
    }
}

/// A local agent to start.
#[derive(Debug, Clone)]
pub struct Local {
    /// Node name.
    pub name: String,
    /// Addresses to dial.
    pub bootstrap: Vec<Multiaddr>,
    /// Executor.
    pub exec: Exec,
    /// Identity (a restarted agent keeps its key).
    pub keypair: identity::Keypair,
    /// Durable journal, if any.
    pub journal: Option<PathBuf>,
    /// Policy name (`tapfinger` is the agent's default).
    pub policy: String,
    /// Slot, round deadline and heartbeat (ms); a peer is gone after 8 heartbeats.
    pub slot_ms: u64,
    /// Round deadline (ms).
    pub round_ms: u64,
    /// Heartbeat period (ms).
    pub heartbeat_ms: u64,
    /// Incarnation (a restarted agent announces a higher one).
    pub incarnation: u64,
    /// Autonomy time (ms): a killed agent's tasks run elsewhere after 8 heartbeats plus this
    /// plus the takeover grace.
    pub autonomy_ms: u64,
    /// Online learning with a coordinator.
    pub online: Option<tapfinger_agent::online::OnlineConfig>,
    /// For `tapfinger`: a checkpoint directory instead of the shipped model.
    pub model: Option<PathBuf>,
    /// What it offers (cores, GPUs, GiB); GPUs are devices 7, 8, ...
    pub capacity: Resources,
    /// Shrink converging tasks (the agent's `shrink_converging`).
    pub shrink: bool,
    /// Preempt lower classes (the agent's `preempt`).
    pub preempt: bool,
    /// Slots per interval of the task-volume forecast (0: none).
    pub forecast_interval_slots: u64,
    /// Its labels (none by default).
    pub labels: BTreeMap<String, String>,
    /// The cluster's GPU step (the agent's `gpu_step`; 1 by default). Below 1, `capacity`
    /// counts GPUs in its units (4 for one device at 0.25).
    pub gpu_step: f64,
    /// The MPS control program (the agent's `mps_control`), its folders under `mps` beside it;
    /// used where `gpu_step` is below 1. Devices have 16 GiB of memory each.
    pub mps_control: Option<PathBuf>,
    /// A stand-in for NVML's process samples (a JSON file of `gpu_use::ProcUse`).
    pub fake_nvml: Option<PathBuf>,
    /// Its claims state the packing prior (the agent's `pack_shares`).
    pub pack_shares: bool,
}

impl Local {
    /// Fast timings for tests: 150 ms slots, 100 ms rounds and heartbeats.
    pub fn new(name: &str, exec: Exec) -> Self {
        Self {
            name: name.into(),
            bootstrap: Vec::new(),
            exec,
            keypair: identity::Keypair::generate_ed25519(),
            journal: None,
            policy: "tapfinger".into(),
            slot_ms: 150,
            round_ms: 100,
            heartbeat_ms: 100,
            incarnation: 1,
            autonomy_ms: 1000,
            online: None,
            model: None,
            capacity: capacity(),
            shrink: false,
            preempt: false,
            forecast_interval_slots: 0,
            labels: BTreeMap::new(),
            gpu_step: 1.0,
            mps_control: None,
            fake_nvml: None,
            pack_shares: false,
        }
    }

    /// Dial these peers at start.
    pub fn bootstrap(mut self, addrs: Vec<Multiaddr>) -> Self {
        self.bootstrap = addrs;
        self
    }

    /// Start it: the agent's own resource space, conversion and policy, the libp2p network with
    /// the test cluster's key, on an ephemeral loopback port.
    pub async fn start(self) -> (Agent, Multiaddr) {
        let (store, recovered) = match &self.journal {
            Some(path) => {
                let (s, r) = tapfinger_agent::store::Store::open(path).unwrap();
                (Some(s), r)
            }
            None => (None, Default::default()),
        };
        let (net, addr) = start_listening(NetConfig {
            keypair: self.keypair,
            cluster: "it".into(),
            listen: Vec::new(),
            bootstrap: self.bootstrap,
            psk: Some(PreSharedKey::new([42; 32])),
            allow: None,
            mdns: false,
            peer_exchange: true,
            channel: 1024,
        })
        .await;
        let me = node_id(&net.peer_id);
        let space = tapfinger_agent::run::space(self.gpu_step);
        let per = tapfinger::spec::units_per_device(&space).map_or(1, |(_, per)| per);
        let gpu_devices: Vec<u32> = (0..self.capacity.get(1) / per).map(|i| 7 + i).collect();
        let gpu_shares = match &self.mps_control {
            Some(program) if per > 1 => {
                let gpus: Vec<(u32, u64)> = gpu_devices.iter().map(|d| (*d, 16 << 30)).collect();
                let dir = program.parent().unwrap().join("mps");
                tapfinger_agent::mps::GpuShares::setup(per, program, &dir, &gpus)
            }
            _ => Default::default(),
        };
        let mut labels = self.labels.clone();
        if gpu_shares.mps.is_some() {
            labels.insert(
                tapfinger::spec::GPU_SHARES_LABEL.into(),
                tapfinger::spec::GPU_SHARES_MPS.into(),
            );
        }
        let node = NodeConfig {
            me,
            name: self.name,
            capacity: self.capacity.clone(),
            kind_names: vec!["cpu".into(), "gpu".into(), "mem".into()],
            steps: space.kinds().iter().map(|k| k.step).collect(),
            labels,
            incarnation: self.incarnation,
            num_types: 1,
            window: 10,
            service_kind: 1,
            slot_ms: self.slot_ms,
            round_ms: self.round_ms,
            heartbeat_ms: self.heartbeat_ms,
            peer_timeout_ms: 8 * self.heartbeat_ms,
            autonomy_ms: self.autonomy_ms,
            forget_ms: tapfinger::node::DEFAULT_FORGET_MS,
            known: Default::default(),
            lease_age_ms: None,
            addr: "127.0.0.1".into(),
            priorities: Default::default(),
            // Cores are kind 0 of the agent's space.
            shrink_kind: self.shrink.then_some(0),
            preempt: self.preempt,
        };
        let policy =
            tapfinger_agent::policy::build(&self.policy, self.model.as_deref(), 10).unwrap();
        let mut core = NodeCore::new(node, policy, u64::from(me.0));
        // As the agent's `[gangs]` defaults place them.
        core.set_gangs(tapfinger_agent::config::GangsConfig::default().placement());
        let online = self.online.map(|cfg| {
            tapfinger_agent::online::Online::open(cfg, &mut core).expect("online learning starts")
        });
        let (tx, rx) = mpsc::channel(256);
        let executor: Box<dyn Executor> = match self.exec {
            Exec::Simulated(rate) => {
                let speed = Arc::new(move |_: &TaskSpec, a: &Allocation| rate * a.cpus);
                Box::new(SimulatedExecutor::new(tx, Duration::from_millis(20), speed))
            }
            Exec::Speed(speed) => {
                Box::new(SimulatedExecutor::new(tx, Duration::from_millis(20), speed))
            }
            Exec::Processes(logs) => Box::new(ProcessExecutor::new(
                Cgroups::Unavailable("not used in this test".into()),
                logs,
                tx,
            )),
            Exec::Cgroups(logs, group) => Box::new(ProcessExecutor::new(
                Cgroups::detect(std::path::Path::new("/sys/fs/cgroup"), &group),
                logs,
                tx,
            )),
        };
        let agent = daemon::spawn(Parts {
            core,
            net,
            executor,
            exec_events: rx,
            to_allocation: Box::new(move |r| tapfinger_agent::run::to_allocation_in(r, per)),
            space,
            types: vec!["default".into()],
            store,
            recovered,
            files: None,
            gpus: tapfinger_agent::daemon::Gpus {
                devices: gpu_devices,
                shares: gpu_shares,
                probe: self.fake_nvml.map(|f| {
                    Box::new(tapfinger_agent::gpu_use::FileProbe(f))
                        as Box<dyn tapfinger_agent::gpu_use::GpuProbe>
                }),
                pack: self.pack_shares,
            },
            online,
            forecast_interval_slots: self.forecast_interval_slots,
            stop_timeout: Duration::from_secs(60),
            plateau: Default::default(),
        });
        (agent, addr)
    }
}

/// Start `locals` in order, each dialling those before it, and wait (30 s at most) until every
/// agent sees every other.
pub async fn start_all(locals: Vec<Local>) -> Vec<Agent> {
    let mut agents = Vec::new();
    let mut addrs = Vec::new();
    for local in locals {
        let (a, addr) = local.bootstrap(addrs.clone()).start().await;
        agents.push(a);
        addrs.push(addr);
    }
    let n = agents.len();
    let all: Vec<&Agent> = agents.iter().collect();
    wait(
        &all,
        Duration::from_secs(30),
        "agents to see each other",
        |s| s.iter().all(|st| st.peers.len() + 1 == n),
    )
    .await;
    agents
}

/// A task needing one core and 1 GiB (`train` is never run by the simulated executor).
pub fn spec() -> TaskSpec {
    TaskSpec::from_toml("command = [\"train\"]\nmin_demand = { cpu = 1, mem = 1 }\n").unwrap()
}

/// Current status of each agent.
pub fn statuses(agents: &[&Agent]) -> Vec<std::sync::Arc<Status>> {
    agents.iter().map(|a| a.status.borrow().clone()).collect()
}

/// Poll until `done` holds, checking on every poll that no agent allocates more than its
/// capacity of any kind; panic after `limit`.
pub async fn wait(
    agents: &[&Agent],
    limit: Duration,
    what: &str,
    done: impl Fn(&[std::sync::Arc<Status>]) -> bool,
) {
    let end = Instant::now() + limit;
    loop {
        let s = statuses(agents);
        for st in &s {
            if let (Some(used), Some(_)) = (&st.used, &st.capacity) {
                assert!(
                    used.fits_in(&capacity()),
                    "{:?} allocates {used} > {}",
                    st.id,
                    capacity()
                );
            }
        }
        if done(&s) {
            return;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}: {s:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every completion the agents report, one entry per run (a task run twice appears twice).
pub fn finished(s: &[std::sync::Arc<Status>]) -> Vec<TaskId> {
    s.iter()
        .flat_map(|st| st.finished_here.iter().copied())
        .collect()
}

/// The API state of `agent` (its commands, status and metrics), with `token` and `log_dir`.
pub fn api_state(
    agent: &Agent,
    token: Option<String>,
    log_dir: Option<PathBuf>,
) -> tapfinger_agent::api::ApiState {
    tapfinger_agent::api::ApiState {
        history: agent.history.clone(),
        commands: agent.commands.clone(),
        status: agent.status.clone(),
        metrics: agent.metrics.clone(),
        token,
        log_dir,
        security: Default::default(),
    }
}

/// `agent`'s API (with `token`, no logs) served on an ephemeral loopback port: its address.
pub async fn serve_api(agent: &Agent, token: Option<String>) -> String {
    let app = tapfinger_agent::api::router(api_state(agent, token, None));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = l.local_addr().unwrap().to_string();
    tokio::spawn(tapfinger_agent::api::serve(l, app));
    api
}

/// Every `.rs` file below `dir` (the source checks `layers.rs` and `sizes.rs` read them); panics
/// on an unreadable folder: a broken checkout, said at once.
pub fn rust_files(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The cgroup parent of one test's agent, `tapfinger-<what>-test-<pid>`; panics, saying why,
/// where cgroups are not writable (CI has them; the `default` nextest profile leaves such tests
/// out by name).
pub fn test_cgroup(what: &str) -> String {
    let group = format!("tapfinger-{what}-test-{}", std::process::id());
    let root = std::path::Path::new("/sys/fs/cgroup");
    if let tapfinger_agent::exec::Cgroups::Unavailable(why) =
        tapfinger_agent::exec::Cgroups::detect(root, &group)
    {
        panic!("this test needs writable cgroups (CI has them): {why}");
    }
    group
}

/// Remove a test's cgroup parent once its agent is gone (its tasks' groups went with them).
pub fn remove_test_cgroup(group: &str) {
    for h in ["", "cpu", "memory"] {
        let _ = std::fs::remove_dir(std::path::Path::new("/sys/fs/cgroup").join(h).join(group));
    }
}

/// Poll every 50 ms, up to `limit`, until `seen()` holds; whether it did.
pub async fn poll_until(limit: Duration, seen: impl Fn() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if seen() {
            return true;
        }
    }
    false
}

/// GET `path` from `api` every 100 ms, at most `tries` times, until `ok(code, body)`: whether
/// it held, and the last body.
pub async fn poll_get(
    api: &str,
    path: &str,
    tries: usize,
    ok: impl Fn(u16, &str) -> bool,
) -> (bool, String) {
    let mut last = String::new();
    for _ in 0..tries {
        let (code, body) = tapfinger_agent::client::http(api, "GET", path, None, None)
            .await
            .unwrap();
        if ok(code, &body) {
            return (true, body);
        }
        last = body;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (false, last)
}
