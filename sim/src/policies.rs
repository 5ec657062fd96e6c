//! Policy construction for the simulator: the shared baselines by name, plus the clairvoyant
//! reference ([`crate::clairvoyant`]), which alone may read the true speed model (every report
//! marks it as such).
//!
//! Optimus's profiling samples are produced here the way a profiler would: by running each task
//! type alone at a few configurations and timing it to completion. The policy then sees only those
//! numbers, never the formula or the table.

use crate::clairvoyant::Clairvoyant;
use crate::env::Simulator;
use std::sync::Arc;
use tapfinger::Policy;
use tapfinger::baselines::{self, BaselineContext, BaselineError};
use tapfinger::model::TapfingerPolicy;
use tapfinger::model::checkpoint::{self, LoadError};
use tapfinger::model::net::NetConfig;

/// A policy the simulator runs, by name: [`FromStr`](std::str::FromStr) takes every name it
/// knows, and an unknown one is an [`UnknownPolicy`] that lists them.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyName {
    /// `tapfinger`: the learned policy (the model given, else the one shipped for the scenario,
    /// else the general model).
    Tapfinger,
    /// `rlpto`: the shipped RLPTO model.
    Rlpto,
    /// `LABEL=MODEL_PATH`: the learned policy with the model at `path`, reported as `label`.
    Model {
        /// The name reports give it.
        label: String,
        /// The checkpoint folder or model file.
        path: std::path::PathBuf,
    },
    /// A heuristic baseline.
    Baseline(baselines::Baseline),
    /// The clairvoyant reference or one of its rule's variants (they read the true speed model).
    Clairvoyant(&'static str),
}

/// A policy name the simulator does not know.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "unknown policy {0:?}; known: {TAPFINGER}, {RLPTO}, {baselines}, {clairvoyant}, or LABEL=MODEL_PATH (a trained model)",
    baselines = baselines::Baseline::ALL.map(baselines::Baseline::name).join(", "),
    clairvoyant = crate::clairvoyant::NAMES.join(", ")
)]
pub struct UnknownPolicy(pub String);

impl std::str::FromStr for PolicyName {
    type Err = UnknownPolicy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some((label, path)) = s.split_once('=') {
            if label.is_empty() || path.is_empty() {
                return Err(UnknownPolicy(s.to_string()));
            }
            return Ok(PolicyName::Model {
                label: label.to_string(),
                path: path.into(),
            });
        }
        if s == TAPFINGER {
            return Ok(PolicyName::Tapfinger);
        }
        if s == RLPTO {
            return Ok(PolicyName::Rlpto);
        }
        if let Some(c) = crate::clairvoyant::NAMES.into_iter().find(|c| *c == s) {
            return Ok(PolicyName::Clairvoyant(c));
        }
        s.parse()
            .map(PolicyName::Baseline)
            .map_err(|_| UnknownPolicy(s.to_string()))
    }
}

/// Every deployable baseline ([`baselines::Baseline::JUDGED`]: all a deployment could run, the
/// ranked eight first) and the clairvoyant reference: what `compare` runs beside the learned
/// policy by default, so that its table ranks it against every baseline it could be deployed
/// instead of.
pub fn every_policy() -> Vec<&'static str> {
    with_clairvoyant(baselines::Baseline::JUDGED)
}

/// The ranked baselines ([`baselines::Baseline::RANKED`]) and the clairvoyant reference, in
/// report order.
pub fn all_policies() -> Vec<&'static str> {
    with_clairvoyant(baselines::Baseline::RANKED)
}

/// The names of `list`, then the clairvoyant reference's.
fn with_clairvoyant(list: &[baselines::Baseline]) -> Vec<&'static str> {
    list.iter()
        .map(|b| b.name())
        .chain(std::iter::once(CLAIRVOYANT))
        .collect()
}

