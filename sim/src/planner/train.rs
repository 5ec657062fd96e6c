//! Training the learned planner with REINFORCE: each iteration draws a batch of random chains
//! (generator seeds from [`TRAIN_SEEDS`] up, never the figures' 100..300; half from
//! [`random::chain`], the bench's family, half from [`random::varied`], a wider one), decodes several plans
//! per chain, and pushes up the log-probability of the plans cheaper than the chain's average
//! (the average of the chain's own draws is the baseline, as in POMO; the score is the log of
//! the cost, so chains of every size weigh alike). A plan that misses the target or the limits
//! scores as the chain's worst feasible draw plus one (so missing is always worse than any plan
//! that works). The exact planner is never used to train; it only measures progress on the
//! development chains (seeds 0..50) in the curve.

use super::{PlannerConfig, PlannerNet, rollout};
use burn::module::Module;
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Tensor, TensorData};
use std::path::Path;
use tapfinger::plan::{Problem, exact, random};

/// Training chains are drawn from generator seeds from here up.
pub const TRAIN_SEEDS: u64 = 1_000_000;

/// What a training run is given.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct TrainConfig {
    /// The network's size.
    pub config: PlannerConfig,
    /// Chains per iteration.
    pub batch: usize,
    /// Plans drawn per chain.
    pub samples: usize,
    /// Adam's learning rate.
    pub lr: f64,
    /// Weight of the entropy bonus.
    pub entropy: f64,
    /// Seed of the weights and the draws.
    pub seed: u64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            config: PlannerConfig::default(),
            batch: 32,
            samples: 8,
            lr: 1e-3,
            entropy: 0.01,
            seed: 1,
        }
    }
}

/// What `train.json` holds beside the weights.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Meta {
    /// The run's settings (the network's size among them).
    pub train: TrainConfig,
    /// Iterations done.
    pub iterations: u64,
    /// The command that trained it.
    pub command: String,
}

/// One point of the training curve.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    /// Iteration.
    pub iteration: u64,
    /// Mean over the batch of the draws' mean cost against the batch chains' best draw.
    pub spread: f64,
    /// Share of draws that missed the target or the limits.
    pub missed: f64,
    /// Greedy decode on the development chains: mean cost against the exact plan.
    pub dev_ratio: f64,
}

/// Mean cost of the greedy decode against the exact plan on development chains 0..50 (both
/// unit settings; chains no plan reaches are left out; a greedy miss counts as 2×).
pub fn dev_ratio(net: &PlannerNet) -> f64 {
    let device = Device::flex();
    let mut rng = tapfinger::seeded_rng(0);
    let mut sum = 0.0;
    let mut n = 0;
    for seed in 0..50 {
        for limited in [false, true] {
            let (job, prices) = random::chain(seed, limited);
            let Ok(p) = Problem::new(job, prices) else {
                continue;
            };
            let Ok(best) = exact::plan(&p) else { continue };
            let out = rollout(net, &[(&p, true)], &mut rng, &device);
            sum += p
                .evaluate(&out.assign[0], "learned")
                .map_or(2.0, |plan| plan.cost / best.cost);
            n += 1;
        }
    }
    sum / f64::from(n.max(1))
}

/// A training run in progress.
pub struct Trainer {
    /// Settings.
    pub cfg: TrainConfig,
    /// The network being trained.
    net: PlannerNet,
    /// Its optimizer (Adam).
    optim: ModuleOptimizer,
    /// Where it runs.
    device: Device,
    /// Draws the training chains and the sampled plans (seeded).
    rng: tapfinger::Rng,
    /// Iterations done.
    pub iteration: u64,
    /// The curve so far.
    pub curve: Vec<Point>,
}

impl Trainer {
    /// A run with fresh weights.
    pub fn new(cfg: TrainConfig) -> Self {
        let device = Device::flex().autodiff();
        device.seed(cfg.seed);
        let net = PlannerNet::new(&cfg.config, &device);
        Self {
            rng: tapfinger::seeded_rng(cfg.seed ^ 0x91a7),
            cfg,
            net,
            optim: AdamConfig::new().init(),
            device,
            iteration: 0,
            curve: Vec::new(),
        }
    }

