//! One task class's samples and its fitted model of job time against allocation (the
//! estimator's module doc says what is kept and why): the least-squares fit from the samples,
//! the shape from one task's pairs where they exist, and what a switch or a start-up costs.

use super::{COSTLY_SWITCH, NANO, NOISE_Z, PRIOR_SLOTS, offsets, prior_shape, term};
use crate::fit::nnls;
use crate::task::TaskTypeId;
use std::collections::BTreeMap;

/// Per canonical allocation: (samples, sum of job times in nanoslots).
type Cells = BTreeMap<[u32; 3], (u64, u128)>;

/// Per (earlier, later) canonical allocation: (pairs, sum of the later job time over the
/// earlier one, in nanos).
type Pairs = BTreeMap<([u32; 3], [u32; 3]), (u64, u128)>;

/// One class's samples and fit.
#[derive(Debug, Clone, Default)]
pub(super) struct Class {
    /// Per canonical allocation: (samples, sum of job times in nanoslots).
    pub(super) cells: Cells,
    /// The fitted model, once samples span two allocations.
    pub(super) theta: Option<[f64; 4]>,
    /// Samples' level relative to the prior shape (time / shape, averaged per sample).
    pub(super) level: Option<f64>,
    /// The minimum demand the prior shape and the terms' offsets are anchored at: per kind, the
    /// least of the class's tasks heard of ([`class_for`]).
    pub(super) min: [f64; 3],
    /// Per (earlier, later) canonical allocation of one task's consecutive samples: (pairs, sum
    /// of the later job time over the earlier one, in nanos). A ratio of one task's own times
    /// does not depend on the task's size, which the cells' times mix in (module doc).
    pub(super) pairs: Pairs,
    /// Distinct profile hints: (canonical allocation, job time in nanoslots), one sample each.
    pub(super) hints: std::collections::BTreeSet<([u32; 3], u128)>,
    /// Re-allocations measured: (count, sum of the speed of a switch's slot over the speed of
    /// the same task's next slot at that allocation, each at most 1, in nanos).
    pub(super) switches: (u64, u128),
    /// Ordinary pairs (one task's consecutive slots at one allocation): (count, sum of what the
    /// earlier slot lost against the later, `1 − min(later / earlier speed, 1)`, in nanos, sum of
    /// its squares in nanos). The noise a switch's loss must stand out of (module doc).
    pub(super) ordinary: (u64, u128, u128),
    /// The switches' slots, kept apart from `cells` as `cells` keeps samples: they count as
    /// speed samples while the class's switches measure free ([`COSTLY_SWITCH`]), as they
    /// did before switches were measured.
    pub(super) switch_cells: Cells,
    /// Start-ups measured, as `switches` measures re-allocations: (count, sum of the speed of
    /// a run's first slot over the speed of its next slot at the same allocation, each at most
    /// 1, in nanos).
    pub(super) starts: (u64, u128),
    /// Runs' first slots, kept apart from `cells` as `switch_cells` keeps the switches': speed
    /// samples while the class's start-ups measure free ([`COSTLY_SWITCH`]).
    pub(super) start_cells: Cells,
    /// Pairs whose earlier slot was a run's first (a start, then the slot after a re-share):
    /// kept apart from `pairs` and counted with them while start-ups measure free. A costly
    /// start-up's slot is slow, so such a pair would make its later allocation look faster
    /// than it is.
    pub(super) start_pairs: Pairs,
}

fn terms(a: &[f64; 3], o: &[f64; 3]) -> [f64; 4] {
    [1.0, term(o[0], a[0]), term(o[1], a[1]), term(o[2], a[2])]
}

/// [`terms`] without the terms of the kinds that never `varied` (the intercept carries them).
fn varied_terms(a: &[f64; 3], o: &[f64; 3], varied: &[bool; 3]) -> [f64; 4] {
    let mut f = terms(a, o);
    for k in 0..3 {
        if !varied[k] {
            f[k + 1] = 0.0;
        }
    }
    f
}