/// Name of the learned policy. Its ablations (`nohan`, `nopointer`, `vanilla`) are trained with
/// `tapfinger-sim train --variant NAME` and evaluated as `tapfinger` with their own `--model`: the
/// variant is part of the model's `train.json`.
pub const TAPFINGER: &str = "tapfinger";

/// Name of the shipped RLPTO model ([`tapfinger::model::checkpoint::RLPTO`]: the learned
/// policy with priority classes, convergence and the arrival forecast in its features, trained
/// on the cluster reward). It runs with the forecast it was trained with.
pub const RLPTO: &str = "rlpto";

/// The shipped RLPTO model for every node (greedy decisions).
pub fn rlpto(sim: &Simulator) -> Result<Vec<Box<dyn Policy>>, LearnedError> {
    let (infer, cfg) = checkpoint::RLPTO.load(&sim.dims())?;
    Ok(per_node(
        sim,
        TapfingerPolicy::new(Arc::new(infer), cfg),
        None,
    ))
}

/// Why the learned policy could not be built.
#[derive(Debug, thiserror::Error)]
pub enum LearnedError {
    /// The model could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
}

/// The learned policy (greedy decisions) for every node, from a trained model: `model` if given,
/// else the model shipped for the scenario ([`tapfinger::model::checkpoint::SHIPPED`]), else the
/// general model ([`tapfinger::model::checkpoint::GENERAL`]).
pub fn learned(
    sim: &Simulator,
    model: Option<&std::path::Path>,
) -> Result<Vec<Box<dyn Policy>>, LearnedError> {
    learned_with(sim, model, false)
}

/// [`learned`], and with `batched` one forward pass per step for the whole cluster where the
/// model allows it ([`tapfinger::model::step_batch`]): the same decisions but where a batched
/// matrix product rounds two equal logits differently, so that identical tasks in a window may
/// be taken in another order (the development suite's 100 episodes came out identical; 48- and
/// 96-node scale runs did not). For large clusters (the scale bench); the agent never batches,
/// so results meant to hold for the agents use [`learned`].
pub fn learned_with(
    sim: &Simulator,
    model: Option<&std::path::Path>,
    batched: bool,
) -> Result<Vec<Box<dyn Policy>>, LearnedError> {
    learned_sharing(sim, model, batched.then(Default::default))
}

/// [`learned_with`], batching through `step` (which then counts the batched passes).
pub fn learned_sharing(
    sim: &Simulator,
    model: Option<&std::path::Path>,
    step: Option<tapfinger::model::step_batch::SharedStep>,
) -> Result<Vec<Box<dyn Policy>>, LearnedError> {
    let dims = sim.dims();
    let (infer, cfg) = match model {
        Some(path) => checkpoint::load_path(path, &dims).map(|(infer, cfg, _)| (infer, cfg))?,
        // The model shipped for this preset, else the general model (it fits every cluster).
        None => checkpoint::shipped(&sim.scenario().name)
            .unwrap_or(&checkpoint::GENERAL)
            .load(&dims)?,
    };
    Ok(per_node(
        sim,
        TapfingerPolicy::new(Arc::new(infer), cfg),
        step,
    ))
}

/// The learned policy (greedy decisions) for every node from a checkpoint's bytes
/// (`model.safetensors`, `train.json`): a version the coordinator published.
pub fn from_bytes(
    sim: &Simulator,
    model: &[u8],
    train_json: &str,
) -> Result<Vec<Box<dyn Policy>>, LearnedError> {
    let (infer, cfg, _) = checkpoint::load_bytes(model, train_json, "checkpoint", &sim.dims())?;
    Ok(per_node(
        sim,
        TapfingerPolicy::new(Arc::new(infer), cfg),
        None,
    ))
}

/// The learned policy (greedy decisions) for every node from a training network in memory (a
/// candidate being judged; feature `train`).
#[cfg(feature = "train")]
pub fn from_net(
    sim: &Simulator,
    net: &tapfinger::model::net::Net,
    cfg: &NetConfig,
) -> Vec<Box<dyn Policy>> {
    per_node(sim, TapfingerPolicy::from_net(net, cfg.clone()), None)
}

