//! PPO training of the learned TapFinger policy in the simulator.
//!
//! One iteration: run `envs` episodes with every agent sampling from the current network through
//! the shared protocol, record each decision (view, pointer and allocation choices, their
//! log-probabilities), whether its claim lost a conflict, and each agent's per-slot reward; compute
//! per-agent GAE advantages (γ = 1, so the return is minus the agent's summed queue lengths); then
//! run PPO epochs over shuffled minibatches: clipped objective, value loss, pointer entropy bonus,
//! advantage normalization per minibatch, global-norm gradient clipping. A lost claim's allocation
//! terms are masked out of the loss (the claim never ran). Everything is seeded.
//!
//! The update itself ([`Trainer::learn`]) takes [`Experience`] from any source: the simulator's
//! episodes here, or live agents' reports in the coordinator (`tapfinger-coordinator`).
//!
//! The parts: `collect` runs episodes (PPO sampling, imitation, greedy evaluation), `ppo`
//! turns experience into advantages and gradient steps, `files` writes and resumes
//! checkpoints (the loading side, which the agent shares, is [`tapfinger::model::checkpoint`]).

mod collect;
mod files;
pub use files::{ratio_curve, read_curve};
mod ppo;

use crate::env::Simulator;
use burn::module::Module;
use burn::optim::grad_clipping::GradientClippingConfig;
use burn::optim::{AdamConfig, ModuleOptimizer};
use burn::tensor::Device;
use ppo::Sample;
use rand::RngExt;
use serde::{Deserialize, Serialize};
use tapfinger::Policy;
use tapfinger::model::batch::Dims;
use tapfinger::model::net::{Net, NetConfig};
use tapfinger::model::{Experience, TapfingerPolicy};

pub use tapfinger::model::checkpoint::{CONFIG_FILE, MODEL_FILE, OPTIM_FILE};

/// Training settings (saved beside every checkpoint).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Network sizes.
    pub net: NetConfig,
    /// Seed of workloads, sampling and initialization.
    pub seed: u64,
    /// Episodes per iteration.
    pub envs: usize,
    /// PPO epochs per iteration.
    pub epochs: usize,
    /// Minibatch size (decisions).
    pub minibatch: usize,
    /// Adam learning rate.
    pub lr: f64,
    /// PPO clip range.
    pub clip: f32,
    /// GAE λ.
    pub gae_lambda: f32,
    /// Discount per decision: 1 for the simulator's finite episodes; below 1 for live agents'
    /// never-ending streams (the coordinator), whose returns would otherwise grow without bound.
    #[serde(default = "one")]
    pub gamma: f32,
    /// Value loss weight.
    pub value_coef: f32,
    /// Entropy bonus weight (at the first PPO iteration).
    pub entropy_coef: f32,
    /// The entropy weight decays linearly to `entropy_final` over this many PPO iterations
    /// (0: no decay; runs written before it have none).
    #[serde(default)]
    pub entropy_decay_iterations: u64,
    /// Entropy weight at the end of the decay.
    #[serde(default)]
    pub entropy_final: f32,
    /// Global gradient-norm clip.
    pub grad_clip: f32,
    /// Rewards are multiplied by this before learning (returns are large negative numbers).
    pub reward_scale: f32,
    /// Imitation (DAgger) iterations before PPO: the network learns the teacher's decisions on the
    /// states it visits itself, the teacher acting with a probability that falls from 1 to 0.
    #[serde(default)]
    pub imitate: u64,
    /// The teacher for imitation: a simulator policy that shares as the student does (elastic
    /// for an elastic network, else non-elastic), or `auto` (the default): of those, the one with
    /// the least average JCT on development workloads of the scenario, resolved when training
    /// starts (and recorded here).
    #[serde(default = "default_teacher")]
    pub teacher: String,
    /// Greedy evaluation episodes after every iteration, on validation workloads (their own seed
    /// range, disjoint from training and from `compare`'s seeds); 0 turns evaluation off.
    #[serde(default)]
    pub eval_episodes: usize,
    /// Train the value head on returns divided by their running scale (the root mean square of
    /// the returns seen, an exponential average over iterations), so that its targets stay near
    /// 1 whatever the cluster and load (new runs; a run written before keeps raw returns).
    #[serde(default)]
    pub normalize_returns: bool,
    /// The input-dependent baseline (Mao et al., "Variance reduction for reinforcement learning
    /// in input-driven environments"; Decima trains this way): a PPO iteration's episodes share
    /// one workload, and each decision's advantage is the cluster's return from its slot on less
    /// the mean, over those episodes, of the cluster's return from that slot — the part of the
    /// return the arrivals explain is taken out. Off (runs written before it): GAE on the critic
    /// over each agent's own reward.
    #[serde(default)]
    pub input_baseline: bool,
}

