//! Fine-tuning on the cluster's twin, gated on the twin (`tapfinger-sim tune --workload`): the
//! observed workload cut by arrival into a training window and the gate's window, never trained
//! on ([`split`]), and the gate ([`gate`]): the candidate, the model it started from and every
//! baseline an agent can run, replayed on the gate window's twin; the candidate passes only if
//! it beats the best of those baselines, and the model it started from by [`MIN_GAIN`] there.
//!
//! Why a gain and not just "better": one window's twin is a small sample. A candidate tuned on
//! the twin of `gen:30007`'s workload 100 passed a plain "better" gate there (8.25 slots against
//! 8.32 for the general model and 8.68 for `tiresias` on its latest 60 tasks) and was worse than
//! the general model on four fresh workloads of the true scenario (10.51 against 10.23 slots).

/// How much better than the model it started from a candidate must be on the gate window.
pub const MIN_GAIN: f64 = 0.05;

use crate::metrics::summarize;
use crate::report::{self, CompareError};
use crate::train::{TrainConfig, TrainError, Trainer};
use crate::{Scenario, SimError, Simulator, guard, policies};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};
use tapfinger::model::net::{Net, NetConfig};
use tapfinger::twin::Workload;

/// Why the twin of a window could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// Too few tasks for two windows, or a share outside (0, 1).
    #[error("{0}")]
    Split(String),
    /// A window's twin does not make a scenario.
    #[error("the twin: {0}")]
    Twin(String),
    /// A baseline could not be built.
    #[error(transparent)]
    Policy(#[from] CompareError),
    /// An episode failed.
    #[error(transparent)]
    Episode(#[from] SimError),
    /// Training failed.
    #[error(transparent)]
    Train(#[from] TrainError),
}

/// How a fine-tune on the twin runs ([`fine_tune`]).
#[derive(Debug, Clone)]
pub struct Tuning {
    /// The latest share of the tasks kept for the gate ([`split`]).
    pub holdout: f64,
    /// At most this many training iterations (0: as many as `budget` allows).
    pub iterations: u64,
    /// At most this long training (`None`: `iterations` alone bounds it; one of the two must).
    pub budget: Option<Duration>,
    /// Learning rate.
    pub lr: f64,
    /// PPO epochs and minibatch, where not the trainer's defaults.
    pub epochs: Option<usize>,
    /// See `epochs`.
    pub minibatch: Option<usize>,
    /// Seed of the training episodes.
    pub seed: u64,
    /// The gain over the model it started from the gate asks ([`MIN_GAIN`]).
    pub min_gain: f64,
}

/// A fine-tune's outcome.
pub struct Tuned {
    /// The trainer, holding the candidate (`Trainer::save` writes its checkpoint).
    pub trainer: Trainer,
    /// The candidate's network (greedy).
    pub candidate: Net,
    /// What the gate found.
    pub gate: Gate,
    /// The training iterations run.
    pub iterations: u64,
}

/// Fine-tune `start` on the twin of `w`'s earlier tasks and gate the candidate on the twin of
/// its latest ([`split`], [`gate`]); `progress` hears each iteration's number and training
/// average JCT. The one fine-tune that `tapfinger-sim tune --workload`, the coordinator and the
/// deployment replay run.
pub fn fine_tune(
    w: &Workload,
    start: (&Net, &NetConfig),
    t: &Tuning,
    progress: &mut dyn FnMut(u64, f64),
) -> Result<Tuned, TuneError> {
    if t.iterations == 0 && t.budget.is_none() {
        return Err(TuneError::Split(
            "a fine-tune needs a number of iterations or a time budget".into(),
        ));
    }
    let (train_w, gate_w) = split(w, t.holdout)?;
    let train_sim = twin(&train_w, "twin-train")?;
    let gate_sim = twin(&gate_w, "twin-gate")?;
    let mut cfg = TrainConfig::new(start.1.dims.clone(), t.seed);
    cfg.net = start.1.clone();
    cfg.lr = t.lr;
    if let Some(e) = t.epochs {
        cfg.epochs = e;
    }
    if let Some(m) = t.minibatch {
        cfg.minibatch = m;
    }
    cfg.eval_episodes = 0;
    let mut trainer = Trainer::with_net(train_sim, cfg, start.0.clone())?;
    let t0 = Instant::now();
    let mut done = 0u64;
    while t.budget.is_none_or(|b| t0.elapsed() < b) && (t.iterations == 0 || done < t.iterations) {
        let p = trainer.iterate()?;
        done += 1;
        progress(done, p.avg_jct);
    }
    let candidate = trainer.inference_net();
    let g = gate(&gate_sim, (&candidate, &trainer.cfg.net), start, t.min_gain)?;
    Ok(Tuned {
        trainer,
        candidate,
        gate: g,
        iterations: done,
    })
}

/// `w` cut by arrival (then task id): the earlier tasks to train on, the latest `holdout` share
/// (at least one task, and at least one left to train on) for the gate.
pub fn split(w: &Workload, holdout: f64) -> Result<(Workload, Workload), TuneError> {
    if !(holdout > 0.0 && holdout < 1.0) {
        return Err(TuneError::Split(format!(
            "the gate's share must be between 0 and 1, got {holdout}"
        )));
    }
    let n = w.tasks.len();
    if n < 2 {
        return Err(TuneError::Split(format!(
            "{n} tasks cannot make a training window and a gate window"
        )));
    }
    let mut tasks = w.tasks.clone();
    tasks.sort_by_key(|t| (t.arrival, t.id));
    let held = ((n as f64 * holdout).round() as usize).clamp(1, n - 1);
    let gate_tasks = tasks.split_off(n - held);
    let mut train = w.clone();
    train.tasks = tasks;
    let mut gate = w.clone();
    gate.tasks = gate_tasks;
    Ok((train, gate))
}

/// The twin of `w` as a simulator whose episodes' agents start from the speed figures and the
/// size book the cluster had learned ([`crate::twin::warm_estimator`],
/// [`crate::twin::warm_sizes`]), as the guard's do
/// ([`guard::table`]): a candidate trained and gated on agents that know nothing would learn
/// and be judged on views the cluster's agents never show it.
pub fn twin(w: &Workload, name: &str) -> Result<Simulator, TuneError> {
    let toml = crate::twin::scenario_toml(w, name).map_err(TuneError::Twin)?;
    let sc = Scenario::from_toml(&toml, name, None).map_err(|e| TuneError::Twin(e.to_string()))?;
    let mut sim = Simulator::new(sc);
    if let Some(book) = crate::twin::warm_sizes(w) {
        sim = sim.with_sizes(book);
    }
    let warm = crate::twin::warm_estimator(w, &sim);
    Ok(sim.warm(warm))
}

/// Average JCT of `net` (greedy decisions) on `sim`.
pub fn learned_jct(sim: &Simulator, net: &Net, cfg: &NetConfig) -> Result<f64, TuneError> {
    let ps = policies::from_net(sim, net, cfg);
    let r = sim.run(ps, 0)?;
    Ok(summarize(&r, &sim.scenario().kind_names()).avg_jct)
}

/// What the gate found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gate {
    /// Every baseline an agent can run, with its average JCT on the gate window's twin (those
    /// whose episode failed are left out).
    pub baselines: Vec<(String, f64)>,
    /// The best of them.
    pub best: (String, f64),
    /// The model the candidate started from.
    pub before: f64,
    /// The candidate.
    pub candidate: f64,
    /// Whether the candidate beats the best baseline, and the model before by the gain asked.
    pub passed: bool,
}

/// Judge `candidate` against every deployable baseline and `start` on `gate` (the twin of the
/// window no training saw): it passes if it beats the best baseline, and `start` by `min_gain`
/// (a fraction of `start`'s average JCT).
pub fn gate(
    gate: &Simulator,
    candidate: (&Net, &NetConfig),
    start: (&Net, &NetConfig),
    min_gain: f64,
) -> Result<Gate, TuneError> {
    let kinds = gate.scenario().kind_names();
    let mut baselines = Vec::new();
    for name in guard::candidates() {
        if name == policies::TAPFINGER {
            continue;
        }
        let ps = report::instances_for_seed(gate, name, None, 0)?;
        if let Ok(r) = gate.run(ps, 0) {
            baselines.push((name.to_string(), summarize(&r, &kinds).avg_jct));
        }
    }
    let best = baselines
        .iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .cloned()
        .ok_or_else(|| TuneError::Split("no baseline ran on the gate window".into()))?;
    let before = learned_jct(gate, start.0, start.1)?;
    let cand = learned_jct(gate, candidate.0, candidate.1)?;
    Ok(Gate {
        passed: cand < best.1 && cand < before * (1.0 - min_gain),
        baselines,
        best,
        before,
        candidate: cand,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gate window is the latest arrivals, never among the training tasks, and both windows
    /// keep every box and class.
    #[test]
    fn the_gate_window_is_the_latest_tasks_and_no_training_task() {
        let sc = crate::Scenario::load("hetero6").unwrap();
        let sim = Simulator::new(sc);
        let ps = report::instances_for_seed(&sim, "tiresias", None, 100).unwrap();
        let (_, w) = crate::twin::observe(&sim, ps, 100).unwrap();
        let (train, gate) = split(&w, 0.25).unwrap();
        assert_eq!(train.tasks.len() + gate.tasks.len(), w.tasks.len());
        assert_eq!(
            gate.tasks.len(),
            (w.tasks.len() as f64 * 0.25).round() as usize
        );
        let last_train = train.tasks.iter().map(|t| t.arrival).max().unwrap();
        assert!(gate.tasks.iter().all(|t| t.arrival >= last_train));
        assert!(
            gate.tasks
                .iter()
                .all(|g| train.tasks.iter().all(|t| t.id != g.id))
        );
        assert_eq!(
            (train.nodes.len(), gate.classes.len()),
            (w.nodes.len(), w.classes.len())
        );
        assert!(split(&w, 0.0).is_err() && split(&w, 1.0).is_err());
        // The gate on the model itself: it cannot beat itself, so it does not pass.
        let g = &tapfinger::model::checkpoint::GENERAL;
        let gsim = twin(&gate, "gate").unwrap();
        let (net, cfg) = g.load_net(&gsim.dims()).unwrap();
        let r = super::gate(&gsim, (&net, &cfg), (&net, &cfg), 0.0).unwrap();
        assert_eq!(r.candidate, r.before);
        assert!(!r.passed, "{r:?}");
        assert!(r.baselines.iter().any(|(n, _)| n == &r.best.0));
    }

    /// The gate judges as the guard does: on the twin of the same window, from the speed
    /// figures the cluster had learned, the model and every baseline take what the guard's
    /// table says they take. A gate whose agents started knowing nothing judged other views.
    #[test]
    fn the_gate_judges_on_the_guards_warm_twin() {
        let sc = crate::Scenario::load("hetero6").unwrap();
        let sim = Simulator::new(sc);
        let ps = report::instances_for_seed(&sim, "tiresias", None, 100).unwrap();
        let (_, w) = crate::twin::observe(&sim, ps, 100).unwrap();
        let (_, gate_w) = split(&w, 0.5).unwrap();
        let gsim = twin(&gate_w, "gate").unwrap();
        let (net, cfg) = tapfinger::model::checkpoint::GENERAL
            .load_net(&gsim.dims())
            .unwrap();
        let g = gate(&gsim, (&net, &cfg), (&net, &cfg), 0.0).unwrap();
        let t = guard::table(
            &gate_w,
            guard::Learned::Net {
                net: &net,
                cfg: &cfg,
            },
            0,
        )
        .unwrap();
        let of = |n: &str| t.twin_jcts.iter().find(|(m, _)| m == n).map(|x| x.1);
        assert_eq!(Some(g.before), of(policies::TAPFINGER), "{t:?}");
        for (name, j) in &g.baselines {
            assert_eq!(Some(*j), of(name), "{name}: {t:?}");
        }
        // And the warm start is what makes them agree: cold agents judge otherwise.
        let cold = Simulator::new(gsim.scenario().clone());
        let cold_before = learned_jct(&cold, &net, &cfg).unwrap();
        assert_ne!(
            cold_before, g.before,
            "a cold twin judged the same: the test shows nothing"
        );
    }
}
