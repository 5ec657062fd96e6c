//! Scenarios: a cluster, its task types and its workload, from a built-in preset or a TOML file.
//!
//! Parsing ([`ScenarioFile`]) is separate from validation ([`Scenario::from_file`]): every number
//! a user can get wrong (negative capacity, a minimum demand no node can hold, an empty cluster,
//! λ ≤ 0, a broken speed table) is rejected with a message that names the field. Nothing here
//! simulates; it only describes.

use crate::presets::{PRESET_FILES, PRESETS};
use crate::speed::{SpeedModel, TableError, TableModel};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tapfinger::{ResourceError, ResourceKind, ResourceSpace, Resources};

/// Errors while loading a scenario.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// Neither a preset nor a readable file.
    #[error("unknown scenario {name:?}: not a preset ({known}) and not a readable file ({source})")]
    Unknown {
        /// What was asked for.
        name: String,
        /// Preset names.
        known: String,
        /// Why the file could not be read.
        source: std::io::Error,
    },
    /// TOML syntax or schema error.
    #[error("scenario {origin}: {message}")]
    Parse {
        /// File or preset.
        origin: String,
        /// Parser message (with line and column).
        message: String,
    },
    /// A value is out of range or inconsistent.
    #[error("scenario {origin}: {field}: {reason}")]
    Invalid {
        /// File or preset.
        origin: String,
        /// The offending field, e.g. `nodes[2].capacity`.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A speed table could not be loaded.
    #[error("scenario {origin}: {source}")]
    Table {
        /// File or preset.
        origin: String,
        /// Cause.
        source: TableError,
    },
}

/// What happens to a task allocated less than its true need in some kind (e.g. memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryMode {
    /// It makes no progress (and holds its allocation).
    #[default]
    Stall,
    /// It fails after one slot and is re-queued asking for its true need.
    Fail,
}

/// Which nodes a task can reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reachability {
    /// TapFinger's: n uniform in 1..=N, then a uniform subset of n of the nodes that can hold the task.
    #[default]
    Random,
    /// Every node that can hold the task.
    All,
}

/// The TOML form of a scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// Name.
    pub name: String,
    /// One-line description.
    #[serde(default)]
    pub description: String,
    /// Poisson arrival rate per slot.
    pub lambda: f64,
    /// Number of tasks in an episode.
    pub tasks: i64,
    /// Pending window size per node.
    #[serde(default = "default_window")]
    pub window: i64,
    /// Progress multiplier in a slot whose allocation changed (elastic policies).
    #[serde(default = "one")]
    pub switch_weight: f64,
    /// Seconds per slot (used by measured tables).
    #[serde(default = "one")]
    pub slot_seconds: f64,
    /// Below-need behaviour.
    #[serde(default)]
    pub memory: MemoryMode,
    /// Reachability rule.
    #[serde(default)]
    pub reachability: Reachability,
    /// Slots after which an unfinished episode is an error.
    #[serde(default = "default_max_slots")]
    pub max_slots: i64,
    /// Resource kinds.
    pub resources: Vec<ResourceKind>,
    /// Nodes.
    pub nodes: Vec<NodeSpec>,
    /// Task types.
    pub task_types: Vec<TaskTypeSpec>,
    /// Bursty arrivals (none: Poisson at `lambda` every slot).
    #[serde(default)]
    pub burst: Option<crate::workload::Burst>,
    /// Heavy-tailed task sizes (none: every task of a type has the same work).
    #[serde(default)]
    pub task_size: Option<crate::workload::TaskSize>,
    /// A recorded workload replayed instead of drawn arrivals and sizes ([`crate::trace`]).
    #[serde(default)]
    pub trace: Option<crate::trace::TraceSpec>,
    /// Multi-node jobs among the tasks ([`crate::gangs`]).
    #[serde(default)]
    pub gangs: Option<crate::gangs::GangsFile>,
    /// Published average JCT per policy, shown beside ours.
    #[serde(default)]
    pub published: BTreeMap<String, f64>,
}

fn default_window() -> i64 {
    10
}
fn one() -> f64 {
    1.0
}
fn default_max_slots() -> i64 {
    100_000
}

