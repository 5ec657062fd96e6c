//! What a user submits: a [`TaskSpec`] (the command to run, its demand per resource kind, its
//! placement constraints), and its validation into a [`Task`] for a given cluster.
//!
//! Specs arrive as TOML (`tapfinger-agent submit task.toml`) or JSON (the HTTP API), so unknown
//! fields are refused rather than ignored (a misspelt `min_demand` must not silently schedule a
//! task with no demand), and every validation error names the offending field. Demands are parsed
//! as signed integers so that a negative number is reported as such instead of as a type error.

use crate::resources::{ResourceSpace, Resources};
use crate::task::{NodeId, Task, TaskId, TaskTypeId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod gang;
mod gpu_share;
mod profile;
pub use gang::{GangSpec, PipelineSpec, WorkerCount};
pub use gpu_share::{
    FractionError, GPU_SHARES_LABEL, GPU_SHARES_MPS, fraction_rule, shares_gpus, units_per_device,
};
pub use profile::{MAX_HINT_SECONDS, MAX_PROFILE, ProfileHint};

/// Longest accepted name, label key or value, argument or environment entry (bytes).
pub const MAX_STRING: usize = 4096;
/// Most accepted arguments, environment entries, labels or peers.
pub const MAX_ITEMS: usize = 256;

/// A task as submitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// Human-readable name (defaults to the program's file name).
    #[serde(default)]
    pub name: String,
    /// Program and arguments; the program is looked up in `PATH` when not a path.
    #[serde(default)]
    pub command: Vec<String>,
    /// Extra environment variables for the process.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Task class (e.g. the model being trained, `resnet50`): the speed estimator learns per
    /// class. A class the cluster's type list names gets its index there; any other gets a
    /// stable id of its own (the same on every agent), which a per-preset model reads as type 0
    /// and the estimator serves from its prior until the class has been observed.
    #[serde(default, rename = "type")]
    pub task_type: String,
    /// Minimum per resource kind (`cpu`, `gpu`, `mem`, ...), in the kind's natural unit (cores,
    /// GPUs, GiB), a multiple of the cluster's step for the kind (`gpu = 0.25` where GPUs are
    /// shared in quarters); kinds not named get 0.
    #[serde(default)]
    pub min_demand: BTreeMap<String, f64>,
    /// Largest useful amount per kind, as `min_demand` (optional; kinds not named are uncapped).
    #[serde(default)]
    pub max_demand: BTreeMap<String, f64>,
    /// Labels a node must carry (all of them) to run the task, e.g. `site = "plant-3"`.
    #[serde(default)]
    pub require_labels: BTreeMap<String, String>,
    /// If not empty, only these nodes (by name) may run the task, e.g. where its data lives.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// Priority class, 0 (the highest, the default) to [`crate::task::LOWEST_CLASS`].
    #[serde(default)]
    pub priority: i64,
    /// The task can be stopped and started again where it left off (it checkpoints and, when
    /// started with `TAPFINGER_RESUME=1`, resumes from its last checkpoint). Only such a task
    /// may get more GPUs than its minimum: an elastic policy re-shares GPUs by restarting the
    /// task with its new devices (a process's devices are fixed when it starts). Off: the
    /// task's GPUs stay at its minimum demand from start to end.
    #[serde(default)]
    pub resumable: bool,
    /// Seconds a preempted task is given after its checkpoint signal (SIGTERM) before it is
    /// killed (0 to 3600; default 10): time to save a checkpoint (issue its progress line's
    /// `checkpoint=` then). Only preemption waits; other stops end a task at once.
    #[serde(default = "default_grace")]
    pub grace_seconds: i64,
    /// A multi-node job: the command runs once per member (parameter servers first, then
    /// workers), placed across boxes all at once, each member with the rendezvous environment
    /// (`MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK`, `LOCAL_RANK`, ...). The members'
    /// demands replace `min_demand` and `max_demand`, which must then be left out.
    #[serde(default)]
    pub gang: Option<Box<GangSpec>>,
    /// A layer chain planned at least cost (HeterPS, `crate::plan`): each layer's time per
    /// batch on a CPU core and on a GPU, the bytes between layers and a throughput target. The
    /// exact planner assigns each layer a kind and provisions each stage; the stages run as a
    /// gang, one member per stage (a stage larger than any box is split), in layer order. A
    /// target no plan meets on the eligible boxes is refused at submit.
    #[serde(default)]
    pub pipeline: Option<Box<PipelineSpec>>,
    /// How long the task takes alone at a few allocations, as its submitter knows it (at most
    /// [`MAX_PROFILE`]; [`ProfileHint`]): the speed estimator's figures for its class until
    /// progress has been observed. Single-node tasks only.
    // Always written (no `skip_serializing_if`): the wire's binary format has no field names
    // to leave one out by.
    #[serde(default)]
    pub profile: Vec<ProfileHint>,
    /// How much work the task is, in a unit its class's tasks share (epochs, steps, thousands
    /// of samples; from [`crate::estimate::MIN_WORK`] to [`crate::estimate::MAX_WORK`]).
    /// Optional: with it, the speed estimator estimates the task at its own size
    /// ([`crate::estimate::Estimator::declare`]), where without it every task of a class is
    /// estimated at the class's mean, so a 30-epoch fine-tune looks like a 1-epoch one.
    /// Single-node tasks only.
    #[serde(default)]
    pub work: Option<f64>,
    /// Who submits it (a user or a team): with `job`, the key its size is learned and
    /// predicted under ([`crate::sizes`]). `tapfinger-agent submit` fills in the login name
    /// where the spec names nobody; empty: nobody said (its class's history speaks for it).
    #[serde(default)]
    pub submitter: String,
    /// The recurring job it is an instance of: a nightly fine-tune resubmitted under the same
    /// name is one job. Empty: its name, else its program's file name.
    #[serde(default)]
    pub job: String,
}