impl TrainConfig {
    /// The entropy weight at (0-based) `iteration`: constant through imitation, then falling
    /// linearly from `entropy_coef` to `entropy_final` over `entropy_decay_iterations` PPO
    /// iterations.
    pub fn entropy_at(&self, iteration: u64) -> f32 {
        let ppo = iteration.saturating_sub(self.imitate);
        if self.entropy_decay_iterations == 0 {
            return self.entropy_coef;
        }
        let f = (ppo as f32 / self.entropy_decay_iterations as f32).min(1.0);
        self.entropy_coef + (self.entropy_final - self.entropy_coef) * f
    }
}

fn one() -> f32 {
    1.0
}

fn default_teacher() -> String {
    crate::policies::AUTO_TEACHER.to_string()
}

impl TrainConfig {
    /// Defaults of the reference (PPO clip 0.2, λ 0.95, value 0.5, entropy 0.01), with a larger
    /// learning rate than its 1e-4 because our network is smaller.
    pub fn new(dims: Dims, seed: u64) -> Self {
        Self {
            net: NetConfig::new(dims),
            seed,
            envs: 8,
            epochs: 2,
            minibatch: 256,
            lr: 3e-4,
            clip: 0.2,
            gae_lambda: 0.95,
            gamma: 1.0,
            value_coef: 0.5,
            entropy_coef: 0.01,
            entropy_decay_iterations: 200,
            entropy_final: 0.001,
            grad_clip: 0.5,
            reward_scale: 0.1,
            imitate: 0,
            teacher: default_teacher(),
            eval_episodes: 4,
            normalize_returns: true,
            input_baseline: true,
        }
    }
}

/// One point of the training curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    /// Iteration (1-based).
    pub iteration: u64,
    /// Mean average JCT of the iteration's (sampling) episodes.
    pub avg_jct: f64,
    /// Mean episode return (sum over agents).
    pub episode_return: f64,
    /// Decisions learned from.
    pub decisions: usize,
    /// Mean policy loss of the last epoch.
    pub policy_loss: f64,
    /// Mean value loss of the last epoch.
    pub value_loss: f64,
    /// Mean pointer entropy of the last epoch.
    pub entropy: f64,
    /// `imitate` or `ppo`.
    pub phase: String,
    /// Greedy average JCT on the validation workloads after the iteration (NaN if not evaluated).
    pub eval_jct: f64,
    /// [`REFERENCE`]'s average JCT on the iteration's own training workloads (NaN where it was
    /// not run): the yardstick that makes points of a curriculum over different scenarios
    /// comparable (`avg_jct / reference_jct`).
    #[serde(default = "nan")]
    pub reference_jct: f64,
}

/// The baseline run beside every PPO iteration on its workloads ([`CurvePoint::reference_jct`]):
/// elastic Tiresias, the best baseline on most generated scenarios.
pub const REFERENCE: &str = "tiresias";

fn nan() -> f64 {
    f64::NAN
}