/// A greedy copy of `policy` per node (one set of weights), batched through `step` if given.
fn per_node(
    sim: &Simulator,
    policy: TapfingerPolicy,
    step: Option<tapfinger::model::step_batch::SharedStep>,
) -> Vec<Box<dyn Policy>> {
    (0..sim.scenario().nodes.len())
        .map(|_| {
            let p = policy.clone().greedy(true);
            Box::new(match &step {
                Some(s) => p.batched(s.clone()),
                None => p,
            }) as Box<dyn Policy>
        })
        .collect()
}

/// The imitation teacher chosen per scenario by evaluation ([`best_teacher`]).
pub const AUTO_TEACHER: &str = "auto";

/// Development workload seeds on which [`best_teacher`] ranks the candidates (never the seeds
/// results are reported on, which start at 100).
const TEACHER_SEEDS: std::ops::Range<u64> = 0..3;

/// Whether `name` can teach a learned policy of configuration `student`: a known policy whose
/// claims the student can make (`may_teach`: an elastic student starts tasks at their minimum
/// demand and re-shares every slot, so only elastic policies teach it, unless it draws floors; a
/// fixed-share student cannot copy re-allocation, so only non-elastic ones teach it). `Err`
/// says why not.
pub fn check_teacher(sim: &Simulator, name: &str, student: &NetConfig) -> Result<(), String> {
    if name == AUTO_TEACHER {
        return Ok(());
    }
    let ps = build(sim, name).map_err(|e| e.to_string())?;
    if ps.first().is_some_and(|p| !may_teach(p.as_ref(), student)) {
        let (what, kind) = if student.elastic {
            (
                "keeps each task's allocation for its whole run",
                "an elastic",
            )
        } else {
            ("re-allocates running tasks every slot", "a fixed-share")
        };
        return Err(format!(
            "{name} {what}, which {kind} learned policy cannot copy; choose one of {} or auto",
            teachers(sim, student, true).join(", ")
        ));
    }
    Ok(())
}

/// Whether policy `p`'s claims are what `student` could claim: a fixed-share student copies
/// fixed-share policies and an elastic one elastic policies (both claim at the minimum); an
/// elastic student with floors copies every policy's claims, a fixed-share one's allocation
/// being the floor it starts a task with (the re-share is the student's own).
fn may_teach(p: &dyn tapfinger::Policy, student: &NetConfig) -> bool {
    p.elastic() == student.elastic || student.elastic && student.floors
}

/// Teachers one may name besides the ranked baselines: first-fit-max's admission in elastic
/// form ([`baselines::FirstFitElastic`]), so that an elastic student can be shown a task left
/// waiting where first-fit-max's waits pay off (first-fit-max itself keeps each allocation for
/// a task's whole run, which an elastic student cannot copy). Not among `auto`'s candidates:
/// chosen per scenario it made the general model worse (docs/DECISIONS.md).
pub const EXTRA_TEACHERS: &[baselines::Baseline] = &[baselines::Baseline::FirstFitElastic];

/// The policies that may teach a learned policy of configuration `student` on `sim`'s
/// scenario ([`may_teach`]): the ranked baselines, and with `extras` [`EXTRA_TEACHERS`].
fn teachers(sim: &Simulator, student: &NetConfig, extras: bool) -> Vec<&'static str> {
    let extra: &[baselines::Baseline] = if extras { EXTRA_TEACHERS } else { &[] };
    baselines::Baseline::RANKED
        .iter()
        .chain(extra)
        .map(|b| b.name())
        .filter(|n| {
            build(sim, n).is_ok_and(|ps| ps.first().is_some_and(|p| may_teach(p.as_ref(), student)))
        })
        .collect()
}