fn default_grace() -> i64 {
    DEFAULT_GRACE_SECONDS
}

/// The default grace of a preempted task ([`TaskSpec::grace_seconds`]).
pub const DEFAULT_GRACE_SECONDS: i64 = 10;

/// `v` of `kind` in its natural unit as grid units: a non-negative multiple of the kind's step
/// (within a millionth of a step, what decimal fractions like 0.1 need).
fn grid_units(v: f64, kind: &crate::resources::ResourceKind) -> Result<u32, String> {
    // `-0.0` too: a sign the user wrote is a mistake to point out, not to read as 0.
    if !v.is_finite() || v.is_sign_negative() {
        return Err(format!("must not be negative ({v})"));
    }
    let units = v / kind.step;
    let whole = units.round();
    if (units - whole).abs() > 1e-6 {
        let unit = if kind.unit.is_empty() {
            String::new()
        } else {
            format!(" {}", kind.unit)
        };
        return Err(format!(
            "{v} is not a multiple of this cluster's step for {} ({}{unit})",
            kind.name, kind.step
        ));
    }
    if whole > f64::from(u32::MAX) {
        return Err(format!("too large ({v})"));
    }
    Ok(whole as u32)
}

/// A spec that cannot be accepted; `field` names the offending field (`min_demand.cpu`, ...).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecError {
    /// Dotted path of the field.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
    /// The refusal was judged on the boxes given (their capacities or labels): a box not among
    /// them (an agent's peer not heard at the time) might have changed it.
    pub by_boxes: bool,
}

pub(crate) fn err(field: impl Into<String>, message: impl Into<String>) -> SpecError {
    SpecError {
        field: field.into(),
        message: message.into(),
        by_boxes: false,
    }
}

/// A refusal judged on the boxes given ([`SpecError::by_boxes`]).
pub(crate) fn err_boxes(field: impl Into<String>, message: impl Into<String>) -> SpecError {
    SpecError {
        by_boxes: true,
        ..err(field, message)
    }
}

/// A node as placement sees it: name, labels and capacity.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement<'a> {
    /// Node id.
    pub id: NodeId,
    /// Node name.
    pub name: &'a str,
    /// Node labels.
    pub labels: &'a BTreeMap<String, String>,
    /// Capacity offered to the cluster.
    pub capacity: &'a Resources,
}

impl TaskSpec {
    /// Who submitted it and which recurring job it is, as the size book keys it: the job is
    /// `job`, else `name`, else the program's file name ([`TaskSpec::job`]).
    pub fn identity(&self) -> crate::sizes::Identity {
        let some = |s: &str| (!s.trim().is_empty()).then(|| s.trim().to_string());
        let program = self
            .command
            .first()
            .and_then(|p| std::path::Path::new(p).file_name())
            .and_then(|n| n.to_str())
            .unwrap_or("");
        crate::sizes::Identity {
            submitter: some(&self.submitter),
            job: some(&self.job)
                .or_else(|| some(&self.name))
                .or_else(|| some(program)),
        }
    }

