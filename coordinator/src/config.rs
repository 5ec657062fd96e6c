//! `coordinator.toml`: every setting with a default; unknown fields are refused with their name.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The coordinator's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CoordinatorConfig {
    /// Cluster name (the agents' `cluster`).
    pub cluster: String,
    /// Identity key, trainer checkpoint, published versions, received experience.
    pub data_dir: PathBuf,
    /// libp2p listen addresses.
    pub listen: Vec<libp2p::Multiaddr>,
    /// Agents to dial at start.
    pub bootstrap: Vec<libp2p::Multiaddr>,
    /// The cluster's private-network key file (the agents' `cluster_key_file`). Required when
    /// `listen` has an address other than loopback, unless `insecure_open_cluster` is set.
    pub cluster_key_file: Option<PathBuf>,
    /// Listen beyond loopback without a cluster key (a lab network closed by other means):
    /// any host that reaches the port could then send experience. Warned at every start.
    pub insecure_open_cluster: bool,
    /// If not empty, only these agents' peer ids may connect and send experience; others are
    /// disconnected, and refused (counted in `/metrics` as
    /// `tapfinger_coordinator_refused_total`).
    pub allow_peers: Vec<libp2p::PeerId>,
    /// HTTP API (status, metrics).
    pub api: String,
    /// Bearer-token file for the HTTP API (required when `api` is not a loopback address).
    pub api_token_file: Option<PathBuf>,
    /// Scenario whose simulator evaluates candidates (its kinds, types and window must be the
    /// agents'): `edge-agent` by default.
    pub scenario: String,
    /// The model training starts from when there is no checkpoint yet: `shipped` (the agents'
    /// compiled-in model) or a checkpoint directory (e.g. an untrained one).
    pub start: String,
    /// Decisions received before an update runs.
    pub update_decisions: usize,
    /// Validation episodes per evaluation.
    pub eval_episodes: usize,
    /// A candidate may be worse than the published version by at most this (slots of average
    /// JCT) and still be published; 0 means "not worse".
    pub tolerance: f64,
    /// Learning rate.
    pub lr: f64,
    /// Discount per decision (agents' streams never end; the simulator's episodes use 1).
    pub gamma: f32,
    /// PPO epochs per update.
    pub epochs: usize,
    /// Minibatch size.
    pub minibatch: usize,
    /// Seed.
    pub seed: u64,
    /// Most received batches kept waiting for an update (oldest dropped and counted).
    pub inbox_max_batches: usize,
    /// The guard (the `guard` module): judge the workload the agents observed and switch the
    /// cluster to a baseline when the learned policy does worse there, and back.
    pub guard: bool,
    /// Seconds between two judgements (at least; see `guard_max_share`).
    pub guard_every_s: u64,
    /// The most of one core the guard may use on average: after a judgement of `t` seconds the
    /// next waits at least `t / guard_max_share`.
    pub guard_max_share: f64,
    /// Finished tasks a workload needs before it is judged (fewer say too little).
    pub guard_min_tasks: usize,
    /// Boxes whose pushed workloads a judgement needs: only tasks another box reports alike
    /// are judged, so one box cannot pick the cluster's policy (1: a one-box cluster).
    pub guard_min_boxes: usize,
    /// How much better (a fraction of average JCT on the twin, beyond the twin's own error on
    /// the policy in force and one standard error of the gain over the tasks judged) another
    /// policy must be to replace the one in force.
    pub guard_margin: f64,
    /// Fine-tuning on the twin: every `tune_every_s`, after a judgement, the version in use is
    /// trained this many iterations on the twin of the judged workload's earlier tasks and
    /// published only if it beats every deployable baseline, and itself by 5 %, on the latest
    /// `tune_holdout` share of them (0: never).
    pub tune_iterations: u64,
    /// Seconds between two fine-tunes on the twin.
    pub tune_every_s: u64,
    /// The latest share of a workload's tasks the fine-tune's gate judges on (never trained on).
    pub tune_holdout: f64,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        Self {
            cluster: "default".into(),
            data_dir: PathBuf::from("/var/lib/tapfinger-coordinator"),
            listen: vec![
                libp2p::Multiaddr::empty()
                    .with(libp2p::multiaddr::Protocol::Ip4(
                        std::net::Ipv4Addr::UNSPECIFIED,
                    ))
                    .with(libp2p::multiaddr::Protocol::Tcp(7700)),
            ],
            bootstrap: Vec::new(),
            cluster_key_file: None,
            insecure_open_cluster: false,
            allow_peers: Vec::new(),
            api: "127.0.0.1:7701".into(),
            api_token_file: None,
            scenario: "edge-agent".into(),
            start: "shipped".into(),
            update_decisions: 512,
            eval_episodes: 4,
            tolerance: 0.0,
            lr: 1e-4,
            gamma: 0.99,
            epochs: 2,
            minibatch: 256,
            seed: 0,
            inbox_max_batches: 10_000,
            guard: true,
            guard_every_s: 300,
            guard_max_share: 0.05,
            guard_min_tasks: 20,
            guard_min_boxes: 2,
            guard_margin: tapfinger_sim::guard::MARGIN,
            tune_iterations: 20,
            tune_every_s: 6 * 3600,
            tune_holdout: 0.2,
        }
    }
}

