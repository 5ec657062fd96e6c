//! Fractions of a GPU in a scenario: the agents' rules where the GPU step is below one device
//! (`tapfinger::spec::units_per_device`), and what tasks sharing a device cost each other.
//!
//! Rules (as a spec's on the agents): every node's GPU capacity is a whole number of devices; a
//! task type asks either for a fraction of one device, growing to one device at most, or for
//! whole devices, keeping its count (an unset maximum means one device, or the count).
//!
//! Costs (`colocation = "gavel-v100"`): Gavel measured each pair of its job types on one V100
//! (`sim/data/gavel/colocation.csv`: each job's steps per second beside the other). Over each
//! job's steps per second alone (`throughputs.csv`), summed, that is the pair's combined
//! throughput T. Under MPS each task keeps its partition of the device; what the pair loses
//! beyond it is contention (memory bandwidth, caches), which shows where T < 1: each task of
//! the pair then progresses at T times its speed. Where T ≥ 1 the pair fits in one device's
//! work and sharing costs nothing more. Pairs not measured (or measured as 0: out of memory)
//! and types without a `gavel_job` cost nothing.

use super::{ScenarioFile, TaskType};
use std::collections::BTreeMap;
use tapfinger::{ResourceSpace, Resources};

/// Gavel's co-located pairs on a V100 (extracted from `simulation_throughputs.json`, MIT).
const PAIRS: &str = include_str!("../../data/gavel/colocation.csv");
/// Gavel's throughputs alone (the same extract the importer reads).
const ALONE: &str = include_str!("../../data/gavel/throughputs.csv");

/// The co-location factor of every pair of task types (by index): the multiplier of a task's
/// progress while it shares a device with a task of the other type.
#[derive(Debug, Clone, PartialEq)]
pub struct Colocation {
    factor: Vec<Vec<f64>>,
}

impl Colocation {
    /// The multiplier of a type-`a` task's progress beside a type-`b` task (1: no cost).
    pub fn factor(&self, a: usize, b: usize) -> f64 {
        self.factor
            .get(a)
            .and_then(|r| r.get(b))
            .copied()
            .unwrap_or(1.0)
    }

    /// The factors of `types` from Gavel's measurements on `gpu`.
    fn gavel(gpu: &str, jobs: &[Option<String>]) -> Result<Self, String> {
        let mut alone: BTreeMap<&str, f64> = BTreeMap::new();
        for l in ALONE.lines().skip(1) {
            let f: Vec<&str> = l.split(',').collect();
            if f.len() == 4 && f[0] == gpu && f[2] == "1" {
                alone.insert(f[1], f[3].parse().unwrap_or(0.0));
            }
        }
        let mut pairs: BTreeMap<(&str, &str), f64> = BTreeMap::new();
        for l in PAIRS.lines().skip(1) {
            let f: Vec<&str> = l.split(',').collect();
            if f.len() != 5 || f[0] != gpu {
                continue;
            }
            let (x, y): (f64, f64) = (f[3].parse().unwrap_or(0.0), f[4].parse().unwrap_or(0.0));
            let (a, b) = (alone.get(f[1]), alone.get(f[2]));
            if let (Some(a), Some(b)) = (a, b)
                && x > 0.0
                && y > 0.0
            {
                pairs.insert((f[1], f[2]), x / a + y / b);
            }
        }
        for (i, j) in jobs.iter().enumerate() {
            if let Some(j) = j
                && !alone.contains_key(j.as_str())
            {
                return Err(format!(
                    "task_types[{i}].gavel_job: {j:?} is not one of Gavel's job types measured on \
                     a {gpu} (e.g. \"ResNet-50 (batch size 16)\", \"A3C\", \"LM (batch size 5)\")"
                ));
            }
        }
        let t = |a: &str, b: &str| pairs.get(&(a, b)).or_else(|| pairs.get(&(b, a))).copied();
        let factor = jobs
            .iter()
            .map(|a| {
                jobs.iter()
                    .map(|b| match (a, b) {
                        (Some(a), Some(b)) => t(a, b).map_or(1.0, |x| x.min(1.0)),
                        _ => 1.0,
                    })
                    .collect()
            })
            .collect();
        Ok(Self { factor })
    }
}

/// The scenario's co-location costs, if it asks for them: (field, reason) on a bad name.
pub(super) fn colocation(f: &ScenarioFile) -> Result<Option<Colocation>, (String, String)> {
    let jobs: Vec<Option<String>> = f.task_types.iter().map(|t| t.gavel_job.clone()).collect();
    match f.colocation.as_deref() {
        None => {
            if let Some(i) = jobs.iter().position(Option::is_some) {
                return Err((
                    format!("task_types[{i}].gavel_job"),
                    "names a Gavel job for the co-location costs, but `colocation` is not set"
                        .into(),
                ));
            }
            Ok(None)
        }
        Some("gavel-v100") => Colocation::gavel("v100", &jobs)
            .map(Some)
            .map_err(|reason| ("task_types".into(), reason)),
        Some(other) => Err((
            "colocation".into(),
            format!("unknown costs {other:?}; the one known is \"gavel-v100\""),
        )),
    }
}

/// The agents' rules for a GPU step below one device: whole devices on every node, each type a
/// fraction (at most one device) or a fixed count of whole devices; `types` get their capped
/// maximum. (field, reason) where a rule is broken.
pub(super) fn check_shares(
    space: &ResourceSpace,
    capacities: &[Resources],
    types: &mut [TaskType],
) -> Result<(), (String, String)> {
    let Some((g, per)) = tapfinger::spec::units_per_device(space) else {
        return Ok(());
    };
    for (i, c) in capacities.iter().enumerate() {
        if !c.get(g).is_multiple_of(per) {
            return Err((
                format!("nodes[{i}].capacity"),
                format!("a node has whole GPUs: {per} units each"),
            ));
        }
    }
    let largest = capacities
        .iter()
        .fold(Resources(vec![0; space.len()]), |a, c| a.max_each(c));
    for (i, t) in types.iter_mut().enumerate() {
        let field = |s: &str| format!("task_types[{i}] ({}).{s}", t.name);
        // The agents' rule and messages ([`tapfinger::spec::fraction_rule`]).
        let asked = t.max_demand.as_ref().map(|m| m.get(g));
        let (cap, _) = tapfinger::spec::fraction_rule(per, t.min_demand.get(g), asked).map_err(
            |e| match e {
                tapfinger::spec::FractionError::SplitDevices => {
                    (field("min_demand"), e.to_string())
                }
                _ => (field("max_demand"), e.to_string()),
            },
        )?;
        // Unset: the largest node's capacity, what it could get anyway.
        let mut max = t.max_demand.clone().unwrap_or_else(|| largest.clone());
        max.0[g] = max.get(g).min(cap);
        t.max_demand = Some(max);
    }
    Ok(())
}
