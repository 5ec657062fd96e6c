//! Trained models shipped with the simulator, one per preset, compiled into the binary so that
//! `--policy tapfinger` works on a preset with no training step and from any directory.
//!
//! Each lives in `sim/models/<preset>/` as the checkpoint that `tapfinger-sim train` wrote
//! (`model.bpk`, `train.json`, `curve.csv`); `docs/MODELS.md` gives the command that produced it.
//! A user's own model (`--model PATH`) always takes precedence.

use crate::train::{TrainError, load_net_bytes};
use tapfinger::model::batch::Dims;
use tapfinger::model::net::{Net, NetConfig};

/// A model compiled into the binary.
#[derive(Debug)]
pub struct Shipped {
    /// The preset it was trained on (and is loaded for).
    pub scenario: &'static str,
    /// `model.bpk`.
    pub model: &'static [u8],
    /// `train.json`.
    pub config: &'static str,
}

impl Shipped {
    /// The network, checked against the scenario's input sizes.
    pub fn load(&self, dims: &Dims) -> Result<(Net, NetConfig), TrainError> {
        load_net_bytes(
            self.model.to_vec(),
            self.config,
            &format!("shipped model for {}", self.scenario),
            dims,
        )
    }
}

macro_rules! shipped {
    ($($name:literal),* $(,)?) => {
        &[$(Shipped {
            scenario: $name,
            model: include_bytes!(concat!("../models/", $name, "/model.bpk")),
            config: include_str!(concat!("../models/", $name, "/train.json")),
        }),*]
    };
}

/// Every shipped model.
pub const SHIPPED: &[Shipped] = shipped![
    "hetero6",
    "synthetic6-l3",
    "multitask3",
    "synthetic3",
    "synthetic6-l2",
    "synthetic6-l4",
    "edge-synergy",
    "edge-agent",
];

/// The model shipped for a scenario name, if any.
pub fn shipped(scenario: &str) -> Option<&'static Shipped> {
    SHIPPED.iter().find(|m| m.scenario == scenario)
}