    /// Parse TOML; a syntax error or unknown field is a [`SpecError`] naming it.
    pub fn from_toml(text: &str) -> Result<Self, SpecError> {
        toml_error(text)
    }

    /// Parse JSON; a syntax error or unknown field is a [`SpecError`] naming it.
    pub fn from_json(text: &str) -> Result<Self, SpecError> {
        serde_json::from_str(text).map_err(|e| {
            let m = e.to_string();
            let field = field_of(&m).unwrap_or("spec").to_string();
            err(field, m)
        })
    }

    /// Check the spec against the cluster's resource kinds and nodes, and build the [`Task`]
    /// (reachable = nodes that match the labels and names and whose capacity fits the minimum).
    pub fn validate(
        &self,
        space: &ResourceSpace,
        types: &[String],
        nodes: &[Placement<'_>],
        id: TaskId,
        arrival: u64,
    ) -> Result<Task, SpecError> {
        self.check_fields()?;
        let kinds = space.len();
        let units = |field: &str, map: &BTreeMap<String, f64>| -> Result<Resources, SpecError> {
            let mut r = Resources(vec![0; kinds]);
            for (name, v) in map {
                let k = space.index_of(name).ok_or_else(|| {
                    err(
                        format!("{field}.{name}"),
                        format!(
                            "unknown resource kind; this cluster has {}",
                            kind_names(space).join(", ")
                        ),
                    )
                })?;
                r.0[k] = grid_units(*v, &space.kinds()[k])
                    .map_err(|reason| err(format!("{field}.{name}"), reason))?;
            }
            Ok(r)
        };
        self.check_shape()?;
        if let Some(g) = &self.gang {
            return self.validate_gang(g, space, types, nodes, id, arrival, &units);
        }
        if let Some(p) = &self.pipeline {
            let shape = self.plan_pipeline(p, space, nodes)?;
            return self.gang_task(shape, types, nodes, id, arrival);
        }
        let min = units("min_demand", &self.min_demand)?;
        self.check_profile(space, &min)?;
        self.check_work()?;
        if min.0.iter().all(|u| *u == 0) {
            return Err(err(
                "min_demand",
                format!(
                    "at least one kind must be positive (kinds: {})",
                    kind_names(space).join(", ")
                ),
            ));
        }
        let max = self.max_units(space, &min, &units)?;
        let (max, fractional) = self.gpu_shares(space, &min, max)?;
        let sharing;
        let nodes = if fractional {
            sharing = self.boxes_sharing_gpus(nodes)?;
            &sharing[..]
        } else {
            nodes
        };
        let mut reachable = self.reachable(nodes, &min)?;
        let ty = self.type_id(types);
        reachable.sort();
        Ok(Task {
            id,
            ty,
            min_demand: min,
            max_demand: max,
            priority: self.class()?,
            reachable,
            arrival,
            gang: None,
        })
    }

    /// The fields every spec has: a program, strings within their limits, a class, a grace.
    fn check_fields(&self) -> Result<(), SpecError> {
        let program = self.command.first().map(String::as_str).unwrap_or("");
        if program.trim().is_empty() {
            return Err(err(
                "command",
                "must name a program, e.g. [\"python3\", \"train.py\"]",
            ));
        }
        check_strings("command", self.command.iter(), MAX_ITEMS)?;
        check_strings(
            "env",
            self.env.keys().chain(self.env.values()),
            2 * MAX_ITEMS,
        )?;
        check_strings(
            "require_labels",
            self.require_labels
                .keys()
                .chain(self.require_labels.values()),
            2 * MAX_ITEMS,
        )?;
        check_strings("nodes", self.nodes.iter(), MAX_ITEMS)?;
        check_strings("name", std::iter::once(&self.name), 1)?;
        check_strings("submitter", std::iter::once(&self.submitter), 1)?;
        check_strings("job", std::iter::once(&self.job), 1)?;
        self.class()?;
        if !(0..=3600).contains(&self.grace_seconds) {
            return Err(err(
                "grace_seconds",
                format!("must be 0 to 3600 seconds, got {}", self.grace_seconds),
            ));
        }
        Ok(())
    }

    /// A gang or a pipeline (not both), neither with declared work or profile hints.
    fn check_shape(&self) -> Result<(), SpecError> {
        if self.gang.is_some() && self.pipeline.is_some() {
            return Err(err("pipeline", "a spec is a gang or a pipeline, not both"));
        }
        if (self.gang.is_some() || self.pipeline.is_some()) && self.work.is_some() {
            return Err(err(
                "work",
                "declared work is for single-node tasks, not gangs or pipelines",
            ));
        }
        if (self.gang.is_some() || self.pipeline.is_some()) && !self.profile.is_empty() {
            return Err(err(
                "profile",
                "profile hints are for single-node tasks, not gangs or pipelines",
            ));
        }
        Ok(())
    }

    /// The maximum demand (`None`: none given), each kind at least the minimum; a task that
    /// cannot resume never gets GPUs beyond its minimum (see `resumable`).
    fn max_units(
        &self,
        space: &ResourceSpace,
        min: &Resources,
        units: &Units<'_>,
    ) -> Result<Option<Resources>, SpecError> {
        let max = if self.max_demand.is_empty() {
            None
        } else {
            let mut m = units("max_demand", &self.max_demand)?;
            for (k, v) in m.0.iter_mut().enumerate() {
                if !self.max_demand.contains_key(&kind_names(space)[k]) {
                    *v = u32::MAX;
                }
                if *v < min.get(k) {
                    return Err(err(
                        format!("max_demand.{}", kind_names(space)[k]),
                        format!("{v} is below min_demand ({})", min.get(k)),
                    ));
                }
            }
            Some(m)
        };
        let gpu = crate::estimate::KindMap::from_names(&kind_names(space)).0[1];
        Ok(match gpu {
            Some(g)
                if !self.resumable && min.get(g) < max.as_ref().map_or(u32::MAX, |m| m.get(g)) =>
            {
                let mut m = max.unwrap_or_else(|| Resources(vec![u32::MAX; min.len()]));
                m.0[g] = min.get(g);
                Some(m)
            }
            _ => max,
        })
    }

    /// The nodes the task may run on: among `nodes` (if named), carrying the required labels,
    /// with a capacity that holds the minimum demand.
    fn reachable(
        &self,
        nodes: &[Placement<'_>],
        min: &Resources,
    ) -> Result<Vec<NodeId>, SpecError> {
        for name in &self.nodes {
            if !nodes.iter().any(|n| n.name == name) {
                return Err(err(format!("nodes.{name}"), "no such node in the cluster"));
            }
        }
        let matches = |n: &Placement<'_>| {
            (self.nodes.is_empty() || self.nodes.iter().any(|x| x == n.name))
                && self
                    .require_labels
                    .iter()
                    .all(|(k, v)| n.labels.get(k) == Some(v))
        };
        let eligible: Vec<&Placement<'_>> = nodes.iter().filter(|n| matches(n)).collect();
        if eligible.is_empty() {
            return Err(err_boxes(
                "require_labels",
                "no node carries all the required labels (and is among `nodes`)",
            ));
        }
        let reachable: Vec<NodeId> = eligible
            .iter()
            .filter(|n| min.fits_in(n.capacity))
            .map(|n| n.id)
            .collect();
        if reachable.is_empty() {
            return Err(err_boxes(
                "min_demand",
                format!("{min} fits on no eligible node (largest capacities: {})", {
                    let caps: Vec<String> = eligible
                        .iter()
                        .map(|n| format!("{}={}", n.name, n.capacity))
                        .collect();
                    caps.join(", ")
                }),
            ));
        }
        Ok(reachable)
    }
}

impl TaskSpec {
    /// The task's priority class, checked.
    pub(crate) fn class(&self) -> Result<u8, SpecError> {
        crate::task::check_class(self.priority).map_err(|m| err("priority", m))
    }

