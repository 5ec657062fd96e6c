//! The recorder both drivers feed once a slot: it turns the ledger's task states into each
//! task's runs (a run ends when its box or allocation changes, when it is put back in the queue,
//! or when it finishes) and writes a window of them, with the estimator's speed figures, as a
//! [`Workload`]. It reads task states only, never a speed model.

use super::{ClassRecord, FORMAT, ModelSpeeds, NodeRecord, RunRecord, TaskRecord, Workload};
use crate::estimate::Estimator;
use crate::estimate::GpuModel;
use crate::ledger::TaskState;
use crate::resources::Resources;
use crate::task::{NodeId, Task, TaskId};
use std::collections::BTreeMap;

/// Most tasks a recorder keeps: past it the earliest finished ones go first (a day of a busy
/// cluster's tasks at a few hundred bytes each).
pub const MAX_TASKS: usize = 50_000;

/// Most values per resource kind in a class's speed grid (its minimum, doublings, its maximum).
const GRID_VALUES: usize = 5;

/// One task as a driver hands it over: the task, where it stands and its class's name.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// The task.
    pub task: &'a Task,
    /// Its state in the ledger.
    pub state: &'a TaskState,
    /// Its class's name.
    pub class: &'a str,
    /// The work its submitter declared, if any (a spec's `work`).
    pub work: Option<f64>,
    /// Who submitted it and which recurring job it is (the ledger's).
    pub identity: &'a crate::sizes::Identity,
}

/// What the recorder keeps of a task.
#[derive(Debug, Clone)]
struct Kept {
    record: TaskRecord,
    class_name: String,
    /// Whether its last run is still open (the task was running at the last observation).
    open: bool,
}

/// The runs and outcomes of every task a driver showed it, slot by slot.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    tasks: BTreeMap<TaskId, Kept>,
    last_slot: u64,
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// The tasks of `slot`, after its decisions and before it runs: a running task whose box
    /// and allocation are those of its open run extends it to the end of `slot`; otherwise the
    /// open run ends and, where it runs, a new one begins. A task it has not seen is recorded
    /// with its arrival. A task seen done finishes at the start of `slot` unless
    /// [`Recorder::finish`] said when.
    pub fn observe<'a>(&mut self, slot: u64, seen: impl IntoIterator<Item = Seen<'a>>) {
        self.last_slot = self.last_slot.max(slot);
        for s in seen {
            let kept = self.tasks.entry(s.task.id).or_insert_with(|| Kept {
                record: TaskRecord {
                    id: s.task.id,
                    class: s.task.ty.0,
                    arrival: s.task.arrival,
                    priority: s.task.priority,
                    min_demand: s.task.min_demand.clone(),
                    max_demand: s.task.max_demand.clone(),
                    reachable: s.task.reachable.clone(),
                    runs: Vec::new(),
                    finished: None,
                    code: None,
                    work: s.work,
                    gang: s.task.gang.clone(),
                    identity: (s.identity.submitter.is_some() || s.identity.job.is_some())
                        .then(|| s.identity.clone()),
                },
                class_name: s.class.to_string(),
                open: false,
            });
            if kept.record.finished.is_some() {
                continue;
            }
            match s.state {
                TaskState::Running {
                    node,
                    alloc,
                    progress,
                    ..
                } => kept.running(slot, *node, alloc, *progress),
                TaskState::Pending => kept.open = false,
                TaskState::Done { code, .. } => {
                    // Finished since the last observation: its open run ran to the end.
                    if kept.open
                        && let Some(r) = kept.record.runs.last_mut()
                    {
                        r.to = slot.max(r.from + 1);
                        r.progress_to = 1.0;
                    }
                    kept.open = false;
                    kept.record.finished = Some(slot);
                    kept.record.code = *code;
                }
                TaskState::Gang {
                    members, progress, ..
                } => kept.gang_running(slot, members, *progress),
            }
        }
        self.bound();
    }

    /// Task `id` finished at the end of slot `slot - 1` (so `slot` is its finish, as the
    /// simulator counts it), with exit code `code`; its open run ends there at progress 1.
    pub fn finish(&mut self, id: TaskId, slot: u64, code: Option<i32>) {
        if let Some(k) = self.tasks.get_mut(&id) {
            if k.open
                && let Some(r) = k.record.runs.last_mut()
            {
                r.to = slot.max(r.from + 1);
                r.progress_to = 1.0;
            }
            k.open = false;
            k.record.finished.get_or_insert(slot);
            k.record.code = code;
        }
    }

    /// Tasks it holds.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// The workload of the tasks that arrived in `from..to`, with `nodes` and the estimator's
    /// figures for their classes; runs carry the estimator's slots at their allocation.
    pub fn export(&self, from: u64, to: u64, ctx: &Context<'_>) -> Workload {
        let model_of: BTreeMap<NodeId, Option<&str>> = ctx
            .nodes
            .iter()
            .map(|n| (n.id, n.gpu_model.as_deref()))
            .collect();
        let in_window: Vec<&Kept> = self
            .tasks
            .values()
            .filter(|k| (from..to).contains(&k.record.arrival))
            .collect();
        let mut classes: BTreeMap<u16, (String, Task)> = BTreeMap::new();
        // A gang's demand is one member's and it has no maximum: it names its class (a class
        // of gangs only has a record too) but does not widen a class of single tasks.
        for k in &in_window {
            let r = &k.record;
            let single = in_window
                .iter()
                .any(|o| o.record.class == r.class && o.record.gang.is_none());
            if single && r.gang.is_some() {
                continue;
            }
            let e = classes
                .entry(r.class)
                .or_insert_with(|| (k.class_name.clone(), probe(r)));
            e.1.min_demand = e.1.min_demand.min_each(&r.min_demand);
            e.1.max_demand = match (&e.1.max_demand, &r.max_demand) {
                (Some(a), Some(b)) => Some(a.max_each(b)),
                _ => None,
            };
        }
        let mut tasks: Vec<TaskRecord> = in_window
            .iter()
            .map(|k| {
                let mut r = k.record.clone();
                let probe = &classes[&r.class].1;
                // A gang's progress is its placement's, not a class figure's (`gang_work`).
                for run in r.runs.iter_mut().filter(|run| run.members.is_empty()) {
                    let model = model_of.get(&run.node).copied().flatten().unwrap_or("");
                    run.est_slots = ctx
                        .estimator
                        .slots_on(probe, GpuModel::of(model), &run.alloc);
                }
                r
            })
            .collect();
        tasks.sort_by_key(|t| (t.arrival, t.id));
        let classes = classes
            .into_iter()
            .map(|(id, (name, probe))| class_record(id, name, &probe, ctx))
            .collect();
        let links = ctx.links.filter(|_| tasks.iter().any(|t| t.gang.is_some()));
        Workload {
            format: FORMAT.to_string(),
            slot_seconds: ctx.slot_seconds,
            from_slot: from,
            to_slot: to,
            kinds: ctx.kinds.clone(),
            nodes: ctx.nodes.clone(),
            classes,
            tasks,
            links,
            sizes: ctx.sizes.cloned(),
        }
    }

    /// Past [`MAX_TASKS`], the earliest finished tasks go.
    fn bound(&mut self) {
        while self.tasks.len() > MAX_TASKS {
            let Some(id) = self
                .tasks
                .iter()
                .filter(|(_, k)| k.record.finished.is_some())
                .min_by_key(|(_, k)| k.record.arrival)
                .map(|(id, _)| *id)
                .or_else(|| self.tasks.keys().next().copied())
            else {
                return;
            };
            self.tasks.remove(&id);
        }
    }
}

