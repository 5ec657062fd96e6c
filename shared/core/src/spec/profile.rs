//! What a spec's submitter says of the task's speed and size, for the speed estimator:
//!
//! - profile hints: how long the task takes alone at a few allocations, as its submitter
//!   measured or knows it (`[[profile]]` in a spec's TOML). The estimator uses them for the
//!   task's class before any progress of it has been observed
//!   ([`crate::estimate::Estimator::hint`]), so a new class is placed by what its submitter
//!   knows instead of by the prior;
//! - declared work (`work`): how much work the task is, in a unit the class's tasks share, so
//!   that the estimator estimates it at its own size ([`crate::estimate::Estimator::declare`]).
//!
//! ```toml
//! work = 30                      # e.g. epochs; the class's other tasks use the same unit
//! [[profile]]
//! alloc = { cpu = 4, gpu = 1 }   # kinds not named: at the task's minimum demand
//! seconds = 5400                 # the whole task (its 30 epochs), alone at that allocation
//! ```

use super::{SpecError, TaskSpec, err};
use crate::resources::{ResourceSpace, Resources};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Most profile hints one spec may carry.
pub const MAX_PROFILE: usize = 16;

/// Longest time a hint may state (seconds; about three years): beyond it a hint is a typo.
pub const MAX_HINT_SECONDS: f64 = 1e8;

/// One profile hint (see [`TaskSpec::profile`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileHint {
    /// The amount per resource kind the time was measured at, in the kind's natural unit as
    /// `min_demand` (cores, GPUs, GiB; a multiple of the cluster's step); kinds not named are at
    /// the task's minimum demand.
    #[serde(default)]
    pub alloc: BTreeMap<String, f64>,
    /// Seconds the whole task takes alone at `alloc`.
    pub seconds: f64,
}