    pub(crate) fn type_id(&self, types: &[String]) -> TaskTypeId {
        TaskTypeId(types.iter().position(|t| *t == self.task_type).map_or_else(
            || class_id(&self.task_type),
            |i| u16::try_from(i).unwrap_or(0),
        ))
    }

    /// The nodes the spec's labels and names allow.
    pub(crate) fn eligible<'n, 'a>(&self, nodes: &'n [Placement<'a>]) -> Vec<&'n Placement<'a>> {
        nodes
            .iter()
            .filter(|n| {
                (self.nodes.is_empty() || self.nodes.iter().any(|x| x == n.name))
                    && self
                        .require_labels
                        .iter()
                        .all(|(k, v)| n.labels.get(k) == Some(v))
            })
            .collect()
    }
}

/// Demands by kind name into a vector of the cluster's kinds, for the field named.
pub(crate) type Units<'a> =
    dyn Fn(&str, &BTreeMap<String, f64>) -> Result<Resources, SpecError> + 'a;

pub(crate) fn kind_names(space: &ResourceSpace) -> Vec<String> {
    space.kinds().iter().map(|k| k.name.clone()).collect()
}

/// Check the strings of one field: each at most [`MAX_STRING`] bytes, no NUL, and at most `max`
/// of them. The limits are the wire's ([`crate::wire::Envelope::validate`]), so that whatever the
/// API accepts can be announced to every peer.
fn check_strings<'a>(
    field: &str,
    items: impl Iterator<Item = &'a String>,
    max: usize,
) -> Result<(), SpecError> {
    let mut n = 0;
    for s in items {
        n += 1;
        if s.len() > MAX_STRING {
            return Err(err(
                field,
                format!("an entry is longer than {MAX_STRING} bytes"),
            ));
        }
        if s.contains('\0') {
            return Err(err(field, "an entry contains a NUL byte"));
        }
    }
    if n > max {
        return Err(err(field, format!("more than {max} entries")));
    }
    Ok(())
}

