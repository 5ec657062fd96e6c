//! The agent's configuration (`agent.toml`; every setting can also be given as a flag, which wins)
//! and what the box offers to the cluster.
//!
//! Unknown keys are refused (a misspelt `reserve` must not silently offer the whole box), and every
//! error names its field. The offer is what discovery found, capped by `[offer]` and reduced by
//! `[reserve]` (units kept for the host); offering more than the box has is an error, not a clamp,
//! because an operator who writes `gpu = 2` on a box with one GPU has made a mistake worth hearing.

use crate::discovery::Discovered;
use libp2p::{Multiaddr, PeerId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

mod parse;
pub use parse::ConfigError;
use parse::err;

/// One GiB.
const GIB: f64 = (1u64 << 30) as f64;

pub use tapfinger_net::log::LogFormat;

/// Units per resource kind, as written in the config: `cpu` (cores), `gpu` (devices), `mem_gb`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Amounts {
    /// CPU cores.
    pub cpu: Option<f64>,
    /// GPUs.
    pub gpu: Option<f64>,
    /// Memory in GiB.
    pub mem_gb: Option<f64>,
}

/// `agent.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// Node name (default: the host name).
    pub name: String,
    /// Cluster name: agents only talk to agents of the same cluster.
    pub cluster: String,
    /// Where the agent keeps its store, identity key and task logs.
    pub data_dir: PathBuf,
    /// libp2p listen addresses.
    pub listen: Vec<Multiaddr>,
    /// Peers to dial at start (multiaddrs ending in `/p2p/<peer id>`).
    pub bootstrap: Vec<Multiaddr>,
    /// Find peers on the LAN with mDNS.
    pub mdns: bool,
    /// Connect to every box the connected ones know (a full mesh, so that every message goes
    /// straight to every box); false: only to the bootstrap list and the LAN, and messages to
    /// the others are relayed.
    pub peer_exchange: bool,
    /// Private-network key file (`swarm.key` format, made by `tapfinger-agent keygen`): peers
    /// without it cannot connect. Required when the agent listens on an address other than
    /// loopback, unless `insecure_open_cluster` is set.
    pub cluster_key_file: Option<PathBuf>,
    /// Run an open cluster: listen beyond loopback without a cluster key, so that any host that
    /// reaches the port can join and have its tasks run here. Only for a lab network that is
    /// closed by other means; warned at every start and shown in `GET /v1/node` and the
    /// dashboard.
    pub insecure_open_cluster: bool,
    /// If not empty, only these peer ids may talk to this agent (the other agents and the
    /// coordinator): a key holder off the list can neither connect nor be heard.
    pub allow_peers: Vec<PeerId>,
    /// Address of the local HTTP API.
    pub api: String,
    /// Bearer-token file for the API (required when `api` is not a loopback address).
    pub api_token_file: Option<PathBuf>,
    /// The address other boxes reach this box's gang members at (rank 0's `MASTER_ADDR` when
    /// it runs here). Default: the IP of the first `listen` address, unless that is 0.0.0.0
    /// or `::`; then none, and this box hosts no gang members until it is set.
    pub address: Option<String>,
    /// Length of a decision round's deadline (ms).
    pub round_ms: u64,
    /// Length of a slot (ms): how often the cluster re-considers placements.
    pub slot_ms: u64,
    /// Heartbeat period (ms).
    pub heartbeat_ms: u64,
    /// Silence (ms) after which a peer leaves the negotiation rounds (default: 5 heartbeats).
    /// Its tasks stay its own until `autonomy_ms` more have passed.
    pub peer_timeout_ms: Option<u64>,
    /// Autonomy time (ms, default 120000): how long a box cut off from a quorum of its cluster
    /// keeps running its tasks (then it stops them), and how long its peers wait beyond the peer
    /// timeout before running a silent box's tasks elsewhere. Longer: edge boxes ride out longer
    /// outages without losing work; shorter: a dead box's tasks start elsewhere sooner.
    pub autonomy_ms: u64,
    /// A queued task moves up one priority class (0 is the highest) per this much waiting
    /// (ms, default 250000: 50 slots of 5 s), so that no class waits forever behind a higher
    /// one; 0: never. Rounded up to whole slots. Every box of a cluster must use the same.
    pub priority_aging_ms: u64,
    /// Shrink converging tasks (RLPTO, default false): a task whose progress lines' loss (or
    /// accuracy) has plateaued — improved by less than 1 % over its last 5 reports — gives up
    /// one CPU per slot down to its minimum demand, its CPU share lowered while it runs (no
    /// restart), and the CPUs go to this box's other tasks or to the next ones it starts. A box's
    /// own choice: boxes of one cluster may differ.
    pub shrink_converging: bool,
    /// RLPTO's plateau detector, for `converging` in `show`/`tasks` and for shrinking: a task
    /// is converging when the best of its last `plateau_window` loss (or accuracy) reports
    /// improves on the one before them by less than `plateau_epsilon`, relative (defaults 5 and
    /// 0.01).
    pub plateau_window: u64,
    /// See `plateau_window` (in [0, 1)).
    pub plateau_epsilon: f64,
    /// Preempt lower priority classes (default false): once a slot, a waiting task that fits
    /// no box gets room on the box short of least, whose tasks of a lower class are stopped —
    /// those losing least work first (progress since their last `checkpoint=` report), only as
    /// many as needed — after a checkpoint signal (SIGTERM) and their spec's `grace_seconds`.
    /// They go back to the queue. Every box of a cluster should agree.
    pub preempt: bool,
    /// The task-volume forecast's interval (ms, default 60000; 0: no forecast): once per
    /// interval the agent fits RLPTO's ARIMA + GRU on the cluster's arrivals per interval and
    /// shows the expected arrivals of the next 6 in `GET /v1/node` and `/metrics`. Rounded up to
    /// whole slots. An RLPTO model reads the next 3 from its views, per interval of the slots
    /// it was trained with (which then win over this setting).
    pub forecast_interval_ms: u64,
    /// Keep capacity for forecast urgent tasks (RLPTO's reservation, default false): while the
    /// forecast says class-0 tasks are coming, a task of a lower class starts only if the
    /// cluster keeps their expected need (the next interval's forecast arrivals × the class-0
    /// share of the last 20 intervals' arrivals × their mean minimum demand). Needs the
    /// forecast (`forecast_interval_ms` > 0). Every box of a cluster should agree.
    pub reserve_for_urgent: bool,
    /// A box silent this long (ms, default one day) is forgotten: it no longer counts toward the
    /// quorum. Until then a cluster that lost half its boxes or more stops after `autonomy_ms`.
    pub forget_ms: u64,
    /// Task logs (`<data_dir>/logs`) of tasks that ended are deleted after this many hours
    /// (default 168, a week; 0 keeps them forever).
    pub log_retention_hours: u64,
    /// Finished tasks accepted here that the task journal keeps (the most recent; default
    /// 10000): the history `tasks` shows after a restart. Older ones are forgotten when the
    /// journal compacts itself, so it stays small.
    pub journal_keep_finished: usize,
    /// The longest a graceful stop (SIGTERM) waits for the tasks running here (default 60): each
    /// gets its checkpoint signal and its spec's `grace_seconds`, and is handed back to the
    /// cluster once it has ended; tasks still running after this (or after a second SIGTERM)
    /// are stopped at once. A service manager's stop timeout must exceed it (the packaged unit's
    /// is 90 s).
    pub stop_timeout_seconds: u64,
    /// The user tasks run as (a name in the box's user database), so that a task can read
    /// neither the agent's keys nor its journal nor other tasks' logs, and write nowhere in its
    /// data directory. Unset: tasks run as the agent's user. Needs the agent to run as root or
    /// with `CAP_SETUID` and `CAP_SETGID` (the packaged unit grants both and makes the user
    /// `tapfinger-task`), and `setpriv` (util-linux).
    pub task_user: Option<String>,
    /// Policy: `tapfinger` (the learned policy, default), `rlpto` (the shipped RLPTO model) or
    /// a baseline name (`tiresias-np`, `optimus`, `drf`, `first-fit-max`, `min`, ...).
    pub policy: String,
    /// For `tapfinger`: a checkpoint directory written by `tapfinger-sim train` (`model.safetensors` and
    /// `train.json`) instead of the model compiled into the agent.
    pub model: Option<PathBuf>,
    /// Log format.
    pub log_format: LogFormat,
    /// Placement labels of this node.
    pub labels: BTreeMap<String, String>,
    /// The cluster's GPU unit in devices (default 1: whole devices). Below one (0.5, 0.25,
    /// 0.1: one device divided by a whole number), tasks may ask for a fraction of a GPU and
    /// run as MPS clients held to it. Every box of a cluster must use the same (a unit must
    /// mean the same amount to every box; a peer with another is not heard). A box whose MPS
    /// control program is missing keeps the step and takes only whole-device tasks.
    pub gpu_step: f64,
    /// Where `gpu_step` shares GPUs in fractions: this box's claims state FGD's growth score
    /// of the task on its devices as their prior (`tapfinger::ledger::Ledger::claim_prior`), so
    /// that a contested task goes to the box it leaves least fragmented for the workload's
    /// shapes, instead of the box with most headroom. Off by default: it packs a filling
    /// cluster tighter (docs/PACKING.md) and co-locates shares that headroom keeps apart, which
    /// slowed the simulated small-GPU jobs (docs/RESULTS.md). Set it alike on every box: the
    /// two priors are on different scales.
    pub pack_shares: bool,
    /// The MPS control program (`nvidia-cuda-mps-control`, looked up on `PATH`, or a path):
    /// started per device that holds fractional tasks, its folders under `<data_dir>/mps`.
    pub mps_control: PathBuf,
    /// Caps on what is offered (default: everything discovered).
    pub offer: Amounts,
    /// Units kept for the host (subtracted from the offer).
    pub reserve: Amounts,
    /// The coordinator (optional): where new policy versions come from and experience goes.
    pub coordinator: CoordinatorLink,
    /// How the gangs this box proposes are placed.
    pub gangs: GangsConfig,
}