impl TaskSpec {
    /// Check the profile hints against the cluster's kinds and the task's minimum demand `min`
    /// (a hint below the minimum could never be run).
    pub(crate) fn check_profile(
        &self,
        space: &ResourceSpace,
        min: &Resources,
    ) -> Result<(), SpecError> {
        if self.profile.len() > MAX_PROFILE {
            return Err(err(
                "profile",
                format!("at most {MAX_PROFILE} hints, got {}", self.profile.len()),
            ));
        }
        for (i, h) in self.profile.iter().enumerate() {
            if !(h.seconds.is_finite() && h.seconds > 0.0 && h.seconds <= MAX_HINT_SECONDS) {
                return Err(err(
                    format!("profile[{i}].seconds"),
                    format!(
                        "must be a positive number of seconds up to {MAX_HINT_SECONDS:e}, got {}",
                        h.seconds
                    ),
                ));
            }
            for (name, v) in &h.alloc {
                let field = format!("profile[{i}].alloc.{name}");
                let k = space
                    .index_of(name)
                    .ok_or_else(|| err(&field, "unknown resource kind"))?;
                let kind = &space.kinds()[k];
                let units = super::grid_units(*v, kind).map_err(|m| err(&field, m))?;
                if units < min.get(k) {
                    return Err(err(
                        &field,
                        format!(
                            "{v} is below min_demand ({})",
                            f64::from(min.get(k)) * kind.step
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Check the declared work: from [`crate::estimate::MIN_WORK`] to
    /// [`crate::estimate::MAX_WORK`].
    pub(crate) fn check_work(&self) -> Result<(), SpecError> {
        use crate::estimate::{MAX_WORK, MIN_WORK};
        match self.work {
            Some(w) if !(w.is_finite() && (MIN_WORK..=MAX_WORK).contains(&w)) => Err(err(
                "work",
                format!(
                    "must be a positive amount from {MIN_WORK:e} up to {MAX_WORK:e} (epochs, \
                     steps or thousands of samples), got {w}"
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The profile hints as the estimator takes them: per hint, the allocation in grid units of
    /// the cluster's kinds (`kind_names`, in order, each of its `steps`: empty, 1 each; kinds not
    /// named at `min`, the task's minimum demand) and the time in slots of `slot_ms`. Hints
    /// naming a kind this cluster lacks, or an amount off its grid, are left out (a spec is
    /// checked at submission; this serves every agent that hears it).
    pub fn profile_hints(
        &self,
        kind_names: &[String],
        steps: &[f64],
        min: &Resources,
        slot_ms: u64,
    ) -> Vec<(Resources, f64)> {
        self.profile
            .iter()
            .filter_map(|h| {
                let mut a = min.clone();
                for (name, v) in &h.alloc {
                    let k = kind_names.iter().position(|n| n == name)?;
                    let kind = crate::resources::ResourceKind {
                        name: name.clone(),
                        unit: String::new(),
                        step: steps.get(k).copied().unwrap_or(1.0),
                    };
                    *a.0.get_mut(k)? = super::grid_units(*v, &kind).ok()?;
                }
                Some((a, h.seconds * 1000.0 / slot_ms.max(1) as f64))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space() -> ResourceSpace {
        ResourceSpace::cpu_gpu()
    }

    #[test]
    fn hints_are_checked_and_converted_to_slots() {
        let spec = TaskSpec::from_toml(
            r#"
command = ["train.py"]
min_demand = { cpu = 2, gpu = 1 }
[[profile]]
alloc = { gpu = 4 }
seconds = 600
[[profile]]
seconds = 1800
"#,
        )
        .unwrap();
        let min = Resources(vec![2, 1]);
        spec.check_profile(&space(), &min).unwrap();
        let names = space().kind_names();
        let hints = spec.profile_hints(&names, &[], &min, 500);
        assert_eq!(
            hints,
            vec![
                (Resources(vec![2, 4]), 1200.0),
                (Resources(vec![2, 1]), 3600.0)
            ]
        );
    }

    /// Hints are amounts in each kind's unit, as demands are: half a GPU is two quarter units;
    /// an amount off the grid is refused naming the field.
    #[test]
    fn hints_are_in_natural_units_on_the_cluster_s_grid() {
        let quarters = ResourceSpace::cpu_gpu_quarters();
        let spec = |gpu: &str| {
            TaskSpec::from_toml(&format!(
                "command = [\"x\"]\nmin_demand = {{ cpu = 1, gpu = 0.25 }}\n\
                 [[profile]]\nalloc = {{ gpu = {gpu} }}\nseconds = 60\n"
            ))
            .unwrap()
        };
        let min = Resources(vec![1, 1]);
        spec("0.5").check_profile(&quarters, &min).unwrap();
        let hints = spec("0.5").profile_hints(&quarters.kind_names(), &[1.0, 0.25], &min, 1000);
        assert_eq!(hints, vec![(Resources(vec![1, 2]), 60.0)]);
        let e = spec("0.3").check_profile(&quarters, &min).unwrap_err();
        assert_eq!(e.field, "profile[0].alloc.gpu", "{e}");
    }

    #[test]
    fn declared_work_must_be_a_positive_finite_amount() {
        let check = |work: &str| {
            TaskSpec::from_toml(&format!("command = [\"x\"]\nwork = {work}\n"))
                .unwrap()
                .check_work()
                .map_err(|e| e.to_string())
        };
        for bad in ["0", "1e-9", "-2", "1e7", "nan", "inf"] {
            let e = check(bad).unwrap_err();
            assert!(
                e.starts_with("work: must be a positive amount"),
                "{bad}: {e}"
            );
        }
        check("30").unwrap();
        check("0.5").unwrap();
        let none = TaskSpec::from_toml("command = [\"x\"]\n").unwrap();
        assert_eq!(none.work, None);
        none.check_work().unwrap();
    }

    #[test]
    fn bad_hints_are_refused_naming_the_field() {
        let check = |hint: &str| {
            let text = format!("command = [\"x\"]\nmin_demand = {{ cpu = 2 }}\n{hint}");
            TaskSpec::from_toml(&text)
                .and_then(|s| s.check_profile(&space(), &Resources(vec![2, 0])))
                .unwrap_err()
                .to_string()
        };
        assert!(check("[[profile]]\nseconds = 0").starts_with("profile[0].seconds"));
        assert!(check("[[profile]]\nseconds = -3").starts_with("profile[0].seconds"));
        assert!(check("[[profile]]\nseconds = 1e12").starts_with("profile[0].seconds"));
        let below = check("[[profile]]\nalloc = { cpu = 1 }\nseconds = 5");
        assert!(
            below.starts_with("profile[0].alloc.cpu: 1 is below"),
            "{below}"
        );
        let unknown = check("[[profile]]\nalloc = { tpu = 1 }\nseconds = 5");
        assert!(
            unknown.starts_with("profile[0].alloc.tpu: unknown"),
            "{unknown}"
        );
        assert!(check("[[profile]]\nsecs = 5").contains("secs"));
        let many = "[[profile]]\nseconds = 5\n".repeat(MAX_PROFILE + 1);
        assert!(check(&many).starts_with("profile: at most"));
    }
}