    /// The network without its autodiff graph.
    pub fn inference_net(&self) -> PlannerNet {
        self.net.valid()
    }

    /// One REINFORCE step on a fresh batch of chains.
    pub fn step(&mut self) -> Point {
        let (b, k) = (self.cfg.batch, self.cfg.samples.max(2));
        let first = TRAIN_SEEDS + self.iteration * b as u64;
        let problems: Vec<Problem> = (0..b as u64)
            .filter_map(|i| {
                // Half from the bench's family, half from a wider one (other price lists,
                // limits, targets and links), so that the planner reads what it has not seen.
                let seed = first + i;
                let (job, prices) = match seed % 4 {
                    0 => random::chain(seed, false),
                    1 => random::chain(seed, true),
                    _ => random::varied(seed),
                };
                Problem::new(job, prices).ok()
            })
            .collect();
        let rows: Vec<(&Problem, bool)> = problems
            .iter()
            .flat_map(|p| std::iter::repeat_n((p, false), k))
            .collect();
        let out = rollout(&self.net, &rows, &mut self.rng, &self.device);
        let mut adv = vec![0.0f32; rows.len()];
        let (mut spread, mut missed, mut counted) = (0.0, 0usize, 0usize);
        for (c, p) in problems.iter().enumerate() {
            let range = c * k..(c + 1) * k;
            let costs: Vec<Option<f64>> = out.assign[range.clone()]
                .iter()
                .map(|a| {
                    p.evaluate(a, "learned")
                        .ok()
                        .map(|plan| plan.cost.max(1e-12).ln())
                })
                .collect();
            missed += costs.iter().filter(|s| s.is_none()).count();
            let worst = costs
                .iter()
                .flatten()
                .copied()
                .fold(f64::NEG_INFINITY, f64::max);
            if !worst.is_finite() {
                continue; // every draw missed: nothing to compare
            }
            let scores: Vec<f64> = costs.iter().map(|s| s.unwrap_or(worst + 1.0)).collect();
            let mean = scores.iter().sum::<f64>() / k as f64;
            let best = scores.iter().copied().fold(f64::INFINITY, f64::min);
            spread += (mean - best).exp();
            counted += 1;
            for (i, s) in range.zip(scores) {
                adv[i] = (mean - s) as f32;
            }
        }
        let n = rows.len();
        let adv = Tensor::<1>::from_data(TensorData::new(adv, [n]), &self.device);
        let loss = -(out.logp * adv).mean() - out.entropy.mean() * self.cfg.entropy;
        let grads = GradientsParams::from_grads(loss.backward(), &self.net);
        let net = self.net.clone();
        self.net = self.optim.step(self.cfg.lr, net, grads);
        self.iteration += 1;
        Point {
            iteration: self.iteration,
            spread: spread / counted.max(1) as f64,
            missed: missed as f64 / n as f64,
            dev_ratio: f64::NAN,
        }
    }

    /// Write `model.bpk`, `train.json` and `curve.csv` into `dir`.
    pub fn save(&self, dir: &Path, command: &str) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)?;
        self.inference_net().save_file(dir.join("model.bpk"))?;
        let meta = Meta {
            train: self.cfg.clone(),
            iterations: self.iteration,
            command: command.to_string(),
        };
        std::fs::write(dir.join("train.json"), serde_json::to_string_pretty(&meta)?)?;
        let mut csv = String::from("iteration,draw_spread,missed,dev_ratio\n");
        for p in &self.curve {
            csv.push_str(&format!(
                "{},{:.4},{:.4},{:.4}\n",
                p.iteration, p.spread, p.missed, p.dev_ratio
            ));
        }
        std::fs::write(dir.join("curve.csv"), csv)?;
        Ok(())
    }
}
