//! Recurring jobs: users who submit the same jobs again and again (a nightly training run, a
//! sweep's configurations), the workload where a cluster's history predicts sizes.
//!
//! Published traces show both how much recurs and how well it predicts: Helios (SC'21) predicts
//! a job's GPU time from its user's and job name's history with half of the estimates within
//! ±50 %; 3Sigma (EuroSys'18) finds 8–23 % of its estimates off by twice or more, depending on
//! the cluster. A scenario's `task_size.recurring` draws such a workload: each class has `jobs`
//! recurring jobs, each a user's; every arriving task of a class runs one of them (job `k` with
//! weight `1/(k+1)`: a few jobs run often, most rarely); a job's mean size is one heavy-tailed
//! draw (the `task_size` Pareto, mean 1, capped), and each run's size is that mean times a
//! log-normal of mean 1 and log-spread σ, σ drawn per job from `spread` (σ = 0.40 puts 8 % of
//! runs off the job's median by twice or more, 0.58 puts 23 % there, 0.80 keeps half within
//! ±50 %), capped at the same maximum. With `informative = false` the jobs and users are drawn
//! alike but each run's size is its own Pareto draw: history says nothing beyond the class.
//!
//! A stream of its own (the workload seed's): the arrivals, classes and boxes are the same as
//! without it.

use crate::scenario::{Recurring, Scenario};
use rand::RngExt as _;
use rand_distr::{Distribution as _, StandardNormal};

/// A workload's recurring jobs, per task by id.
pub struct Runs {
    /// Each task's job: (class, job index within the class), and that job's user.
    pub job: Vec<(usize, u32, u32)>,
    /// Each task's size (its work over its class's).
    pub size: Vec<f64>,
}

impl Runs {
    /// Each task's identity as a spec would name it: submitter `user<U>`, job
    /// `<class name>-job<K>`.
    pub fn identities(&self) -> Vec<Option<tapfinger::sizes::Identity>> {
        self.job
            .iter()
            .map(|(c, k, u)| {
                Some(tapfinger::sizes::Identity {
                    submitter: Some(format!("user{u}")),
                    job: Some(format!("c{c}-job{k}")),
                })
            })
            .collect()
    }
}

/// The recurring jobs of `sc`'s workload of `seed`, for its first `n` tasks, if it has them.
pub fn draw(sc: &Scenario, seed: u64, n: usize) -> Option<Runs> {
    let ts = sc.task_size?;
    let r = ts.recurring?;
    let tasks = super::generate(sc, seed);
    let classes = sc.types.len();
    // Per class and job: its mean size and its spread, drawn in order from the jobs' stream.
    let mut jobs_rng = tapfinger::seeded_rng(seed ^ 0x5245_4355_5252_4A42);
    let jobs: Vec<Vec<(f64, f64)>> = (0..classes)
        .map(|_| {
            (0..r.jobs)
                .map(|_| {
                    let mean = super::pareto(&ts, &mut jobs_rng);
                    let spread = jobs_rng.random_range(r.spread[0]..=r.spread[1]);
                    (mean, spread)
                })
                .collect()
        })
        .collect();
    let mut runs_rng = tapfinger::seeded_rng(seed ^ 0x5245_4355_5252_5255);
    let weights: Vec<f64> = (0..r.jobs).map(|k| 1.0 / f64::from(k + 1)).collect();
    let total: f64 = weights.iter().sum();
    let mut out = Runs {
        job: Vec::with_capacity(n),
        size: Vec::with_capacity(n),
    };
    for t in tasks.iter().take(n) {
        let c = usize::from(t.ty.0).min(classes.saturating_sub(1));
        let k = pick(&weights, total, runs_rng.random::<f64>());
        let (mean, spread) = jobs[c][k as usize];
        let size = if r.informative {
            let z: f64 = StandardNormal.sample(&mut runs_rng);
            mean * (spread * z - spread * spread / 2.0).exp()
        } else {
            super::pareto(&ts, &mut runs_rng)
        };
        out.job.push((c, k, user(&r, c, k)));
        out.size.push(size.clamp(1e-3, ts.max));
    }
    // A workload shorter than `n` (a scenario's count): the rest as plain tasks.
    while out.size.len() < n {
        out.job.push((0, 0, 0));
        out.size.push(1.0);
    }
    Some(out)
}

