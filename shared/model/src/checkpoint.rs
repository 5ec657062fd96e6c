//! Trained models on disk and in the binary: the checkpoint folder's files, loading a network
//! from them (refused with both sizes named when trained for other inputs), and the models
//! shipped with the project, one per preset, compiled in so that the learned policy works with no
//! training step and no file that can go missing.
//!
//! A checkpoint folder is what `tapfinger-sim train` writes: [`MODEL_FILE`] (the burn record),
//! [`CONFIG_FILE`] (the training configuration, the scenario and the iteration; only the
//! network's part is read here), [`OPTIM_FILE`] (the optimizer's state, for resuming) and
//! `curve.csv`. The shipped ones live in `shared/models/<preset>/`.

use super::batch::Dims;
use super::net::{Net, NetConfig};
use burn::tensor::Device;
use std::path::Path;

/// File name of the weights in a checkpoint folder.
pub const MODEL_FILE: &str = "model.bpk";
/// File name of the training configuration in a checkpoint folder.
pub const CONFIG_FILE: &str = "train.json";
/// File name of the optimizer's state (Adam's moments) in a checkpoint folder.
pub const OPTIM_FILE: &str = "optim.bpk";

/// Why a checkpoint could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("{label}: {reason}")]
pub struct LoadError {
    /// Where the checkpoint came from (a path, or "shipped model for ...").
    pub label: String,
    /// What is wrong.
    pub reason: String,
}

/// The part of a checkpoint's `train.json` needed to rebuild the network (the trainer writes
/// more; the rest is ignored here so that the agent does not depend on the trainer).
#[derive(serde::Deserialize)]
struct CheckpointMeta {
    /// The training configuration, of which only the network's is read.
    config: CheckpointNet,
    /// The scenario it was trained on (a preset model loads only there).
    scenario: String,
}

#[derive(serde::Deserialize)]
struct CheckpointNet {
    /// What rebuilds the network.
    net: NetConfig,
}

/// Load a network from the bytes of a `model.bpk` and the text of its `train.json`; `label` names
/// the source in errors. A general model (feature schema 5, or 3 for RLPTO) loads on every cluster; a per-preset
/// model trained for other input sizes is refused with both sizes named, since loading it would
/// fail deep inside burn with a shape error or, worse, silently misread features; a model of a
/// feature schema this build does not know is refused naming both versions. Returns the network, its configuration and the scenario it was trained on.
pub fn load_bytes(
    bytes: Vec<u8>,
    train_json: &str,
    label: &str,
    dims: &Dims,
) -> Result<(Net, NetConfig, String), LoadError> {
    let err = |reason: String| LoadError {
        label: label.to_string(),
        reason,
    };
    // A schema this build does not read fails here, naming those it reads
    // ([`super::batch::UnknownSchema`]).
    let meta: CheckpointMeta = serde_json::from_str(train_json).map_err(|e| err(e.to_string()))?;
    // What `NetConfig` no longer has: the crowding mask's factor (0 or absent: off). A model
    // trained with the mask on would decide otherwise without it, so it is refused.
    let crowding = serde_json::from_str::<serde_json::Value>(train_json)
        .ok()
        .and_then(|v| v["config"]["net"]["crowding"].as_u64())
        .unwrap_or(0);
    if crowding > 0 {
        return Err(err(format!(
            "trained with the crowding mask (crowding {crowding}), which this build no longer has (docs/DECISIONS.md, section 5): retrain without it"
        )));
    }
    let cfg = meta.config.net;
    if dims.is_general() && !cfg.dims.is_general() {
        return Err(err(format!(
            "written with feature schema {} (scenario {}); a general model (feature schema {}) is needed here",
            cfg.dims.schema,
            meta.scenario,
            super::batch::Schema::General
        )));
    }
    // A general model reads every cluster; a per-preset one only the sizes it was trained for.
    if !cfg.dims.is_general() && cfg.dims != *dims {
        return Err(err(format!(
            "trained for {} resource kind(s), {} task type(s), window {} (scenario {}); this cluster has {}, {}, {}",
            cfg.dims.kinds,
            cfg.dims.types,
            cfg.dims.window,
            meta.scenario,
            dims.kinds,
            dims.types,
            dims.window
        )));
    }
    let record = burn::store::ModuleRecord::from_bytes(burn::tensor::Bytes::from_bytes_vec(bytes))
        .map_err(|e| err(e.to_string()))?;
    let net = burn::module::Module::try_load_record(Net::new(&cfg, &Device::flex()), record)
        .map_err(|e| err(e.to_string()))?;
    // The policy decides with the decision pass (`net::infer`), which reads these weights into
    // plain buffers; where it could not, the policy would pass every step. Refused here, loudly,
    // rather than an agent that silently schedules nothing. (It reads every network `Net::new`
    // builds: its tests cover each named variant and the shipped model.)
    if net.infer().is_none() {
        return Err(err(
            "its weights cannot be read by the decision pass (a layer of a form this build does not decide with): use the tapfinger that trained it, or retrain".into(),
        ));
    }
    Ok((net, cfg, meta.scenario))
}