fn as_f64(a: &[u32; 3]) -> [f64; 3] {
    a.map(f64::from)
}

impl Class {
    /// Observed slots and hints held, without merging any cells: what ranks a class's GPU
    /// models by how much it was seen on them ([`super::models::speaking`]).
    pub(super) fn weight(&self) -> u64 {
        self.cells.values().map(|c| c.0).sum::<u64>() + self.hints.len() as u64
    }

    /// Whether samples or hints have set its level (else [`Class::slots`] is the prior's).
    /// Not `samples() > 0`: that may copy the cells, and estimates are read far more often
    /// than samples come in.
    pub(super) fn fitted(&self) -> bool {
        self.theta.is_some() || self.level.is_some()
    }

    pub(super) fn samples(&self) -> u64 {
        // The counts of [`Class::speed_cells`] without merging the maps (views ask this for
        // every task they show, so it is worth not cloning a map for it).
        let count = |c: &Cells| c.values().map(|c| c.0).sum::<u64>();
        let mut n = count(&self.cells);
        if self.switch_cost() < COSTLY_SWITCH {
            n += count(&self.switch_cells);
        }
        if self.start_cost() < COSTLY_SWITCH {
            n += count(&self.start_cells);
        }
        n + self.hints.len() as u64
    }

    /// The fraction of a slot a re-allocation costs, as measured ([`Estimator::switch_cost`]).
    ///
    /// [`Estimator::switch_cost`]: super::Estimator::switch_cost
    pub(super) fn switch_cost(&self) -> f64 {
        self.cost(self.switches)
    }

    /// The fraction of its first slot a run's start-up costs, as measured
    /// ([`Estimator::start_cost`]).
    ///
    /// [`Estimator::start_cost`]: super::Estimator::start_cost
    pub(super) fn start_cost(&self) -> f64 {
        self.cost(self.starts)
    }

    /// What slots measured as `(count, sum of kept fractions in nanos)` lose beyond the
    /// ordinary slots' loss, 0 where that does not stand out of the noise (module doc).
    fn cost(&self, (count, kept): (u64, u128)) -> f64 {
        if count == 0 {
            return 0.0;
        }
        let n = count as f64;
        let lost = (1.0 - kept as f64 / NANO / n).clamp(0.0, 1.0);
        let (mean, spread) = self.ordinary_loss();
        let excess = (lost - mean).max(0.0);
        // Below the bar once the noise is allowed for: no evidence of a cost (module doc).
        if excess - NOISE_Z * spread / n.sqrt() < COSTLY_SWITCH {
            return 0.0;
        }
        excess
    }

    /// The ordinary pairs' mean loss and its standard deviation (0 with fewer than two pairs:
    /// no evidence of noise).
    fn ordinary_loss(&self) -> (f64, f64) {
        let (n, sum, squares) = self.ordinary;
        if n == 0 {
            return (0.0, 0.0);
        }
        let nf = n as f64;
        let mean = sum as f64 / NANO / nf;
        if n < 2 {
            return (mean, 0.0);
        }
        let var = (squares as f64 / NANO - nf * mean * mean) / (nf - 1.0);
        (mean, var.max(0.0).sqrt())
    }

