//! The agent's policy: the learned TapFinger model by default, any baseline by name.
//!
//! The default model is the general model (it loads on every cluster: its features are CPU, GPU
//! and memory and the online speed estimates fed by the progress tasks report, not task types)
//! in the form the agent runs: elastic, a task starts at its minimum demand and every slot the
//! node re-shares its spare CPU and memory among its running tasks (their cgroups change while
//! they run), the GPUs a task starts with staying its own to the end. It is compiled into the
//! binary so that a fresh install schedules with it and no file can go missing.
//! An operator can point `model` at a checkpoint directory written by `tapfinger-sim train`
//! (`model.bpk` + `train.json`); a model trained for other input sizes is refused at start with
//! both sizes named, never loaded half-way.

use std::path::Path;
use tapfinger::Policy;
use tapfinger::baselines::{self, BaselineContext};
use tapfinger::model::TapfingerPolicy;
use tapfinger::model::batch::Dims;

use tapfinger::model::checkpoint::GENERAL_AGENT;

/// Input sizes of the agent's view: three resource kinds, one task type, and `window` pending tasks.
pub fn dims(window: usize) -> Dims {
    Dims::per_preset(3, 1, window)
}

/// The learned policy from checkpoint bytes (`model.bpk`, `train.json`), refused if trained for
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
    let (net, cfg, scenario) = tapfinger::model::load_bytes(bytes, json, label, &dims(window))
        .map_err(|e| anyhow::anyhow!("model: {e}"))?;
    // A process's GPU devices are fixed when it starts: a model trained to re-share GPUs
    // would not be, run here, the policy that was trained (see `build`).
    anyhow::ensure!(
        !cfg.elastic || cfg.hold_gpus,
        "model: {label} re-shares the GPUs of running tasks every slot, which the agent cannot \
         do (a process's devices are fixed when it starts); use a model trained with \
         `--sharing elastic` (GPUs held, CPU and memory re-shared) or `--sharing fixed`"
    );
    tracing::info!(model = %label, trained_on = %scenario, "learned policy loaded");
    let p = TapfingerPolicy::from_net(net, cfg, burn::tensor::Device::flex());
    Ok(match recorder {
        Some(r) => Box::new(p.greedy(false).recording(r)),
        None => Box::new(p.greedy(true)),
    })
}

/// The checkpoint the agent starts from: `model` (a checkpoint directory) or the shipped model;
/// returns `model.bpk`, `train.json` and a label for messages.
pub fn initial_checkpoint(model: Option<&Path>) -> anyhow::Result<(Vec<u8>, String, String)> {
    Ok(match model {
        Some(dir) => {
            let (bytes, json) = tapfinger::model::checkpoint::read_files(dir)
                .map_err(|e| anyhow::anyhow!("model: {e}"))?;
            (bytes, json, dir.display().to_string())
        }
        None => (
            GENERAL_AGENT.model.to_vec(),
            GENERAL_AGENT.config.to_string(),
            "shipped agent model (general, GPUs held)".to_string(),
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
        anyhow::bail!("model: only the `tapfinger` policy uses a model (policy is `{name}`)");
    }
    let ctx = BaselineContext {
        num_types: 1,
        cpu_kind: 0,
        gpu_kind: SERVICE_KIND,
        profile: Vec::new(),
    };
    let policy = baselines::by_name(name, &ctx)
        .map_err(|e| anyhow::anyhow!("policy: {e}; or `tapfinger` (the default)"))?;
    // The elastic baselines re-share GPUs as well as CPU and memory every slot. The agent
    // changes a running task's CPU and memory shares (its cgroup) but not its GPU devices, so
    // such a policy here would not be the policy the simulator measured.
    anyhow::ensure!(
        !policy.resizes_gpus(),
        "policy: `{name}` re-shares the GPUs of running tasks (elastic), which the agent cannot \
         do; use its non-preemptive form (`{name}-np`) or `tapfinger`"
    );
    Ok(policy)
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
        // The general model, elastic, GPUs held: what the agent can run as trained.
        assert!(p.elastic() && !p.resizes_gpus());
    }

    #[test]
    fn a_model_that_re_shares_gpus_is_refused_naming_the_forms_that_run() {
        // The shipped general model with its sharing set each way.
        let m = &tapfinger::model::checkpoint::GENERAL;
        let with = |elastic: bool, hold_gpus: bool| {
            let mut j: serde_json::Value = serde_json::from_str(m.config).unwrap();
            j["config"]["net"]["elastic"] = serde_json::Value::Bool(elastic);
            j["config"]["net"]["hold_gpus"] = serde_json::Value::Bool(hold_gpus);
            learned(m.model.to_vec(), &j.to_string(), "general", 10, None)
        };
        let e = with(true, false)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("GPUs") && e.contains("--sharing elastic") && e.contains("--sharing fixed"),
            "{e}"
        );
        let held = with(true, true).unwrap();
        assert!(held.elastic() && !held.resizes_gpus());
        assert!(!with(false, false).unwrap().elastic());
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
    fn elastic_baselines_are_refused_with_their_non_preemptive_form() {
        let e = build("tiresias", None, 10).err().map(|e| e.to_string());
        let e = e.unwrap_or_default();
        assert!(e.contains("GPUs") && e.contains("tiresias-np"), "{e}");
        assert!(build("tiresias-np", None, 10).is_ok());
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
            e.contains("/nonexistent/train.json") || e.contains("/nonexistent/model.bpk"),
            "{e}"
        );
    }
}