/// A node (or `count` identical nodes).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Name (suffixed with an index when `count` > 1).
    pub name: String,
    /// Units per resource kind.
    pub capacity: Vec<i64>,
    /// How many such nodes.
    #[serde(default = "one_i64")]
    pub count: i64,
    /// Labels (e.g. a GPU model) that a recorded task may require ([`crate::trace`]).
    #[serde(default)]
    pub labels: Vec<String>,
}

fn one_i64() -> i64 {
    1
}

/// A task type.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskTypeSpec {
    /// Name.
    pub name: String,
    /// Relative frequency among arrivals.
    #[serde(default = "one")]
    pub weight: f64,
    /// Minimum demand (what the task asks for).
    pub min_demand: Vec<i64>,
    /// Per-task cap.
    #[serde(default)]
    pub max_demand: Option<Vec<i64>>,
    /// True need, hidden from policies (defaults to the minimum demand).
    #[serde(default)]
    pub need: Option<Vec<i64>>,
    /// Priority class (0 highest).
    #[serde(default)]
    pub priority: u8,
    /// Speed model.
    pub speed: SpeedSpec,
}

/// The TOML form of a speed model.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "model", rename_all = "lowercase", deny_unknown_fields)]
pub enum SpeedSpec {
    /// `Δp = tanh(Σ w_k a_k)·sqrt(1.2 − p) + b`.
    Synthetic {
        /// Weights per kind.
        w: Vec<f64>,
        /// Constant term.
        b: f64,
    },
    /// Measured table.
    Table {
        /// CSV path, relative to the scenario file (or give `rows`).
        #[serde(default)]
        csv: Option<String>,
        /// The CSV text itself (generated scenarios carry their tables inline).
        #[serde(default)]
        rows: Option<String>,
        /// Rows to use (defaults to the type's name).
        #[serde(default)]
        row_type: Option<String>,
        /// Start-up overhead per run.
        #[serde(default)]
        startup_seconds: f64,
    },
}

/// A validated node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeDef {
    /// Name.
    pub name: String,
    /// Capacity.
    pub capacity: Resources,
    /// Labels.
    pub labels: Vec<String>,
}

/// A validated task type.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskType {
    /// Name.
    pub name: String,
    /// Relative frequency.
    pub weight: f64,
    /// Minimum demand.
    pub min_demand: Resources,
    /// Cap.
    pub max_demand: Option<Resources>,
    /// True need.
    pub need: Resources,
    /// Priority class.
    pub priority: u8,
    /// Speed model.
    pub speed: SpeedModel,
}

/// A validated scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Resource kinds.
    pub space: ResourceSpace,
    /// Nodes (node i is agent i).
    pub nodes: Vec<NodeDef>,
    /// Task types.
    pub types: Vec<TaskType>,
    /// Arrival rate per slot.
    pub lambda: f64,
    /// Tasks per episode.
    pub tasks: u32,
    /// Window size.
    pub window: usize,
    /// Switching penalty multiplier.
    pub switch_weight: f64,
    /// Seconds per slot.
    pub slot_seconds: f64,
    /// Below-need behaviour.
    pub memory: MemoryMode,
    /// Reachability.
    pub reachability: Reachability,
    /// Episode limit in slots.
    pub max_slots: u64,
    /// Published average JCT per policy.
    pub published: BTreeMap<String, f64>,
    /// Bursty arrivals.
    pub burst: Option<crate::workload::Burst>,
    /// Heavy-tailed task sizes.
    pub task_size: Option<crate::workload::TaskSize>,
    /// A recorded workload (its tasks replace drawn arrivals and sizes).
    pub trace: Option<Vec<crate::trace::TraceTask>>,
    /// Multi-node jobs among the tasks.
    pub gangs: Option<crate::gangs::Gangs>,
}

pub use crate::presets::presets;