impl Kept {
    /// Running on `node` at `alloc` in `slot`, at `progress` when the slot began.
    fn running(&mut self, slot: u64, node: NodeId, alloc: &Resources, progress: f64) {
        let runs = &mut self.record.runs;
        if self.open
            && let Some(r) = runs.last_mut()
        {
            if r.node == node && r.alloc == *alloc {
                r.to = slot + 1;
                r.progress_to = progress;
                return;
            }
            r.to = slot;
            r.progress_to = progress;
        }
        runs.push(RunRecord {
            node,
            alloc: alloc.clone(),
            from: slot,
            to: slot + 1,
            progress_from: progress,
            progress_to: progress,
            // A run that follows an open one on the same box is a re-share of the same copy.
            start: !(self.open && runs.last().is_some_and(|r| r.node == node)),
            est_slots: 0.0,
            members: Vec::new(),
        });
        self.open = true;
    }

    /// A gang running as `members` in `slot`, at `progress` when the slot began. A gang keeps
    /// its members until it ends: new members are a new start (it was requeued and placed
    /// again).
    fn gang_running(&mut self, slot: u64, members: &[(NodeId, Resources)], progress: f64) {
        let runs = &mut self.record.runs;
        if self.open
            && let Some(r) = runs.last_mut()
        {
            if r.members == members {
                r.to = slot + 1;
                r.progress_to = progress;
                return;
            }
            r.to = slot;
            r.progress_to = progress;
        }
        let Some((node, alloc)) = members.first() else {
            return;
        };
        runs.push(RunRecord {
            node: *node,
            alloc: alloc.clone(),
            from: slot,
            to: slot + 1,
            progress_from: progress,
            progress_to: progress,
            start: true,
            est_slots: 0.0,
            members: members.to_vec(),
        });
        self.open = true;
    }
}

