//! Scenarios: a cluster, its task types and its workload, from a built-in preset or a TOML file.
//!
//! Parsing ([`ScenarioFile`]) is separate from validation ([`Scenario::from_file`]): every number
//! a user can get wrong (negative capacity, a minimum demand no node can hold, an empty cluster,
//! λ ≤ 0, a broken speed table) is rejected with a message that names the field. Nothing here
//! simulates; it only describes.

use crate::speed::{SpeedModel, TableError, TableModel};
use serde::Deserialize;

mod sharing;
mod validate;
pub use sharing::Colocation;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tapfinger::{ResourceError, ResourceKind, ResourceSpace, Resources};
pub(crate) use validate::{hosts, hosts_of};

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
    /// Progress multiplier in a run's first slot: the time from the decision to the task's
    /// first progress (an agent's rounds and launch, a process loading its model).
    #[serde(default = "one")]
    pub start_weight: f64,
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
    pub burst: Option<Burst>,
    /// Heavy-tailed task sizes (none: every task of a type has the same work).
    #[serde(default)]
    pub task_size: Option<TaskSize>,
    /// A recorded workload replayed instead of drawn arrivals and sizes ([`crate::trace`]).
    #[serde(default)]
    pub trace: Option<crate::trace::TraceSpec>,
    /// Multi-node jobs among the tasks ([`crate::gangs`]).
    #[serde(default)]
    pub gangs: Option<crate::gangs::GangsFile>,
    /// Priority classes: whether the queues honour them, and their aging.
    #[serde(default)]
    pub priorities: Option<PrioritiesFile>,
    /// Shrinking converging tasks and the plateau detector ([`crate::learning`]).
    #[serde(default)]
    pub shrink: Option<crate::learning::ShrinkFile>,
    /// The cluster reward's weights ([`crate::learning`]).
    #[serde(default)]
    pub reward: Option<crate::learning::RewardWeights>,
    /// Published average JCT per policy, shown beside ours.
    #[serde(default)]
    pub published: BTreeMap<String, f64>,
    /// Every task carries its type's profiling runs (those Optimus fits) as profile hints for
    /// the speed estimator, as a submitter's spec may (`--profile-hints` turns it on anywhere).
    #[serde(default)]
    pub profile_hints: bool,
    /// Every task declares its work (its size: a multiple of its type's mean, as a spec's
    /// `work` says how many epochs or steps a task is) to the speed estimator, which then
    /// estimates each task at its own size (`--declare-work` turns it on anywhere).
    #[serde(default)]
    pub declare_work: bool,
    /// What tasks sharing a GPU cost each other: `"gavel-v100"` (Gavel's measured pairs, the
    /// types' `gavel_job`); unset: nothing ([`Colocation`]).
    #[serde(default)]
    pub colocation: Option<String>,
}

/// The `[priorities]` section as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrioritiesFile {
    /// Serve the highest non-empty class first (`false`: priority-blind queues).
    #[serde(default = "yes")]
    pub honour: bool,
    /// A waiting task moves up one class per this many slots (0: never).
    #[serde(default = "aging")]
    pub aging_slots: i64,
    /// Lower classes make room for a waiting task that fits nowhere (the ledger's
    /// preemption rule): running tasks checkpoint every `checkpoint_slots` slots and a preempted one
    /// resumes from its last checkpoint.
    #[serde(default)]
    pub preempt: bool,
    /// Slots between a running task's checkpoints (≥ 1).
    #[serde(default = "checkpoint")]
    pub checkpoint_slots: i64,
    /// Slots a preempted task takes to end after its checkpoint signal (its units stay taken
    /// meanwhile; ≥ 0).
    #[serde(default)]
    pub grace_slots: i64,
}

fn checkpoint() -> i64 {
    5
}

fn yes() -> bool {
    true
}

fn aging() -> i64 {
    tapfinger::ledger::Priorities::AGING_SLOTS as i64
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
    /// Its GPUs' model (e.g. `v100`): task types run at their `gpu_speed` for it, and the
    /// online estimator learns each class per model, as agents do from NVML's device name.
    #[serde(default)]
    pub gpu_model: Option<String>,
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
    /// Learning curve: what its tasks report as they progress ([`crate::learning`]).
    #[serde(default)]
    pub curve: Option<crate::learning::CurveSpec>,
    /// Speed model.
    pub speed: SpeedSpec,
    /// Gavel's job type this type's tasks are (e.g. `"ResNet-50 (batch size 16)"`): what it
    /// costs a task of another type to share a GPU with one, under the scenario's `colocation`.
    #[serde(default)]
    pub gavel_job: Option<String>,
    /// Speed on nodes of a GPU model relative to `speed` (e.g. `{ k80 = 0.3, v100 = 1.0 }`:
    /// a task progresses 0.3 times as fast on a K80 box); a model not listed runs at 1.
    #[serde(default)]
    pub gpu_speed: BTreeMap<String, f64>,
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
    /// Its GPUs' model ([`NodeSpec::gpu_model`]).
    pub gpu_model: Option<String>,
}