impl Scenario {
    /// A preset by name, a generated scenario (`gen:N`, [`crate::generate`]), or else a TOML
    /// file by path.
    pub fn load(name_or_path: &str) -> Result<Self, ScenarioError> {
        if let Some(p) = PRESETS.iter().find(|p| p.name == name_or_path) {
            return Self::from_toml(p.toml, &format!("preset {}", p.name), None);
        }
        if let Some(generated) = crate::generate::load(name_or_path) {
            return generated;
        }
        let path = Path::new(name_or_path);
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Unknown {
            name: name_or_path.into(),
            known: PRESETS
                .iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
                .join(", "),
            source,
        })?;
        Self::from_toml(
            &text,
            &path.display().to_string(),
            Some(path.parent().map(Path::to_path_buf).unwrap_or_default()),
        )
    }

    /// Parse and validate TOML text; `dir` resolves relative table paths (`None`: embedded files).
    pub fn from_toml(
        text: &str,
        origin: &str,
        dir: Option<PathBuf>,
    ) -> Result<Self, ScenarioError> {
        let file: ScenarioFile = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            origin: origin.into(),
            message: e.to_string(),
        })?;
        Self::from_file(file, origin, dir.as_deref())
    }

    /// Validate a parsed file.
    pub fn from_file(
        f: ScenarioFile,
        origin: &str,
        dir: Option<&Path>,
    ) -> Result<Self, ScenarioError> {
        let invalid = |field: String, reason: String| ScenarioError::Invalid {
            origin: origin.into(),
            field,
            reason,
        };
        let space = ResourceSpace::new(f.resources.clone()).map_err(|e| match e {
            ResourceError::InvalidKind { name, reason } => {
                invalid(format!("resources ({name:?})"), reason)
            }
            other => invalid("resources".into(), other.to_string()),
        })?;
        let n = space.len();
        let names: Vec<String> = space.kinds().iter().map(|k| k.name.clone()).collect();
        let vector =
            |field: String, v: &[i64], allow_zero_all: bool| -> Result<Resources, ScenarioError> {
                if v.len() != n {
                    return Err(invalid(
                        field,
                        format!(
                            "has {} entries, expected {} ({})",
                            v.len(),
                            n,
                            names.join(", ")
                        ),
                    ));
                }
                let mut out = Vec::with_capacity(n);
                for (k, x) in v.iter().enumerate() {
                    if *x < 0 {
                        return Err(invalid(field, format!("{} is {x}; must be ≥ 0", names[k])));
                    }
                    out.push(u32::try_from(*x).map_err(|_| {
                        invalid(field.clone(), format!("{} is too large: {x}", names[k]))
                    })?);
                }
                if !allow_zero_all && out.iter().all(|x| *x == 0) {
                    return Err(invalid(field, "must not be all zero".into()));
                }
                Ok(Resources(out))
            };
        if let Some(reason) = f.burst.as_ref().and_then(|b| b.invalid()) {
            return Err(invalid("burst".into(), reason));
        }
        if let Some(reason) = f.task_size.as_ref().and_then(|b| b.invalid()) {
            return Err(invalid("task_size".into(), reason));
        }
        if !(f.lambda.is_finite() && f.lambda > 0.0) {
            return Err(invalid(
                "lambda".into(),
                format!("arrival rate must be > 0, got {}", f.lambda),
            ));
        }
        if f.tasks <= 0 || f.tasks > 10_000_000 {
            return Err(invalid(
                "tasks".into(),
                format!("must be between 1 and 10000000, got {}", f.tasks),
            ));
        }
        if f.window <= 0 || f.window > 1000 {
            return Err(invalid(
                "window".into(),
                format!("must be between 1 and 1000, got {}", f.window),
            ));
        }
        if !(f.switch_weight > 0.0 && f.switch_weight <= 1.0) {
            return Err(invalid(
                "switch_weight".into(),
                format!("must be in (0, 1], got {}", f.switch_weight),
            ));
        }
        if !(f.slot_seconds.is_finite() && f.slot_seconds > 0.0) {
            return Err(invalid(
                "slot_seconds".into(),
                format!("must be > 0, got {}", f.slot_seconds),
            ));
        }
        if f.max_slots <= 0 {
            return Err(invalid(
                "max_slots".into(),
                format!("must be > 0, got {}", f.max_slots),
            ));
        }
        if f.nodes.is_empty() {
            return Err(invalid(
                "nodes".into(),
                "the cluster is empty: at least one node is required".into(),
            ));
        }
        let mut nodes = Vec::new();
        for (i, spec) in f.nodes.iter().enumerate() {
            let cap = vector(format!("nodes[{i}].capacity"), &spec.capacity, false)?;
            if spec.count <= 0 || spec.count > 10_000 {
                return Err(invalid(
                    format!("nodes[{i}].count"),
                    format!("must be between 1 and 10000, got {}", spec.count),
                ));
            }
            for c in 0..spec.count {
                let name = if spec.count > 1 {
                    format!("{}-{c}", spec.name)
                } else {
                    spec.name.clone()
                };
                nodes.push(NodeDef {
                    name,
                    capacity: cap.clone(),
                    labels: spec.labels.clone(),
                });
            }
        }
        if f.task_types.is_empty() {
            return Err(invalid(
                "task_types".into(),
                "at least one task type is required".into(),
            ));
        }
        if f.task_types.len() > usize::from(u16::MAX) {
            return Err(invalid("task_types".into(), "too many task types".into()));
        }
        let mut types = Vec::new();
        for (i, t) in f.task_types.iter().enumerate() {
            let field = |s: &str| format!("task_types[{i}] ({}).{s}", t.name);
            let min = vector(field("min_demand"), &t.min_demand, false)?;
            if !nodes.iter().any(|nd| min.fits_in(&nd.capacity)) {
                return Err(invalid(
                    field("min_demand"),
                    format!("{min} is larger than every node's capacity"),
                ));
            }
            let max = match &t.max_demand {
                Some(m) => {
                    let m = vector(field("max_demand"), m, false)?;
                    if !min.fits_in(&m) {
                        return Err(invalid(
                            field("max_demand"),
                            format!("{m} is below the minimum demand {min}"),
                        ));
                    }
                    Some(m)
                }
                None => None,
            };
            let need = match &t.need {
                Some(v) => {
                    let need = vector(field("need"), v, true)?;
                    let both = need.max_each(&min);
                    if !nodes.iter().any(|nd| {
                        both.fits_in(&nd.capacity.min_each(max.as_ref().unwrap_or(&nd.capacity)))
                    }) {
                        return Err(invalid(
                            field("need"),
                            format!("{need} cannot be met on any node within the cap"),
                        ));
                    }
                    need
                }
                None => min.clone(),
            };
            if !(t.weight.is_finite() && t.weight > 0.0) {
                return Err(invalid(
                    field("weight"),
                    format!("must be > 0, got {}", t.weight),
                ));
            }
            let speed = match &t.speed {
                SpeedSpec::Synthetic { w, b } => {
                    if w.len() != n {
                        return Err(invalid(
                            field("speed.w"),
                            format!("has {} entries, expected {n}", w.len()),
                        ));
                    }
                    if w.iter().any(|x| !x.is_finite() || *x < 0.0) || !b.is_finite() || *b < 0.0 {
                        return Err(invalid(
                            field("speed"),
                            "weights and b must be finite and ≥ 0".into(),
                        ));
                    }
                    if *b == 0.0 && w.iter().all(|x| *x == 0.0) {
                        return Err(invalid(
                            field("speed"),
                            "w and b are all zero: the task would never progress".into(),
                        ));
                    }
                    SpeedModel::Synthetic {
                        w: w.clone(),
                        b: *b,
                    }
                }
                SpeedSpec::Table {
                    csv,
                    rows,
                    row_type,
                    startup_seconds,
                } => {
                    if !(startup_seconds.is_finite() && *startup_seconds >= 0.0) {
                        return Err(invalid(
                            field("speed.startup_seconds"),
                            format!("must be ≥ 0, got {startup_seconds}"),
                        ));
                    }
                    let row = row_type.clone().unwrap_or_else(|| t.name.clone());
                    let source = crate::speed::TableSource {
                        csv: csv.as_deref(),
                        rows: rows.as_deref(),
                        dir,
                        embedded: PRESET_FILES,
                    };
                    let table = TableModel::from_source(&source, &row, &names, *startup_seconds)
                        .map_err(|source| ScenarioError::Table {
                            origin: origin.into(),
                            source,
                        })?;
                    let model = SpeedModel::Table(table);
                    if !nodes.iter().any(|nd| {
                        model
                            .isolated(
                                &nd.capacity.min_each(max.as_ref().unwrap_or(&nd.capacity)),
                                f.slot_seconds,
                            )
                            .is_some()
                    }) {
                        return Err(invalid(
                            field("speed"),
                            "no node can run this type at any allocation the table covers".into(),
                        ));
                    }
                    model
                }
            };
            types.push(TaskType {
                name: t.name.clone(),
                weight: t.weight,
                min_demand: min,
                max_demand: max,
                need,
                priority: t.priority,
                speed,
            });
        }
        for (p, v) in &f.published {
            if !v.is_finite() || *v < 0.0 {
                return Err(invalid(
                    format!("published.{p}"),
                    format!("must be a non-negative number, got {v}"),
                ));
            }
        }
        let trace = match &f.trace {
            Some(spec) => {
                let names: Vec<String> = types.iter().map(|t| t.name.clone()).collect();
                let rows = crate::trace::parse(spec, &names, dir)
                    .map_err(|reason| invalid("trace".into(), reason))?;
                crate::workload::check_trace(&rows, &types, &nodes)
                    .map_err(|reason| invalid("trace".into(), reason))?;
                if usize::try_from(f.tasks).unwrap_or(usize::MAX) > rows.len() {
                    return Err(invalid(
                        "tasks".into(),
                        format!("{} is more than the trace's {} rows", f.tasks, rows.len()),
                    ));
                }
                Some(rows)
            }
            None => None,
        };
        let gangs = f
            .gangs
            .as_ref()
            .map(|g| g.check(&names))
            .transpose()
            .map_err(|(field, reason)| invalid(field, reason))?;
        Ok(Scenario {
            name: f.name,
            description: f.description,
            space,
            nodes,
            types,
            lambda: f.lambda,
            tasks: u32::try_from(f.tasks).unwrap_or(u32::MAX),
            window: usize::try_from(f.window).unwrap_or(10),
            switch_weight: f.switch_weight,
            slot_seconds: f.slot_seconds,
            memory: f.memory,
            reachability: f.reachability,
            max_slots: u64::try_from(f.max_slots).unwrap_or(u64::MAX),
            published: f.published,
            burst: f.burst,
            task_size: f.task_size,
            trace,
            gangs,
        })
    }

    /// Names of the resource kinds, in order.
    pub fn kind_names(&self) -> Vec<String> {
        self.space.kinds().iter().map(|k| k.name.clone()).collect()
    }

    /// Index of the CPU-like kind (`cpu`, else 0) and GPU-like kind (`gpu`, else the last).
    pub fn cpu_gpu_kinds(&self) -> (usize, usize) {
        let cpu = self.space.index_of("cpu").unwrap_or(0);
        let gpu = self.space.index_of("gpu").unwrap_or(self.space.len() - 1);
        (cpu, gpu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_loads() {
        for (name, desc) in presets() {
            let s = Scenario::load(&name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!desc.is_empty(), "{name} has no description");
            assert!(!s.nodes.is_empty());
        }
        let h = Scenario::load("hetero6").unwrap();
        assert_eq!(h.nodes.len(), 6);
        assert_eq!(h.published.get("tiresias"), Some(&10.79));
        assert_eq!(Scenario::load("synthetic3").unwrap().nodes.len(), 3);
        assert_eq!(Scenario::load("edge-synergy").unwrap().space.len(), 3);
    }

    fn bad(edit: impl Fn(&str) -> String) -> String {
        let base = include_str!("../presets/synthetic3.toml");
        Scenario::from_toml(&edit(base), "test", None)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn invalid_scenarios_name_the_field() {
        assert!(
            bad(|s| s.replace("capacity = [16, 16]", "capacity = [-4, 16]"))
                .contains("nodes[0].capacity: cpu is -4")
        );
        assert!(bad(|s| s.replace("lambda = 2.0", "lambda = 0.0")).contains("lambda"));
        assert!(bad(|s| s.replace("lambda = 2.0", "lambda = -1.0")).contains("lambda"));
        assert!(
            bad(|s| s.replacen("min_demand = [2, 1]", "min_demand = [20, 1]", 1))
                .contains("larger than every node")
        );
        let empty = bad(|s| {
            let start = s.find("[[nodes]]").unwrap();
            let end = s.find("[[task_types]]").unwrap();
            format!("nodes = []\n{}{}", &s[..start], &s[end..])
        });
        assert!(empty.contains("cluster is empty"), "{empty}");
        assert!(
            bad(|s| s.replace("window = 10", "window = 10\nbogus = 1")).contains("unknown field")
        );
        assert!(bad(|s| s.replace("tasks = 192", "tasks = \"many\"")).contains("tasks"));
        assert!(bad(|s| s.replacen("[0.0, 0.0]", "[0.0]", 1)).contains("speed.w"));
    }

    #[test]
    fn unknown_scenario_lists_presets() {
        let e = Scenario::load("no-such-thing").unwrap_err().to_string();
        assert!(e.contains("hetero6") && e.contains("no-such-thing"), "{e}");
    }
}