/// `[gangs]`: how this box places the multi-node jobs it proposes. Every box of a cluster should
/// say the same: the box that proposes a gang places it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GangsConfig {
    /// `locality` (the LP rounding, which keeps workers near their parameter servers where the
    /// links are slow), `pack-first` or `spread`.
    pub placer: tapfinger::placement::gang::GangPlacer,
    /// Bytes per second between two processes on one box.
    pub internal_bytes_per_s: f64,
    /// Bytes per second between two boxes (and through a parameter-server host's interface).
    pub external_bytes_per_s: f64,
}

impl Default for GangsConfig {
    fn default() -> Self {
        let edge = tapfinger::placement::gang::Links::EDGE;
        Self {
            placer: tapfinger::placement::gang::GangPlacer::Locality,
            internal_bytes_per_s: edge.internal,
            external_bytes_per_s: edge.external,
        }
    }
}

impl GangsConfig {
    /// What the node core places gangs with.
    pub fn placement(&self) -> tapfinger::ledger::GangPlacement {
        tapfinger::ledger::GangPlacement {
            placer: tapfinger::jobs::placer(self.placer),
            links: tapfinger::placement::gang::Links {
                internal: self.internal_bytes_per_s,
                external: self.external_bytes_per_s,
            },
        }
    }
}

