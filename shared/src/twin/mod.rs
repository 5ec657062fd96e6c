//! The cluster's twin: the workload of a window of time as the cluster observed it, in a form
//! a simulator can replay and a policy can be judged and trained on.
//!
//! A [`Workload`] holds only what a running cluster sees: each task's arrival, class, priority,
//! demands and reachable boxes; its runs (box, allocation, the slots each lasted, the progress
//! at each end) and its outcome; each box's capacity and GPU model; and each class's speed
//! figures per GPU model *from the online speed estimator* (`crate::estimate`), which learns
//! them from observed progress. Nothing here reads a speed model: in the simulator, the twin
//! of an episode knows what its agents would have known, never the speeds that drove it.
//!
//! Both drivers build it the same way: the [`Recorder`] is fed the ledger's tasks once a slot
//! (the agent from its node core, the simulator from its episode) and [`Recorder::export`]
//! writes the window with the estimator's figures. The JSON form
//! (`tapfinger-agent workload export`, read by `tapfinger-sim import --format tapfinger`) is a
//! contract: its first field is `format` ([`FORMAT`]); fields may be added, these stay.

mod record;
mod sizes;

pub use record::{Context, MAX_TASKS, Recorder, Seen};
pub use sizes::{size_of, sizes};

use crate::resources::Resources;
use crate::task::{NodeId, TaskId};
use serde::{Deserialize, Serialize};

/// The format line of a workload file.
pub const FORMAT: &str = "tapfinger-workload 1";

/// A window of the cluster's observed workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// [`FORMAT`].
    pub format: String,
    /// Seconds per slot (the agents' slot).
    pub slot_seconds: f64,
    /// First slot of the window.
    pub from_slot: u64,
    /// The slot after the window's last.
    pub to_slot: u64,
    /// The resource kinds (name, unit, grid step), in the order of every [`Resources`] here.
    pub kinds: Vec<crate::resources::ResourceKind>,
    /// The boxes.
    pub nodes: Vec<NodeRecord>,
    /// The task classes seen, with their speed figures.
    pub classes: Vec<ClassRecord>,
    /// Tasks that arrived in the window, by arrival.
    pub tasks: Vec<TaskRecord>,
}

/// A box as the cluster saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Its id.
    pub id: NodeId,
    /// Its name.
    pub name: String,
    /// What it offers (grid units per kind).
    pub capacity: Resources,
    /// Its GPU model's name, if it has one.
    #[serde(default)]
    pub gpu_model: Option<String>,
}

/// A task class and what the estimator learned of its speed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassRecord {
    /// Its id (`Task::ty`).
    pub id: u16,
    /// Its name (the specs' `task_type`, or the scenario's type name).
    pub name: String,
    /// The least minimum demand of its tasks.
    pub min_demand: Resources,
    /// The largest maximum demand of its tasks (`None`: some task could use any amount).
    #[serde(default)]
    pub max_demand: Option<Resources>,
    /// Its speed figures per GPU model (`None`: boxes of no model), the model it was seen most
    /// on first.
    pub speeds: Vec<ModelSpeeds>,
    /// The fraction of a slot a re-allocation costs it (the estimator's switch cost).
    pub switch_cost: f64,
    /// The fraction of a run's first slot its start-up costs (the estimator's start cost).
    pub start_cost: f64,
}

/// A class's estimated times on one GPU model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelSpeeds {
    /// The GPU model (`None`: boxes of no model).
    #[serde(default)]
    pub gpu_model: Option<String>,
    /// Speed samples the estimator held for the class on this model (0: extrapolated from other
    /// models or the prior).
    pub samples: usize,
    /// `(allocation, slots)`: the estimated slots a task of the class's mean size takes alone
    /// at each allocation of a rectilinear grid from its minimum to its maximum demand.
    pub rows: Vec<(Resources, f64)>,
}

/// A task as the cluster saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// Its id.
    pub id: TaskId,
    /// Its class ([`ClassRecord::id`]).
    pub class: u16,
    /// Slot it arrived in.
    pub arrival: u64,
    /// Priority class (0 is the highest).
    pub priority: u8,
    /// Minimum demand.
    pub min_demand: Resources,
    /// Maximum useful demand.
    #[serde(default)]
    pub max_demand: Option<Resources>,
    /// Boxes it may run on (empty: any).
    pub reachable: Vec<NodeId>,
    /// Its runs, in order.
    pub runs: Vec<RunRecord>,
    /// Slot after the one it finished in, if it finished.
    #[serde(default)]
    pub finished: Option<u64>,
    /// Its exit code, if it finished and one is known.
    #[serde(default)]
    pub code: Option<i32>,
}

/// A stretch of slots a task ran on one box at one allocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The box.
    pub node: NodeId,
    /// The allocation.
    pub alloc: Resources,
    /// First slot.
    pub from: u64,
    /// The slot after its last.
    pub to: u64,
    /// Progress at its start, in [0, 1].
    pub progress_from: f64,
    /// Progress at its end.
    pub progress_to: f64,
    /// Whether it began a run of the task (a start, not a re-share of a running copy).
    pub start: bool,
    /// The estimator's slots for a task of the class's mean size alone at this allocation on
    /// this box's GPU model, when it ended (what [`sizes`] measures the task's size against).
    pub est_slots: f64,
}

impl Workload {
    /// The workload's JCTs: each finished task's slots from arrival to finish, by id.
    pub fn jcts(&self) -> Vec<u64> {
        self.tasks
            .iter()
            .filter_map(|t| t.finished.map(|f| f.saturating_sub(t.arrival)))
            .collect()
    }

    /// Why it cannot be replayed, if it cannot: a format other than [`FORMAT`], a slot of no
    /// length, a task of a class it does not describe.
    pub fn check(&self) -> Result<(), String> {
        if self.format != FORMAT {
            return Err(format!(
                "format {:?}: this build reads {FORMAT:?}",
                self.format
            ));
        }
        if !(self.slot_seconds.is_finite() && self.slot_seconds > 0.0) {
            return Err(format!(
                "slot_seconds {} must be above 0",
                self.slot_seconds
            ));
        }
        if self.nodes.is_empty() {
            return Err("no boxes".into());
        }
        let n = self.kinds.len();
        if let Some(b) = self.nodes.iter().find(|b| b.capacity.len() != n) {
            return Err(format!(
                "box {} has {} resource kinds, the workload {n}",
                b.name,
                b.capacity.len()
            ));
        }
        for t in &self.tasks {
            if !self.classes.iter().any(|c| c.id == t.class) {
                return Err(format!(
                    "task {} is of class {}, which no class record describes",
                    t.id.0, t.class
                ));
            }
            if t.min_demand.len() != n {
                return Err(format!(
                    "task {}: {} resource kinds, the workload {n}",
                    t.id.0,
                    t.min_demand.len()
                ));
            }
        }
        Ok(())
    }
}
