//! Episodes for training: PPO sampling (every agent samples from the network and records),
//! imitation (the teacher's decision is the label), and greedy evaluation on validation seeds.

use super::{DevJudge, TRAIN_SEEDS, TrainError, Trainer, VALIDATION_SEEDS};
use crate::env::Observer;
use rand::RngExt;
use std::sync::{Arc, Mutex};
use tapfinger::model::net::Net;
use tapfinger::model::{Experience, Recorder, TapfingerPolicy};
use tapfinger::protocol::RoundOutcome;
use tapfinger::{Decision, NodeId, Policy};

/// One collected episode.
pub(super) struct Episode {
    /// What the agents recorded.
    pub(super) exp: Experience,
    /// Its average job completion time (slots).
    avg_jct: f64,
    /// The agents' summed return.
    ret: f64,
    /// Its workload seed.
    pub(super) workload: u64,
}

/// Imitation: the teacher's decision is the label; who acts is a coin flip with weight `beta`.
struct Imitator {
    /// The network being taught.
    student: TapfingerPolicy,
    /// The baseline whose decisions are the labels.
    teacher: Box<dyn Policy>,
    /// Probability that the teacher acts (decays over imitation).
    beta: f64,
    /// Where the student's records go, labelled with the teacher's action.
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
    // Whoever decides, the slot's sharing is the student's: it is what the student will run.
    fn elastic(&self) -> bool {
        self.student.elastic()
    }
    fn floors(&self) -> bool {
        self.student.floors()
    }
    fn rebalance(
        &mut self,
        view: &tapfinger::view::View<'_>,
        rng: &mut tapfinger::Rng,
    ) -> Vec<(tapfinger::TaskId, tapfinger::Resources)> {
        self.student.rebalance(view, rng)
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

impl Trainer {
    /// Run the iteration's episodes, spread over `threads` OS threads (each episode is seeded by
    /// its index, so the result does not depend on the thread count). `beta`: `None` for PPO
    /// (every agent samples from the network and records), `Some(β)` for imitation (the teacher's
    /// decision is recorded as the label; the teacher acts with probability β, else the network
    /// greedily).
    pub(super) fn collect(
        &self,
        beta: Option<f64>,
    ) -> Result<(Vec<Episode>, f64, f64), TrainError> {
        let net = self.inference_net();
        let envs = self.cfg.envs.max(1);
        let threads = self.threads.clamp(1, envs);
        // Training workloads come from their own seed range (from 2^40 on), never the small
        // seeds that `compare` evaluates on. With the input-dependent baseline, the iteration's
        // episodes share one workload and differ in the agents' sampling.
        let base = TRAIN_SEEDS.wrapping_add(self.cfg.seed.wrapping_mul(1_000_003));
        let seeds: Vec<(u64, u64)> = (0..envs)
            .map(|e| {
                if self.cfg.input_baseline && beta.is_none() {
                    let w = base.wrapping_add(self.iteration * envs as u64);
                    (w, w ^ (e as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407))
                } else {
                    let s = base.wrapping_add(self.iteration * envs as u64 + e as u64);
                    (s, s)
                }
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
        Ok(self.episode(&self.inference_net(), (seed, seed), None)?.exp)
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

    /// How `net` does on other scenarios than the one it trains on: per scenario of `judges`
    /// and per validation workload of it (seeds from [`VALIDATION_SEEDS`]), its greedy average
    /// JCT there over the judge's reference, averaged over all of them. What selects among the
    /// checkpoints of a general model, whose training scenario changes every iteration.
    pub fn judge_on(&self, net: &Net, judges: &[DevJudge]) -> Result<f64, TrainError> {
        let mut sum = 0.0;
        let mut n = 0usize;
        for judge in judges {
            let sim = &judge.sim;
            let kinds = sim.scenario().kind_names();
            for (j, reference) in judge.references.iter().enumerate() {
                let seed = VALIDATION_SEEDS + j as u64;
                let policies = self.policies_for(sim.scenario().nodes.len(), net, true);
                let r = sim
                    .run(policies, seed)
                    .map_err(|source| TrainError::Episode { seed, source })?;
                sum += crate::metrics::summarize(&r, &kinds).avg_jct / reference;
                n += 1;
            }
        }
        Ok(sum / n.max(1) as f64)
    }

    /// One training episode on workload `seeds.0` with sampling seeded by `seeds.1`.
    fn episode(
        &self,
        net: &Net,
        (seed, policy_seed): (u64, u64),
        beta: Option<f64>,
    ) -> Result<Episode, TrainError> {
        let kinds: Vec<String> = self.sim.scenario().kind_names();
        let recorder: Recorder = Arc::new(Mutex::new(Vec::new()));
        let base = TapfingerPolicy::from_net(net, self.cfg.net.clone());
        let student = || base.clone();
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
            .run_split(policies, seed, policy_seed, &mut col)
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
            workload: seed,
        })
    }

    /// [`super::REFERENCE`]'s mean average JCT on the workloads of `episodes`, each run once
    /// (NaN if it cannot run on this scenario).
    pub(super) fn reference_jct(&self, episodes: &[Episode]) -> f64 {
        let kinds: Vec<String> = self.sim.scenario().kind_names();
        let seeds: std::collections::BTreeSet<u64> = episodes.iter().map(|e| e.workload).collect();
        let jcts: Vec<f64> = seeds
            .iter()
            .filter_map(|&seed| {
                let ps = crate::policies::build(&self.sim, super::REFERENCE).ok()?;
                let r = self.sim.run(ps, seed).ok()?;
                Some(crate::metrics::summarize(&r, &kinds).avg_jct)
            })
            .collect();
        if jcts.is_empty() || jcts.len() < seeds.len() {
            return f64::NAN;
        }
        jcts.iter().sum::<f64>() / jcts.len() as f64
    }
}
