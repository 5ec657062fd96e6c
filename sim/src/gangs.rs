//! Multi-node jobs in a scenario: the `[gangs]` section says what share of the episode's tasks
//! are gangs (workers and parameter servers placed together across boxes), how fast the links
//! between boxes are, how gangs are placed, and the ranges their shapes are drawn from.
//!
//! A gang's shape (its members, their demands, its stated compute time and gradient size) is
//! what a user submits and what the placer reads. Its work and its *true* compute time (the
//! stated one times a hidden factor in [0.8, 1.25], as a user's estimate is off) are the
//! simulator's secret ([`GangTruth`]), like a single task's speed model: progress comes from them.
//! Drawn shapes that could never run on the scenario's cluster are drawn again, so an episode
//! never holds a gang that waits forever (the agent refuses such a gang at submit).

use rand::RngExt;
use serde::Deserialize;
use std::collections::BTreeMap;
use tapfinger::placement::gang::{GangPlacer, GangShape, Links};
use tapfinger::{Resources, Task, TaskId};

/// The `[gangs]` section as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GangsFile {
    /// Share of the episode's tasks that are gangs, in [0, 1].
    pub share: f64,
    /// Bytes per second within a box.
    #[serde(default = "internal")]
    pub internal: f64,
    /// Bytes per second between boxes (and through a PS host's interface).
    pub external: f64,
    /// How gangs are placed (`locality`, `pack-first` or `spread`).
    #[serde(default)]
    pub placer: GangPlacer,
    /// Most workers a gang asks for (each gang's range is drawn within 1..=this).
    pub max_workers: i64,
    /// Per resource kind, the range one worker's demand is drawn from.
    pub worker_demand: BTreeMap<String, [i64; 2]>,
    /// Per resource kind, one parameter server's demand.
    pub ps_demand: BTreeMap<String, i64>,
    /// A gang's work, in slots of its most workers all on one box, is drawn from this range.
    pub work_slots: [f64; 2],
}

fn internal() -> f64 {
    5e9
}

/// The `[gangs]` section, checked against the scenario's kinds.
#[derive(Debug, Clone, PartialEq)]
pub struct Gangs {
    /// Share of tasks that are gangs.
    pub share: f64,
    /// Link speeds.
    pub links: Links,
    /// The placer unless a run names another.
    pub placer: GangPlacer,
    /// Most workers.
    pub max_workers: u32,
    /// Per kind, the worker demand range.
    pub worker_demand: Vec<(u32, u32)>,
    /// One PS's demand.
    pub ps_demand: Resources,
    /// Work range in slots.
    pub work_slots: (f64, f64),
}

impl GangsFile {
    /// Check against the scenario's kind names; an error is (field, reason).
    pub fn check(&self, names: &[String]) -> Result<Gangs, (String, String)> {
        let bad = |f: &str, r: String| Err((format!("gangs.{f}"), r));
        if !(0.0..=1.0).contains(&self.share) {
            return bad("share", format!("must be in [0, 1], got {}", self.share));
        }
        for (f, x) in [("internal", self.internal), ("external", self.external)] {
            if !(x.is_finite() && x > 0.0) {
                return bad(f, format!("must be a positive rate in bytes/s, got {x}"));
            }
        }
        if !(1..=64).contains(&self.max_workers) {
            return bad(
                "max_workers",
                format!("must be 1 to 64, got {}", self.max_workers),
            );
        }
        let [lo, hi] = self.work_slots;
        if !(lo.is_finite() && lo > 0.0 && hi >= lo) {
            return bad(
                "work_slots",
                format!("must be a range 0 < a ≤ b, got [{lo}, {hi}]"),
            );
        }
        for k in self.worker_demand.keys().chain(self.ps_demand.keys()) {
            if !names.contains(k) {
                return bad(
                    k,
                    format!("unknown kind; the scenario has {}", names.join(", ")),
                );
            }
        }
        let mut worker_demand = Vec::with_capacity(names.len());
        let mut ps = Vec::with_capacity(names.len());
        for k in names {
            let [a, b] = self.worker_demand.get(k).copied().unwrap_or([0, 0]);
            if a < 0 || b < a || b > 1_000_000 {
                return bad(
                    &format!("worker_demand.{k}"),
                    format!("bad range [{a}, {b}]"),
                );
            }
            worker_demand.push((a as u32, b as u32));
            let p = self.ps_demand.get(k).copied().unwrap_or(0);
            if !(0..=1_000_000).contains(&p) {
                return bad(&format!("ps_demand.{k}"), format!("bad demand {p}"));
            }
            ps.push(p as u32);
        }
        if worker_demand.iter().all(|(_, b)| *b == 0) || ps.iter().all(|p| *p == 0) {
            return bad(
                "worker_demand",
                "workers and PS must each ask for some unit".into(),
            );
        }
        Ok(Gangs {
            share: self.share,
            links: Links {
                internal: self.internal,
                external: self.external,
            },
            placer: self.placer,
            max_workers: self.max_workers as u32,
            worker_demand,
            ps_demand: Resources(ps),
            work_slots: (lo, hi),
        })
    }
}