/// `[coordinator]`: the link to the optional coordinator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CoordinatorLink {
    /// The coordinator's peer id: the only signer whose weights are accepted. Unset: no
    /// coordinator, the agent keeps its model.
    pub peer: Option<PeerId>,
    /// Learning mode: record decisions (sampled, not greedy) and ship them to the coordinator.
    pub learning: bool,
    /// Most experience batches kept on disk while the coordinator is away (oldest dropped).
    pub spool_max_batches: usize,
    /// Decisions per experience batch.
    pub batch_decisions: usize,
    /// How often to ask the coordinator for a new version (ms).
    pub poll_ms: u64,
    /// In learning mode, explore with the coordinator's latest candidate (signed, but not passed
    /// by its evaluation gate) instead of the published version. Learning then stays on-policy
    /// when the gate refuses candidates, at the price of running them; off by default.
    pub explore_candidates: bool,
    /// How often to push the workload this agent observed to the coordinator's guard (ms; 0:
    /// never, and the guard then has nothing of this agent's to judge).
    pub workload_push_ms: u64,
    /// The longest window a push covers (s): the tasks that arrived in it since the agent
    /// adopted the guard's choice in force.
    pub workload_window_s: u64,
}

impl Default for CoordinatorLink {
    fn default() -> Self {
        Self {
            peer: None,
            learning: false,
            spool_max_batches: 1000,
            batch_decisions: 64,
            poll_ms: 2000,
            explore_candidates: false,
            workload_push_ms: 60_000,
            workload_window_s: 3600,
        }
    }
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            name: hostname(),
            cluster: "default".into(),
            data_dir: PathBuf::from("/var/lib/tapfinger"),
            listen: vec![
                Multiaddr::empty()
                    .with(libp2p::multiaddr::Protocol::Ip4(
                        std::net::Ipv4Addr::UNSPECIFIED,
                    ))
                    .with(libp2p::multiaddr::Protocol::Tcp(7600)),
            ],
            bootstrap: Vec::new(),
            mdns: false,
            peer_exchange: true,
            cluster_key_file: None,
            insecure_open_cluster: false,
            allow_peers: Vec::new(),
            api: "127.0.0.1:7601".into(),
            api_token_file: None,
            address: None,
            round_ms: 300,
            slot_ms: 5000,
            heartbeat_ms: 1000,
            peer_timeout_ms: None,
            autonomy_ms: tapfinger::node::DEFAULT_AUTONOMY_MS,
            priority_aging_ms: 250_000,
            shrink_converging: false,
            plateau_window: 5,
            plateau_epsilon: 0.01,
            preempt: false,
            forecast_interval_ms: 60_000,
            reserve_for_urgent: false,
            forget_ms: tapfinger::node::DEFAULT_FORGET_MS,
            log_retention_hours: 168,
            journal_keep_finished: 10_000,
            stop_timeout_seconds: 60,
            task_user: None,
            policy: "tapfinger".into(),
            model: None,
            log_format: LogFormat::Human,
            labels: BTreeMap::new(),
            gpu_step: 1.0,
            pack_shares: false,
            mps_control: PathBuf::from(crate::mps::CONTROL),
            offer: Amounts::default(),
            reserve: Amounts::default(),
            coordinator: CoordinatorLink::default(),
            gangs: GangsConfig::default(),
        }
    }
}

