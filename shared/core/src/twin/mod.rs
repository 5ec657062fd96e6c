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

mod gangs;
mod record;
mod sizes;

pub use gangs::{GANG_WORK_SLOTS, gang_works};
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
    /// The link speeds gangs were placed and ran with, where the workload holds a gang.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links: Option<crate::placement::gang::Links>,
    /// What the cluster had learned of its tasks' sizes when it wrote the window (its size
    /// book, classes by [`ClassRecord::id`]), so that a twin's agents start from it as a later
    /// window's would; `None` from a driver that does not keep one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sizes: Option<crate::sizes::SizeBook>,
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
    /// The work its submitter declared (a spec's `work`: epochs, steps; in its class's unit),
    /// if it did: the speed estimator then measures the class per unit of work, which is what
    /// keeps one class's figures on two GPU models apart from the sizes of the tasks that
    /// happened to run on each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work: Option<f64>,
    /// Its shape, if it is a gang (a multi-box job: its runs then list every member).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<Box<crate::task::GangShape>>,
    /// Who submitted it and which recurring job it is, where its spec said
    /// ([`crate::sizes::Identity`]): what the size history keys on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<crate::sizes::Identity>,
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
    /// A gang's members in rank order (box and allocation each; `node` and `alloc` are rank
    /// 0's); empty for a single task.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<(NodeId, Resources)>,
}

impl Workload {
    /// The workload's JCTs: each finished task's slots from arrival to finish, by id.
    pub fn jcts(&self) -> Vec<u64> {
        self.tasks
            .iter()
            .filter_map(|t| t.finished.map(|f| f.saturating_sub(t.arrival)))
            .collect()
    }

    /// One workload of consecutive windows of the same cluster: each part's slots moved by the
    /// slot given with it (where a part's slots start again from 0, as a replayed window's do;
    /// 0 for windows of one recording), its tasks renumbered after the parts before where their
    /// ids would collide, and each class's figures the latest part's that saw it (the
    /// estimator's latest), and the latest part's size book that has one (a book only learns
    /// more). The parts must describe the same boxes and resource kinds: a window of another
    /// cluster is not more of this one's work.
    pub fn merge(parts: &[(u64, Workload)]) -> Result<Workload, String> {
        let Some(((first_at, first), rest)) = parts.split_first() else {
            return Err("no workloads to merge".into());
        };
        let mut out = first.shifted(*first_at, 0);
        for (k, (at, w)) in rest.iter().enumerate() {
            if w.kinds != out.kinds || w.nodes != out.nodes || w.slot_seconds != out.slot_seconds {
                return Err(format!(
                    "workload {} describes other boxes, resource kinds or slots than the first",
                    k + 1
                ));
            }
            let collide = w
                .tasks
                .iter()
                .any(|t| out.tasks.iter().any(|o| o.id == t.id));
            let next_id = out.tasks.iter().map(|t| t.id.0 + 1).max().unwrap_or(0);
            let w = w.shifted(*at, if collide { next_id } else { 0 });
            out.from_slot = out.from_slot.min(w.from_slot);
            out.to_slot = out.to_slot.max(w.to_slot);
            for c in w.classes {
                match out.classes.iter_mut().find(|o| o.id == c.id) {
                    Some(o) => *o = c,
                    None => out.classes.push(c),
                }
            }
            out.tasks.extend(w.tasks);
            out.links = out.links.or(w.links);
            out.sizes = w.sizes.or(out.sizes.take());
        }
        out.classes.sort_by_key(|c| c.id);
        out.tasks.sort_by_key(|t| (t.arrival, t.id));
        Ok(out)
    }

