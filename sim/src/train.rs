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

use crate::env::{Observer, Simulator};
use burn::module::Module;
use burn::optim::grad_clipping::GradientClippingConfig;
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::activation::{log_softmax, softmax};
use burn::tensor::{Device, Int, Tensor, TensorData};
use rand::RngExt;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tapfinger::model::batch::{Dims, batch};
use tapfinger::model::net::{Net, NetConfig, Selection};
use tapfinger::model::{DecisionRecord, Experience, Recorder, TapfingerPolicy};
use tapfinger::protocol::RoundOutcome;
use tapfinger::{Decision, NodeId, Policy};

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
    /// Entropy bonus weight.
    pub entropy_coef: f32,
    /// Global gradient-norm clip.
    pub grad_clip: f32,
    /// Rewards are multiplied by this before learning (returns are large negative numbers).
    pub reward_scale: f32,
    /// Imitation (DAgger) iterations before PPO: the network learns the teacher's decisions on the
    /// states it visits itself, the teacher acting with a probability that falls from 1 to 0.
    #[serde(default)]
    pub imitate: u64,
    /// The teacher for imitation: a simulator policy name (default the clairvoyant reference,
    /// which reads the simulator's true speed model; the trained network never does).
    #[serde(default = "default_teacher")]
    pub teacher: String,
    /// Greedy evaluation episodes after every iteration, on validation workloads (their own seed
    /// range, disjoint from training and from `compare`'s seeds); 0 turns evaluation off.
    #[serde(default)]
    pub eval_episodes: usize,
}

fn one() -> f32 {
    1.0
}

fn default_teacher() -> String {
    crate::policies::CLAIRVOYANT.to_string()
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
            grad_clip: 0.5,
            reward_scale: 0.1,
            imitate: 0,
            teacher: default_teacher(),
            eval_episodes: 4,
        }
    }
}

/// Input sizes of a simulator's scenario.
pub fn dims_of(sim: &Simulator) -> Dims {
    let sc = sim.scenario();
    Dims {
        kinds: sc.space.len(),
        types: sc.types.len(),
        window: sc.window,
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
}

/// First workload seed of training episodes.
pub const TRAIN_SEEDS: u64 = 1 << 40;
/// First workload seed of the validation episodes evaluated during training.
pub const VALIDATION_SEEDS: u64 = 1 << 41;

/// File name of the weights in a checkpoint folder.
pub const MODEL_FILE: &str = "model.bpk";
/// File name of the training configuration in a checkpoint folder.
pub const CONFIG_FILE: &str = "train.json";
/// File name of the optimizer's state (Adam's moments) in a checkpoint folder.
pub const OPTIM_FILE: &str = "optim.bpk";

/// What `train.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Training settings (the network sizes among them).
    pub config: TrainConfig,
    /// Scenario trained on.
    pub scenario: String,
    /// Completed iterations.
    pub iteration: u64,
}

fn read_checkpoint(dir: &Path) -> Result<(NetConfig, Checkpoint), TrainError> {
    let json = dir.join(CONFIG_FILE);
    let text = std::fs::read_to_string(&json).map_err(|e| TrainError::Checkpoint {
        path: json.display().to_string(),
        reason: e.to_string(),
    })?;
    let meta: Checkpoint = serde_json::from_str(&text).map_err(|e| TrainError::Checkpoint {
        path: json.display().to_string(),
        reason: e.to_string(),
    })?;
    Ok((meta.config.net.clone(), meta))
}

