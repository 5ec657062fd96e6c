//! The PPO update: per-agent advantages (GAE) and returns, the critic's values, and one
//! minibatch step of the clipped objective (or of imitation's cross-entropy).

use super::Trainer;
use burn::optim::GradientsParams;
use burn::tensor::activation::{log_softmax, softmax};
use burn::tensor::{Device, Int, Tensor, TensorData};
use std::collections::BTreeMap;
use tapfinger::NodeId;
use tapfinger::model::batch::batch;
use tapfinger::model::net::Selection;
use tapfinger::model::{DecisionRecord, Experience};

/// A decision ready for learning.
pub(super) struct Sample {
    /// The decision as recorded (inputs, action, log-probability).
    pub(super) rec: DecisionRecord,
    /// The critic's view of the record's round when it differs from the record's own (live
    /// agents: the round's reports merged); the actor always learns on its own view.
    pub(super) critic: Option<std::sync::Arc<tapfinger::view::ClusterView>>,
    /// Its claim lost the round (the action had no effect).
    pub(super) lost: bool,
    /// GAE advantage, normalized.
    pub(super) advantage: f32,
    /// Return target of the critic.
    pub(super) ret: f32,
}

fn floats(t: Tensor<1>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap_or_default()
}

impl Trainer {
    /// Per-agent GAE over the agent's decisions; the slot's reward is paid to its last decision.
    /// With `values` all zero and `lambda` 1 the targets are plain Monte-Carlo returns.
    pub(super) fn advantages(
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
                    // A live agent restarted counts its slots from 0 again: a next decision in
                    // an earlier slot ends this one's rewards at its own slot (a range that ran
                    // backwards panicked, and took the coordinator's learner with it).
                    let until = idx
                        .get(pos + 1)
                        .map_or(u64::MAX, |&j| records[j].view.slot)
                        .max(r.view.slot + 1);
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

    /// Samples under the input-dependent baseline ([`super::TrainConfig::input_baseline`]) from
    /// episodes that share one workload. A decision's return is the whole cluster's reward from
    /// the decision's slot on (discounted per slot): the objective is the cluster's JCT, and an
    /// agent's own queue would reward it for pushing work onto its peers. Its advantage is that
    /// less the mean over the episodes of the cluster's return from the same slot (0 in an
    /// episode already over).
    pub(super) fn input_baseline_samples(
        &self,
        exps: Vec<Experience>,
        asm: &tapfinger::model::critic::Assembly,
    ) -> Vec<Sample> {
        let horizon = exps
            .iter()
            .flat_map(|e| e.rewards.keys().map(|(s, _)| *s as usize + 1))
            .chain(
                exps.iter()
                    .flat_map(|e| e.records.iter().map(|r| r.view.slot as usize + 1)),
            )
            .max()
            .unwrap_or(0);
        let (gamma, scale) = (self.cfg.gamma, self.cfg.reward_scale);
        // Per episode: the cluster's return from every slot on.
        let togo: Vec<Vec<f32>> = exps
            .iter()
            .map(|e| {
                let mut g = vec![0.0f32; horizon + 1];
                for ((slot, _), r) in &e.rewards {
                    g[*slot as usize] += *r as f32 * scale;
                }
                for s in (0..horizon).rev() {
                    g[s] += gamma * g[s + 1];
                }
                g
            })
            .collect();
        let n = exps.len().max(1) as f32;
        let mut baseline = vec![0.0f32; horizon + 1];
        for g in &togo {
            for (b, x) in baseline.iter_mut().zip(g) {
                *b += x / n;
            }
        }
        let mut out = Vec::new();
        for (e, exp) in exps.into_iter().enumerate() {
            for rec in exp.records {
                let s = rec.view.slot as usize;
                out.push(Sample {
                    critic: asm.view(&rec).cloned(),
                    lost: exp.lost.contains(&(rec.view.slot, rec.view.step, rec.me)),
                    advantage: togo[e][s] - baseline[s],
                    ret: togo[e][s],
                    rec,
                });
            }
        }
        out
    }

    pub(super) fn values(
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
            // The head predicts returns over their running scale.
            let scale = self.ret_scale as f32;
            out.extend(
                floats(net.value(&enc, &b, &device))
                    .into_iter()
                    .map(|v| v * scale),
            );
        }
        out
    }

    /// One minibatch step; returns (policy loss, value loss, entropy). PPO: clipped surrogate on
    /// the advantages. Imitation (`imitate`): cross-entropy of the labels (pointer and allocation),
    /// with the same value regression so that PPO starts from a warm critic.
    pub(super) fn step(&mut self, mb: &[&Sample], imitate: bool) -> (f64, f64, f64) {
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
        let pass_blocked: Vec<bool> = mb.iter().map(|s| s.rec.pass_blocked).collect();
        let ptr = log_softmax(
            self.net
                .pointer_logits(&enc, &b, &blocked, &pass_blocked, &device),
            1,
        );
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
            let q = tapfinger::model::net::AllocQuery {
                slot: &slots,
                kind: k,
                prev: &prev,
                lo: &lo,
                hi: &hi,
                two_point: self.cfg.net.two_point,
            };
            let l = log_softmax(self.net.alloc_logits(&enc, &b, &q, &device), 1);
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
            TensorData::new(
                mb.iter()
                    .map(|s| s.ret / self.ret_scale as f32)
                    .collect::<Vec<f32>>(),
                [g],
            ),
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
            - entropy.clone() * self.cfg.entropy_at(self.iteration);
        let grads = GradientsParams::from_grads(loss.backward(), &self.net);
        let net = self.net.clone();
        self.net = self.optim.step(self.cfg.lr, net, grads);
        let scalar = |t: Tensor<1>| floats(t).first().copied().unwrap_or(f32::NAN) as f64;
        (scalar(policy_loss), scalar(value_loss), scalar(entropy))
    }
}