    /// Every slot moved by `by`, every task id by `ids`.
    fn shifted(&self, by: u64, ids: u64) -> Workload {
        let mut w = self.clone();
        w.from_slot += by;
        w.to_slot += by;
        for t in &mut w.tasks {
            t.id = TaskId(t.id.0 + ids);
            t.arrival += by;
            t.finished = t.finished.map(|f| f + by);
            for r in &mut t.runs {
                r.from += by;
                r.to += by;
            }
        }
        w
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
            if let Some(m) = t
                .runs
                .iter()
                .flat_map(|r| &r.members)
                .find(|(b, a)| a.len() != n || !self.nodes.iter().any(|x| x.id == *b))
            {
                return Err(format!(
                    "task {}: a gang member on box {} at {:?}, which the workload does not describe",
                    t.id.0, m.0.0, m.1.0
                ));
            }
        }
        if self.links.is_none() && self.tasks.iter().any(|t| t.gang.is_some()) {
            return Err("the workload holds gangs but no link speeds".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(speed: f64) -> Workload {
        let task = |id: u64, arrival: u64| TaskRecord {
            identity: None,
            id: TaskId(id),
            class: 0,
            arrival,
            priority: 0,
            min_demand: Resources(vec![1]),
            max_demand: None,
            reachable: vec![],
            runs: vec![RunRecord {
                node: NodeId(0),
                alloc: Resources(vec![1]),
                from: arrival,
                to: arrival + 4,
                progress_from: 0.0,
                progress_to: 1.0,
                start: true,
                est_slots: speed,
                members: vec![],
            }],
            finished: Some(arrival + 4),
            code: Some(0),
            work: None,
            gang: None,
        };
        Workload {
            sizes: None,
            format: FORMAT.into(),
            slot_seconds: 1.0,
            from_slot: 0,
            to_slot: 10,
            kinds: vec![crate::ResourceKind {
                name: "cpu".into(),
                unit: String::new(),
                step: 1.0,
            }],
            nodes: vec![NodeRecord {
                id: NodeId(0),
                name: "a".into(),
                capacity: Resources(vec![4]),
                gpu_model: None,
            }],
            classes: vec![ClassRecord {
                id: 0,
                name: "c".into(),
                min_demand: Resources(vec![1]),
                max_demand: None,
                speeds: vec![ModelSpeeds {
                    gpu_model: None,
                    samples: 1,
                    rows: vec![(Resources(vec![1]), speed)],
                }],
                switch_cost: 0.0,
                start_cost: 0.0,
            }],
            tasks: vec![task(0, 0), task(1, 3)],
            links: None,
        }
    }

    /// Replayed windows (slots from 0, ids from 0) merge into one timeline: the later one's
    /// slots after the offset given, its ids after the earlier's, its class figures kept.
    #[test]
    fn merged_windows_keep_every_task_once_on_one_timeline() {
        let m = Workload::merge(&[(0, window(4.0)), (8, window(5.0))]).unwrap();
        m.check().unwrap();
        let got: Vec<(u64, u64, u64, Option<u64>)> = m
            .tasks
            .iter()
            .map(|t| (t.id.0, t.arrival, t.runs[0].from, t.finished))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, 0, 0, Some(4)),
                (1, 3, 3, Some(7)),
                (2, 8, 8, Some(12)),
                (3, 11, 11, Some(15))
            ]
        );
        assert_eq!((m.from_slot, m.to_slot), (0, 18));
        assert_eq!(m.classes.len(), 1);
        assert_eq!(m.classes[0].speeds[0].rows[0].1, 5.0, "the latest figures");
        assert_eq!(m.jcts(), vec![4, 4, 4, 4]);
        // Windows of one recording keep their ids and slots.
        let mut later = window(5.0);
        for t in &mut later.tasks {
            t.id.0 += 10;
        }
        let m = Workload::merge(&[(0, window(4.0)), (0, later)]).unwrap();
        assert_eq!(
            m.tasks.iter().map(|t| t.id.0).collect::<Vec<_>>(),
            vec![0, 10, 1, 11]
        );
        // The latest part's size book that has one: a later window's agents know more.
        let book = |n: u32| {
            let mut b = crate::sizes::SizeBook::new();
            let q = crate::sizes::Query {
                identity: &crate::sizes::ANONYMOUS,
                class: crate::TaskTypeId(0),
                min_demand: &Resources(vec![1]),
            };
            for _ in 0..n {
                b.observe(&q, 3.0);
            }
            b
        };
        let with = |n: Option<u32>| Workload {
            sizes: n.map(book),
            ..window(4.0)
        };
        let learned =
            |parts: &[(u64, Workload)]| Workload::merge(parts).unwrap().sizes.map(|b| b.learned());
        assert_eq!(learned(&[(0, with(Some(2))), (8, with(Some(5)))]), Some(5));
        assert_eq!(learned(&[(0, with(Some(2))), (8, with(None))]), Some(2));
        assert_eq!(learned(&[(0, with(None)), (8, with(None))]), None);
        // Another cluster's window is refused.
        let mut other = window(4.0);
        other.nodes[0].capacity = Resources(vec![8]);
        assert!(Workload::merge(&[(0, window(4.0)), (0, other)]).is_err());
        assert!(Workload::merge(&[]).is_err());
    }
}