/// Load a network from a checkpoint folder, or from a `model.bpk` with its `train.json` beside
/// it.
pub fn load_path(path: &Path, dims: &Dims) -> Result<(Net, NetConfig, String), LoadError> {
    let label = path.display().to_string();
    if !path.exists() {
        return Err(LoadError {
            label,
            reason: "no such file or folder (expected a checkpoint folder written by `tapfinger-sim train`, or the model.bpk in it)".into(),
        });
    }
    let (dir, model) = if path.is_dir() {
        (path.to_path_buf(), path.join(MODEL_FILE))
    } else {
        (
            path.parent().map(Path::to_path_buf).unwrap_or_default(),
            path.to_path_buf(),
        )
    };
    let read = |p: &Path| {
        std::fs::read(p).map_err(|e| LoadError {
            label: p.display().to_string(),
            reason: e.to_string(),
        })
    };
    let json = dir.join(CONFIG_FILE);
    let text = String::from_utf8(read(&json)?).map_err(|_| LoadError {
        label: json.display().to_string(),
        reason: "not UTF-8".into(),
    })?;
    load_bytes(read(&model)?, &text, &model.display().to_string(), dims)
}

/// The bytes of `model.bpk` and the text of `train.json` in a checkpoint folder.
pub fn read_files(dir: &Path) -> Result<(Vec<u8>, String), LoadError> {
    let read = |f: &str| {
        let p = dir.join(f);
        std::fs::read(&p).map_err(|e| LoadError {
            label: p.display().to_string(),
            reason: e.to_string(),
        })
    };
    let json = String::from_utf8(read(CONFIG_FILE)?).map_err(|_| LoadError {
        label: dir.join(CONFIG_FILE).display().to_string(),
        reason: "not UTF-8".into(),
    })?;
    Ok((read(MODEL_FILE)?, json))
}

/// The network configuration (sizes included) and the scenario a `train.json` describes, without
/// loading weights.
pub fn net_config(train_json: &str) -> Result<(NetConfig, String), LoadError> {
    let meta: CheckpointMeta = serde_json::from_str(train_json).map_err(|e| LoadError {
        label: CONFIG_FILE.into(),
        reason: e.to_string(),
    })?;
    Ok((meta.config.net, meta.scenario))
}

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
    /// Write it as a checkpoint folder (`model.bpk`, `train.json`) with `edit` applied to its
    /// `train.json` first, e.g. to run the same weights with another `focus` or sharing
    /// (`config.net.focus`): what `--model DIR` and `--from DIR` read.
    pub fn write_to(
        &self,
        dir: &Path,
        edit: impl FnOnce(&mut serde_json::Value),
    ) -> std::io::Result<()> {
        let mut json: serde_json::Value =
            serde_json::from_str(self.config).map_err(std::io::Error::other)?;
        edit(&mut json);
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("model.bpk"), self.model)?;
        std::fs::write(dir.join("train.json"), json.to_string())
    }

    /// The network, checked against the input sizes.
    pub fn load(&self, dims: &Dims) -> Result<(Net, NetConfig), LoadError> {
        load_bytes(
            self.model.to_vec(),
            self.config,
            &format!("shipped model for {}", self.scenario),
            dims,
        )
        .map(|(net, cfg, _)| (net, cfg))
    }
}

macro_rules! shipped {
    ($($(#[$doc:meta])* $konst:ident = $name:literal;)*) => {
        $(
            $(#[$doc])*
            pub const $konst: Shipped = Shipped {
                scenario: $name,
                model: include_bytes!(concat!("../../models/", $name, "/model.bpk")),
                config: include_str!(concat!("../../models/", $name, "/train.json")),
            };
        )*
        /// Every shipped model. (A binary that names one model, as the agent does, carries only
        /// that one.)
        pub const SHIPPED: &[Shipped] = &[$($konst),*];
    };
}

shipped! {
    /// For the `hetero6` preset (and, by its input sizes, `hetero3` and `hetero12`).
    HETERO6 = "hetero6";
    /// For `synthetic6-l3`.
    SYNTHETIC6_L3 = "synthetic6-l3";
    /// For `multitask3`.
    MULTITASK3 = "multitask3";
    /// For `synthetic3`.
    SYNTHETIC3 = "synthetic3";
    /// For `synthetic6-l2`.
    SYNTHETIC6_L2 = "synthetic6-l2";
    /// For `synthetic6-l4`.
    SYNTHETIC6_L4 = "synthetic6-l4";
    /// For `edge-synergy`.
    EDGE_SYNERGY = "edge-synergy";
    /// For `edge-agent` (the agent's resource kinds and units, one task type); the agent's
    /// default before the general model.
    EDGE_AGENT = "edge-agent";
    /// The general model (the general feature schema): trained on generated scenarios, it loads on every
    /// cluster; the learned policy's default wherever no model ships for the scenario, and the
    /// agent's default.
    GENERAL = "general";
    /// The RLPTO model (feature schema 3: the general features with priority classes,
    /// convergence and the arrival forecast, trained on the cluster reward with
    /// `train --rlpto`): the policy `rlpto`.
    RLPTO = "rlpto";
}

/// Presets served by another preset's model of the same input sizes: `hetero3` and `hetero12`
/// are `hetero6`'s servers at other counts, made to test that model off its own cluster size.
const SAME_SIZES: &[(&str, &str)] = &[("hetero3", "hetero6"), ("hetero12", "hetero6")];

/// The model shipped for a scenario name, if any (the per-preset models, and `hetero6`'s for
/// `hetero3` and `hetero12`; [`GENERAL`] is the default for every other scenario).
pub fn shipped(scenario: &str) -> Option<&'static Shipped> {
    let name = SAME_SIZES
        .iter()
        .find(|(s, _)| *s == scenario)
        .map_or(scenario, |(_, m)| m);
    SHIPPED
        .iter()
        .find(|m| m.scenario == name && ![GENERAL.scenario, RLPTO.scenario].contains(&m.scenario))
}