/// Load a trained policy for inference from a model file (`model.bpk`, with its `train.json`
/// beside it) or from the checkpoint folder holding both.
pub fn load_policy_net(path: &Path, dims: &Dims) -> Result<(Net, NetConfig), TrainError> {
    if !path.exists() {
        return Err(TrainError::Checkpoint {
            path: path.display().to_string(),
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
    let json = dir.join(CONFIG_FILE);
    let err = |p: &Path, e: std::io::Error| TrainError::Checkpoint {
        path: p.display().to_string(),
        reason: e.to_string(),
    };
    let text = std::fs::read_to_string(&json).map_err(|e| err(&json, e))?;
    let bytes = std::fs::read(&model).map_err(|e| err(&model, e))?;
    load_net_bytes(bytes, &text, &model.display().to_string(), dims)
}

/// Load a policy from the bytes of a `model.bpk` and the text of its `train.json`; `label` names
/// the source in errors. A model trained for other input sizes is refused with both sizes named.
pub fn load_net_bytes(
    bytes: Vec<u8>,
    train_json: &str,
    label: &str,
    dims: &Dims,
) -> Result<(Net, NetConfig), TrainError> {
    tapfinger::model::load_bytes(bytes, train_json, label, dims)
        .map(|(net, cfg, _)| (net, cfg))
        .map_err(|e| TrainError::Checkpoint {
            path: e.label,
            reason: e.reason,
        })
}

/// A decision ready for learning.
struct Sample {
    rec: DecisionRecord,
    /// The critic's view of the record's round when it differs from the record's own (live
    /// agents: the round's reports merged); the actor always learns on its own view.
    critic: Option<std::sync::Arc<tapfinger::view::ClusterView>>,
    lost: bool,
    advantage: f32,
    ret: f32,
}

/// One collected episode.
struct Episode {
    exp: Experience,
    avg_jct: f64,
    ret: f64,
}

/// Imitation: the teacher's decision is the label; who acts is a coin flip with weight `beta`.
struct Imitator {
    student: TapfingerPolicy,
    teacher: Box<dyn Policy>,
    beta: f64,
    recorder: Recorder,
}

impl Policy for Imitator {
    fn name(&self) -> &str {
        "imitator"
    }
    fn decide(&mut self, view: &tapfinger::view::View<'_>, rng: &mut tapfinger::Rng) -> Decision {
        let teach = self.teacher.decide(view, rng);
        if let (Some(label), Ok(mut buf)) = (self.student.label(view, &teach), self.recorder.lock())
        {
            buf.push(label);
        }
        if self.beta >= 1.0 || rng.random::<f64>() < self.beta {
            teach
        } else {
            self.student.decide(view, rng)
        }
    }
}

/// Records which claims lost and every agent's reward per slot (the simulator as the source of
/// [`Experience`]).
#[derive(Default)]
struct Collector(Experience);

impl Observer for Collector {
    fn round(&mut self, o: &RoundOutcome) {
        for (agent, _) in &o.lost {
            self.0.lost.insert((o.round.slot, o.round.step, *agent));
        }
    }
    fn slot_end(&mut self, slot: u64, rewards: &[f64]) {
        for (i, r) in rewards.iter().enumerate() {
            self.0.rewards.insert((slot, NodeId(i as u32)), *r);
        }
    }
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
    /// The learned policy was asked for without a model, and none ships for the scenario.
    #[error(
        "policy tapfinger needs trained weights and none ships for scenario {scenario:?} (shipped: {shipped}): pass --model DIR_OR_FILE (train one with `tapfinger-sim train --scenario ...`)"
    )]
    NoModel {
        /// Scenario name.
        scenario: String,
        /// Scenarios with a shipped model.
        shipped: String,
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
    sim: Simulator,
    net: Net,
    optim: ModuleOptimizer,
    device: Device,
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
}

fn floats(t: Tensor<1>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap_or_default()
}

impl Trainer {
    /// A trainer with a fresh network.
    pub fn new(sim: Simulator, cfg: TrainConfig) -> Self {
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

    /// The current network without autodiff (for evaluation and saving).
    pub fn inference_net(&self) -> Net {
        self.net.valid()
    }

    /// Greedy policies for every node, from the current network.
    pub fn policies(&self, greedy: bool) -> Vec<Box<dyn Policy>> {
        self.policies_of(&self.inference_net(), greedy)
    }

    fn policies_of(&self, net: &Net, greedy: bool) -> Vec<Box<dyn Policy>> {
        (0..self.sim.scenario().nodes.len())
            .map(|_| {
                Box::new(
                    TapfingerPolicy::from_net(net.clone(), self.cfg.net.clone(), Device::flex())
                        .greedy(greedy),
                ) as Box<dyn Policy>
            })
            .collect()
    }

    /// Run the iteration's episodes, spread over `threads` OS threads (each episode is seeded by
    /// its index, so the result does not depend on the thread count). `beta`: `None` for PPO
    /// (every agent samples from the network and records), `Some(β)` for imitation (the teacher's
    /// decision is recorded as the label; the teacher acts with probability β, else the network
    /// greedily).
    fn collect(&self, beta: Option<f64>) -> Result<(Vec<Episode>, f64, f64), TrainError> {
        let net = self.inference_net();
        let envs = self.cfg.envs.max(1);
        let threads = self.threads.clamp(1, envs);
        // Training workloads come from their own seed range (from 2^40 on), never the small
        // seeds that `compare` evaluates on.
        let seeds: Vec<u64> = (0..envs)
            .map(|e| {
                TRAIN_SEEDS
                    .wrapping_add(self.cfg.seed.wrapping_mul(1_000_003))
                    .wrapping_add(self.iteration * envs as u64 + e as u64)
            })
            .collect();
        let mut results: Vec<Option<Result<Episode, TrainError>>> =
            (0..envs).map(|_| None).collect();
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|th| {
                    let net = net.clone();
                    let seeds = &seeds;
                    scope.spawn(move || {
                        (th..envs)
                            .step_by(threads)
                            .map(|e| (e, self.episode(&net, seeds[e], beta)))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            for h in handles {
                match h.join() {
                    Ok(done) => {
                        for (e, r) in done {
                            results[e] = Some(r);
                        }
                    }
                    Err(_) => {
                        results.push(Some(Err(TrainError::Checkpoint {
                            path: String::new(),
                            reason: "an episode thread panicked".into(),
                        })));
                    }
                }
            }
        });
        let mut episodes = Vec::with_capacity(envs);
        for r in results.into_iter().flatten() {
            episodes.push(r?);
        }
        let n = episodes.len().max(1) as f64;
        let jct = episodes.iter().map(|e| e.avg_jct).sum::<f64>() / n;
        let ret = episodes.iter().map(|e| e.ret).sum::<f64>() / n;
        Ok((episodes, jct, ret))
    }

    /// One episode of simulated agents sampling from the current network, as [`Experience`]
    /// (what live agents in learning mode report): the simulator as a data source for
    /// [`Trainer::learn`] outside [`Trainer::iterate`], e.g. the coordinator's offline mode.
    pub fn sample_experience(&self, seed: u64) -> Result<Experience, TrainError> {
        Ok(self.episode(&self.inference_net(), seed, None)?.exp)
    }

    /// Greedy average JCT of the current network over the validation workloads (NaN when
    /// `eval_episodes` is 0). Episodes run on up to `threads` threads.
    pub fn evaluate(&self) -> Result<f64, TrainError> {
        self.evaluate_net(&self.inference_net(), self.cfg.eval_episodes)
    }

    /// Greedy average JCT of `net` over the first `n` validation workloads (NaN when `n` is 0):
    /// what an evaluation gate compares candidates with.
    pub fn evaluate_net(&self, net: &Net, n: usize) -> Result<f64, TrainError> {
        if n == 0 {
            return Ok(f64::NAN);
        }
        let kinds: Vec<String> = self.sim.scenario().kind_names();
        let threads = self.threads.clamp(1, n);
        let mut jcts = vec![f64::NAN; n];
        let mut failure = None;
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|th| {
                    let kinds = &kinds;
                    scope.spawn(move || {
                        (th..n)
                            .step_by(threads)
                            .map(|e| {
                                let seed = VALIDATION_SEEDS + e as u64;
                                self.sim
                                    .run(self.policies_of(net, true), seed)
                                    .map(|r| (e, crate::metrics::summarize(&r, kinds).avg_jct))
                                    .map_err(|source| TrainError::Episode { seed, source })
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            for h in handles {
                let Ok(done) = h.join() else {
                    failure = Some(TrainError::Checkpoint {
                        path: String::new(),
                        reason: "an evaluation thread panicked".into(),
                    });
                    continue;
                };
                for r in done {
                    match r {
                        Ok((e, j)) => jcts[e] = j,
                        Err(e) => failure = Some(e),
                    }
                }
            }
        });
        if let Some(e) = failure {
            return Err(e);
        }
        Ok(jcts.iter().sum::<f64>() / n as f64)
    }

    /// One training episode.
    fn episode(&self, net: &Net, seed: u64, beta: Option<f64>) -> Result<Episode, TrainError> {
        let kinds: Vec<String> = self.sim.scenario().kind_names();
        let recorder: Recorder = Arc::new(Mutex::new(Vec::new()));
        let student =
            || TapfingerPolicy::from_net(net.clone(), self.cfg.net.clone(), Device::flex());
        let policies: Vec<Box<dyn Policy>> = match beta {
            None => (0..self.sim.scenario().nodes.len())
                .map(|_| Box::new(student().recording(recorder.clone())) as Box<dyn Policy>)
                .collect(),
            Some(beta) => crate::policies::build(&self.sim, &self.cfg.teacher)
                .map_err(|e| TrainError::Teacher {
                    name: self.cfg.teacher.clone(),
                    reason: e.to_string(),
                })?
                .into_iter()
                .map(|teacher| {
                    Box::new(Imitator {
                        student: student().greedy(true),
                        teacher,
                        beta,
                        recorder: recorder.clone(),
                    }) as Box<dyn Policy>
                })
                .collect(),
        };
        let mut col = Collector::default();
        let result = self
            .sim
            .run_observed(policies, seed, &mut col)
            .map_err(|source| TrainError::Episode { seed, source })?;
        let summary = crate::metrics::summarize(&result, &kinds);
        let records =
            std::mem::take(&mut *recorder.lock().map_err(|_| TrainError::Checkpoint {
                path: String::new(),
                reason: "recorder poisoned".into(),
            })?);
        col.0.records = records;
        Ok(Episode {
            exp: col.0,
            avg_jct: summary.avg_jct,
            ret: summary.episode_return,
        })
    }

    /// Per-agent GAE over the agent's decisions; the slot's reward is paid to its last decision.
    /// With `values` all zero and `lambda` 1 the targets are plain Monte-Carlo returns.
    fn advantages(
        &self,
        records: Vec<DecisionRecord>,
        col: &Experience,
        values: &[f32],
        lambda: f32,
        asm: &tapfinger::model::critic::Assembly,
    ) -> Vec<Sample> {
        let mut by_agent: BTreeMap<NodeId, Vec<usize>> = BTreeMap::new();
        for (i, r) in records.iter().enumerate() {
            by_agent.entry(r.me).or_default().push(i);
        }
        let mut adv = vec![0.0f32; records.len()];
        let mut rets = vec![0.0f32; records.len()];
        let gamma = self.cfg.gamma;
        for idx in by_agent.values() {
            // A stream cut off mid-way (live agents) is bootstrapped from the critic's value of
            // its last state; a finished episode's return ends at zero.
            let mut next_v = match idx.last() {
                Some(&l) if col.truncated => values[l],
                _ => 0.0f32,
            };
            let mut gae = 0.0f32;
            for (pos, &i) in idx.iter().enumerate().rev() {
                let r = &records[i];
                let last_of_slot = idx
                    .get(pos + 1)
                    .is_none_or(|&j| records[j].view.slot != r.view.slot);
                // The reward of every slot from this one up to the agent's next decision: a live
                // agent need not decide in every slot (the simulator's agents do), and a slot
                // without a decision still costs what it costs.
                let reward = if last_of_slot {
                    let until = idx.get(pos + 1).map_or(u64::MAX, |&j| records[j].view.slot);
                    col.rewards
                        .range((r.view.slot, NodeId(0))..(until, NodeId(0)))
                        .filter(|((_, who), _)| *who == r.me)
                        .map(|(_, v)| *v)
                        .sum::<f64>() as f32
                        * self.cfg.reward_scale
                } else {
                    0.0
                };
                let delta = reward + gamma * next_v - values[i];
                gae = delta + gamma * lambda * gae;
                adv[i] = gae;
                rets[i] = gae + values[i];
                next_v = values[i];
            }
        }
        records
            .into_iter()
            .enumerate()
            .map(|(i, rec)| {
                let lost = col.lost.contains(&(rec.view.slot, rec.view.step, rec.me));
                Sample {
                    critic: asm.view(&rec).cloned(),
                    rec,
                    lost,
                    advantage: adv[i],
                    ret: rets[i],
                }
            })
            .collect()
    }

    fn values(
        &self,
        records: &[DecisionRecord],
        asm: &tapfinger::model::critic::Assembly,
    ) -> Vec<f32> {
        let net = self.inference_net();
        let device = Device::flex();
        let mut out = Vec::with_capacity(records.len());
        for chunk in records.chunks(512) {
            let items: Vec<_> = chunk
                .iter()
                .map(|r| (asm.view(r).map_or(&r.view, |g| &**g), r.me))
                .collect();
            let b = batch(&items, &self.cfg.net.dims);
            let enc = net.encode(&b, &device);
            out.extend(floats(net.value(&enc, &b, &device)));
        }
        out
    }

    /// One minibatch step; returns (policy loss, value loss, entropy). PPO: clipped surrogate on
    /// the advantages. Imitation (`imitate`): cross-entropy of the labels (pointer and allocation),
    /// with the same value regression so that PPO starts from a warm critic.
    fn step(&mut self, mb: &[&Sample], imitate: bool) -> (f64, f64, f64) {
        let device = self.device.clone();
        let dims = &self.cfg.net.dims;
        let g = mb.len();
        let w = dims.window;
        let items: Vec<_> = mb.iter().map(|s| (&s.rec.view, s.rec.me)).collect();
        let b = batch(&items, dims);
        let enc = self.net.encode(&b, &device);
        let blocked: Vec<bool> = mb
            .iter()
            .flat_map(|s| s.rec.blocked.iter().copied())
            .collect();
        let ptr = log_softmax(self.net.pointer_logits(&enc, &b, &blocked, &device), 1);
        let chosen: Vec<i32> = mb.iter().map(|s| s.rec.slot as i32).collect();
        let idx = |v: Vec<i32>| Tensor::<2, Int>::from_data(TensorData::new(v, [g, 1]), &device);
        let (mut new_logp, entropy) = if self.cfg.net.selection == Selection::Pointer {
            let logp = ptr.clone().gather(1, idx(chosen)).reshape([g]);
            (
                logp,
                -(softmax(ptr.clone(), 1) * ptr).sum_dim(1).reshape([g]),
            )
        } else {
            // Ablations choose the task by a fixed rule: that term is a constant of the data.
            let fixed: Vec<f32> = mb.iter().map(|s| s.rec.logp_ptr).collect();
            (
                Tensor::<1>::from_data(TensorData::new(fixed, [g]), &device),
                Tensor::<1>::zeros([g], &device),
            )
        };
        // Allocation terms only for claims that won (a lost claim's allocation never ran).
        let keep: Vec<f32> = mb
            .iter()
            .map(|s| {
                if s.rec.slot < w && !s.lost && !s.rec.units.is_empty() {
                    1.0
                } else {
                    0.0
                }
            })
            .collect();
        let keep_t = Tensor::<1>::from_data(TensorData::new(keep.clone(), [g]), &device);
        let slots: Vec<usize> = mb.iter().map(|s| s.rec.slot.min(w)).collect();
        let max_units = self.cfg.net.max_units as u32;
        let mut prev = vec![0.0f32; g * dims.kinds];
        let mut alloc_logp = Tensor::<1>::zeros([g], &device);
        for k in 0..dims.kinds {
            let lo: Vec<u32> = mb
                .iter()
                .map(|s| s.rec.lo.get(k).copied().unwrap_or(0))
                .collect();
            let hi: Vec<u32> = mb
                .iter()
                .map(|s| s.rec.hi.get(k).copied().unwrap_or(max_units))
                .collect();
            let units: Vec<i32> = mb
                .iter()
                .map(|s| s.rec.units.get(k).copied().unwrap_or(0) as i32)
                .collect();
            let l = log_softmax(
                self.net
                    .alloc_logits(&enc, &b, &slots, k, &prev, &lo, &hi, &device),
                1,
            );
            alloc_logp = alloc_logp + l.gather(1, idx(units.clone())).reshape([g]);
            for (i, u) in units.iter().enumerate() {
                prev[i * dims.kinds + k] = *u as f32;
            }
        }
        new_logp = new_logp + alloc_logp * keep_t;
        let old: Vec<f32> = mb
            .iter()
            .zip(&keep)
            .map(|(s, k)| s.rec.logp_ptr + k * s.rec.logp_alloc)
            .collect();
        let old = Tensor::<1>::from_data(TensorData::new(old, [g]), &device);
        let adv: Vec<f32> = mb.iter().map(|s| s.advantage).collect();
        let mean = adv.iter().sum::<f32>() / g as f32;
        let std = (adv.iter().map(|a| (a - mean).powi(2)).sum::<f32>() / g as f32).sqrt() + 1e-8;
        let adv = Tensor::<1>::from_data(
            TensorData::new(
                adv.iter().map(|a| (a - mean) / std).collect::<Vec<f32>>(),
                [g],
            ),
            &device,
        );
        let policy_loss = if imitate {
            -new_logp.mean()
        } else {
            let ratio = (new_logp - old).exp();
            let clipped = ratio
                .clone()
                .clamp(1.0 - self.cfg.clip, 1.0 + self.cfg.clip);
            -(ratio * adv.clone()).min_pair(clipped * adv).mean()
        };
        let rets = Tensor::<1>::from_data(
            TensorData::new(mb.iter().map(|s| s.ret).collect::<Vec<f32>>(), [g]),
            &device,
        );
        // The critic's input: the round's global state where it differs from the agent's own
        // view (live agents), else the encoding the actor already made (one forward pass).
        let value = if mb.iter().any(|s| s.critic.is_some()) {
            let items: Vec<_> = mb
                .iter()
                .map(|s| (s.critic.as_deref().unwrap_or(&s.rec.view), s.rec.me))
                .collect();
            let cb = batch(&items, dims);
            let cenc = self.net.encode(&cb, &device);
            self.net.value(&cenc, &cb, &device)
        } else {
            self.net.value(&enc, &b, &device)
        };
        let value_loss = (value - rets).powf_scalar(2.0).mean();
        let entropy = entropy.mean();
        let loss = policy_loss.clone() + value_loss.clone() * self.cfg.value_coef
            - entropy.clone() * self.cfg.entropy_coef;
        let grads = GradientsParams::from_grads(loss.backward(), &self.net);
        let net = self.net.clone();
        self.net = self.optim.step(self.cfg.lr, net, grads);
        let scalar = |t: Tensor<1>| floats(t).first().copied().unwrap_or(f32::NAN) as f64;
        (scalar(policy_loss), scalar(value_loss), scalar(entropy))
    }

    /// Write a checkpoint into `dir`: `model.bpk` (burn record), `train.json` (configuration,
    /// scenario and iteration), `optim.bpk` (Adam's moments, so that a resumed run continues
    /// exactly where this one stopped), `curve.csv` and `curve.svg`.
    pub fn save(&self, dir: &Path) -> Result<(), TrainError> {
        let err = |path: &Path, reason: String| TrainError::Checkpoint {
            path: path.display().to_string(),
            reason,
        };
        std::fs::create_dir_all(dir).map_err(|e| err(dir, e.to_string()))?;
        let model = dir.join(MODEL_FILE);
        self.inference_net()
            .save_file(&model)
            .map_err(|e| err(&model, e.to_string()))?;
        let optim = dir.join(OPTIM_FILE);
        self.optim
            .save(&optim)
            .map_err(|e| err(&optim, e.to_string()))?;
        let meta = Checkpoint {
            config: self.cfg.clone(),
            scenario: self.sim.scenario().name.clone(),
            iteration: self.iteration,
        };
        let json = dir.join(CONFIG_FILE);
        let text = serde_json::to_string_pretty(&meta).map_err(|e| err(&json, e.to_string()))?;
        std::fs::write(&json, text).map_err(|e| err(&json, e.to_string()))?;
        let mut csv = String::from(
            "iteration,avg_jct,episode_return,decisions,policy_loss,value_loss,entropy,phase,eval_jct\n",
        );
        for p in &self.curve {
            csv.push_str(&format!(
                "{},{:.4},{:.2},{},{:.5},{:.5},{:.5},{},{:.4}\n",
                p.iteration,
                p.avg_jct,
                p.episode_return,
                p.decisions,
                p.policy_loss,
                p.value_loss,
                p.entropy,
                p.phase,
                p.eval_jct
            ));
        }
        let curve = dir.join("curve.csv");
        std::fs::write(&curve, csv).map_err(|e| err(&curve, e.to_string()))?;
        let mut series = vec![(
            "avg JCT (training episodes)".to_string(),
            self.curve
                .iter()
                .map(|p| (p.iteration as f64, p.avg_jct))
                .collect::<Vec<_>>(),
        )];
        let eval: Vec<(f64, f64)> = self
            .curve
            .iter()
            .filter(|p| p.eval_jct.is_finite())
            .map(|p| (p.iteration as f64, p.eval_jct))
            .collect();
        if !eval.is_empty() {
            series.push(("avg JCT (greedy, validation)".to_string(), eval));
        }
        crate::plot::line_chart(
            &dir.join("curve.svg"),
            &format!("{}: training curve", meta.scenario),
            "iteration",
            "average JCT (slots)",
            &series,
        )
        .map_err(|e| err(dir, e.to_string()))?;
        Ok(())
    }

    /// Resume from a checkpoint folder written by [`Trainer::save`].
    pub fn resume(sim: Simulator, dir: &Path) -> Result<Self, TrainError> {
        let (net_cfg, meta) = read_checkpoint(dir)?;
        let curve_text = std::fs::read_to_string(dir.join("curve.csv")).unwrap_or_default();
        let mut t = Trainer::new(sim, meta.config.clone());
        let device = t.device.clone();
        let path = dir.join(MODEL_FILE);
        t.net = Net::new(&net_cfg, &device)
            .try_load_file(&path)
            .map_err(|e| TrainError::Checkpoint {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?;
        // A checkpoint from before the optimizer was saved resumes with fresh moments.
        let optim = dir.join(OPTIM_FILE);
        if optim.exists() {
            let fresh = std::mem::replace(&mut t.optim, AdamConfig::new().init());
            t.optim = fresh.load(&optim).map_err(|e| TrainError::Checkpoint {
                path: optim.display().to_string(),
                reason: e.to_string(),
            })?;
        }
        t.iteration = meta.iteration;
        t.curve = curve_text
            .lines()
            .skip(1)
            .filter_map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                Some(CurvePoint {
                    iteration: f.first()?.parse().ok()?,
                    avg_jct: f.get(1)?.parse().ok()?,
                    episode_return: f.get(2)?.parse().ok()?,
                    decisions: f.get(3)?.parse().ok()?,
                    policy_loss: f.get(4)?.parse().ok()?,
                    value_loss: f.get(5)?.parse().ok()?,
                    entropy: f.get(6)?.parse().ok()?,
                    phase: f.get(7).unwrap_or(&"ppo").to_string(),
                    eval_jct: f.get(8).and_then(|x| x.parse().ok()).unwrap_or(f64::NAN),
                })
            })
            .collect();
        Ok(t)
    }

    /// One iteration: collect episodes, then epochs over shuffled minibatches. The first
    /// `imitate` iterations imitate the teacher (the teacher acts with probability falling from
    /// 1 to 1/imitate); later ones are PPO.
    pub fn iterate(&mut self) -> Result<CurvePoint, TrainError> {
        let imitate = self.iteration < self.cfg.imitate;
        let beta = imitate.then(|| 1.0 - self.iteration as f64 / self.cfg.imitate as f64);
        let (episodes, avg_jct, episode_return) = self.collect(beta)?;
        let exps = episodes.into_iter().map(|e| e.exp).collect();
        self.learn(exps, imitate, avg_jct, episode_return)
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
        let mut samples = Vec::new();
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
                samples.extend(self.advantages(records, &exp, &values, self.cfg.gae_lambda, &asm));
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
        };
        self.curve.push(point.clone());
        Ok(point)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scenario;

    /// One box, GPU-hungry tasks only: the better the allocations, the shorter the queue.
    const TINY: &str = r#"
name = "tiny"
max_slots = 3000
lambda = 0.7
tasks = 24
window = 4
[[resources]]
name = "cpu"
[[resources]]
name = "gpu"
[[nodes]]
name = "box"
capacity = [4, 8]
[[task_types]]
name = "LM"
min_demand = [1, 1]
speed = { model = "synthetic", w = [0.0, 0.25], b = 0.0 }
"#;

    fn greedy_jct(t: &Trainer, seeds: &[u64]) -> f64 {
        let kinds = vec!["cpu".to_string(), "gpu".to_string()];
        let total: f64 = seeds
            .iter()
            .map(|&s| {
                crate::metrics::summarize(&t.sim.run(t.policies(true), s).unwrap(), &kinds).avg_jct
            })
            .sum();
        total / seeds.len() as f64
    }

    /// A trainer on the tiny scenario with a small network: `width`, 1 layer, 8 units per kind,
    /// minibatch 64; `tune` sets the rest.
    fn tiny(seed: u64, width: usize, tune: impl FnOnce(&mut TrainConfig)) -> Trainer {
        let sim = Simulator::new(Scenario::from_toml(TINY, "tiny", None).unwrap());
        let mut cfg = TrainConfig::new(dims_of(&sim), seed);
        cfg.net.width = width;
        cfg.net.layers = 1;
        cfg.net.max_units = 8;
        cfg.minibatch = 64;
        tune(&mut cfg);
        Trainer::new(sim, cfg)
    }

    /// Rewards of slots in which an agent made no decision (possible live) are charged to its
    /// previous decision, and the simulator's episodes have a decision in every slot of every agent.
    #[test]
    fn slots_without_a_decision_still_count() {
        let t = tiny(1, 16, |cfg| {
            cfg.gamma = 1.0;
            cfg.reward_scale = 1.0;
        });
        let rec = |slot: u64| {
            let view = tapfinger::view::ClusterView {
                slot,
                ..Default::default()
            };
            DecisionRecord::new(view, NodeId(0), Vec::new(), 0)
        };
        let mut exp = Experience::default();
        for (slot, r) in [(1, -1.0), (2, -2.0), (3, -4.0), (4, -8.0)] {
            exp.rewards.insert((slot, NodeId(0)), r);
            // Another agent's rewards are not ours.
            exp.rewards.insert((slot, NodeId(1)), -100.0);
        }
        let records = vec![rec(1), rec(3)];
        let asm = tapfinger::model::critic::assemble(&records);
        let s = t.advantages(records, &exp, &[0.0, 0.0], 1.0, &asm);
        assert_eq!((s[0].ret, s[1].ret), (-15.0, -12.0));

        let sim = Simulator::new(Scenario::load("hetero6").unwrap());
        let dims = dims_of(&sim);
        let exp = Trainer::new(sim, TrainConfig::new(dims, 5))
            .sample_experience(5)
            .unwrap();
        let decided: std::collections::BTreeSet<(u64, NodeId)> =
            exp.records.iter().map(|r| (r.view.slot, r.me)).collect();
        assert!(exp.rewards.keys().all(|k| decided.contains(k)));
    }

    #[test]
    fn ppo_improves_a_tiny_environment() {
        let mut t = tiny(11, 32, |cfg| {
            cfg.envs = 4;
            cfg.lr = 1e-3;
            cfg.eval_episodes = 0;
        });
        let eval: Vec<u64> = (1000..1004).collect();
        let before = greedy_jct(&t, &eval);
        let mut curve = Vec::new();
        for _ in 0..15 {
            curve.push(t.iterate().unwrap());
        }
        let after = greedy_jct(&t, &eval);
        let first: f64 = curve[..3].iter().map(|p| p.avg_jct).sum::<f64>() / 3.0;
        let last: f64 = curve[12..].iter().map(|p| p.avg_jct).sum::<f64>() / 3.0;
        // (lr 1e-3: at 3e-3 the sampling policy's JCT rose again after iteration 10.)
        eprintln!("{:?}", curve.iter().map(|p| p.avg_jct).collect::<Vec<_>>());
        eprintln!(
            "greedy before {before:.2} after {after:.2}; sampling first {first:.2} last {last:.2}"
        );
        assert!(
            curve
                .iter()
                .all(|p| p.policy_loss.is_finite() && p.value_loss.is_finite())
        );
        assert!(after < before, "greedy JCT {before:.2} → {after:.2}");
        assert!(last < first, "sampling JCT {first:.2} → {last:.2}");

        // A checkpoint resumes with the same weights: the same greedy decisions.
        let dir = std::env::temp_dir().join(format!("tapfinger-ckpt-{}", std::process::id()));
        t.save(&dir).unwrap();
        let sim2 = Simulator::new(Scenario::from_toml(TINY, "tiny", None).unwrap());
        let resumed = Trainer::resume(sim2, &dir).unwrap();
        assert_eq!(resumed.iteration, 15);
        assert_eq!(resumed.curve.len(), 15);
        assert_eq!(greedy_jct(&resumed, &eval), after);
        let (_, cfg) = load_policy_net(&dir.join(MODEL_FILE), &dims_of(&t.sim)).unwrap();
        assert_eq!(cfg, t.cfg.net);
        let wrong = Dims {
            kinds: 3,
            types: 1,
            window: 4,
        };
        assert!(
            load_policy_net(&dir, &wrong)
                .unwrap_err()
                .to_string()
                .contains("trained for 2")
        );
    }

    /// The centralized critic's assembly: in the simulator every agent of a round decides on the
    /// same snapshot, so the rounds of a multi-agent episode need no merge (one forward pass);
    /// once one agent's view of its peers goes stale, its rounds are merged.
    #[test]
    fn simulated_rounds_need_no_merge_and_stale_views_do() {
        let sim = Simulator::new(Scenario::load("hetero6").unwrap());
        let dims = dims_of(&sim);
        let t = Trainer::new(sim, TrainConfig::new(dims, 5));
        let mut exp = t.sample_experience(5).unwrap();
        let asm = tapfinger::model::critic::assemble(&exp.records);
        assert!(asm.reports_per_round() > 1.5, "{}", asm.reports_per_round());
        assert_eq!(asm.merged, 0);
        // Agent 0 has not heard node 1's last heartbeat: it still sees node 1 with all its
        // capacity free.
        let stale = exp
            .records
            .iter()
            .position(|r| {
                r.me == NodeId(0) && r.view.nodes.get(1).is_some_and(|n| n.free != n.capacity)
            })
            .expect("a round in which node 1 runs something");
        let n1 = &mut exp.records[stale].view.nodes[1];
        n1.free = n1.capacity.clone();
        let round = (exp.records[stale].view.slot, exp.records[stale].view.step);
        let asm = tapfinger::model::critic::assemble(&exp.records);
        assert_eq!(asm.merged, 1);
        let g = asm.rounds[&round].as_ref().unwrap();
        // Node 1's own report wins.
        let own = exp
            .records
            .iter()
            .find(|r| r.me == NodeId(1) && (r.view.slot, r.view.step) == round)
            .unwrap();
        assert_eq!(g.nodes[1].free, own.view.nodes[1].free);
        assert_ne!(g.nodes[1].free, g.nodes[1].capacity);
    }

    #[test]
    fn imitation_learns_from_the_teacher_then_hands_over_to_ppo() {
        let mut t = tiny(11, 32, |cfg| {
            cfg.envs = 4;
            cfg.lr = 3e-3;
            cfg.imitate = 4;
            cfg.eval_episodes = 2;
        });
        let eval: Vec<u64> = (2000..2004).collect();
        let before = greedy_jct(&t, &eval);
        let teacher: f64 = {
            let kinds = vec!["cpu".to_string(), "gpu".to_string()];
            eval.iter()
                .map(|&s| {
                    let ps = crate::policies::build(&t.sim, "clairvoyant").unwrap();
                    crate::metrics::summarize(&t.sim.run(ps, s).unwrap(), &kinds).avg_jct
                })
                .sum::<f64>()
                / eval.len() as f64
        };
        let curve: Vec<CurvePoint> = (0..5).map(|_| t.iterate().unwrap()).collect();
        let after = greedy_jct(&t, &eval);
        eprintln!("greedy before {before:.2}, after imitation {after:.2}, teacher {teacher:.2}");
        let phases: Vec<&str> = curve.iter().map(|p| p.phase.as_str()).collect();
        assert_eq!(phases, ["imitate", "imitate", "imitate", "imitate", "ppo"]);
        assert!(curve.iter().all(|p| p.eval_jct.is_finite()));
        // The cross-entropy to the teacher's labels falls, and the student closes most of the gap
        // between the untrained network and the teacher.
        assert!(curve[3].policy_loss < curve[0].policy_loss, "{curve:?}");
        assert!(
            after < before && after - teacher < 0.5 * (before - teacher),
            "before {before:.2}, after {after:.2}, teacher {teacher:.2}"
        );
    }

    #[test]
    fn results_do_not_depend_on_the_number_of_threads() {
        let run = |threads: usize| {
            let mut t = tiny(21, 16, |cfg| {
                // The default minibatch (256) is what this test always used.
                cfg.minibatch = 256;
                cfg.envs = 3;
                cfg.imitate = 1;
                cfg.eval_episodes = 3;
            });
            t.threads = threads;
            (t.iterate().unwrap(), t.iterate().unwrap())
        };
        assert_eq!(run(1), run(2));
    }

    #[test]
    fn a_resumed_run_continues_exactly_where_the_checkpoint_stopped() {
        let make = || {
            tiny(5, 16, |cfg| {
                cfg.envs = 2;
                cfg.imitate = 1;
                cfg.eval_episodes = 0;
            })
        };
        // Three iterations in one go ...
        let mut straight = make();
        let straight_curve: Vec<CurvePoint> = (0..3).map(|_| straight.iterate().unwrap()).collect();
        // ... against two, a checkpoint, a fresh process's resume, and the third.
        let mut first = make();
        first.iterate().unwrap();
        first.iterate().unwrap();
        let dir = std::env::temp_dir().join(format!("tapfinger-resume-{}", std::process::id()));
        first.save(&dir).unwrap();
        assert!(dir.join(OPTIM_FILE).exists(), "Adam's moments are saved");
        let sim = Simulator::new(Scenario::from_toml(TINY, "tiny", None).unwrap());
        let mut resumed = Trainer::resume(sim, &dir).unwrap();
        let third = resumed.iterate().unwrap();
        // The losses of the third iteration depend on the weights, the optimizer's moments and
        // the minibatch order: all three must have survived the checkpoint.
        // (`eval_jct` is NaN with evaluation off, and NaN != NaN: compare the rest.)
        let no_eval = |p: &CurvePoint| CurvePoint {
            eval_jct: 0.0,
            ..p.clone()
        };
        assert_eq!(no_eval(&third), no_eval(&straight_curve[2]));
        let eval = [900, 901];
        assert_eq!(greedy_jct(&resumed, &eval), greedy_jct(&straight, &eval));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn ablations_train_without_error() {
        for variant in ["nohan", "nopointer", "vanilla"] {
            let sim = Simulator::new(Scenario::from_toml(TINY, "tiny", None).unwrap());
            let mut cfg = TrainConfig::new(dims_of(&sim), 3);
            cfg.net = NetConfig::variant(dims_of(&sim), variant).unwrap();
            cfg.net.width = 16;
            cfg.net.max_units = 8;
            cfg.envs = 2;
            let mut t = Trainer::new(sim, cfg);
            let p = t.iterate().unwrap();
            assert!(
                p.policy_loss.is_finite() && p.value_loss.is_finite(),
                "{variant}: {p:?}"
            );
            if variant != "nohan" {
                assert_eq!(
                    p.entropy, 0.0,
                    "{variant}: a fixed selection rule has no pointer entropy"
                );
            }
        }
    }
}