impl AgentConfig {
    /// [`AgentConfig::address`], or its default.
    pub fn gang_address(&self) -> String {
        if let Some(a) = &self.address {
            return a.clone();
        }
        self.listen
            .first()
            .and_then(|m| {
                m.iter().find_map(|p| match p {
                    libp2p::multiaddr::Protocol::Ip4(ip) if !ip.is_unspecified() => {
                        Some(ip.to_string())
                    }
                    libp2p::multiaddr::Protocol::Ip6(ip) if !ip.is_unspecified() => {
                        Some(ip.to_string())
                    }
                    _ => None,
                })
            })
            .unwrap_or_default()
    }
}

fn hostname() -> String {
    sysinfo::System::host_name().unwrap_or_else(|_| "edge-box".into())
}

/// What the box offers the cluster, in natural units.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Offer {
    /// CPU cores.
    pub cpus: f64,
    /// GPUs (whole devices).
    pub gpus: u32,
    /// Memory in bytes.
    pub memory_bytes: u64,
}

impl AgentConfig {
    /// The network's exposure: `Ok(None)` when the peer-to-peer side is closed (every listen
    /// address is loopback, or a cluster key is set); `Ok(Some(warning))` for an open cluster
    /// the operator asked for (`insecure_open_cluster`); an error, naming `keygen`, for an open
    /// cluster nobody asked for. Without a key, any host that reaches a non-loopback port can
    /// announce a task (a command line) that some box will run.
    pub fn open_cluster(&self) -> Result<Option<String>, ConfigError> {
        let exposed = tapfinger_net::secret::exposed(&self.listen);
        if exposed.is_empty() || self.cluster_key_file.is_some() {
            return Ok(None);
        }
        let what = format!(
            "the agent listens on {} (not loopback) without a cluster key, so any host that reaches that port can join the cluster and run commands on its boxes",
            exposed.join(", ")
        );
        if self.insecure_open_cluster {
            return Ok(Some(format!(
                "OPEN CLUSTER (insecure_open_cluster = true): {what}"
            )));
        }
        Err(err(
            "cluster_key_file",
            format!(
                "{what}. Make a key with `tapfinger-agent keygen --swarm-key /etc/tapfinger/swarm.key`, copy it to every box of the cluster (mode 0600), and set cluster_key_file = \"/etc/tapfinger/swarm.key\" (or pass --cluster-key-file); or listen on 127.0.0.1 only. A lab that really wants an open cluster sets insecure_open_cluster = true"
            ),
        ))
    }

