//! Least-cost layer-to-resource planning for one training job, after HeterPS (Liu et al., FGCS
//! 2023): assign each layer of a model to a resource type (a CPU kind or a GPU kind) so that the
//! job reaches its throughput target at the least monetary cost, and provision each stage.
//!
//! The model (ours; the paper's abstract states the goal, not the formulas):
//!
//! - A job is a chain of layers. Each layer has a profiled time per batch on one unit of each
//!   resource type it can run on, and the bytes it passes to the next layer per batch.
//! - A plan assigns each layer a type; a maximal run of consecutive layers of one type is a
//!   *stage*. Stages run as a pipeline, so the job's throughput is the least over its stages and
//!   over the links between them.
//! - A stage is data-parallel over `k` units of its type with diminishing returns: with `t` the
//!   sum of its layers' times, it does `k / (t · (1 + σ·(k − 1)))` batches per second, where `σ`
//!   is the type's synchronisation overhead per added unit ([`ResourceType::scaling`]).
//! - Between two stages a batch's activations cross the network at the link bandwidth, so a
//!   boundary passes at most `bandwidth / bytes` batches per second (a slow edge link can rule a
//!   split out).
//! - Provisioning gives each stage the fewest units that reach the target. The pipeline is fed at
//!   the target rate, so the job trains for `batches / target` seconds and costs
//!   `Σ price · units` per hour for that long.
//!
//! Planners: [`exact`] (a dynamic program over the chain that honours the unit limits, the
//! reference), and the simple plans in [`simple`] (CPU only, GPU only, and greedy per layer). The
//! learned planner lives in the simulator, which trains it; it is judged against [`exact`] and
//! finishes its best draw with the local search of [`improve`].

pub mod exact;
pub mod improve;
pub mod random;
pub mod simple;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Relative slack when comparing a rate with the target (float sums of layer times).
const EPS: f64 = 1e-9;

/// A training job as a chain of layers (the `--job` file of `tapfinger-sim plan`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// Name shown in the plan.
    #[serde(default)]
    pub name: String,
    /// Batches to train (the job's work).
    pub batches: f64,
    /// Throughput target, batches per second.
    pub throughput: f64,
    /// The layers, input first.
    #[serde(rename = "layer")]
    pub layers: Vec<Layer>,
}

/// One layer of a [`Job`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    /// Name shown in the plan.
    #[serde(default)]
    pub name: String,
    /// Seconds per batch on one unit of each resource type it can run on (by type name); a type
    /// not named cannot run it.
    pub time: BTreeMap<String, f64>,
    /// Bytes passed to the next layer per batch (ignored for the last layer).
    #[serde(default)]
    pub out_bytes: f64,
}

/// Whether a resource type is a CPU kind or a GPU kind (for the CPU-only and GPU-only plans).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A CPU kind (a unit is, e.g., a core or a CPU box).
    Cpu,
    /// A GPU kind (a unit is one device).
    Gpu,
}

/// One resource type and its price (the `--prices` file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceType {
    /// Name the layers' `time` tables use.
    pub name: String,
    /// CPU or GPU.
    pub kind: Kind,
    /// Price of one unit for one hour (any currency, the same for every type).
    pub price: f64,
    /// Units available; absent: as many as a plan needs.
    #[serde(default)]
    pub units: Option<u32>,
    /// Synchronisation overhead per added unit of a data-parallel stage (0: linear scaling).
    #[serde(default = "default_scaling")]
    pub scaling: f64,
}

fn default_scaling() -> f64 {
    0.05
}

/// The resource types on offer and the link between them (the `--prices` file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    /// Bytes per second between two stages (a shared link between the units of two stages).
    pub link_bandwidth: f64,
    /// The types.
    #[serde(rename = "resource")]
    pub resources: Vec<ResourceType>,
}

/// Why a job and a price list cannot be planned, or why no plan meets the target.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// A field is out of range or a name is unknown; the message names it.
    #[error("{0}")]
    Invalid(String),
    /// No assignment reaches the throughput target within the unit limits.
    #[error(
        "no plan reaches {target} batches/s within the units on offer; the most any plan reaches is {best:.4} batches/s"
    )]
    Unreachable {
        /// The job's target.
        target: f64,
        /// The highest throughput any plan reaches (0 when none runs at all).
        best: f64,
    },
    /// This planner's plan misses the target or the unit limits (another planner may do).
    #[error("the {planner} plan {why}")]
    Infeasible {
        /// Which planner.
        planner: &'static str,
        /// What it misses.
        why: String,
    },
}