/// What an export needs beside the recorder: the slot's length, the kinds, the boxes, the
/// estimator and how wide a class's speed grid may go.
pub struct Context<'a> {
    /// Seconds per slot.
    pub slot_seconds: f64,
    /// The resource kinds.
    pub kinds: Vec<crate::resources::ResourceKind>,
    /// The boxes.
    pub nodes: Vec<NodeRecord>,
    /// The speed estimator, fed with the progress the cluster observed.
    pub estimator: &'a Estimator,
    /// The link speeds gangs are placed with (written where the window holds a gang).
    pub links: Option<crate::placement::gang::Links>,
    /// The size book, fed with the tasks the cluster finished (`None`: the driver keeps none).
    pub sizes: Option<&'a crate::sizes::SizeBook>,
}

/// A task of class `r.class` and no declared size: what the estimator's figures for a task of
/// the class's mean size are asked for.
fn probe(r: &TaskRecord) -> Task {
    let mut t = Task::new(u64::MAX, r.min_demand.0.clone()).of_type(r.class);
    t.max_demand = r.max_demand.clone();
    t
}

/// The class's record: its speed grid on every GPU model the boxes have (the model it holds
/// the most samples on first).
fn class_record(id: u16, name: String, probe: &Task, ctx: &Context<'_>) -> ClassRecord {
    let cap = ctx
        .nodes
        .iter()
        .fold(Resources::zeros(ctx.kinds.len()), |a, n| {
            a.max_each(&n.capacity)
        });
    let max = probe
        .max_demand
        .clone()
        .unwrap_or(cap.clone())
        .min_each(&cap);
    let grid = grid(&probe.min_demand, &max);
    let samples: BTreeMap<GpuModel, usize> = ctx
        .estimator
        .summary()
        .into_iter()
        .filter(|s| s.class.0 == id)
        .map(|s| (s.gpu_model, s.samples))
        .collect();
    let mut models: Vec<Option<String>> = ctx.nodes.iter().map(|n| n.gpu_model.clone()).collect();
    models.sort();
    models.dedup();
    let key = |m: &Option<String>| GpuModel::of(m.as_deref().unwrap_or(""));
    let mut speeds: Vec<ModelSpeeds> = models
        .into_iter()
        .map(|m| ModelSpeeds {
            samples: samples.get(&key(&m)).copied().unwrap_or(0),
            rows: grid
                .iter()
                .map(|a| (a.clone(), ctx.estimator.slots_on(probe, key(&m), a)))
                .collect(),
            gpu_model: m,
        })
        .collect();
    speeds.sort_by_key(|s| std::cmp::Reverse(s.samples));
    ClassRecord {
        id,
        name,
        min_demand: probe.min_demand.clone(),
        max_demand: probe.max_demand.clone(),
        speeds,
        switch_cost: ctx.estimator.switch_cost(probe.ty),
        start_cost: ctx.estimator.start_cost(probe.ty),
    }
}