    /// The plateau detector's settings.
    pub fn plateau(&self) -> tapfinger::plateau::Plateau {
        tapfinger::plateau::Plateau {
            window: self.plateau_window as usize,
            epsilon: self.plateau_epsilon,
        }
    }

    /// The forecast's interval in slots (`forecast_interval_ms` rounded up; 0: none).
    pub fn forecast_interval_slots(&self) -> u64 {
        self.forecast_interval_ms.div_ceil(self.slot_ms.max(1))
    }

    /// How priority classes order the queues: honoured, aging every `priority_aging_ms`
    /// rounded up to whole slots (never when 0).
    pub fn priorities(&self) -> tapfinger::ledger::Priorities {
        tapfinger::ledger::Priorities {
            honour: true,
            aging_slots: (self.priority_aging_ms > 0)
                .then(|| self.priority_aging_ms.div_ceil(self.slot_ms.max(1))),
        }
    }

    /// Grid units of one GPU device (1 / `gpu_step`), if the step divides a device.
    pub fn gpu_units(&self) -> Option<u32> {
        let per = (1.0 / self.gpu_step).round();
        (self.gpu_step.is_finite()
            && self.gpu_step > 0.0
            && (1.0..=100.0).contains(&per)
            && (per * self.gpu_step - 1.0).abs() < 1e-9)
            .then_some(per as u32)
    }

    /// The peer timeout in force (`peer_timeout_ms`, or five heartbeats).
    pub fn peer_timeout(&self) -> u64 {
        self.peer_timeout_ms.unwrap_or(5 * self.heartbeat_ms)
    }

    /// What this box offers: discovered, capped by `[offer]`, minus `[reserve]`.
    pub fn offer(&self, d: &Discovered) -> Result<Offer, ConfigError> {
        let pick = |k: &str, have: f64, cap: Option<f64>, keep: Option<f64>| {
            let cap_v = cap.unwrap_or(have);
            if cap_v > have {
                return Err(err(
                    &format!("offer.{k}"),
                    format!("{cap_v} is more than this box has ({have})"),
                ));
            }
            let left = cap_v - keep.unwrap_or(0.0);
            if left < 0.0 {
                return Err(err(
                    &format!("reserve.{k}"),
                    format!("{} is more than is offered ({cap_v})", keep.unwrap_or(0.0)),
                ));
            }
            Ok(left)
        };
        let cpus = pick("cpu", d.cpus as f64, self.offer.cpu, self.reserve.cpu)?;
        let gpus = pick("gpu", d.gpus.len() as f64, self.offer.gpu, self.reserve.gpu)?;
        if gpus.fract() != 0.0 {
            return Err(err("offer.gpu", "GPUs are offered as whole devices"));
        }
        let mem = pick(
            "mem_gb",
            d.memory_bytes as f64 / GIB,
            self.offer.mem_gb,
            self.reserve.mem_gb,
        )?;
        Ok(Offer {
            cpus,
            gpus: gpus as u32,
            memory_bytes: (mem * GIB) as u64,
        })
    }
}

pub use tapfinger_net::secret::is_loopback;