impl CoordinatorConfig {
    /// Parse `coordinator.toml`.
    pub fn from_toml(text: &str) -> anyhow::Result<Self> {
        let c: Self = toml::from_str(text).map_err(|e| anyhow::anyhow!("coordinator.toml: {e}"))?;
        anyhow::ensure!(c.update_decisions > 0, "update_decisions: must be positive");
        anyhow::ensure!(c.lr > 0.0, "lr: must be positive");
        anyhow::ensure!(c.tolerance >= 0.0, "tolerance: must not be negative");
        // A margin below 0 would switch to a policy that did worse; one of 1 or more could never
        // be met (no policy finishes tasks in no time).
        anyhow::ensure!(
            (0.0..1.0).contains(&c.guard_margin),
            "guard_margin: {} is outside [0, 1): it is the fraction of average JCT another policy must gain to be chosen",
            c.guard_margin
        );
        anyhow::ensure!(
            c.guard_max_share > 0.0 && c.guard_max_share <= 1.0,
            "guard_max_share: {} is outside (0, 1]: it is a share of one core",
            c.guard_max_share
        );
        anyhow::ensure!(
            (0.0..1.0).contains(&c.tune_holdout),
            "tune_holdout: {} is outside [0, 1): it is a share of the workload's tasks",
            c.tune_holdout
        );
        c.check_api()?;
        Ok(c)
    }

    /// The API's address: a non-loopback one needs `api_token_file`.
    pub fn check_api(&self) -> anyhow::Result<()> {
        let api: std::net::SocketAddr = self
            .api
            .parse()
            .map_err(|e| anyhow::anyhow!("api: {:?} is not an address:port ({e})", self.api))?;
        anyhow::ensure!(
            api.ip().is_loopback() || self.api_token_file.is_some(),
            "api_token_file: required when the API listens on {} (not loopback); make one with `tapfinger-agent keygen --token /etc/tapfinger/coordinator.token`",
            api.ip()
        );
        Ok(())
    }

    /// Like the agents' check: `Ok(Some(warning))` for an open cluster asked for, an error for
    /// one nobody asked for, `Ok(None)` when the network is closed (a key, or loopback only).
    pub fn open_cluster(&self) -> anyhow::Result<Option<String>> {
        let exposed = tapfinger_net::secret::exposed(&self.listen);
        if exposed.is_empty() || self.cluster_key_file.is_some() {
            return Ok(None);
        }
        let what = format!(
            "the coordinator listens on {} (not loopback) without a cluster key, so any host that reaches it could send experience it trains on",
            exposed.join(", ")
        );
        anyhow::ensure!(
            self.insecure_open_cluster,
            "cluster_key_file: {what}. Set cluster_key_file to the agents' swarm key (`tapfinger-agent keygen --swarm-key PATH` makes one), or listen on 127.0.0.1 only; a lab that wants an open cluster sets insecure_open_cluster = true"
        );
        Ok(Some(format!(
            "OPEN CLUSTER (insecure_open_cluster = true): {what}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_parse_and_unknown_fields_are_named() {
        let c = CoordinatorConfig::from_toml("").unwrap();
        assert_eq!(c.scenario, "edge-agent");
        let e = CoordinatorConfig::from_toml("learning_rate = 1").unwrap_err();
        assert!(e.to_string().contains("learning_rate"), "{e}");
        // The commented example holds the defaults, and the cluster key every deployment needs.
        let example =
            CoordinatorConfig::from_toml(include_str!("../../deploy/coordinator.toml")).unwrap();
        assert_eq!(
            example,
            CoordinatorConfig {
                cluster_key_file: Some("/etc/tapfinger/swarm.key".into()),
                ..CoordinatorConfig::default()
            }
        );
        assert!(example.open_cluster().unwrap().is_none());
        let e = CoordinatorConfig::from_toml("lr = -1.0").unwrap_err();
        assert!(e.to_string().contains("lr"), "{e}");
        for (line, field) in [
            ("guard_margin = -5", "guard_margin"),
            ("guard_margin = 1.0", "guard_margin"),
            ("guard_max_share = 0", "guard_max_share"),
            ("tune_holdout = 1.5", "tune_holdout"),
        ] {
            let e = CoordinatorConfig::from_toml(line).unwrap_err();
            assert!(e.to_string().contains(field), "{line}: {e}");
        }
    }

    #[test]
    fn an_open_coordinator_and_an_api_without_a_token_are_refused() {
        // The shipped defaults listen on 0.0.0.0 without a key.
        let e = CoordinatorConfig::default().open_cluster().unwrap_err();
        assert!(
            e.to_string().contains("cluster_key_file") && e.to_string().contains("keygen"),
            "{e}"
        );
        let open = CoordinatorConfig::from_toml("insecure_open_cluster = true").unwrap();
        assert!(
            open.open_cluster()
                .unwrap()
                .unwrap()
                .contains("OPEN CLUSTER")
        );
        let keyed = CoordinatorConfig::from_toml("cluster_key_file = \"/k\"").unwrap();
        assert!(keyed.open_cluster().unwrap().is_none());
        let local = CoordinatorConfig::from_toml("listen = [\"/ip4/127.0.0.1/tcp/7700\"]").unwrap();
        assert!(local.open_cluster().unwrap().is_none());
        let e = CoordinatorConfig::from_toml("api = \"0.0.0.0:7701\"").unwrap_err();
        assert!(e.to_string().contains("api_token_file"), "{e}");
        CoordinatorConfig::from_toml("api = \"0.0.0.0:7701\"\napi_token_file = \"/t\"").unwrap();
        let e = CoordinatorConfig::from_toml("allow_peers = [\"nope\"]").unwrap_err();
        assert!(e.to_string().contains("allow_peers"), "{e}");
    }
}