/// Every allocation of the rectilinear grid whose values per kind are `min`, its doublings and
/// `max` (at most [`GRID_VALUES`] each).
fn grid(min: &Resources, max: &Resources) -> Vec<Resources> {
    let per_kind: Vec<Vec<u32>> = min
        .0
        .iter()
        .zip(&max.0)
        .map(|(&lo, &hi)| {
            let hi = hi.max(lo);
            let mut v = vec![lo];
            let mut x = lo.max(1);
            while v.len() + 1 < GRID_VALUES && x.saturating_mul(2) < hi {
                x = x.saturating_mul(2);
                v.push(x);
            }
            if hi > lo {
                v.push(hi);
            }
            v
        })
        .collect();
    let mut out = vec![Vec::new()];
    for values in &per_kind {
        out = out
            .into_iter()
            .flat_map(|p: Vec<u32>| {
                values.iter().map(move |x| {
                    let mut q = p.clone();
                    q.push(*x);
                    q
                })
            })
            .collect();
    }
    out.into_iter().map(Resources).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(node: u32, alloc: [u32; 3], progress: f64) -> TaskState {
        TaskState::Running {
            node: NodeId(node),
            alloc: Resources(alloc.to_vec()),
            progress,
            started: 0,
        }
    }

    /// A run lasts while box and allocation stay; a re-share on the same box is a new run but
    /// not a new start; a requeue ends the run; the finish closes it at progress 1.
    #[test]
    fn runs_follow_the_states_and_the_finish_closes_them() {
        let mut t = Task::new(1, [1, 0, 1]).of_type(2);
        t.arrival = 3;
        let mut r = Recorder::new();
        let pending = TaskState::Pending;
        fn s<'a>(t: &'a Task, state: &'a TaskState) -> Vec<Seen<'a>> {
            vec![Seen {
                identity: &crate::sizes::ANONYMOUS,
                task: t,
                state,
                class: "c",
                work: None,
            }]
        }
        r.observe(3, s(&t, &pending));
        r.observe(4, s(&t, &running(0, [2, 0, 1], 0.0)));
        r.observe(5, s(&t, &running(0, [2, 0, 1], 0.2)));
        r.observe(6, s(&t, &running(0, [4, 0, 1], 0.4)));
        r.observe(7, s(&t, &pending));
        r.observe(8, s(&t, &running(1, [4, 0, 1], 0.5)));
        r.finish(t.id, 10, Some(0));
        let est = Estimator::new(crate::estimate::KindMap::from_names(&["cpu", "gpu", "mem"]));
        let ctx = Context {
            sizes: None,
            slot_seconds: 1.0,
            kinds: ["cpu", "gpu", "mem"]
                .map(|n| crate::ResourceKind {
                    name: n.into(),
                    unit: String::new(),
                    step: 1.0,
                })
                .to_vec(),
            nodes: vec![],
            estimator: &est,
            links: None,
        };
        let w = r.export(0, 100, &ctx);
        let runs: Vec<(u32, u32, u64, u64, bool)> = w.tasks[0]
            .runs
            .iter()
            .map(|x| (x.node.0, x.alloc.get(0), x.from, x.to, x.start))
            .collect();
        assert_eq!(
            runs,
            vec![(0, 2, 4, 6, true), (0, 4, 6, 7, false), (1, 4, 8, 10, true)]
        );
        assert_eq!(w.tasks[0].finished, Some(10));
        assert_eq!(w.tasks[0].runs[2].progress_to, 1.0);
        assert_eq!(w.jcts(), vec![7]);
        assert_eq!(w.classes[0].name, "c");
        // Outside the window: nothing.
        assert!(r.export(4, 100, &ctx).tasks.is_empty());
    }

    /// A gang's run lasts while its members stay and lists them all; a requeue and a new
    /// placement start a new run; the finish closes it at progress 1. The export states the
    /// links, and a class of gangs only still has its record.
    #[test]
    fn a_gangs_runs_list_its_members_and_follow_its_placements() {
        let mut t = Task::new(7, [1, 0, 1]).of_type(3);
        t.gang = Some(Box::new(crate::task::GangShape {
            workers: (1, 2),
            ps: 1,
            worker_demand: Resources(vec![1, 0, 1]),
            ps_demand: Resources(vec![1, 0, 1]),
            compute_seconds: 0.5,
            gradient_bytes: 1e6,
            restarts: 1,
            stages: Vec::new(),
        }));
        let on = |boxes: &[u32], progress: f64| TaskState::Gang {
            members: boxes
                .iter()
                .map(|b| (NodeId(*b), Resources(vec![1, 0, 1])))
                .collect(),
            progress,
            started: 0,
        };
        let mut r = Recorder::new();
        let states = [
            on(&[0, 0, 1], 0.0),
            on(&[0, 0, 1], 0.3),
            TaskState::Pending,
            on(&[1, 1, 1], 0.0),
        ];
        for (slot, state) in (1..).zip(&states) {
            let seen = Seen {
                identity: &crate::sizes::ANONYMOUS,
                task: &t,
                state,
                class: "g",
                work: None,
            };
            r.observe(slot, [seen]);
        }
        r.finish(t.id, 6, Some(0));
        let est = Estimator::new(crate::estimate::KindMap::from_names(&["cpu", "gpu", "mem"]));
        let links = crate::placement::gang::Links::EDGE;
        let ctx = Context {
            sizes: None,
            slot_seconds: 1.0,
            kinds: Vec::new(),
            nodes: vec![],
            estimator: &est,
            links: Some(links),
        };
        let w = r.export(0, 100, &ctx);
        let g = &w.tasks[0];
        assert!(g.gang.is_some());
        let runs: Vec<(Vec<u32>, u64, u64, f64)> = g
            .runs
            .iter()
            .map(|x| {
                (
                    x.members.iter().map(|m| m.0.0).collect(),
                    x.from,
                    x.to,
                    x.progress_to,
                )
            })
            .collect();
        assert_eq!(
            runs,
            vec![(vec![0, 0, 1], 1, 3, 0.3), (vec![1, 1, 1], 4, 6, 1.0)]
        );
        assert!(g.runs.iter().all(|x| x.start && x.node == x.members[0].0));
        assert_eq!(w.links, Some(links));
        assert_eq!(w.classes.len(), 1);
        assert_eq!(w.classes[0].name, "g");
    }

    #[test]
    fn the_grid_spans_minimum_doublings_and_maximum() {
        let g = grid(&Resources(vec![1, 0, 2]), &Resources(vec![8, 0, 2]));
        let cpus: Vec<u32> = g.iter().map(|r| r.get(0)).collect();
        assert_eq!(cpus, vec![1, 2, 4, 8]);
        assert!(g.iter().all(|r| r.get(1) == 0 && r.get(2) == 2));
    }
}
