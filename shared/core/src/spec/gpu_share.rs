//! Fractions of a GPU in a spec. Where the cluster's GPU step is below one device (`gpu_step =
//! 0.25` on the agents: a device is 4 grid units), a task asks either for a fraction of one
//! device (0.25, 0.5, 0.75: it runs as an MPS client with that share of the device, on a box
//! that shares GPUs) or for whole devices (1, 2, ...: never sharing a device). So:
//!
//! - more than one GPU is a whole number of devices, in `min_demand` and `max_demand` alike;
//! - a fractional task grows to one device at most (an unset maximum means one device);
//! - a task of whole devices keeps its count: the counts between two whole numbers are not
//!   allocations a device can be given (an unset maximum means its minimum);
//! - a fractional task may run only on boxes carrying [`GPU_SHARES_LABEL`] = `mps`, which an
//!   agent sets when it can start MPS daemons; a box without MPS keeps the cluster's step (its
//!   units must mean what its peers' mean) and takes only whole-device tasks.
//!
//! With a step of one device (the default) nothing here applies.

use super::{Placement, SpecError, TaskSpec, err, err_boxes};
use crate::resources::{ResourceSpace, Resources};

/// The label a box carries when it shares GPUs between tasks (value [`GPU_SHARES_MPS`]).
pub const GPU_SHARES_LABEL: &str = "gpu_shares";
/// [`GPU_SHARES_LABEL`]'s value on a box that runs fractional tasks under MPS.
pub const GPU_SHARES_MPS: &str = "mps";

/// Grid units of one GPU device in `space` (1 / the `gpu` kind's step), with the kind's index;
/// `None` where the space has no `gpu` kind or its step is a whole device or more.
pub fn units_per_device(space: &ResourceSpace) -> Option<(usize, u32)> {
    let k = space.index_of("gpu")?;
    let step = space.kinds()[k].step;
    let per = (1.0 / step).round();
    (step < 1.0 && per >= 2.0 && ((per * step) - 1.0).abs() < 1e-9).then_some((k, per as u32))
}

/// Whether a box's labels say it runs fractional GPU tasks.
pub fn shares_gpus(labels: &std::collections::BTreeMap<String, String>) -> bool {
    labels.get(GPU_SHARES_LABEL).map(String::as_str) == Some(GPU_SHARES_MPS)
}

/// How a GPU demand breaks the fraction rules (module doc): one set of rules and messages for
/// the agents' specs and the simulator's scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FractionError {
    /// More than one device, but not a whole number of them.
    #[error("more than one GPU is a whole number of devices (a fraction lives on one device)")]
    SplitDevices,
    /// A fraction whose maximum is more than one device.
    #[error("a task asking for a fraction of a GPU grows to one device at most")]
    FractionGrows,
    /// Whole devices whose maximum is more than their count.
    #[error(
        "a task of whole GPUs keeps its count where GPUs are shared in fractions (the counts \
         between whole devices cannot be given)"
    )]
    WholeKeepsCount,
}

/// The fraction rules for one GPU demand, where a device is `per` grid units: `min` units at
/// least and `max` at most (`None`: no maximum asked). Returns the most the task may hold (one
/// device for a fraction, its own count for whole devices) and whether it asks for a fraction.
pub fn fraction_rule(per: u32, min: u32, max: Option<u32>) -> Result<(u32, bool), FractionError> {
    if min > per && !min.is_multiple_of(per) {
        return Err(FractionError::SplitDevices);
    }
    let fractional = min > 0 && min < per;
    let cap = if fractional { per } else { min };
    match max {
        Some(hi) if hi > cap && fractional => Err(FractionError::FractionGrows),
        Some(hi) if hi > cap => Err(FractionError::WholeKeepsCount),
        _ => Ok((cap, fractional)),
    }
}

impl TaskSpec {
    /// The rules above for a single-node task's `min` and `max` (`None`: unbounded): the
    /// maximum the task may get, and whether it asks for a fraction of a device.
    pub(super) fn gpu_shares(
        &self,
        space: &ResourceSpace,
        min: &Resources,
        max: Option<Resources>,
    ) -> Result<(Option<Resources>, bool), SpecError> {
        let Some((g, per)) = units_per_device(space) else {
            return Ok((max, false));
        };
        let asked = self
            .max_demand
            .contains_key("gpu")
            .then(|| max.as_ref().map_or(u32::MAX, |m| m.get(g)));
        let (cap, fractional) = fraction_rule(per, min.get(g), asked).map_err(|e| {
            let field = match e {
                FractionError::SplitDevices => "min_demand.gpu",
                _ => "max_demand.gpu",
            };
            err(field, e.to_string())
        })?;
        let hi = max.as_ref().map_or(u32::MAX, |m| m.get(g));
        let mut m = max.unwrap_or_else(|| Resources(vec![u32::MAX; min.len()]));
        m.0[g] = hi.min(cap);
        Ok((Some(m), fractional))
    }

