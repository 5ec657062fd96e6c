//! Trained models on disk and in the binary: the checkpoint folder's files, loading a model's
//! weights from them for deciding (refused with both sizes named when trained for other inputs),
//! and the models shipped with the project, one per preset, compiled in so that the learned
//! policy works with no training step and no file that can go missing.
//!
//! A checkpoint folder is what `tapfinger-sim train` writes: [`MODEL_FILE`] (the weights,
//! safetensors), [`CONFIG_FILE`] (the training configuration, the scenario and the iteration;
//! only the network's part is read here), [`OPTIM_FILE`] (the optimizer's state, for resuming)
//! and `curve.csv` (and [`RECORD_FILE`], for resuming). The shipped ones live in
//! `shared/models/<preset>/`. Loading for deciding
//! needs no burn ([`crate::net::infer`]); with the feature `train`, `load_net_bytes` and
//! `Shipped::load_net` give the training network, and a folder of an older version, whose
//! weights are only a burn record ([`RECORD_FILE`]), is read and converted.

use super::batch::Dims;
#[cfg(feature = "train")]
use super::net::Net;
use super::net::NetConfig;
use super::net::infer::Infer;
use std::path::Path;

/// File name of the weights in a checkpoint folder.
pub const MODEL_FILE: &str = "model.safetensors";
/// File name of the training network's burn record in a checkpoint folder: its weights with
/// burn's parameter ids, which the optimizer's state ([`OPTIM_FILE`]) refers to, so that a
/// resumed run continues exactly. Training writes it beside [`MODEL_FILE`]; a folder of an older
/// version has only it, read by a build with the feature `train` (`tapfinger-sim convert-model
/// DIR` writes its [`MODEL_FILE`]).
pub const RECORD_FILE: &str = "model.bpk";
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

/// The network configuration and scenario of a `train.json`, checked against the cluster's input
/// sizes: a general model (feature schema 5, or 3 for RLPTO) loads on every cluster; a
/// per-preset model trained for other input sizes is refused with both sizes named, since its
/// weights would silently misread features; a model of a feature schema this build does not
/// know is refused naming both versions.
fn checked_config(
    train_json: &str,
    label: &str,
    dims: &Dims,
) -> Result<(NetConfig, String), LoadError> {
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
    Ok((cfg, meta.scenario))
}

/// The model of the bytes of a `model.safetensors` and the text of its `train.json`, for
/// deciding; `label` names the source in errors. The configuration is checked (a per-preset
/// model only on the input sizes it was trained for, a known feature schema), and every tensor the decision pass reads against the shape the
/// configuration gives it. Returns the weights, the configuration and the scenario it was
/// trained on.
pub fn load_bytes(
    bytes: &[u8],
    train_json: &str,
    label: &str,
    dims: &Dims,
) -> Result<(Infer, NetConfig, String), LoadError> {
    let (cfg, scenario) = checked_config(train_json, label, dims)?;
    let infer = Infer::from_safetensors(bytes, &cfg).map_err(|e| LoadError {
        label: label.to_string(),
        reason: e.to_string(),
    })?;
    Ok((infer, cfg, scenario))
}

/// [`load_bytes`] for training: the burn network (feature `train`), every tensor of it, the
/// critic's included.
#[cfg(feature = "train")]
pub fn load_net_bytes(
    bytes: Vec<u8>,
    train_json: &str,
    label: &str,
    dims: &Dims,
) -> Result<(Net, NetConfig, String), LoadError> {
    let (cfg, scenario) = checked_config(train_json, label, dims)?;
    let net = Net::from_safetensors(bytes, &cfg, &burn::tensor::Device::flex()).map_err(|e| {
        LoadError {
            label: label.to_string(),
            reason: e,
        }
    })?;
    Ok((net, cfg, scenario))
}

/// The weights of a burn record ([`RECORD_FILE`]) as safetensors (feature `train`).
#[cfg(feature = "train")]
pub fn convert_legacy(bytes: Vec<u8>, train_json: &str, label: &str) -> Result<Vec<u8>, LoadError> {
    let err = |reason: String| LoadError {
        label: label.to_string(),
        reason,
    };
    let meta: CheckpointMeta = serde_json::from_str(train_json).map_err(|e| err(e.to_string()))?;
    let cfg = meta.config.net;
    let record = burn::store::ModuleRecord::from_bytes(burn::tensor::Bytes::from_bytes_vec(bytes))
        .map_err(|e| err(e.to_string()))?;
    let net = burn::module::Module::try_load_record(
        Net::new(&cfg, &burn::tensor::Device::flex()),
        record,
    )
    .map_err(|e| err(e.to_string()))?;
    net.to_safetensors().map_err(err)
}

/// Load a model from a checkpoint folder, or from the weights file in it with its `train.json`
/// beside it, for deciding.
pub fn load_path(path: &Path, dims: &Dims) -> Result<(Infer, NetConfig, String), LoadError> {
    let (bytes, json) = read_path(path)?;
    load_bytes(&bytes, &json, &path.display().to_string(), dims)
}