/// The field a serde message names (`unknown field `x``, `missing field `y``), if any.
fn field_of(message: &str) -> Option<&str> {
    let at = ["unknown field `", "missing field `", "duplicate field `"]
        .iter()
        .find_map(|p| message.find(p).map(|i| i + p.len() - 1))?;
    let start = at + 1;
    let len = message[start..].find('`')?;
    Some(&message[start..start + len])
}

fn toml_error(text: &str) -> Result<TaskSpec, SpecError> {
    toml::from_str(text).map_err(|e| {
        let m = e.message().to_string();
        let field = field_of(&m)
            .map(str::to_string)
            .unwrap_or_else(|| "spec".into());
        err(field, e.to_string().trim().to_string())
    })
}

/// The id of a task class no type list names: 0 for none, else a hash of the name (FNV-1a)
/// above the ids type lists use (below 1024), so that every agent gives a class the same id.
pub fn class_id(name: &str) -> u16 {
    if name.is_empty() {
        return 0;
    }
    let mut h: u32 = 0x811C_9DC5;
    for b in name.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    1024 + (h % (u32::from(u16::MAX) - 1024)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space() -> ResourceSpace {
        ResourceSpace::cpu_gpu()
    }

    fn check(text: &str) -> Result<Task, SpecError> {
        let labels_a: BTreeMap<String, String> = [("site".to_string(), "a".to_string())].into();
        let labels_b: BTreeMap<String, String> = [("site".to_string(), "b".to_string())].into();
        let (ca, cb) = (Resources(vec![4, 0]), Resources(vec![16, 2]));
        let nodes = [
            Placement {
                id: NodeId(0),
                name: "small",
                labels: &labels_a,
                capacity: &ca,
            },
            Placement {
                id: NodeId(1),
                name: "big",
                labels: &labels_b,
                capacity: &cb,
            },
        ];
        TaskSpec::from_toml(text)?.validate(
            &space(),
            &["IMG".into(), "LM".into()],
            &nodes,
            TaskId(7),
            3,
        )
    }

    /// Demands are in each kind's natural unit: where GPUs are shared in quarters, `gpu = 0.25`
    /// is one grid unit and `gpu = 2` eight; an amount that is not a multiple of the step is
    /// refused, naming the field and the step; where a GPU is one unit, a fraction is refused.
    #[test]
    fn demands_are_multiples_of_the_cluster_s_step() {
        let quarters = ResourceSpace::cpu_gpu_quarters();
        let labels: BTreeMap<String, String> =
            [(GPU_SHARES_LABEL.to_string(), GPU_SHARES_MPS.to_string())].into();
        let cap = Resources(vec![16, 8]);
        let nodes = [Placement {
            id: NodeId(1),
            name: "gpu-box",
            labels: &labels,
            capacity: &cap,
        }];
        let on = |space: &ResourceSpace, demand: &str| {
            TaskSpec::from_toml(&format!("command = [\"x\"]\nmin_demand = {{ {demand} }}\n"))
                .unwrap()
                .validate(space, &[], &nodes, TaskId(1), 0)
        };
        assert_eq!(
            on(&quarters, "cpu = 1, gpu = 0.25").unwrap().min_demand,
            Resources(vec![1, 1])
        );
        assert_eq!(
            on(&quarters, "gpu = 2").unwrap().min_demand,
            Resources(vec![0, 8])
        );
        let e = on(&quarters, "cpu = 1, gpu = 0.3").unwrap_err();
        assert_eq!(e.field, "min_demand.gpu", "{e}");
        assert!(e.to_string().contains("0.25"), "{e}");
        let e = on(&space(), "cpu = 1, gpu = 0.5").unwrap_err();
        assert_eq!(e.field, "min_demand.gpu", "{e}");
        let e = on(&space(), "cpu = 1.5").unwrap_err();
        assert_eq!(e.field, "min_demand.cpu", "{e}");
        let e = on(&space(), "cpu = -1").unwrap_err();
        assert_eq!(e.field, "min_demand.cpu", "{e}");
        let e = on(&space(), "cpu = 1, mem = -0.0").unwrap_err();
        assert_eq!(e.field, "min_demand.mem", "{e}");
    }

    #[test]
    fn a_good_spec_becomes_a_task() {
        let t = check(
            "command = [\"python3\", \"train.py\"]\ntype = \"LM\"\nmin_demand = { cpu = 2 }\nmax_demand = { cpu = 8 }\n",
        )
        .unwrap();
        assert_eq!(t.ty, TaskTypeId(1));
        // A class the type list does not name: a stable id of its own, outside the list's range.
        let other = |class: &str| {
            check(&format!(
                "command = [\"x\"]\ntype = \"{class}\"\nmin_demand = {{ cpu = 1 }}\n"
            ))
            .unwrap()
            .ty
        };
        assert_eq!(other("resnet50"), other("resnet50"));
        assert_ne!(other("resnet50"), other("bert"));
        assert!(other("resnet50").0 >= 1024);
        assert_eq!(other(""), TaskTypeId(0));
        assert_eq!(class_id("resnet50"), other("resnet50").0);
        assert_eq!(t.min_demand, Resources(vec![2, 0]));
        // Not resumable: its GPUs are capped at its minimum (none).
        assert_eq!(t.max_demand, Some(Resources(vec![8, 0])));
        assert_eq!(t.reachable, vec![NodeId(0), NodeId(1)]);
        let resumable = |extra: &str| {
            check(&format!(
                "command = [\"x\"]\nmin_demand = {{ cpu = 1, gpu = 1 }}\n{extra}"
            ))
            .unwrap()
            .max_demand
        };
        assert_eq!(resumable(""), Some(Resources(vec![u32::MAX, 1])));
        assert_eq!(resumable("resumable = true\n"), None);
        assert_eq!(
            resumable("resumable = true\nmax_demand = { gpu = 2 }\n"),
            Some(Resources(vec![u32::MAX, 2]))
        );
        let gpu = check("command = [\"x\"]\nmin_demand = { cpu = 1, gpu = 1 }\n").unwrap();
        assert_eq!(gpu.reachable, vec![NodeId(1)], "only the GPU node fits");
        let labelled = check(
            "command = [\"x\"]\nmin_demand = { cpu = 1 }\nrequire_labels = { site = \"a\" }\n",
        )
        .unwrap();
        assert_eq!(labelled.reachable, vec![NodeId(0)]);
    }

    #[test]
    fn bad_specs_name_the_field() {
        let cases = [
            ("min_demand = { cpu = 1 }\n", "command"),
            ("command = [\"\"]\nmin_demand = { cpu = 1 }\n", "command"),
            ("command = [\"x\"]\n", "min_demand"),
            (
                "command = [\"x\"]\nmin_demand = { cpu = 0 }\n",
                "min_demand",
            ),
            (
                "command = [\"x\"]\nmin_demand = { cpu = -2 }\n",
                "min_demand.cpu",
            ),
            (
                "command = [\"x\"]\nmin_demand = { tpu = 1 }\n",
                "min_demand.tpu",
            ),
            (
                "command = [\"x\"]\nmin_demand = { cpu = 64 }\n",
                "min_demand",
            ),
            (
                "command = [\"x\"]\nmin_demand = { cpu = 4 }\nmax_demand = { cpu = 2 }\n",
                "max_demand.cpu",
            ),
            (
                "command = [\"x\"]\nmin_demand = { cpu = 1 }\nnodes = [\"nope\"]\n",
                "nodes.nope",
            ),
            (
                "command = [\"x\"]\nmin_demand = { cpu = 1 }\nrequire_labels = { site = \"c\" }\n",
                "require_labels",
            ),
            (
                "command = [\"x\"]\nmin_demand = { cpu = 1 }\nmin_demnd = { cpu = 1 }\n",
                "min_demnd",
            ),
            ("command = [\"x\"\n", "spec"),
            (
                "command = [\"x\"]\nmin_demand = { cpu = 1 }\npriority = 12\n",
                "priority",
            ),
            (
                "command = [\"x\"]\nmin_demand = { cpu = 1 }\npriority = -1\n",
                "priority",
            ),
            (
                "command = [\"x\"]\nmin_demand = { cpu = 1 }\nwork = 0\n",
                "work",
            ),
            (
                "command = [\"x\"]\nmin_demand = { cpu = 1 }\nwork = 2e6\n",
                "work",
            ),
        ];
        for (text, field) in cases {
            let e = check(text).unwrap_err();
            assert_eq!(e.field, field, "{text:?}: {e}");
        }
        let e = TaskSpec::from_json(r#"{"command": ["x"], "min_demand": {"cpu": 1}, "gpus": 2}"#)
            .unwrap_err();
        assert_eq!(e.field, "gpus", "{e}");
    }

    #[test]
    fn a_gang_spec_becomes_a_gang_or_is_refused_with_why() {
        let gang = |table: &str| {
            check(&format!(
                "command = [\"python3\", \"train.py\"]\n[gang]\n{table}\n"
            ))
        };
        let t = gang(
            "workers = [1, 3]\nworker_demand = { cpu = 2 }\nps_demand = { cpu = 1 }\ngradient_mb = 20",
        )
        .unwrap();
        let s = t.gang.as_deref().unwrap();
        assert_eq!((s.workers, s.ps), ((1, 3), 1));
        assert_eq!(s.worker_demand, Resources(vec![2, 0]));
        assert_eq!(s.gradient_bytes, 20e6);
        assert_eq!(t.reachable, vec![NodeId(0), NodeId(1)]);
        let fixed =
            gang("workers = 2\nworker_demand = { cpu = 2 }\nps_demand = { cpu = 1 }").unwrap();
        assert_eq!(fixed.gang.unwrap().workers, (2, 2));
        // Refusals name the field and say why.
        let cases = [
            (
                "workers = 0\nworker_demand = { cpu = 1 }\nps_demand = { cpu = 1 }",
                "gang.workers",
                "",
            ),
            (
                "workers = 1\nps = 0\nworker_demand = { cpu = 1 }\nps_demand = { cpu = 1 }",
                "gang.ps",
                "",
            ),
            (
                "workers = 1\nworker_demand = { tpu = 1 }\nps_demand = { cpu = 1 }",
                "gang.worker_demand.tpu",
                "",
            ),
            (
                "workers = 1\nworker_demand = { cpu = 0 }\nps_demand = { cpu = 1 }",
                "gang.worker_demand",
                "",
            ),
            (
                "workers = 1\nworker_demand = { cpu = 1 }\nps_demand = { cpu = 1 }\ncompute_seconds = 0",
                "gang.compute_seconds",
                "",
            ),
            // 20 CPUs in all; each worker needs 12, which no box has (16 and 4).
            (
                "workers = 1\nworker_demand = { cpu = 12 }\nps_demand = { cpu = 6 }",
                "gang",
                "not its boxes",
            ),
            (
                "workers = 3\nworker_demand = { cpu = 8 }\nps_demand = { cpu = 1 }",
                "gang",
                "whole cluster",
            ),
        ];
        for (table, field, why) in cases {
            let e = gang(table).unwrap_err();
            assert_eq!(e.field, field, "{table}: {e}");
            assert!(e.message.contains(why), "{table}: {e}");
        }
        let e = check(
            "command = [\"x\"]\nmin_demand = { cpu = 1 }\n[gang]\nworkers = 1\nworker_demand = { cpu = 1 }\nps_demand = { cpu = 1 }\n",
        )
        .unwrap_err();
        assert_eq!(e.field, "min_demand");
        // The spec crosses the wire's binary format and JSON alike.
        let spec = TaskSpec::from_toml(
            "command = [\"x\"]\n[gang]\nworkers = [2, 4]\nworker_demand = { cpu = 1 }\nps_demand = { cpu = 1 }\n",
        )
        .unwrap();
        let json = serde_json::to_string(&spec).unwrap();
        assert_eq!(TaskSpec::from_json(&json).unwrap(), spec);
    }

    #[test]
    fn a_pipeline_is_planned_into_members_or_refused_with_why() {
        let pipeline = |throughput: &str, prices: &str| {
            check(&format!(
                "command = [\"x\"]\n[pipeline]\nbatches = 1000\nthroughput = {throughput}\nprices = {prices}\n\
                 [[pipeline.layer]]\ntime = {{ cpu = 0.01, gpu = 0.02 }}\nout_bytes = 1e5\n\
                 [[pipeline.layer]]\ntime = {{ cpu = 0.4, gpu = 0.005 }}\n"
            ))
        };
        let t = pipeline("50", "{ cpu = 0.05, gpu = 0.35 }").unwrap();
        let s = t.gang.as_deref().unwrap();
        assert!(!s.stages.is_empty());
        // The dense layer goes to a GPU (2 of them in the cluster); the input layer to cores.
        assert!(s.stages.iter().any(|m| m.get(1) > 0), "{:?}", s.stages);
        assert!(s.stages.iter().all(|m| m.get(0) <= 16 && m.get(1) <= 2));
        let e = pipeline("100000", "{ cpu = 0.05, gpu = 0.35 }").unwrap_err();
        assert_eq!(e.field, "pipeline.throughput", "{e}");
        assert!(e.message.contains("no plan reaches 100000"), "{e}");
        let e = pipeline("50", "{ tpu = 1.0 }").unwrap_err();
        assert_eq!(e.field, "pipeline.prices.tpu", "{e}");
        // Without GPUs priced: 45 batches/s on cores is out of reach (a core adds less than
        // the last as the stage grows); at 24 both layers form one stage of 19 cores, more than
        // a box has, split over the two boxes (16 + 3).
        let e = pipeline("45", "{ cpu = 0.05 }").unwrap_err();
        assert_eq!(e.field, "pipeline.throughput", "{e}");
        let t = pipeline("24", "{ cpu = 0.05 }").unwrap();
        let cores: Vec<u32> = t.gang.unwrap().stages.iter().map(|m| m.get(0)).collect();
        assert_eq!(cores, vec![16, 3]);
    }

    // Arbitrary input from a user or a peer: a spec's text, as TOML or JSON, and the task built
    // from it, never panic, whatever the bytes; errors name a field. Mutations of a valid spec
    // reach deeper than random text (past the syntax into the fields).
    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,400}") {
            if let Err(e) = TaskSpec::from_toml(&text) {
                proptest::prop_assert!(!e.field.is_empty());
            }
            let _ = TaskSpec::from_json(&text);
            let _ = check(&text);
        }

        #[test]
        fn a_mutated_spec_is_refused_or_checked_never_a_panic(
            at in 0usize..400,
            with in "[\\[\\]{}=\",.0-9a-z_ \n-]{0,12}",
            cut in 0usize..8,
        ) {
            let good = "name = \"x\"\ncommand = [\"sh\", \"-c\", \"true\"]\ntype = \"LM\"\n\
                        min_demand = { cpu = 2, gpu = 1 }\nmax_demand = { cpu = 8 }\npriority = 1\n\
                        require_labels = { site = \"b\" }\nwork = 3.5\ngrace_seconds = 5\n\
                        [gang]\nworkers = 2\nps = 1\nworker_demand = { cpu = 1 }\n";
            let mut text: Vec<char> = good.chars().collect();
            let at = at.min(text.len());
            let end = (at + cut).min(text.len());
            text.splice(at..end, with.chars());
            let text: String = text.into_iter().collect();
            let _ = check(&text);
            if let Ok(spec) = TaskSpec::from_toml(&text)
                && let Ok(json) = serde_json::to_string(&spec)
            {
                let _ = TaskSpec::from_json(&json);
            }
        }
    }
}