    /// For a fractional task, the eligible boxes that share GPUs; a clear error if none does.
    pub(super) fn boxes_sharing_gpus<'n, 'a>(
        &self,
        nodes: &'n [Placement<'a>],
    ) -> Result<Vec<Placement<'a>>, SpecError> {
        let sharing: Vec<Placement<'a>> = nodes
            .iter()
            .filter(|n| shares_gpus(n.labels))
            .cloned()
            .collect();
        if sharing.is_empty() {
            return Err(err_boxes(
                "min_demand.gpu",
                format!(
                    "a fraction of a GPU runs only on boxes that share GPUs (label {GPU_SHARES_LABEL} = \
                     {GPU_SHARES_MPS}, set where MPS is available); no box has it"
                ),
            ));
        }
        Ok(sharing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::ResourceKind;
    use crate::task::{NodeId, TaskId};
    use std::collections::BTreeMap;

    fn quarter_space() -> ResourceSpace {
        let kind = |name: &str, step: f64| ResourceKind {
            name: name.into(),
            unit: String::new(),
            step,
        };
        ResourceSpace::new(vec![kind("cpu", 1.0), kind("gpu", 0.25), kind("mem", 1.0)])
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn spec(text: &str) -> TaskSpec {
        TaskSpec::from_toml(&format!("command = [\"x\"]\n{text}")).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Two boxes, only the first shares GPUs; both have one GPU (four quarters).
    fn validate(text: &str, labels: [bool; 2]) -> Result<crate::Task, SpecError> {
        let with: BTreeMap<String, String> =
            [(GPU_SHARES_LABEL.to_string(), GPU_SHARES_MPS.to_string())].into();
        let without = BTreeMap::new();
        let cap = Resources(vec![8, 4, 16]);
        let nodes: Vec<Placement<'_>> = labels
            .iter()
            .enumerate()
            .map(|(i, l)| Placement {
                id: NodeId(i as u32),
                name: ["a", "b"][i],
                labels: if *l { &with } else { &without },
                capacity: &cap,
            })
            .collect();
        spec(text).validate(&quarter_space(), &[], &nodes, TaskId(1), 0)
    }

    #[test]
    fn the_step_of_a_device_is_counted_in_units() {
        assert_eq!(units_per_device(&quarter_space()), Some((1, 4)));
        assert_eq!(units_per_device(&ResourceSpace::cpu_gpu()), None);
    }

    /// A fraction runs on the sharing box only, and grows to one device at most.
    #[test]
    fn a_fraction_runs_where_gpus_are_shared_and_grows_to_one_device() {
        let t = validate("min_demand = { cpu = 1, gpu = 0.25 }", [true, false])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.reachable, vec![NodeId(0)]);
        assert_eq!(
            t.max_demand.as_ref().map(|m| m.get(1)),
            Some(1),
            "not resumable"
        );
        let t = validate(
            "min_demand = { cpu = 1, gpu = 0.25 }\nresumable = true",
            [true, true],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.max_demand.as_ref().map(|m| m.get(1)), Some(4));
        let e = validate("min_demand = { cpu = 1, gpu = 0.5 }", [false, false]).unwrap_err();
        assert_eq!(e.field, "min_demand.gpu");
        assert!(e.by_boxes, "another box may share GPUs");
        let e = validate(
            "min_demand = { gpu = 0.5 }\nmax_demand = { gpu = 2 }\nresumable = true",
            [true, true],
        )
        .unwrap_err();
        assert_eq!(e.field, "max_demand.gpu");
    }

    /// Whole devices run anywhere, keep their count, and more than one is whole.
    #[test]
    fn whole_devices_run_anywhere_and_keep_their_count() {
        let t = validate("min_demand = { gpu = 1 }\nresumable = true", [true, false])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.reachable, vec![NodeId(0), NodeId(1)]);
        assert_eq!(t.max_demand.as_ref().map(|m| m.get(1)), Some(4));
        let e = validate("min_demand = { gpu = 1.5 }", [true, true]).unwrap_err();
        assert_eq!(e.field, "min_demand.gpu");
        let e = validate(
            "min_demand = { gpu = 1 }\nmax_demand = { gpu = 2 }\nresumable = true",
            [true, true],
        )
        .unwrap_err();
        assert_eq!(e.field, "max_demand.gpu");
        let e = validate("min_demand = { gpu = 0.3 }", [true, true]).unwrap_err();
        assert_eq!(e.field, "min_demand.gpu");
        assert!(e.message.contains("multiple"), "{}", e.message);
    }

    /// A pipeline's plan counts whole GPUs (a layer's time is on a GPU): its stages hold whole
    /// devices in quarter units.
    #[test]
    fn a_pipeline_s_stages_hold_whole_gpus() {
        let t = validate(
            "[pipeline]\nbatches = 1000\nthroughput = 50\nprices = { cpu = 0.05, gpu = 0.35 }\n\
             [[pipeline.layer]]\ntime = { cpu = 0.01, gpu = 0.02 }\nout_bytes = 1e5\n\
             [[pipeline.layer]]\ntime = { cpu = 0.4, gpu = 0.005 }\n",
            [true, true],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let stages = &t.gang.as_deref().unwrap_or_else(|| panic!("a gang")).stages;
        assert!(stages.iter().any(|m| m.get(1) > 0), "{stages:?}");
        assert!(stages.iter().all(|m| m.get(1) % 4 == 0), "{stages:?}");
    }
}