/// [`load_path`] for training (feature `train`).
#[cfg(feature = "train")]
pub fn load_net_path(path: &Path, dims: &Dims) -> Result<(Net, NetConfig, String), LoadError> {
    let (bytes, json) = read_path(path)?;
    load_net_bytes(bytes, &json, &path.display().to_string(), dims)
}

/// The weights (safetensors) and `train.json` of a checkpoint folder or of a weights file in one.
pub fn read_path(path: &Path) -> Result<(Vec<u8>, String), LoadError> {
    if !path.exists() {
        return Err(LoadError {
            label: path.display().to_string(),
            reason: format!(
                "no such file or folder (expected a checkpoint folder written by `tapfinger-sim train`, or the {MODEL_FILE} in it)"
            ),
        });
    }
    if path.is_dir() {
        return read_files(path);
    }
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let json = read_text(&dir.join(CONFIG_FILE))?;
    let bytes = read(path)?;
    let legacy = path.file_name().is_some_and(|f| f == RECORD_FILE);
    Ok((
        if legacy {
            legacy_weights(path, bytes, &json)?
        } else {
            bytes
        },
        json,
    ))
}

fn read(p: &Path) -> Result<Vec<u8>, LoadError> {
    std::fs::read(p).map_err(|e| LoadError {
        label: p.display().to_string(),
        reason: e.to_string(),
    })
}

fn read_text(p: &Path) -> Result<String, LoadError> {
    String::from_utf8(read(p)?).map_err(|_| LoadError {
        label: p.display().to_string(),
        reason: "not UTF-8".into(),
    })
}

/// The weights of an older checkpoint's burn record at `path`: converted with the feature
/// `train`, refused (saying how to convert) without it.
fn legacy_weights(path: &Path, bytes: Vec<u8>, json: &str) -> Result<Vec<u8>, LoadError> {
    #[cfg(feature = "train")]
    {
        convert_legacy(bytes, json, &path.display().to_string())
    }
    #[cfg(not(feature = "train"))]
    {
        let _ = (bytes, json);
        Err(LoadError {
            label: path.display().to_string(),
            reason: format!(
                "a burn record of an older version; this build reads {MODEL_FILE}: convert the folder with `tapfinger-sim convert-model DIR` (built with `--features train`)"
            ),
        })
    }
}