impl NodeDef {
    /// Its GPU model as the estimator keys it.
    pub fn gpu_key(&self) -> tapfinger::estimate::GpuModel {
        self.gpu_model.as_deref().map_or(
            tapfinger::estimate::GpuModel::NONE,
            tapfinger::estimate::GpuModel::of,
        )
    }
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
    /// Learning curve.
    pub curve: Option<crate::learning::Curve>,
    /// Speed model.
    pub speed: SpeedModel,
    /// Speed per GPU model relative to `speed` ([`TaskTypeSpec::gpu_speed`]).
    pub gpu_speed: BTreeMap<String, f64>,
}

impl TaskType {
    /// How fast it runs on `node` relative to its speed model: its `gpu_speed` for the node's
    /// GPU model, 1 where the node names none or the type lists none for it.
    pub fn pace(&self, node: &NodeDef) -> f64 {
        node.gpu_model
            .as_ref()
            .and_then(|m| self.gpu_speed.get(m))
            .copied()
            .unwrap_or(1.0)
    }
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
    /// Progress multiplier of a run's first slot.
    pub start_weight: f64,
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
    /// Tasks carry their type's profiling runs as profile hints ([`ScenarioFile::profile_hints`]).
    pub profile_hints: bool,
    /// Tasks declare their work ([`ScenarioFile::declare_work`]).
    pub declare_work: bool,
    /// Where GPUs are shared in fractions, claims state FGD's growth score of the claim on the
    /// box's devices as the Bayes prior instead of the box's headroom (`--pack-shares`,
    /// [`tapfinger::ledger::Ledger::set_devices`]).
    pub pack_shares: bool,
    /// Bursty arrivals.
    pub burst: Option<Burst>,
    /// Heavy-tailed task sizes.
    pub task_size: Option<TaskSize>,
    /// A recorded workload (its tasks replace drawn arrivals and sizes).
    pub trace: Option<Vec<crate::trace::TraceTask>>,
    /// Multi-node jobs among the tasks.
    pub gangs: Option<crate::gangs::Gangs>,
    /// How the queues order priority classes (task types carry the class).
    pub priorities: tapfinger::ledger::Priorities,
    /// Preemption of lower classes: the slots between checkpoints (`None`: no preemption).
    pub checkpoint_slots: Option<u64>,
    /// Slots a preempted task's units stay taken after its checkpoint signal.
    pub preempt_grace_slots: u64,
    /// The task-volume forecast's interval in slots (`None`: no forecast; `compare --forecast`).
    pub forecast_interval_slots: Option<u64>,
    /// The plateau detector, and whether converging tasks shrink (`None`: no detection).
    pub shrink: Option<crate::learning::Shrink>,
    /// The cluster reward's weights.
    pub reward: crate::learning::RewardWeights,
    /// Pay the cluster reward to the policies (an RLPTO model's training) instead of the
    /// default reward; records always carry it.
    pub cluster_reward: bool,
    /// Keep capacity for the urgent tasks the forecast says are coming (`compare --reserve`).
    pub reserve: bool,
    /// What tasks sharing a GPU cost each other (`None`: nothing).
    pub colocation: Option<Colocation>,
}

impl Scenario {
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