/// A job checked against a price list, with its tables indexed for the planners.
#[derive(Debug, Clone)]
pub struct Problem {
    /// The job as given.
    pub job: Job,
    /// The price list as given.
    pub prices: Prices,
    /// `time[l][r]`: seconds per batch of layer `l` on one unit of type `r`, if it can run there.
    time: Vec<Vec<Option<f64>>>,
}

impl Problem {
    /// Check the job against the price list: positive finite numbers, unique type names, every
    /// time naming a known type, every layer runnable somewhere.
    pub fn new(job: Job, prices: Prices) -> Result<Self, PlanError> {
        let bad = |s: String| Err(PlanError::Invalid(s));
        let pos = |v: f64| v.is_finite() && v > 0.0;
        if !pos(job.batches) {
            return bad(format!("job: batches must be > 0, got {}", job.batches));
        }
        if !pos(job.throughput) {
            return bad(format!(
                "job: throughput must be > 0, got {}",
                job.throughput
            ));
        }
        if job.layers.is_empty() {
            return bad("job: no [[layer]]".into());
        }
        if !pos(prices.link_bandwidth) {
            return bad(format!(
                "prices: link_bandwidth must be > 0, got {}",
                prices.link_bandwidth
            ));
        }
        if prices.resources.is_empty() {
            return bad("prices: no [[resource]]".into());
        }
        let mut index = BTreeMap::new();
        for (r, t) in prices.resources.iter().enumerate() {
            if index.insert(t.name.as_str(), r).is_some() {
                return bad(format!("prices: resource {:?} is listed twice", t.name));
            }
            if !(t.price.is_finite() && t.price >= 0.0) {
                return bad(format!("prices: resource {:?}: price must be >= 0", t.name));
            }
            if !(t.scaling.is_finite() && (0.0..1.0).contains(&t.scaling)) {
                return bad(format!(
                    "prices: resource {:?}: scaling must be in [0, 1), got {}",
                    t.name, t.scaling
                ));
            }
            if t.units == Some(0) {
                return bad(format!("prices: resource {:?}: units must be > 0", t.name));
            }
        }
        let mut time = Vec::with_capacity(job.layers.len());
        for (l, layer) in job.layers.iter().enumerate() {
            let what = format!("job: layer {} ({:?})", l + 1, layer.name);
            if !(layer.out_bytes.is_finite() && layer.out_bytes >= 0.0) {
                return bad(format!("{what}: out_bytes must be >= 0"));
            }
            let mut row = vec![None; prices.resources.len()];
            for (name, &s) in &layer.time {
                let Some(&r) = index.get(name.as_str()) else {
                    return bad(format!(
                        "{what}: time names {name:?}, which prices do not list"
                    ));
                };
                if !pos(s) {
                    return bad(format!("{what}: time on {name:?} must be > 0, got {s}"));
                }
                row[r] = Some(s);
            }
            if row.iter().all(Option::is_none) {
                return bad(format!("{what}: no time on any listed resource"));
            }
            time.push(row);
        }
        Ok(Self { job, prices, time })
    }

    /// Number of layers.
    pub fn layers(&self) -> usize {
        self.time.len()
    }

    /// Number of resource types.
    pub fn types(&self) -> usize {
        self.prices.resources.len()
    }

    /// Seconds per batch of layer `l` on one unit of type `r`, if it can run there.
    pub fn time(&self, l: usize, r: usize) -> Option<f64> {
        self.time[l][r]
    }

    /// Units of type `r` on offer (`u32::MAX` when unbounded).
    pub fn limit(&self, r: usize) -> u32 {
        self.prices.resources[r].units.unwrap_or(u32::MAX)
    }

    /// The same job with another throughput target.
    pub fn with_target(&self, target: f64) -> Self {
        let mut p = self.clone();
        p.job.throughput = target;
        p
    }

    /// Batches per second a link passes after layer `l` (infinite when it passes nothing).
    pub fn link_rate(&self, l: usize) -> f64 {
        let bytes = self.job.layers[l].out_bytes;
        if bytes > 0.0 {
            self.prices.link_bandwidth / bytes
        } else {
            f64::INFINITY
        }
    }

    /// Whether a rate reaches the target (with float slack).
    fn meets(&self, rate: f64) -> bool {
        rate >= self.job.throughput * (1.0 - EPS)
    }