    /// The speed samples per allocation: the observed ones, and the switches' and runs' first
    /// slots while those measure free. From sums alone, so the same in any order the samples
    /// came in.
    fn speed_cells(&self) -> std::borrow::Cow<'_, Cells> {
        let mut extra = Vec::new();
        if self.switch_cost() < COSTLY_SWITCH {
            extra.push(&self.switch_cells);
        }
        if self.start_cost() < COSTLY_SWITCH {
            extra.push(&self.start_cells);
        }
        merged(&self.cells, extra)
    }

    /// The pairs the shape is fitted to: the ordinary ones, and those from a run's first slot
    /// while start-ups measure free.
    fn all_pairs(&self) -> std::borrow::Cow<'_, Pairs> {
        let extra = if self.start_cost() < COSTLY_SWITCH {
            vec![&self.start_pairs]
        } else {
            Vec::new()
        };
        merged(&self.pairs, extra)
    }

    pub(super) fn refit(&mut self) {
        // Per allocation: its mean job time and its weight (√samples, as least squares over
        // every sample would weigh it); each hint a row of weight 1.
        let cells = self.speed_cells();
        let rows: Vec<([f64; 3], f64, f64)> = cells
            .iter()
            .map(|(a, (n, sum))| (as_f64(a), *sum as f64 / NANO / *n as f64, *n as f64))
            .chain(
                self.hints
                    .iter()
                    .map(|(a, t)| (as_f64(a), *t as f64 / NANO, 1.0)),
            )
            .collect();
        let n: f64 = rows.iter().map(|r| r.2).sum();
        self.level = Some(
            rows.iter()
                .map(|(a, t, w)| w * t / prior_shape(&self.min, a))
                .sum::<f64>()
                / n,
        );
        let varied: [bool; 3] = std::array::from_fn(|k| {
            rows.iter()
                .any(|(a, _, _)| (a[k] - rows[0].0[k]).abs() > 0.0)
        });
        if self.fit_pairs(&rows, varied) {
            return;
        }
        if !varied.iter().any(|v| *v) {
            self.theta = None;
            return;
        }
        // Kinds that never varied get no term: the intercept carries them.
        let o = offsets(&self.min);
        let x: Vec<[f64; 4]> = rows
            .iter()
            .map(|(a, _, w)| varied_terms(a, &o, &varied).map(|v| v * w.sqrt()))
            .collect();
        let y: Vec<f64> = rows.iter().map(|(_, t, w)| t * w.sqrt()).collect();
        self.theta = Some(nnls(&x, &y));
    }

    /// The fit from the pairs (module doc), where they exist: the shape from the pairs' ratios
    /// (`T(later) = ratio · T(earlier)`, normalized to 1 at the most sampled allocation), the
    /// level from every sample (`rows`: allocation, mean job time, samples). False, and nothing
    /// changed, without pairs or where the pairs leave a kind unvaried that the samples vary.
    fn fit_pairs(&mut self, rows: &[([f64; 3], f64, f64)], in_samples: [bool; 3]) -> bool {
        let pairs = self.all_pairs();
        if pairs.is_empty() {
            return false;
        }
        // Pairs that never varied a kind the samples did say nothing of it, and a shape without
        // its term would hold the kind useless for good (a share that believes so never hands
        // the kind out, so no pair ever varies it): the samples' fit speaks until they do. (A
        // pair's allocations are samples' too, so past this the pairs vary what they vary.)
        if (0..3).any(|k| in_samples[k] && !pairs.keys().any(|(a, b)| a[k] != b[k])) {
            return false;
        }
        let o = offsets(&self.min);
        let masked = |a: &[f64; 3]| varied_terms(a, &o, &in_samples);
        let mut x: Vec<[f64; 4]> = Vec::with_capacity(pairs.len() + 1);
        let mut y: Vec<f64> = Vec::with_capacity(pairs.len() + 1);
        let mut total = 0.0;
        for ((a, b), (n, sum)) in pairs.iter() {
            let n = *n as f64;
            let ratio = *sum as f64 / NANO / n;
            let (fa, fb) = (masked(&as_f64(a)), masked(&as_f64(b)));
            x.push(std::array::from_fn(|j| (fb[j] - ratio * fa[j]) * n.sqrt()));
            y.push(0.0);
            total += n;
        }
        // An allocation no pair touches (a rigid task's: it never re-allocates) would take its
        // time from the pairs' shape alone, however many samples say otherwise: its cell's
        // mean against the most sampled cell the pairs do touch is the only ratio there is for
        // it, so it counts as its samples' weight of pairs. (Cells mix the tasks' sizes, which
        // is why pairs lead where they exist; but the agent's short re-shares make noisy pairs,
        // and a rigid class's full-width samples must not be overruled by them.)
        let touched = |a: &[f64; 3]| {
            pairs
                .keys()
                .any(|(p, q)| as_f64(p) == *a || as_f64(q) == *a)
        };
        let most = |r: &&([f64; 3], f64, f64), q: &&([f64; 3], f64, f64)| r.2.total_cmp(&q.2);
        if let Some((r, t0, _)) = rows
            .iter()
            .filter(|r| r.1 > 0.0 && touched(&r.0))
            .max_by(most)
        {
            for (a, t, n) in rows.iter().filter(|r| !touched(&r.0)) {
                let (fr, fa) = (masked(r), masked(a));
                x.push(std::array::from_fn(|j| (fa[j] - t / t0 * fr[j]) * n.sqrt()));
                y.push(0.0);
                total += n;
            }
        }
        // The anchor fixes the scale the ratios leave free (heavily weighted: it must hold).
        let anchor = rows.iter().max_by(most).map_or([0.0; 3], |r| r.0);
        drop(pairs);
        let weight = 1e3 * total.sqrt();
        x.push(masked(&anchor).map(|v| v * weight));
        y.push(weight);
        let shape = nnls(&x, &y);
        let f = |a: &[f64; 3]| {
            terms(a, &o)
                .iter()
                .zip(&shape)
                .map(|(t, s)| t * s)
                .sum::<f64>()
        };
        let n: f64 = rows.iter().map(|r| r.2).sum();
        let level = rows
            .iter()
            .map(|(a, t, w)| w * t / f(a).max(1e-9))
            .sum::<f64>()
            / n;
        if !(level.is_finite() && level > 0.0 && shape.iter().any(|s| *s > 0.0)) {
            return false;
        }
        self.theta = Some(shape.map(|s| s * level));
        true
    }

    pub(super) fn slots(&self, min: &[f64; 3], a: &[f64; 3]) -> f64 {
        let t = match (&self.theta, self.level) {
            (Some(th), _) => terms(a, &offsets(&self.min))
                .iter()
                .zip(th)
                .map(|(f, t)| f * t)
                .sum::<f64>(),
            (None, Some(level)) => level * prior_shape(&self.min, a),
            (None, None) => PRIOR_SLOTS * prior_shape(min, a),
        };
        t.max(1e-3)
    }
}