    /// This scenario's cluster repeated `copies` times (each node's copies named `NAME-C`),
    /// with `tasks_per_node` tasks per node and the arrival rate scaled with the copies: the
    /// same load on a larger cluster (the scale bench and its check).
    pub fn repeated(mut self, copies: usize, tasks_per_node: u32) -> Self {
        self.nodes = (0..copies)
            .flat_map(|c| {
                self.nodes.iter().map(move |n| NodeDef {
                    name: format!("{}-{c}", n.name),
                    ..n.clone()
                })
            })
            .collect();
        self.tasks = tasks_per_node * self.nodes.len() as u32;
        self.lambda *= copies as f64;
        self
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

/// Bursty arrivals: slots alternate between quiet spells and bursts (lengths geometric with these
/// means), the arrival rate in a burst `factor` times the quiet rate, both set so that the mean
/// rate stays the scenario's λ (so the offered load is unchanged; only its spread in time is).
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Burst {
    /// Arrival rate in a burst over the rate between bursts (≥ 1).
    pub factor: f64,
    /// Mean length of a burst, in slots (≥ 1).
    pub on_slots: f64,
    /// Mean length of the quiet spell between bursts, in slots (≥ 1).
    pub off_slots: f64,
}

impl Burst {
    /// Why these settings are invalid, if they are.
    pub fn invalid(&self) -> Option<String> {
        let ok = |x: f64| x.is_finite() && x >= 1.0;
        (!(ok(self.factor) && ok(self.on_slots) && ok(self.off_slots))).then(|| {
            format!(
                "factor, on_slots and off_slots must be finite and ≥ 1, got {}, {}, {}",
                self.factor, self.on_slots, self.off_slots
            )
        })
    }

    /// Arrival rates (quiet, burst) whose mean over time is `lambda`.
    pub fn rates(&self, lambda: f64) -> (f64, f64) {
        let on = self.on_slots / (self.on_slots + self.off_slots);
        let quiet = lambda / (1.0 - on + self.factor * on);
        (quiet, quiet * self.factor)
    }
}

/// Heavy-tailed task sizes: each task's work is its type's times a Pareto draw with this shape,
/// scaled to mean 1 and capped at `max` (so the offered load is unchanged; a few tasks are much
/// longer than the rest). The size is the simulator's secret, like the speed model: no policy
/// sees it, unless the tasks declare their work ([`ScenarioFile::declare_work`], what a spec's
/// `work` says), which reaches the speed estimator and nothing else.
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSize {
    /// Pareto shape α (> 1; smaller is heavier-tailed).
    pub pareto_shape: f64,
    /// Largest size (a multiple of the mean, ≥ 1).
    pub max: f64,
    /// Tasks are runs of recurring jobs ([`crate::workload::recurring`]): each job's mean size is the
    /// Pareto draw, and each run of it varies around that by the job's own spread.
    #[serde(default)]
    pub recurring: Option<Recurring>,
}

/// Recurring jobs ([`crate::workload::recurring`]): users who submit the same jobs again and again, each
/// job of one class, its runs' sizes spread around the job's own mean.
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recurring {
    /// Recurring jobs per class (≥ 1).
    pub jobs: u32,
    /// Users who submit them (≥ 1; job `k` of class `c` is user `(c · jobs + k) mod users`'s).
    pub users: u32,
    /// The range each job's spread σ is drawn from: its runs' sizes are its mean times a
    /// log-normal of mean 1 and log-spread σ (0.40: 8 % of runs off the job's median by twice
    /// or more; 0.58: 23 %; 0.80: half within ±50 %).
    pub spread: [f64; 2],
    /// Whether a job's history says anything: `false` draws every run's size on its own (the
    /// job's name is drawn as before, its sizes are not its own).
    #[serde(default = "yes")]
    pub informative: bool,
}

impl TaskSize {
    /// Why these settings are invalid, if they are.
    pub fn invalid(&self) -> Option<String> {
        if let Some(r) = &self.recurring {
            let [lo, hi] = r.spread;
            if r.jobs == 0 || r.users == 0 {
                return Some(format!(
                    "recurring needs at least one job and one user, got {} and {}",
                    r.jobs, r.users
                ));
            }
            if !(lo.is_finite() && hi.is_finite() && 0.0 <= lo && lo <= hi && hi <= 3.0) {
                return Some(format!(
                    "recurring spread must be [lo, hi] with 0 ≤ lo ≤ hi ≤ 3, got [{lo}, {hi}]"
                ));
            }
        }
        (!(self.pareto_shape.is_finite()
            && self.pareto_shape > 1.0
            && self.max.is_finite()
            && self.max >= 1.0))
            .then(|| {
                format!(
                    "pareto_shape must be > 1 and max ≥ 1, got {} and {}",
                    self.pareto_shape, self.max
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_loads() {
        for (name, desc) in crate::catalog::presets() {
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
        let base = include_str!("../../presets/synthetic3.toml");
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
        for w in ["0.0", "1.5"] {
            let e = bad(|s| s.replace("window = 10", &format!("window = 10\nstart_weight = {w}")));
            assert!(e.contains("start_weight") && e.contains("(0, 1]"), "{e}");
        }
    }

    #[test]
    fn unknown_scenario_lists_presets() {
        let e = Scenario::load("no-such-thing").unwrap_err().to_string();
        assert!(e.contains("hetero6") && e.contains("no-such-thing"), "{e}");
    }
}