/// What the simulator keeps secret about a gang.
#[derive(Debug, Clone, PartialEq)]
pub struct GangTruth {
    /// Worker iterations to do.
    pub iterations: f64,
    /// True seconds of compute per iteration.
    pub compute_seconds: f64,
}

impl GangTruth {
    /// Fewest slots the gang could take: all its most workers on one box from arrival.
    pub fn lower_bound(&self, shape: &GangShape, links: Links, slot_seconds: f64) -> u64 {
        let local = 1.0 / (self.compute_seconds + 2.0 * shape.gradient_bytes / links.internal);
        let per_slot = f64::from(shape.workers.1) * local * slot_seconds;
        (self.iterations / per_slot).ceil().max(1.0) as u64
    }

    /// Least area per resource kind ([`crate::bound`]): every worker iteration holds at least a
    /// worker's demand for at least its compute time (links and parameter servers only add), as
    /// a share of `pool`, the cluster's capacity per kind (a kind of none costs nothing).
    pub fn area(&self, shape: &GangShape, slot_seconds: f64, pool: &[f64]) -> Vec<f64> {
        let slots = self.iterations * self.compute_seconds / slot_seconds;
        pool.iter()
            .enumerate()
            .map(|(k, &c)| {
                if c > 0.0 {
                    slots * f64::from(shape.worker_demand.get(k)) / c
                } else {
                    0.0
                }
            })
            .collect()
    }
}

impl Gangs {
    /// One shape and its truth.
    fn draw(&self, rng: &mut tapfinger::Rng, slot_seconds: f64) -> (GangShape, GangTruth) {
        let lo = rng.random_range(1..=2u32).min(self.max_workers);
        let hi = rng.random_range(lo.max(2).min(self.max_workers)..=self.max_workers);
        let demand = Resources(
            self.worker_demand
                .iter()
                .map(|&(a, b)| rng.random_range(a..=b))
                .collect(),
        );
        let shape = GangShape {
            workers: (lo, hi),
            ps: rng.random_range(1..=2u32),
            worker_demand: demand,
            ps_demand: self.ps_demand.clone(),
            compute_seconds: rng.random_range(0.2..1.0),
            gradient_bytes: rng.random_range(20e6..200e6),
            restarts: 0,
            stages: Vec::new(),
        };
        let compute_seconds = shape.compute_seconds * rng.random_range(0.8..1.25);
        let mut truth = GangTruth {
            iterations: 1.0,
            compute_seconds,
        };
        let (a, b) = self.work_slots;
        let work = if b > a { rng.random_range(a..b) } else { a };
        truth.iterations = (f64::from(hi) * slot_seconds * work
            / (compute_seconds + 2.0 * shape.gradient_bytes / self.links.internal))
            .round()
            .max(1.0);
        (shape, truth)
    }

    /// Make a `share` of `tasks` gangs (drawn per task from `seed`, so the single tasks of a
    /// workload are the same with and without gangs): each carries its shape, and may use every
    /// box. Returns each gang's truth.
    pub fn assign(
        &self,
        tasks: &mut [Task],
        capacities: &[Resources],
        seed: u64,
        slot_seconds: f64,
    ) -> BTreeMap<TaskId, GangTruth> {
        let mut truths = BTreeMap::new();
        // A trace's own gangs keep their shapes ([`crate::trace`]).
        for t in tasks.iter_mut().filter(|t| t.gang.is_none()) {
            let mut rng = tapfinger::seeded_rng(
                seed ^ 0x6a46_5eed ^ t.id.0.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            );
            if !rng.random_bool(self.share) {
                continue;
            }
            // A shape that could never run here is drawn again (module doc).
            let drawn = (0..20)
                .map(|_| self.draw(&mut rng, slot_seconds))
                .find(|(s, _)| s.never_fits(capacities, self.links).is_none());
            let Some((shape, truth)) = drawn else {
                continue;
            };
            t.min_demand = shape.worker_demand.clone();
            t.max_demand = None;
            // Members may go to any box (the shape was checked against them all).
            t.reachable = (0..capacities.len() as u32)
                .map(tapfinger::NodeId)
                .collect();
            t.gang = Some(Box::new(shape));
            truths.insert(t.id, truth);
        }
        truths
    }
}
