//! Metrics of an episode and their aggregation over seeds.
//!
//! Pure arithmetic over [`EpisodeResult`]s: JCT statistics, JCT relative to the lower bound,
//! makespan, utilization per resource kind, conflicts and decisions per slot. Nothing is simulated
//! here.

use crate::env::EpisodeResult;
use serde::Serialize;
use std::collections::BTreeMap;

/// Summary of one episode.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Mean JCT (slots).
    pub avg_jct: f64,
    /// Median JCT.
    pub median_jct: f64,
    /// 95th percentile JCT.
    pub p95_jct: f64,
    /// 99th percentile JCT.
    pub p99_jct: f64,
    /// Mean best isolated runtime of the same tasks.
    pub lower_bound_jct: f64,
    /// The pooled bound ([`crate::bound`]): the cluster as one machine running preemptive
    /// shortest-remaining-first on the tasks' true sizes (never below `lower_bound_jct`).
    pub pooled_bound_jct: f64,
    /// Mean of per-task JCT / lower bound.
    pub jct_over_lower_bound: f64,
    /// Slot at whose end the last task finished.
    pub makespan: f64,
    /// Mean allocated share per kind over the slots up to the makespan.
    pub utilization: BTreeMap<String, f64>,
    /// The same over the slots that ended with a task waiting (arrived, not started): what a
    /// policy leaves idle under a queue (`None` where no task ever waited).
    pub utilization_while_waiting: Option<BTreeMap<String, f64>>,
    /// Mean contested tasks per slot.
    pub conflicts_per_slot: f64,
    /// Mean tasks started per slot.
    pub decisions_per_slot: f64,
    /// Mean decision steps (protocol rounds) per slot.
    pub steps_per_slot: f64,
    /// Failed runs (below the true need).
    pub failures: f64,
    /// Sum of all agents' returns.
    pub episode_return: f64,
    /// Mean JCT of the gangs (multi-node jobs), if the episode had any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gang_avg_jct: Option<f64>,
    /// Mean JCT per priority class, if the episode had more than one class.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub class_avg_jct: BTreeMap<u8, f64>,
    /// Mean cluster reward per task (RLPTO's; [`crate::learning`]).
    pub cluster_reward: f64,
    /// Mean node-slots of resources held per task.
    pub resource_time: f64,
    /// Mean final accuracy of the tasks with a learning curve, if any had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<f64>,
    /// Tasks the plateau detector found converging (a learning curve and `[shrink]` needed).
    pub converged: f64,
    /// Mean accuracy those tasks still gained after the detector first found them converging
    /// (what stopping them there would have cost), if any was found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gained_after_plateau: Option<f64>,
    /// Tasks stopped to make room for a higher class (per episode).
    pub preempted: f64,
    /// Work they lost, in tasks' own work (1: one whole run), per episode.
    pub work_lost: f64,
    /// Times a task's GPU count changed while it ran (elastic re-shares), per task: on an
    /// agent each one restarts a resumable task with its new devices, which the simulator
    /// charges only where the scenario's `switch_weight` says.
    pub gpu_changes: f64,
    /// The arrival forecast's mean absolute error per interval, its last-value baseline's, and
    /// the intervals a model (not the fallback) forecast (`--forecast`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forecast_mae: Option<(f64, f64, f64)>,
    /// Resources by data size (RLPTO's claim that large data gets more): node-slots held per
    /// slot from start to finish, mean over the largest quarter of the tasks by size and over
    /// the smallest quarter, where sizes differ.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub units_by_size: Option<(f64, f64)>,
}

/// [`Summary::units_by_size`] of these tasks.
fn units_by_size(tasks: &[crate::env::TaskRecord]) -> Option<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = tasks
        .iter()
        .map(|t| {
            let ran = t.finish.saturating_sub(t.start).max(1) as f64;
            (t.size, t.resource_time / ran)
        })
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let q = v.len() / 4;
    if q == 0 || v[0].0 == v[v.len() - 1].0 {
        return None;
    }
    let mean = |s: &[(f64, f64)]| s.iter().map(|x| x.1).sum::<f64>() / s.len() as f64;
    Some((mean(&v[v.len() - q..]), mean(&v[..q])))
}