/// The teacher for a scenario: of the policies that may teach `student`, the one with the
/// least average JCT over the development seeds, each run as it shares itself (ties: the first
/// in the baseline list).
pub fn best_teacher(sim: &Simulator, student: &NetConfig) -> String {
    let kinds = sim.scenario().kind_names();
    let jct = |name: &str| -> f64 {
        TEACHER_SEEDS
            .map(|seed| {
                build(sim, name)
                    .ok()
                    .and_then(|ps| sim.run(ps, seed).ok())
                    .map_or(f64::INFINITY, |e| {
                        crate::metrics::summarize(&e, &kinds).avg_jct
                    })
            })
            .sum()
    };
    teachers(sim, student, false)
        .into_iter()
        .map(|n| (n, jct(n)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map_or_else(|| "tiresias-np".to_string(), |(n, _)| n.to_string())
}

pub use crate::clairvoyant::CLAIRVOYANT;

/// Label for reports: the clairvoyant reference is marked.
pub fn label(name: &str) -> String {
    if crate::clairvoyant::is_clairvoyant(name) {
        format!("{name} (reads true speed; reference only)")
    } else {
        name.to_string()
    }
}

pub use crate::profile::profile;

/// One policy instance per node. The clairvoyant reference built here does not know the
/// workload's task sizes ([`build_for_seed`] does).
pub fn build(sim: &Simulator, name: &str) -> Result<Vec<Box<dyn Policy>>, BaselineError> {
    build_with(sim, name, None)
}

/// [`build`] for the episode of workload `seed`: the clairvoyant reference also knows every
/// task's true size there (heavy-tailed scenarios), as it knows the true speed model.
pub fn build_for_seed(
    sim: &Simulator,
    name: &str,
    seed: u64,
) -> Result<Vec<Box<dyn Policy>>, BaselineError> {
    build_with(sim, name, Some(seed))
}

fn build_with(
    sim: &Simulator,
    name: &str,
    seed: Option<u64>,
) -> Result<Vec<Box<dyn Policy>>, BaselineError> {
    let sc = sim.scenario();
    if crate::clairvoyant::is_clairvoyant(name) {
        let mut c = Clairvoyant::new(sc);
        if let Some(seed) = seed.filter(|_| name != crate::clairvoyant::RULE_UNSIZED) {
            c = c.with_sizes(sc, seed);
        }
        if name == crate::clairvoyant::RULE_STARTED {
            c = c.started_only();
        }
        return Ok((0..sc.nodes.len())
            .map(|_| Box::new(c.clone()) as Box<dyn Policy>)
            .collect());
    }
    let (cpu_kind, gpu_kind) = sc.cpu_gpu_kinds();
    let ctx = BaselineContext {
        num_types: sc.types.len(),
        cpu_kind,
        gpu_kind,
        profile: if name.starts_with("optimus") {
            profile(sc)
        } else {
            Vec::new()
        },
    };
    (0..sc.nodes.len())
        .map(|_| baselines::by_name(name, &ctx))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name the simulator lists parses, trained models parse as `LABEL=PATH`, and an
    /// unknown name is refused naming every known one.
    #[test]
    fn policy_names_parse_and_an_unknown_one_lists_them_all() {
        assert_eq!(TAPFINGER.parse(), Ok(PolicyName::Tapfinger));
        assert_eq!(RLPTO.parse(), Ok(PolicyName::Rlpto));
        for name in all_policies() {
            assert!(name.parse::<PolicyName>().is_ok(), "{name}");
        }
        assert_eq!(
            "mine=out/m".parse(),
            Ok(PolicyName::Model {
                label: "mine".into(),
                path: "out/m".into()
            })
        );
        assert!("=out/m".parse::<PolicyName>().is_err());
        let e = "fifo".parse::<PolicyName>().unwrap_err().to_string();
        for known in [
            TAPFINGER,
            RLPTO,
            "optimus",
            "lookahead",
            CLAIRVOYANT,
            "LABEL=MODEL_PATH",
        ] {
            assert!(e.contains(known), "{e}");
        }
    }
}
