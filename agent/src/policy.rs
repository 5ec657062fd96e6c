//! The agent's policy: the learned TapFinger model by default, any baseline by name.
//!
//! The default model is the general model (it loads on every cluster: its features are CPU, GPU
//! and memory and the online speed estimates fed by the progress tasks report, not task types)
//! — the model the simulator uses wherever no preset model ships. It shares elastically: a task
//! starts at its minimum demand and every slot the node re-shares its spare units among its
//! running tasks. CPU and memory shares change while a task runs (its cgroup); a new GPU count
//! restarts a resumable task with its new devices (`TaskSpec::resumable`; a task that cannot
//! resume keeps its minimum GPUs). It is compiled into the binary so that a fresh install
//! schedules with it and no file can go missing.
//! An operator can point `model` at a checkpoint directory written by `tapfinger-sim train`
//! (`model.safetensors` + `train.json`); a model trained for other input sizes is refused at start with
//! both sizes named, never loaded half-way.

use std::path::Path;
use tapfinger::Policy;
use tapfinger::baselines::{self, BaselineContext};
use tapfinger::model::TapfingerPolicy;
use tapfinger::model::batch::Dims;

use tapfinger::model::checkpoint::GENERAL;

/// Input sizes of the agent's view: three resource kinds, one task type, and `window` pending tasks.
pub fn dims(window: usize) -> Dims {
    Dims::per_preset(3, 1, window)
}

/// The learned policy from checkpoint bytes (`model.safetensors`, `train.json`), refused if trained for
/// other input sizes. `recorder`: learning mode — the policy samples (exploration, and the
/// log-probabilities PPO needs are those of what it did) and records every decision there;
/// otherwise it decides greedily.
pub fn learned(
    bytes: Vec<u8>,
    json: &str,
    label: &str,
    window: usize,
    recorder: Option<tapfinger::model::Recorder>,
) -> anyhow::Result<Box<dyn Policy>> {
    let (infer, cfg, scenario) = tapfinger::model::load_bytes(&bytes, json, label, &dims(window))
        .map_err(|e| anyhow::anyhow!("model: {e}"))?;
    tracing::info!(model = %label, trained_on = %scenario, "learned policy loaded");
    let p = TapfingerPolicy::new(std::sync::Arc::new(infer), cfg);
    Ok(match recorder {
        Some(r) => Box::new(p.greedy(false).recording(r)),
        None => Box::new(p.greedy(true)),
    })
}

/// The checkpoint the agent starts from: `model` (a checkpoint directory) or the shipped model;
/// returns `model.safetensors`, `train.json` and a label for messages.
pub fn initial_checkpoint(model: Option<&Path>) -> anyhow::Result<(Vec<u8>, String, String)> {
    Ok(match model {
        Some(dir) => {
            let (bytes, json) = tapfinger::model::checkpoint::read_files(dir)
                .map_err(|e| anyhow::anyhow!("model: {e}"))?;
            (bytes, json, dir.display().to_string())
        }
        None => (
            GENERAL.model.to_vec(),
            GENERAL.config.to_string(),
            "shipped general model".to_string(),
        ),
    })
}

/// Build the policy named `name`; for `tapfinger`, from `model` (a checkpoint directory) or the
/// shipped model. The learned policy decides greedily: on a real cluster there is no exploration
/// to do, and greedy is what the shipped figures measure.
pub fn build(name: &str, model: Option<&Path>, window: usize) -> anyhow::Result<Box<dyn Policy>> {
    if name == "tapfinger" {
        let (bytes, json, label) = initial_checkpoint(model)?;
        return learned(bytes, &json, &label, window, None);
    }
    if model.is_some() {
        anyhow::bail!(
            "model: only the `tapfinger` policy uses a model (policy is `{name}`; an RLPTO model of your own runs as `tapfinger` with its `model`)"
        );
    }
    if name == "rlpto" {
        let m = &tapfinger::model::checkpoint::RLPTO;
        return learned(
            m.model.to_vec(),
            m.config,
            "shipped RLPTO model",
            window,
            None,
        );
    }
    let ctx = BaselineContext {
        num_types: 1,
        cpu_kind: 0,
        gpu_kind: SERVICE_KIND,
        profile: Vec::new(),
    };
    baselines::by_name(name, &ctx)
        .map_err(|e| anyhow::anyhow!("policy: {e}; or `tapfinger` (the default), or `rlpto`"))
}

/// The resource kind whose units count as attained service (GPUs, kind 1 of the agent's space).
pub const SERVICE_KIND: usize = 1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_model_loads_for_the_agent_dims() {
        let p = build("tapfinger", None, 10).unwrap();
        assert_eq!(p.name(), "tapfinger");
        // The general model, elastic, as the simulator runs it.
        assert!(p.elastic());
    }

    #[test]
    fn the_shipped_rlpto_model_loads_and_reads_a_forecast() {
        let p = build("rlpto", None, 10).unwrap();
        assert!(p.elastic());
        assert!(p.forecast_interval().is_some_and(|s| s > 0));
        assert!(build("rlpto", Some(Path::new("/nonexistent")), 10).is_err());
    }

    #[test]
    fn a_per_preset_model_for_other_sizes_is_refused_with_both_sizes() {
        let m = &tapfinger::model::checkpoint::EDGE_AGENT;
        let e = learned(m.model.to_vec(), m.config, "edge-agent", 7, None)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("window 10") && e.contains("7"), "{e}");
        // The general default reads any window.
        assert!(build("tapfinger", None, 7).is_ok());
    }

    #[test]
    fn the_elastic_baselines_run_here_too() {
        for name in ["tiresias", "tiresias-np"] {
            let p = build(name, None, 10).unwrap();
            assert_eq!(p.elastic(), !name.ends_with("-np"), "{name}");
        }
    }

    #[test]
    fn unknown_policies_and_stray_models_are_errors() {
        assert!(build("nope", None, 10).is_err());
        let e = build("drf", Some(Path::new("/x")), 10)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("only the `tapfinger` policy"), "{e}");
        let e = build("tapfinger", Some(Path::new("/nonexistent")), 10)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("/nonexistent/train.json") || e.contains("/nonexistent/model.safetensors"),
            "{e}"
        );
    }
}