/// The weights (safetensors) and the text of `train.json` in a checkpoint folder; a folder of
/// an older version ([`RECORD_FILE`], no [`MODEL_FILE`]) is converted with the feature
/// `train` and refused, saying how to convert it, without.
pub fn read_files(dir: &Path) -> Result<(Vec<u8>, String), LoadError> {
    let json = read_text(&dir.join(CONFIG_FILE))?;
    let model = dir.join(MODEL_FILE);
    let legacy = dir.join(RECORD_FILE);
    if !model.exists() && legacy.exists() {
        let bytes = read(&legacy)?;
        return Ok((legacy_weights(&legacy, bytes, &json)?, json));
    }
    Ok((read(&model)?, json))
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

/// The weights and `train.json` of a general model (feature schema 5) for the general schema
/// with sizes (8): the input projections of pending and running tasks gain zero rows for the
/// features schema 8 adds, every other tensor is kept, so the widened model decides exactly as
/// the one it came from until training moves the new rows. A fine-tune's warm start
/// (`tapfinger-sim train --from general --sizes`); `label` names the source in errors.
pub fn widen_to_sized(
    bytes: &[u8],
    train_json: &str,
    label: &str,
) -> Result<(Vec<u8>, String), LoadError> {
    use super::batch::Schema;
    let err = |reason: String| LoadError {
        label: label.to_string(),
        reason,
    };
    let (cfg, _) = net_config(train_json).map_err(|e| err(e.reason))?;
    if cfg.dims.schema != Schema::General {
        return Err(err(format!(
            "feature schema {}: only a general model (schema {}) widens to schema {}",
            cfg.dims.schema,
            Schema::General,
            Schema::Sized
        )));
    }
    let to = Dims {
        schema: Schema::Sized,
        ..cfg.dims.clone()
    };
    let tensors = safetensors::SafeTensors::deserialize(bytes).map_err(|e| err(e.to_string()))?;
    let (_, meta) =
        safetensors::SafeTensors::read_metadata(bytes).map_err(|e| err(e.to_string()))?;
    let mut out: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, t) in tensors.tensors() {
        let (mut shape, mut data) = (t.shape().to_vec(), t.data().to_vec());
        let node = (0..4).find(|n| name == format!("input.{n}.weight"));
        if let Some(n) = node.filter(|&n| to.feature_width(n) != cfg.dims.feature_width(n)) {
            let (from_w, to_w) = (cfg.dims.feature_width(n), to.feature_width(n));
            if t.dtype() != safetensors::Dtype::F32 || shape.len() != 2 || shape[0] != from_w {
                return Err(err(format!(
                    "tensor `{name}` has shape {shape:?}, not [{from_w}, width] of 32-bit floats"
                )));
            }
            // `inp × out`, row-major: a new input is a new row, zero so it changes nothing.
            data.resize(to_w * shape[1] * 4, 0);
            shape[0] = to_w;
        }
        out.push((name, t.dtype(), shape, data));
    }
    let views = out
        .iter()
        .map(|(name, dtype, shape, data)| {
            safetensors::tensor::TensorView::new(*dtype, shape.clone(), data)
                .map(|v| (name.clone(), v))
                .map_err(|e| err(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let bytes =
        safetensors::serialize(views, meta.metadata().clone()).map_err(|e| err(e.to_string()))?;
    let mut json: serde_json::Value =
        serde_json::from_str(train_json).map_err(|e| err(e.to_string()))?;
    json["config"]["net"]["dims"]["schema"] = Schema::Sized.number().into();
    Ok((bytes, json.to_string()))
}

/// A model compiled into the binary.
#[derive(Debug)]
pub struct Shipped {
    /// The preset it was trained on (and is loaded for).
    pub scenario: &'static str,
    /// `model.safetensors`.
    pub model: &'static [u8],
    /// `train.json`.
    pub config: &'static str,
}

impl Shipped {
    /// Write it as a checkpoint folder (`model.safetensors`, `train.json`) with `edit` applied to its
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
        std::fs::write(dir.join(MODEL_FILE), self.model)?;
        std::fs::write(dir.join(CONFIG_FILE), json.to_string())
    }

    /// The model for deciding, checked against the input sizes.
    pub fn load(&self, dims: &Dims) -> Result<(Infer, NetConfig), LoadError> {
        load_bytes(self.model, self.config, &self.label(), dims).map(|(m, cfg, _)| (m, cfg))
    }

    /// The training network (feature `train`), checked against the input sizes.
    #[cfg(feature = "train")]
    pub fn load_net(&self, dims: &Dims) -> Result<(Net, NetConfig), LoadError> {
        load_net_bytes(self.model.to_vec(), self.config, &self.label(), dims)
            .map(|(net, cfg, _)| (net, cfg))
    }

    fn label(&self) -> String {
        format!("shipped model for {}", self.scenario)
    }
}

macro_rules! shipped {
    ($($(#[$doc:meta])* $konst:ident = $name:literal;)*) => {
        $(
            $(#[$doc])*
            pub const $konst: Shipped = Shipped {
                scenario: $name,
                model: include_bytes!(concat!("../../models/", $name, "/model.safetensors")),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The input sizes a shipped model loads with: its own (a per-preset model), or any
    /// window of its schema (a general one).
    fn own_dims(m: &Shipped) -> Dims {
        net_config(m.config).unwrap().0.dims
    }

    #[test]
    fn every_shipped_model_loads_for_deciding_and_for_training() {
        for m in SHIPPED {
            let dims = own_dims(m);
            let (infer, cfg) = m.load(&dims).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(infer.max_units(), cfg.max_units, "{}", m.scenario);
            m.load_net(&dims).unwrap_or_else(|e| panic!("{e}"));
        }
    }

    #[test]
    fn weights_of_another_shape_are_refused_naming_the_tensor_and_both_shapes() {
        let mut json: serde_json::Value = serde_json::from_str(GENERAL.config).unwrap();
        json["config"]["net"]["width"] = serde_json::json!(32);
        let dims = own_dims(&GENERAL);
        let e = load_bytes(GENERAL.model, &json.to_string(), "edited", &dims).unwrap_err();
        assert!(e.to_string().contains("input.0.weight"), "{e}");
        assert!(
            e.to_string().contains("needs [") && e.to_string().contains(", 32]"),
            "{e}"
        );
        let e = load_bytes(b"not weights", GENERAL.config, "junk", &dims).unwrap_err();
        assert!(e.to_string().contains("not a safetensors"), "{e}");
    }

    /// A folder of an older version (a burn record) is read as the same weights, and
    /// `convert_legacy` writes exactly what the training network's own export writes.
    #[test]
    fn an_older_folder_s_burn_record_reads_as_the_same_weights() {
        let (cfg, _) = net_config(GENERAL.config).unwrap();
        let device = burn::tensor::Device::flex();
        device.seed(4);
        let net = Net::new(&cfg, &device);
        let record = burn::module::Module::into_record(net.clone())
            .into_bytes()
            .unwrap()
            .to_vec();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(RECORD_FILE), record).unwrap();
        std::fs::write(dir.path().join(CONFIG_FILE), GENERAL.config).unwrap();
        let (weights, _) = read_files(dir.path()).unwrap();
        let own = net.to_safetensors().unwrap();
        let tensors = |b: &[u8]| {
            let t = safetensors::SafeTensors::deserialize(b).unwrap();
            let mut v: Vec<(String, Vec<usize>, Vec<u8>)> = t
                .tensors()
                .into_iter()
                .map(|(n, v)| (n, v.shape().to_vec(), v.data().to_vec()))
                .collect();
            v.sort();
            v
        };
        let (a, b) = (tensors(&weights), tensors(&own));
        assert!(a.len() > 40, "{} tensors", a.len());
        assert!(
            a == b,
            "the converted record differs from the network's own export"
        );
        let (_, cfg2, _) = load_path(dir.path(), &cfg.dims).unwrap();
        assert_eq!(cfg2, cfg);
    }
}