/// The job whose cumulative weight passes `x · total`.
fn pick(weights: &[f64], total: f64, x: f64) -> u32 {
    let mut left = x * total;
    for (k, w) in weights.iter().enumerate() {
        if left < *w {
            return k as u32;
        }
        left -= w;
    }
    weights.len().saturating_sub(1) as u32
}

/// The user who submits job `k` of class `c`.
fn user(r: &Recurring, c: usize, k: u32) -> u32 {
    ((c as u64 * u64::from(r.jobs) + u64::from(k)) % u64::from(r.users)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::TaskSize;

    fn recurring(spread: [f64; 2], informative: bool) -> Scenario {
        let mut sc = Scenario::load("hetero6").unwrap();
        sc.tasks = 6000;
        sc.task_size = Some(TaskSize {
            pareto_shape: 1.8,
            max: 20.0,
            recurring: Some(Recurring {
                jobs: 20,
                users: 6,
                spread,
                informative,
            }),
        });
        sc
    }

    /// The share of runs whose size is off their job's median (`by_job`), or their class's,
    /// by twice or more.
    fn off_twice(sc: &Scenario, by_job: bool) -> f64 {
        let runs = draw(sc, 3, sc.tasks as usize).unwrap();
        let mut groups: std::collections::BTreeMap<(usize, u32), Vec<f64>> = Default::default();
        for (j, s) in runs.job.iter().zip(&runs.size) {
            let key = if by_job { (j.0, j.1) } else { (j.0, 0) };
            groups.entry(key).or_default().push(*s);
        }
        let (mut off, mut all) = (0usize, 0usize);
        for v in groups.values_mut().filter(|v| v.len() >= 100) {
            v.sort_by(f64::total_cmp);
            let median = v[v.len() / 2];
            off += v
                .iter()
                .filter(|s| **s >= 2.0 * median || **s <= median / 2.0)
                .count();
            all += v.len();
        }
        off as f64 / all as f64
    }

    /// Calibration: a spread of 0.40 puts about 8 % of runs off their job's median by twice
    /// or more and 0.58 about 23 % (3Sigma's range), where their class's median is off far more
    /// often; drawn without history (`informative = false`), a job's median is no better than
    /// its class's. The arrivals are the same as without recurring jobs, and the same seed draws
    /// the same jobs.
    #[test]
    fn the_spread_sets_how_often_a_run_is_off_its_job_by_twice() {
        let low = recurring([0.40, 0.40], true);
        let high = recurring([0.58, 0.58], true);
        let blind = recurring([0.40, 0.40], false);
        let (l, h) = (off_twice(&low, true), off_twice(&high, true));
        assert!((0.06..0.11).contains(&l), "{l}");
        assert!((0.19..0.27).contains(&h), "{h}");
        assert!(off_twice(&low, false) > 2.0 * l);
        let (job, class) = (off_twice(&blind, true), off_twice(&blind, false));
        assert!((job - class).abs() < 0.03, "{job} vs {class}");
        let sc = recurring([0.4, 0.8], true);
        let mut plain = sc.clone();
        plain.task_size = None;
        assert_eq!(
            crate::workload::generate(&sc, 3),
            crate::workload::generate(&plain, 3)
        );
        let (a, b) = (draw(&sc, 3, 100).unwrap(), draw(&sc, 3, 100).unwrap());
        assert_eq!((a.job, a.size), (b.job, b.size));
        let ids = crate::workload::identities(&sc, 3, 3);
        assert!(
            ids.iter()
                .all(|i| i.as_ref().is_some_and(|i| i.job.is_some()))
        );
        assert!(
            crate::workload::identities(&plain, 3, 3)
                .iter()
                .all(Option::is_none)
        );
    }

    /// A few jobs run often and most rarely; every user submits some; sizes keep the cap.
    #[test]
    fn jobs_recur_unevenly_and_sizes_keep_the_cap() {
        let sc = recurring([0.4, 0.8], true);
        let runs = draw(&sc, 9, sc.tasks as usize).unwrap();
        let first = runs.job.iter().filter(|j| j.1 == 0).count();
        let last = runs.job.iter().filter(|j| j.1 == 19).count();
        assert!(first > 5 * last, "{first} vs {last}");
        let users: std::collections::BTreeSet<u32> = runs.job.iter().map(|j| j.2).collect();
        assert_eq!(users.len(), 6);
        assert!(runs.size.iter().all(|s| (1e-3..=20.0).contains(s)));
    }
}