/// First workload seed of training episodes.
pub const TRAIN_SEEDS: u64 = 1 << 40;
/// First workload seed of the validation episodes evaluated during training.
pub const VALIDATION_SEEDS: u64 = 1 << 41;

/// One development scenario that judges a general model's checkpoints
/// ([`Trainer::judge_on`]): its simulator and, per validation workload (seeds from
/// [`VALIDATION_SEEDS`], in order), the reference policy's average JCT there.
pub struct DevJudge {
    /// The scenario.
    pub sim: Simulator,
    /// [`REFERENCE`]'s average JCT on workload `VALIDATION_SEEDS + j`, for j = 0, 1, ...
    pub references: Vec<f64>,
}

/// What `train.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Training settings (the network sizes among them).
    pub config: TrainConfig,
    /// Scenario trained on.
    pub scenario: String,
    /// Completed iterations.
    pub iteration: u64,
    /// The running scale of returns the value head is trained in ([`TrainConfig::normalize_returns`]).
    #[serde(default = "one_f64")]
    pub ret_scale: f64,
}

fn one_f64() -> f64 {
    1.0
}

/// Errors of training.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// An episode failed.
    #[error("episode with seed {seed}: {source}")]
    Episode {
        /// Seed.
        seed: u64,
        /// Cause.
        source: crate::env::SimError,
    },
    /// The imitation teacher could not be built.
    #[error("teacher {name:?}: {reason}")]
    Teacher {
        /// Policy name.
        name: String,
        /// Cause.
        reason: String,
    },
    /// Reading or writing a checkpoint failed.
    #[error("checkpoint {path}: {reason}")]
    Checkpoint {
        /// Path.
        path: String,
        /// Cause.
        reason: String,
    },
}

/// The PPO trainer.
pub struct Trainer {
    /// Settings.
    pub cfg: TrainConfig,
    /// The training scenario, prepared.
    sim: Simulator,
    /// The network being trained.
    net: Net,
    /// Its optimizer (Adam).
    optim: ModuleOptimizer,
    /// Where it runs.
    device: Device,
    /// Seeds the episodes' workloads and the samples (seeded: a run is reproducible).
    rng: tapfinger::Rng,
    /// Completed iterations.
    pub iteration: u64,
    /// Training curve so far.
    pub curve: Vec<CurvePoint>,
    /// OS threads for episodes (default: the machine's parallelism). Results do not depend on it.
    pub threads: usize,
    /// What the last [`Trainer::learn`] assembled for the centralized critic: (rounds, reports,
    /// rounds whose merged global view differs from some agent's own view).
    pub last_assembly: (usize, usize, usize),
    /// The running scale of returns (1 without [`TrainConfig::normalize_returns`]): the value head
    /// predicts returns divided by it.
    pub ret_scale: f64,
}

impl Trainer {
    /// A trainer with a fresh network.
    pub fn new(sim: Simulator, mut cfg: TrainConfig) -> Self {
        let sim = Self::paying(sim, &cfg);
        if cfg.imitate > 0 && cfg.teacher == crate::policies::AUTO_TEACHER {
            cfg.teacher = crate::policies::best_teacher(&sim, &cfg.net);
        }
        let device = Device::flex().autodiff();
        device.seed(cfg.seed);
        let net = Net::new(&cfg.net, &device);
        let optim = AdamConfig::new()
            .with_grad_clipping(Some(GradientClippingConfig::Norm(cfg.grad_clip)))
            .init();
        let rng = tapfinger::seeded_rng(cfg.seed ^ 0x7EA1);
        Self {
            cfg,
            sim,
            net,
            optim,
            device,
            rng,
            iteration: 0,
            curve: Vec::new(),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            last_assembly: (0, 0, 0),
            ret_scale: 1.0,
        }
    }