/// The resource kinds every agent schedules, GPUs in units of `gpu_step` devices.
pub fn space(gpu_step: f64) -> tapfinger::resources::ResourceSpace {
    let kind = |name: &str, unit: &str, step: f64| tapfinger::resources::ResourceKind {
        name: name.into(),
        unit: unit.into(),
        step,
    };
    tapfinger::resources::ResourceSpace::new(vec![
        kind("cpu", "core", 1.0),
        kind("gpu", "GPU", gpu_step),
        kind("mem", "GiB", 1.0),
    ])
    .unwrap_or_else(|_| tapfinger::resources::ResourceSpace::cpu_gpu())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn box8() -> Discovered {
        Discovered {
            cpus: 8,
            memory_bytes: 16 << 30,
            gpus: Vec::new(),
            gpu_note: Some("NVML unavailable".into()),
        }
    }

    #[test]
    fn the_example_config_is_valid() {
        let text = include_str!("../../../deploy/agent.toml");
        let cfg = AgentConfig::from_toml(text).unwrap();
        assert_eq!(cfg.labels["site"], "plant-3");
        let offer = cfg.offer(&box8()).unwrap();
        assert_eq!(offer.cpus, 7.0);
        assert_eq!(offer.gpus, 0);
        assert_eq!(offer.memory_bytes, 14 << 30);
    }

    #[test]
    fn gangs_are_placed_as_the_config_says_and_bad_links_are_refused() {
        use tapfinger::placement::gang::{GangPlacer, Links};
        let d = AgentConfig::from_toml("").unwrap().gangs.placement();
        assert_eq!(d.placer.kind(), GangPlacer::Locality);
        assert_eq!(d.links, Links::EDGE);
        let text = "[gangs]\nplacer = \"spread\"\nexternal_bytes_per_s = 1e10\n";
        let g = AgentConfig::from_toml(text).unwrap().gangs.placement();
        assert_eq!(g.placer.kind(), GangPlacer::Spread);
        assert_eq!(g.links.external, 1e10);
        assert_eq!(g.links.internal, Links::EDGE.internal);
        let e = AgentConfig::from_toml("[gangs]\nexternal_bytes_per_s = 0\n").unwrap_err();
        assert_eq!(e.field, "gangs.external_bytes_per_s", "{e}");
        assert!(AgentConfig::from_toml("[gangs]\nplacer = \"nearest\"\n").is_err());
    }

    #[test]
    fn defaults_offer_the_whole_box() {
        let cfg = AgentConfig::from_toml("").unwrap();
        assert_eq!(cfg.api, "127.0.0.1:7601");
        let o = cfg.offer(&box8()).unwrap();
        assert_eq!((o.cpus, o.gpus, o.memory_bytes), (8.0, 0, 16 << 30));
    }

    #[test]
    fn an_open_cluster_is_refused_unless_asked_for() {
        // The shipped defaults listen on 0.0.0.0 without a key.
        let e = AgentConfig::default().open_cluster().unwrap_err();
        assert_eq!(e.field, "cluster_key_file");
        assert!(e.message.contains("tapfinger-agent keygen"), "{e}");
        assert!(e.message.contains("/ip4/0.0.0.0/tcp/7600"), "{e}");
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let open = AgentConfig::from_toml_with("", &set(&["insecure_open_cluster=true"])).unwrap();
        assert!(
            open.open_cluster()
                .unwrap()
                .unwrap()
                .contains("OPEN CLUSTER")
        );
        let keyed = AgentConfig::from_toml_with("", &set(&["cluster_key_file=\"/k\""])).unwrap();
        assert_eq!(keyed.open_cluster().unwrap(), None);
        for local in [
            "/ip4/127.0.0.1/tcp/7600",
            "/ip6/::1/tcp/7600",
            "/ip4/127.0.0.2/udp/1/quic-v1",
        ] {
            let c =
                AgentConfig::from_toml_with("", &set(&[&format!("listen=[\"{local}\"]")])).unwrap();
            assert_eq!(c.open_cluster().unwrap(), None, "{local}");
        }
        for exposed in [
            "/ip4/10.0.0.5/tcp/7600",
            "/ip6/::/tcp/7600",
            "/dns4/box.lan/tcp/7600",
        ] {
            let c = AgentConfig::from_toml_with(
                "",
                &set(&["listen=[\"/ip4/127.0.0.1/tcp/1\"]"])
                    .into_iter()
                    .chain([format!("listen=[\"/ip4/127.0.0.1/tcp/1\", \"{exposed}\"]")])
                    .collect::<Vec<_>>(),
            )
            .unwrap();
            assert!(c.open_cluster().is_err(), "{exposed}");
        }
    }

    #[test]
    fn every_setting_is_also_a_flag() {
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let c = AgentConfig::from_toml_with(
            "slot_ms = 1000\n[labels]\nsite = \"a\"\n",
            &set(&[
                "slot_ms=2000",
                "reserve.cpu=1.5",
                "labels.gpu=jetson",
                "name=box-7",
                "bootstrap=[\"/ip4/127.0.0.1/tcp/1\"]",
                "mdns=true",
                "peer_exchange=false",
                "coordinator.learning=true",
                "coordinator.explore_candidates=true",
            ]),
        )
        .unwrap();
        assert!(c.coordinator.learning && c.coordinator.explore_candidates);
        assert_eq!(c.slot_ms, 2000);
        assert_eq!(c.reserve.cpu, Some(1.5));
        assert_eq!(c.labels.get("site").map(String::as_str), Some("a"));
        assert_eq!(c.labels.get("gpu").map(String::as_str), Some("jetson"));
        assert_eq!(c.name, "box-7");
        assert_eq!(
            c.bootstrap,
            vec!["/ip4/127.0.0.1/tcp/1".parse::<Multiaddr>().unwrap()]
        );
        assert!(c.mdns && !c.peer_exchange);
        assert_eq!(c.policy, "tapfinger", "the learned policy is the default");
        let e = AgentConfig::from_toml_with("", &set(&["slot_mss=1"])).unwrap_err();
        assert_eq!(e.field, "slot_mss");
        let e = AgentConfig::from_toml_with("", &set(&["slot_ms"])).unwrap_err();
        assert_eq!(e.field, "--set");
        let e = AgentConfig::from_toml_with("", &set(&["slot_ms=\"x\""])).unwrap_err();
        assert!(
            e.to_string().contains("slot_ms") && e.to_string().contains("expected u64"),
            "{e}"
        );
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            ("reserv = { cpu = 1 }", "reserv"),
            ("listen = [\"not an address\"]", "listen"),
            ("bootstrap = [\"/ip4/1.2.3.4/tcp/x\"]", "bootstrap"),
            ("allow_peers = [\"nope\"]", "allow_peers"),
            ("[coordinator]\npeer = \"nope\"", "coordinator.peer"),
            ("api = \"0.0.0.0:7601\"", "api_token_file"),
            ("api = \"localhost\"", "api"),
            ("round_ms = 0", "round_ms"),
            ("slot_ms = 100\nround_ms = 200", "slot_ms"),
            ("reserve = { cpu = -1 }", "reserve.cpu"),
            ("offer = { tpu = 1 }", "tpu"),
            ("name = \"\"", "name"),
            ("plateau_window = 0", "plateau_window"),
            ("plateau_epsilon = 1.5", "plateau_epsilon"),
            (
                "reserve_for_urgent = true\nforecast_interval_ms = 0",
                "reserve_for_urgent",
            ),
        ];
        for (text, field) in cases {
            let e = AgentConfig::from_toml(text).unwrap_err();
            assert_eq!(e.field, field, "{text:?}: {e}");
        }
        let over = AgentConfig::from_toml("offer = { gpu = 2 }").unwrap();
        assert_eq!(over.offer(&box8()).unwrap_err().field, "offer.gpu");
        let reserve = AgentConfig::from_toml("reserve = { cpu = 9 }").unwrap();
        assert_eq!(reserve.offer(&box8()).unwrap_err().field, "reserve.cpu");
    }

    /// The GPU step divides a device by a whole number; anything else names the field.
    #[test]
    fn packing_shares_is_off_unless_asked() {
        assert!(!AgentConfig::default().pack_shares);
        let c = AgentConfig::from_toml("gpu_step = 0.25\npack_shares = true").unwrap();
        assert!(c.pack_shares);
    }

    #[test]
    fn the_gpu_step_divides_a_device() {
        let c = AgentConfig::from_toml("gpu_step = 0.25").unwrap();
        assert_eq!(c.gpu_units(), Some(4));
        assert_eq!(AgentConfig::default().gpu_units(), Some(1));
        for bad in ["0.3", "0", "-0.5", "2.0", "0.001"] {
            let e = AgentConfig::from_toml(&format!("gpu_step = {bad}")).unwrap_err();
            assert_eq!(e.field, "gpu_step", "{bad}");
        }
    }
}
