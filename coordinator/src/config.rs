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
    /// The cluster's private-network key file (the agents' `cluster_key_file`).
    pub cluster_key_file: Option<PathBuf>,
    /// Local HTTP API (status, metrics).
    pub api: String,
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
            api: "127.0.0.1:7701".into(),
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
        Ok(c)
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
        // The commented example holds the defaults.
        let example =
            CoordinatorConfig::from_toml(include_str!("../../deploy/coordinator.toml")).unwrap();
        assert_eq!(example, CoordinatorConfig::default());
        let e = CoordinatorConfig::from_toml("lr = -1.0").unwrap_err();
        assert!(e.to_string().contains("lr"), "{e}");
    }
}