    /// A trainer that starts from the weights of `net` (an inference network, e.g. a shipped
    /// model) instead of random ones; the optimizer starts fresh.
    pub fn with_net(sim: Simulator, cfg: TrainConfig, net: Net) -> Result<Self, TrainError> {
        let mut t = Trainer::new(sim, cfg);
        let record = net.into_record();
        t.net = Net::new(&t.cfg.net, &t.device)
            .try_load_record(record)
            .map_err(|e| TrainError::Checkpoint {
                path: "initial weights".into(),
                reason: e.to_string(),
            })?;
        Ok(t)
    }

    /// The simulator the trainer evaluates on.
    pub fn simulator(&self) -> &Simulator {
        &self.sim
    }

    /// Train on another scenario from the next iteration on (a curriculum over generated
    /// scenarios). Only a general network fits every scenario; during imitation an `auto` teacher
    /// is chosen again for the new scenario (`auto` stays `auto` in the configuration).
    pub fn set_simulator(&mut self, sim: Simulator, auto_teacher: bool) -> Result<(), TrainError> {
        if !self.cfg.net.dims.is_general() {
            return Err(TrainError::Checkpoint {
                path: sim.scenario().name.clone(),
                reason: "only a general model (train --general) can move between scenarios".into(),
            });
        }
        if auto_teacher && self.iteration < self.cfg.imitate {
            self.cfg.teacher = crate::policies::best_teacher(&sim, &self.cfg.net);
        }
        self.sim = Self::paying(sim, &self.cfg);
        Ok(())
    }

    /// `sim` paying the reward the network is trained on: RLPTO's cluster reward for an RLPTO
    /// model (feature schema 3), else the default.
    fn paying(sim: Simulator, cfg: &TrainConfig) -> Simulator {
        if cfg.net.dims.is_rlpto() {
            sim.cluster_reward()
        } else {
            sim
        }
    }

    /// The current network without autodiff (for evaluation and saving).
    pub fn inference_net(&self) -> Net {
        self.net.valid()
    }

    /// Greedy policies for every node, from the current network.
    pub fn policies(&self, greedy: bool) -> Vec<Box<dyn Policy>> {
        self.policies_of(&self.inference_net(), greedy)
    }

    fn policies_of(&self, net: &Net, greedy: bool) -> Vec<Box<dyn Policy>> {
        self.policies_for(self.sim.scenario().nodes.len(), net, greedy)
    }

    /// One policy of `net` per node of a cluster of `nodes`.
    fn policies_for(&self, nodes: usize, net: &Net, greedy: bool) -> Vec<Box<dyn Policy>> {
        let base = TapfingerPolicy::from_net(net, self.cfg.net.clone()).greedy(greedy);
        (0..nodes)
            .map(|_| Box::new(base.clone()) as Box<dyn Policy>)
            .collect()
    }

    /// One iteration: collect episodes, then epochs over shuffled minibatches. The first
    /// `imitate` iterations imitate the teacher (the teacher acts with probability falling from
    /// 1 to 1/imitate); later ones are PPO.
    pub fn iterate(&mut self) -> Result<CurvePoint, TrainError> {
        let imitate = self.iteration < self.cfg.imitate;
        let beta = imitate.then(|| 1.0 - self.iteration as f64 / self.cfg.imitate as f64);
        let (episodes, avg_jct, episode_return) = self.collect(beta)?;
        let reference = self.reference_jct(&episodes);
        let exps = episodes.into_iter().map(|e| e.exp).collect();
        let point = self.learn(exps, imitate, avg_jct, episode_return)?;
        if let Some(last) = self.curve.last_mut() {
            last.reference_jct = reference;
        }
        Ok(CurvePoint {
            reference_jct: reference,
            ..point
        })
    }