/// `ty`'s class on a GPU model (the entry `key`), made if new, anchored at the least minimum demand (per kind) of the tasks it
/// has heard of: a minimum of many, the same whatever order the agents hear the tasks in, so
/// that they fit the same terms ([`offsets`]) and prior shape. A lower minimum refits it.
pub(super) fn class_for(
    classes: &mut BTreeMap<(TaskTypeId, super::GpuModel), Class>,
    key: (TaskTypeId, super::GpuModel),
    min: [f64; 3],
) -> &mut Class {
    let c = classes.entry(key).or_insert_with(|| Class {
        min,
        ..Class::default()
    });
    if (0..3).any(|k| min[k] < c.min[k]) {
        c.min = std::array::from_fn(|k| c.min[k].min(min[k]));
        if c.fitted() {
            c.refit();
        }
    }
    c
}

/// `base` with every map of `extra` added cell by cell (counts and sums); `base` itself, not a
/// copy, where nothing is added.
fn merged<'a, K: Ord + Copy>(
    base: &'a BTreeMap<K, (u64, u128)>,
    extra: Vec<&BTreeMap<K, (u64, u128)>>,
) -> std::borrow::Cow<'a, BTreeMap<K, (u64, u128)>> {
    if extra.iter().all(|m| m.is_empty()) {
        return std::borrow::Cow::Borrowed(base);
    }
    let mut all = base.clone();
    for m in extra {
        for (k, (n, sum)) in m {
            let cell = all.entry(*k).or_insert((0, 0));
            cell.0 += n;
            cell.1 += sum;
        }
    }
    std::borrow::Cow::Owned(all)
}