/// Mean of the values, `None` if there are none.
fn mean_of(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    (n > 0).then(|| s / n as f64)
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// Summarize one episode; `kinds` names the resource kinds.
pub fn summarize(r: &EpisodeResult, kinds: &[String]) -> Summary {
    let mut jct: Vec<f64> = r.tasks.iter().map(|t| t.jct as f64).collect();
    jct.sort_by(f64::total_cmp);
    let n = jct.len().max(1) as f64;
    let slots = r.slots.len().max(1) as f64;
    let utilization = kinds
        .iter()
        .enumerate()
        .map(|(k, name)| {
            (
                name.clone(),
                r.slots
                    .iter()
                    .map(|s| s.utilization.get(k).copied().unwrap_or(0.0))
                    .sum::<f64>()
                    / slots,
            )
        })
        .collect();
    let queued: Vec<&crate::episode::SlotRecord> =
        r.slots.iter().filter(|s| s.waiting > 0).collect();
    let utilization_while_waiting = (!queued.is_empty()).then(|| {
        kinds
            .iter()
            .enumerate()
            .map(|(k, name)| {
                (
                    name.clone(),
                    queued
                        .iter()
                        .map(|s| s.utilization.get(k).copied().unwrap_or(0.0))
                        .sum::<f64>()
                        / queued.len() as f64,
                )
            })
            .collect()
    });
    Summary {
        avg_jct: jct.iter().sum::<f64>() / n,
        median_jct: percentile(&jct, 0.5),
        p95_jct: percentile(&jct, 0.95),
        p99_jct: percentile(&jct, 0.99),
        lower_bound_jct: r.tasks.iter().map(|t| t.lower_bound as f64).sum::<f64>() / n,
        pooled_bound_jct: crate::bound::pooled_bound_jct(
            &r.tasks
                .iter()
                .map(|t| (t.arrival, t.lower_bound, t.area.as_slice()))
                .collect::<Vec<_>>(),
        ),
        jct_over_lower_bound: r
            .tasks
            .iter()
            .map(|t| t.jct as f64 / t.lower_bound.max(1) as f64)
            .sum::<f64>()
            / n,
        makespan: r.tasks.iter().map(|t| t.finish).max().unwrap_or(0) as f64,
        utilization,
        utilization_while_waiting,
        conflicts_per_slot: r.slots.iter().map(|s| f64::from(s.conflicts)).sum::<f64>() / slots,
        decisions_per_slot: r.slots.iter().map(|s| f64::from(s.commits)).sum::<f64>() / slots,
        steps_per_slot: r.slots.iter().map(|s| f64::from(s.steps)).sum::<f64>() / slots,
        failures: r.tasks.iter().map(|t| f64::from(t.failures)).sum(),
        episode_return: r.returns.iter().sum(),
        gang_avg_jct: {
            let g: Vec<f64> = r
                .tasks
                .iter()
                .filter(|t| t.members > 0)
                .map(|t| t.jct as f64)
                .collect();
            (!g.is_empty()).then(|| g.iter().sum::<f64>() / g.len() as f64)
        },
        class_avg_jct: {
            let mut by: BTreeMap<u8, (f64, f64)> = BTreeMap::new();
            for t in &r.tasks {
                let e = by.entry(t.priority).or_default();
                e.0 += t.jct as f64;
                e.1 += 1.0;
            }
            if by.len() > 1 {
                by.into_iter().map(|(c, (s, n))| (c, s / n)).collect()
            } else {
                BTreeMap::new()
            }
        },
        cluster_reward: r.tasks.iter().map(|t| t.cluster_reward).sum::<f64>() / n,
        resource_time: r.tasks.iter().map(|t| t.resource_time).sum::<f64>() / n,
        accuracy: mean_of(r.tasks.iter().filter_map(|t| t.accuracy)),
        converged: r
            .tasks
            .iter()
            .filter(|t| t.accuracy_at_plateau.is_some())
            .count() as f64,
        gained_after_plateau: mean_of(
            r.tasks
                .iter()
                .filter_map(|t| Some(t.accuracy? - t.accuracy_at_plateau?)),
        ),
        preempted: r.tasks.iter().map(|t| f64::from(t.preemptions)).sum(),
        work_lost: r.tasks.iter().map(|t| t.work_lost).sum(),
        gpu_changes: mean_of(r.tasks.iter().map(|t| f64::from(t.gpu_changes))).unwrap_or(0.0),
        forecast_mae: (!r.forecasts.is_empty()).then(|| {
            let n = r.forecasts.len() as f64;
            let mae = |f: fn(&crate::env::ForecastPoint) -> f64| {
                r.forecasts
                    .iter()
                    .map(|p| (f(p) - p.actual).abs())
                    .sum::<f64>()
                    / n
            };
            (
                mae(|p| p.predicted),
                mae(|p| p.last_value),
                r.forecasts.iter().filter(|p| p.fitted).count() as f64,
            )
        }),
        units_by_size: units_by_size(&r.tasks),
    }
}

/// Mean and sample standard deviation.
pub fn mean_std(xs: &[f64]) -> (f64, f64) {
    if xs.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let m = xs.iter().sum::<f64>() / xs.len() as f64;
    if xs.len() < 2 {
        return (m, 0.0);
    }
    let v = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (xs.len() - 1) as f64;
    (m, v.sqrt())
}

/// Per-field mean over seeds (utilization averaged per kind).
pub fn mean_summary(s: &[Summary]) -> Summary {
    let f = |g: fn(&Summary) -> f64| mean_std(&s.iter().map(g).collect::<Vec<_>>()).0;
    let mut utilization = BTreeMap::new();
    if let Some(first) = s.first() {
        for k in first.utilization.keys() {
            let v: Vec<f64> = s
                .iter()
                .map(|x| x.utilization.get(k).copied().unwrap_or(0.0))
                .collect();
            utilization.insert(k.clone(), mean_std(&v).0);
        }
    }
    // Over the seeds where a task waited.
    let waited: Vec<&BTreeMap<String, f64>> = s
        .iter()
        .filter_map(|x| x.utilization_while_waiting.as_ref())
        .collect();
    let utilization_while_waiting = waited.first().map(|first| {
        first
            .keys()
            .map(|k| {
                let v: Vec<f64> = waited
                    .iter()
                    .map(|m| m.get(k).copied().unwrap_or(0.0))
                    .collect();
                (k.clone(), mean_std(&v).0)
            })
            .collect()
    });
    Summary {
        avg_jct: f(|x| x.avg_jct),
        median_jct: f(|x| x.median_jct),
        p95_jct: f(|x| x.p95_jct),
        p99_jct: f(|x| x.p99_jct),
        lower_bound_jct: f(|x| x.lower_bound_jct),
        pooled_bound_jct: f(|x| x.pooled_bound_jct),
        jct_over_lower_bound: f(|x| x.jct_over_lower_bound),
        makespan: f(|x| x.makespan),
        utilization_while_waiting,
        utilization,
        conflicts_per_slot: f(|x| x.conflicts_per_slot),
        decisions_per_slot: f(|x| x.decisions_per_slot),
        steps_per_slot: f(|x| x.steps_per_slot),
        failures: f(|x| x.failures),
        episode_return: f(|x| x.episode_return),
        gang_avg_jct: {
            let g: Vec<f64> = s.iter().filter_map(|x| x.gang_avg_jct).collect();
            (!g.is_empty()).then(|| mean_std(&g).0)
        },
        class_avg_jct: {
            let classes: std::collections::BTreeSet<u8> = s
                .iter()
                .flat_map(|x| x.class_avg_jct.keys().copied())
                .collect();
            classes
                .into_iter()
                .map(|c| {
                    let v: Vec<f64> = s
                        .iter()
                        .filter_map(|x| x.class_avg_jct.get(&c))
                        .copied()
                        .collect();
                    (c, mean_std(&v).0)
                })
                .collect()
        },
        cluster_reward: f(|x| x.cluster_reward),
        resource_time: f(|x| x.resource_time),
        accuracy: mean_of(s.iter().filter_map(|x| x.accuracy)),
        converged: f(|x| x.converged),
        gained_after_plateau: mean_of(s.iter().filter_map(|x| x.gained_after_plateau)),
        preempted: f(|x| x.preempted),
        work_lost: f(|x| x.work_lost),
        gpu_changes: f(|x| x.gpu_changes),
        forecast_mae: {
            let v: Vec<(f64, f64, f64)> = s.iter().filter_map(|x| x.forecast_mae).collect();
            (!v.is_empty()).then(|| {
                let n = v.len() as f64;
                (
                    v.iter().map(|x| x.0).sum::<f64>() / n,
                    v.iter().map(|x| x.1).sum::<f64>() / n,
                    v.iter().map(|x| x.2).sum::<f64>() / n,
                )
            })
        },
        units_by_size: {
            let v: Vec<(f64, f64)> = s.iter().filter_map(|x| x.units_by_size).collect();
            (!v.is_empty()).then(|| {
                let n = v.len() as f64;
                (
                    v.iter().map(|x| x.0).sum::<f64>() / n,
                    v.iter().map(|x| x.1).sum::<f64>() / n,
                )
            })
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_spread() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.95), 95.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&[3.0], 0.99), 3.0);
        let (m, s) = mean_std(&[1.0, 3.0]);
        assert_eq!(m, 2.0);
        assert!((s - 2f64.sqrt()).abs() < 1e-12);
    }
}