    /// One update from experience, whatever its source: the simulator's episodes
    /// ([`Trainer::iterate`]) or live agents' reports (the coordinator). Each [`Experience`] is
    /// one stream of decisions (an episode, or one agent's run); advantages are computed per
    /// agent within it. `avg_jct` and `episode_return` only label the curve point.
    pub fn learn(
        &mut self,
        exps: Vec<Experience>,
        imitate: bool,
        avg_jct: f64,
        episode_return: f64,
    ) -> Result<CurvePoint, TrainError> {
        // The centralized critic values each round's global state, merged from all reports of
        // that round (across agents and batches); the simulator's rounds need no merge.
        let asm = tapfinger::model::critic::assemble(exps.iter().flat_map(|e| e.records.iter()));
        self.last_assembly = (asm.rounds.len(), asm.reports, asm.merged);
        // The input-dependent baseline needs whole episodes of one workload (the simulator's
        // iteration); live agents' streams learn on the critic.
        let grouped = !imitate
            && self.cfg.input_baseline
            && exps.len() > 1
            && !exps.iter().any(|e| e.truncated);
        let mut samples = Vec::new();
        if grouped {
            samples = self.input_baseline_samples(exps, &asm);
        } else {
            for mut exp in exps {
                let records = std::mem::take(&mut exp.records);
                if imitate {
                    let zeros = vec![0.0; records.len()];
                    let mut s = self.advantages(records, &exp, &zeros, 1.0, &asm);
                    // A teacher's allocation is a good label even when its claim lost the round.
                    s.iter_mut().for_each(|x| x.lost = false);
                    samples.extend(s);
                } else {
                    let values = self.values(&records, &asm);
                    samples.extend(self.advantages(
                        records,
                        &exp,
                        &values,
                        self.cfg.gae_lambda,
                        &asm,
                    ));
                }
            }
        }
        if self.cfg.normalize_returns && !samples.is_empty() {
            let ms = samples
                .iter()
                .map(|s| f64::from(s.ret).powi(2))
                .sum::<f64>()
                / samples.len() as f64;
            if ms.is_finite() && ms > 0.0 {
                let old = self.ret_scale.powi(2);
                let new = if self.iteration == 0 {
                    ms
                } else {
                    0.9 * old + 0.1 * ms
                };
                self.ret_scale = new.sqrt().max(1e-3);
            }
        }
        // A decision with nothing selectable ("do nothing" forced) has no policy gradient; it
        // only served the advantages above. Dropping it makes an update several times cheaper.
        samples.retain(|s| s.rec.blocked.iter().any(|b| !b));
        let mut order: Vec<usize> = (0..samples.len()).collect();
        // Seeded per iteration (not carried over from the last), so that a resumed run shuffles
        // exactly as an uninterrupted one would.
        self.rng = tapfinger::seeded_rng(self.cfg.seed ^ 0x7EA1 ^ self.iteration);
        let (mut pl, mut vl, mut en, mut n) = (0.0, 0.0, 0.0, 0.0);
        for _ in 0..self.cfg.epochs {
            for i in (1..order.len()).rev() {
                let j = self.rng.random_range(0..=i);
                order.swap(i, j);
            }
            (pl, vl, en, n) = (0.0, 0.0, 0.0, 0.0);
            for chunk in order.chunks(self.cfg.minibatch.max(2)) {
                if chunk.len() < 2 {
                    continue;
                }
                let mb: Vec<&Sample> = chunk.iter().map(|&i| &samples[i]).collect();
                let (a, b, c) = self.step(&mb, imitate);
                pl += a;
                vl += b;
                en += c;
                n += 1.0;
            }
        }
        self.iteration += 1;
        let eval_jct = self.evaluate()?;
        let n: f64 = if n > 0.0 { n } else { 1.0 };
        let point = CurvePoint {
            iteration: self.iteration,
            avg_jct,
            episode_return,
            decisions: samples.len(),
            policy_loss: pl / n,
            value_loss: vl / n,
            entropy: en / n,
            phase: if imitate { "imitate" } else { "ppo" }.to_string(),
            eval_jct,
            reference_jct: f64::NAN,
        };
        self.curve.push(point.clone());
        Ok(point)
    }
}

#[cfg(test)]
mod tests;