    /// The fewest units of type `r` with which a stage of total time `t` reaches the target,
    /// ignoring the unit limit; `None` when no number of units does (the overhead caps the rate).
    pub fn provision(&self, t: f64, r: usize) -> Option<u32> {
        let sigma = self.prices.resources[r].scaling;
        let x = self.job.throughput * t;
        // k / (t (1 + σ(k − 1))) ≥ T  ⇔  k (1 − Tσt) ≥ Tt (1 − σ): solvable only when Tσt < 1.
        if sigma > 0.0 && x * sigma >= 1.0 - EPS {
            return None;
        }
        let k = (x * (1.0 - sigma) / (1.0 - x * sigma) - EPS)
            .ceil()
            .max(1.0);
        if k > f64::from(u32::MAX / 2) {
            return None;
        }
        let mut k = k as u32;
        // The closed form in floats can be one off either way.
        while !self.meets(stage_rate(t, k, sigma)) {
            k += 1;
        }
        while k > 1 && self.meets(stage_rate(t, k - 1, sigma)) {
            k -= 1;
        }
        Some(k)
    }

    /// Evaluate an assignment (a type index per layer): group it into stages, provision each,
    /// and check the links and the unit limits. `planner` names the planner in the error.
    pub fn evaluate(&self, assign: &[usize], planner: &'static str) -> Result<Plan, PlanError> {
        let infeasible = |why: String| Err(PlanError::Infeasible { planner, why });
        if assign.len() != self.layers() {
            return infeasible(format!(
                "assigns {} layers of {}",
                assign.len(),
                self.layers()
            ));
        }
        let mut stages = Vec::new();
        let mut used = vec![0u64; self.types()];
        let mut first = 0;
        while first < assign.len() {
            let r = assign[first];
            let mut last = first;
            while last + 1 < assign.len() && assign[last + 1] == r {
                last += 1;
            }
            let mut t = 0.0;
            for l in first..=last {
                match self.time(l, r) {
                    Some(s) => t += s,
                    None => {
                        return infeasible(format!(
                            "puts layer {:?} on {:?}, which cannot run it",
                            self.job.layers[l].name, self.prices.resources[r].name
                        ));
                    }
                }
            }
            let Some(units) = self.provision(t, r) else {
                return infeasible(format!(
                    "has a stage on {:?} that no number of units brings to the target",
                    self.prices.resources[r].name
                ));
            };
            used[r] += u64::from(units);
            let sigma = self.prices.resources[r].scaling;
            stages.push(Stage {
                resource: self.prices.resources[r].name.clone(),
                first,
                last,
                units,
                throughput: stage_rate(t, units, sigma),
            });
            if last + 1 < assign.len() && !self.meets(self.link_rate(last)) {
                return infeasible(format!(
                    "splits after layer {:?}, whose {} bytes per batch the link passes only {:.4} times a second",
                    self.job.layers[last].name,
                    self.job.layers[last].out_bytes,
                    self.link_rate(last)
                ));
            }
            first = last + 1;
        }
        for (r, &u) in used.iter().enumerate() {
            if u > u64::from(self.limit(r)) {
                return infeasible(format!(
                    "needs {u} units of {:?}, {} on offer",
                    self.prices.resources[r].name,
                    self.limit(r)
                ));
            }
        }
        let mut throughput = f64::INFINITY;
        for (i, s) in stages.iter().enumerate() {
            throughput = throughput.min(s.throughput);
            if i + 1 < stages.len() {
                throughput = throughput.min(self.link_rate(s.last));
            }
        }
        let cost_per_hour = stages
            .iter()
            .map(|s| {
                let r = assign[s.first];
                self.prices.resources[r].price * f64::from(s.units)
            })
            .sum::<f64>();
        let hours = self.job.batches / self.job.throughput / 3600.0;
        Ok(Plan {
            planner,
            assign: assign.to_vec(),
            stages,
            throughput,
            cost_per_hour,
            hours,
            cost: cost_per_hour * hours,
        })
    }
}

/// Batches per second of a stage of total time `t` on `k` units with overhead `sigma`.
pub fn stage_rate(t: f64, k: u32, sigma: f64) -> f64 {
    let k = f64::from(k);
    k / (t * (1.0 + sigma * (k - 1.0)))
}

/// A plan: each layer's type, the stages with their units, and what it reaches and costs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// Which planner made it.
    pub planner: &'static str,
    /// Type index per layer (into the price list).
    pub assign: Vec<usize>,
    /// The stages, input first.
    pub stages: Vec<Stage>,
    /// Batches per second the provisioned pipeline can do (≥ the target).
    pub throughput: f64,
    /// Price of all units for one hour.
    pub cost_per_hour: f64,
    /// Training time at the target rate, hours.
    pub hours: f64,
    /// Total cost: `cost_per_hour · hours`.
    pub cost: f64,
}

/// One stage of a [`Plan`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stage {
    /// Resource type name.
    pub resource: String,
    /// First layer (index into the job's layers).
    pub first: usize,
    /// Last layer, inclusive.
    pub last: usize,
    /// Units provisioned.
    pub units: u32,
    /// Batches per second of the stage on those units.
    pub throughput: f64,
}

#[cfg(test)]
mod tests;
