//! The online speed estimator: how many slots a task of a class would take alone at an
//! allocation, learned from the progress the cluster observes.
//!
//! Every running task's progress is observed (in the agent from the task's reports and peers'
//! heartbeats, in the simulator from the slot that ran): `delta` of its work in `slots` at its
//! allocation is one sample of the class's job time `slots / delta` there. Per class (the task
//! type: a user-given name in the agent's spec) the estimator fits, like Optimus fits profiling
//! runs, a small non-negative model of job time against the allocation in the canonical kinds
//! CPU, GPU and memory ([`KINDS`]):
//!
//! `T(a) = θ₀ + Σ_k θ_k / (o_k + a_k)`, θ ≥ 0 (least squares over every sample),
//!
//! so more of any kind never makes a task slower and the gain of each extra unit shrinks. The
//! offset `o_k` is 0 (Amdahl's law: a serial part and a part that divides among the units)
//! for the kinds the class's tasks ask at least one unit of, so a task that scales linearly is
//! estimated exactly, and 1 for the kinds they may hold none of ([`offsets`]).
//!
//! Tasks of one class differ in size (a fine-tune of 1 epoch or of 30), and a sample's job time
//! mixes the task's size with its allocation: where the long tasks happen to hold more units (an
//! elastic share hands spare units to whoever still runs), fitting the samples alone says more
//! units make a class *slower*, and the fit's non-negativity then drops the kind altogether. So
//! the estimator also keeps, per class, the **pairs** of one task's consecutive samples at two
//! allocations: the ratio of its two job times does not depend on its size. Where a class has
//! pairs, its model's shape comes from them (`T(later) = ratio · T(earlier)`, least squares,
//! θ ≥ 0) and its level from every sample. An allocation no pair touches (a rigid task's,
//! never re-allocated) enters the shape by its samples' mean against the most sampled
//! allocation the pairs do touch, weighted as that many pairs: the pairs' shape carried out to
//! it would otherwise overrule every sample there. Until the pairs have varied every kind the samples
//! vary (and without pairs: a task never re-allocated), the model is fitted to the samples as
//! they are, so a kind the pairs are silent on is never taken for useless. A kind whose
//! allocation never varied has no term (nothing says how the class responds to it). With
//! samples at fewer than two distinct allocations, or before any sample, the estimate is the
//! prior's shape ([`prior_shape`]) scaled to the samples' level, or to [`PRIOR_SLOTS`] at the
//! minimum demand. The estimator sees only allocations and progress: never a speed model, which
//! is what makes it the same in the simulator and in the agent.
//!
//! **What a re-allocation costs.** A task's first slot at a new allocation may be slow (a
//! restart on new devices, a reload): the ledger hands it over as a switch
//! ([`Estimator::observe_switch`]), and the same task's next slot at that allocation says what
//! fraction of a slot the switch lost — a ratio of one task's own times, so the same whatever
//! its size and whatever order agents hear the tasks in. Per class the mean of those is its
//! switch cost ([`Estimator::switch_cost`]); while it is under [`COSTLY_SWITCH`] the switches'
//! slots count as speed samples, past it they do not (a slowed slot would make units look
//! useless). The gain-aware share reads the cost to avoid switches that buy nothing.
//!
//! A real task's slots are noisy (progress reported in coarse steps, a box shared with other
//! work): a switch slot that happens to hold two progress steps where the next holds three
//! measures a third of a slot lost, and one such sample would mark the class costly and freeze
//! its allocations. So the same statistic is kept for **ordinary pairs** (one task's
//! consecutive slots at one allocation: what the earlier slot "lost" against the later), and
//! a switch cost counts only as far as it stands out of them: the switches' mean loss minus the
//! ordinary pairs' mean, and only where that excess is at least [`COSTLY_SWITCH`] after
//! subtracting [`NOISE_Z`] standard errors of the ordinary losses' spread. Where slots are
//! steady (the simulator's speed tables; its formulas, whose speed only falls as a task
//! progresses, so an earlier slot never loses against a later one) the ordinary pairs measure
//! nothing and the cost is the switches' mean, as without them.
//!
//! **What a start-up costs.** A run's first slot holds its start-up (an agent's task process
//! loading its model; [`Estimator::observe_start`]): it makes no ordinary pair, but the same
//! task's next slot at that allocation says what fraction of the slot the start-up lost, as a
//! switch's next slot says of the switch. Per class, beyond the ordinary pairs' loss and its
//! noise, that is its start cost ([`Estimator::start_cost`]); while it is under
//! [`COSTLY_SWITCH`] a first slot is a speed sample and makes a pair with a later slot at
//! another allocation, past it it does neither. A task re-shared right after it starts would
//! otherwise pair its slow first slot with the slot after the switch and show the new
//! allocation faster than it is. In the simulator tasks start at full speed, so the start cost
//! is 0 and the estimates are what they were before start-ups were measured.
//!
//! **Profile hints.** A task's submitter may say how long the task takes alone at a few
//! allocations (the spec's `profile`, what a profiling run or experience measured;
//! [`Estimator::hint`]). Each distinct hint of a class is one more sample of its job time, kept
//! apart from the observed ones and counted once however many tasks repeat it: before any
//! progress is observed the hints alone make the class's model, and as observations accumulate
//! they outweigh them. Hints are kept as a set (at most [`MAX_HINTS`] per class, the least ones
//! in their order), so every agent holds the same hints whichever order it heard the tasks in.
//!
//! **Declared work.** A submitter may also say how much work a task is (the spec's `work`: its
//! epochs, steps or samples, in any unit the class's tasks share; [`Estimator::declare`]).
//! Where a class's tasks declare it, every sample and hint of a task is kept as job time per
//! unit of its work, and a task's estimate is that times its own work: a fine-tune of 30 epochs
//! is estimated 30 times one of 1 epoch, which the class's mean cannot say. A task of such a
//! class that declares nothing counts as the class's mean declared work so far; before any
//! sample, the prior scales by the task's work over that mean. A class none of whose tasks
//! declare work is estimated exactly as without this (one unit per task).

mod class;
mod models;

use crate::resources::Resources;
use crate::task::{Task, TaskId, TaskTypeId};
use class::class_for;
pub use models::{GPU_MODEL_LABEL, GpuModel};
use std::collections::BTreeMap;

/// The canonical resource kinds every feature and estimate uses; a cluster without one has zero
/// of it.
pub const KINDS: [&str; 3] = ["cpu", "gpu", "mem"];

/// The measured cost of a re-allocation ([`Estimator::switch_cost`], the fraction of a slot's
/// progress it loses) from which a switch's slot is no longer a speed sample of its class, and
/// the gain-aware share avoids switches that buy nothing ([`crate::share::gain_greedy_shares`]).
pub const COSTLY_SWITCH: f64 = 0.1;

/// Standard errors of the ordinary slot-to-slot losses a class's switch losses must stand above
/// before they count as a cost (module doc): about 2.5 % one-sided for normal noise.
pub const NOISE_Z: f64 = 2.0;

/// Job length in slots at the minimum demand assumed for a class never observed.
pub const PRIOR_SLOTS: f64 = 10.0;

/// Where each canonical kind sits among a cluster's own kinds (`None`: absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct KindMap(pub [Option<usize>; 3]);

impl KindMap {
    /// From a cluster's kind names: `cpu`/`cpus`/`cores`, `gpu`/`gpus`, `mem`/`memory`/`ram`
    /// (any case). Other kinds have no canonical place (features ignore them).
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Self {
        let mut m = [None; 3];
        for (i, n) in names.iter().enumerate() {
            let k = match n.as_ref().to_ascii_lowercase().as_str() {
                "cpu" | "cpus" | "cores" => 0,
                "gpu" | "gpus" => 1,
                "mem" | "memory" | "ram" => 2,
                _ => continue,
            };
            m[k].get_or_insert(i);
        }
        Self(m)
    }

    /// `r` in the canonical kinds.
    pub fn canonical(&self, r: &Resources) -> [f64; 3] {
        self.units(r).map(f64::from)
    }

    /// `r` in the canonical kinds, as units.
    pub fn units(&self, r: &Resources) -> [u32; 3] {
        self.0.map(|i| i.map_or(0, |i| r.get(i)))
    }
}

/// The prior's shape at canonical allocation `a` for a task whose minimum demand is `min`: 1 at
/// the minimum, falling towards 0.3 as every kind the task asks for grows (a guess: more helps,
/// with diminishing returns).
pub fn prior_shape(min: &[f64; 3], a: &[f64; 3]) -> f64 {
    let used: Vec<usize> = (0..3).filter(|&k| min[k] > 0.0).collect();
    if used.is_empty() {
        return 1.0;
    }
    let mean = used
        .iter()
        .map(|&k| (1.0 + min[k]) / (1.0 + a[k].max(min[k])))
        .sum::<f64>()
        / used.len() as f64;
    0.3 + 0.7 * mean
}

/// Most distinct profile hints kept per class (a bound on what submitters can make every agent
/// hold; beyond it the greatest in the set's order are dropped, the same on every agent).
pub const MAX_HINTS: usize = 64;

/// Job times are kept in integer nanoslots, so that sums do not depend on the order the samples
/// came in (agents hear them in other orders than the simulator: their estimates must agree
/// exactly).
const NANO: f64 = 1e9;

/// Per canonical kind, the offset `o` of the model's term `θ / (o + a)`: 0 where the class's
/// tasks ask at least one unit of the kind (Amdahl's law, `θ / a`: a task that scales linearly
/// in a kind takes `θ / a` exactly, which `θ / (1 + a)` cannot say: fitted to `16 / g`, it
/// estimates 16 GPUs at about twice their true time, and a share on it spreads GPUs where
/// handing them to one task at a time is faster), 1 where a task may hold none of it.
pub fn offsets(min: &[f64; 3]) -> [f64; 3] {
    min.map(|m| if m >= 1.0 { 0.0 } else { 1.0 })
}

/// The term `1 / (o + a)` of one kind, never above 1 (a task of a class that asks for a kind
/// but holds none of it counts as holding one).
pub fn term(o: f64, a: f64) -> f64 {
    1.0 / (o + a).max(1.0)
}

/// The estimator of a cluster (module doc).
#[derive(Debug, Clone, Default)]
pub struct Estimator {
    /// Where CPU, GPU and memory sit among a cluster's kinds (the model's inputs).
    kinds: KindMap,
    /// Samples and fitted model per task class and GPU model ([`models`]; a class whose tasks
    /// use no GPU, and every class on a cluster whose boxes name no model, has one entry, at
    /// [`GpuModel::NONE`]).
    classes: models::Entries,
    /// Each task's last sample (the GPU model it ran on, canonical allocation, job time in
    /// nanos, whether it was its run's first) until it is done: the next sample at another
    /// allocation makes a pair with it (a start pair after a first slot), at the same
    /// allocation an ordinary pair, or after a first slot a measure of the start-up's cost. A
    /// sample on another GPU model pairs with nothing (its times are another model's).
    last: BTreeMap<TaskId, (GpuModel, [u32; 3], u128, bool)>,
    /// Each re-allocated task's switch slot (GPU model, canonical allocation, job time in
    /// nanos; `u128::MAX` for a slot without progress) until its next sample, which says what
    /// the switch cost.
    switched: BTreeMap<TaskId, (GpuModel, [u32; 3], u128)>,
    /// Each task's declared work (module doc), until it is done.
    declared: BTreeMap<TaskId, f64>,
    /// Per class, the tasks that declared their work: (count, sum of their work in nano-units).
    works: BTreeMap<TaskTypeId, (u64, u128)>,
}

/// Largest declared work taken (a bound, so that the sums in nanos cannot overflow).
pub const MAX_WORK: f64 = 1e6;

/// Least declared work taken: below it the work would round to nothing on the nanos grid the
/// class sums keep (and a task of no work would be estimated to take no time).
pub const MIN_WORK: f64 = 1e-6;

impl Estimator {
    /// An estimator for a cluster whose kinds sit as `kinds` says.
    pub fn new(kinds: KindMap) -> Self {
        Self {
            kinds,
            ..Self::default()
        }
    }

    /// What carries into a later stretch of the same cluster's work: every class's samples,
    /// fits and costs, and none of its tasks' own state (their last samples, switches and
    /// declared work belong to tasks of the stretch before, whose ids a new stretch reuses).
    pub fn carried(&self) -> Self {
        Self {
            kinds: self.kinds,
            classes: self.classes.clone(),
            works: self.works.clone(),
            ..Self::default()
        }
    }

    /// The entry key of `task` on a box of GPU model `model`: the model only where the task
    /// asks for a GPU (a CPU task runs alike on every GPU model, and splitting its samples by
    /// model would only slow its learning).
    fn key(&self, task: &Task, model: GpuModel) -> (TaskTypeId, GpuModel) {
        let gpu = self.kinds.units(&task.min_demand)[1];
        (task.ty, if gpu > 0 { model } else { GpuModel::NONE })
    }

    /// `task`'s submitter declared `work` units of work (module doc). A task declares once
    /// (later calls for it change nothing); work that is not finite or is below [`MIN_WORK`]
    /// is ignored, and work above [`MAX_WORK`] counts as that.
    pub fn declare(&mut self, task: &Task, work: f64) {
        if !(work.is_finite() && work >= MIN_WORK) || self.declared.contains_key(&task.id) {
            return;
        }
        // On the nanos grid the class sums keep, so that a task of its class's mean declared
        // work is exactly one mean task.
        let nanos = (work.min(MAX_WORK) * NANO).round();
        let work = nanos / NANO;
        self.declared.insert(task.id, work);
        // The class is heard of: its anchor takes this task's minimum demand.
        let min = self.kinds.canonical(&task.min_demand);
        class_for(&mut self.classes, (task.ty, GpuModel::NONE), min);
        let w = self.works.entry(task.ty).or_insert((0, 0));
        w.0 += 1;
        w.1 += nanos as u128;
    }

    /// The mean declared work of `ty`'s tasks so far (`None`: none declared).
    fn mean_work(&self, ty: TaskTypeId) -> Option<f64> {
        self.works
            .get(&ty)
            .filter(|w| w.0 > 0)
            .map(|w| w.1 as f64 / w.0 as f64 / NANO)
    }

    /// `task`'s declared work over its class's mean declared work: how many mean tasks of its
    /// class it is (1 where its class declares nothing, or it declares nothing itself).
    pub fn relative_work(&self, task: &Task) -> f64 {
        match (self.declared.get(&task.id), self.mean_work(task.ty)) {
            (Some(w), Some(mean)) if mean > 0.0 => w / mean,
            _ => 1.0,
        }
    }

    /// `task`'s work in its class's unit: its declared work, else its class's mean declared
    /// work, else 1 (a class that declares nothing: one unit per task).
    fn work(&self, task: &Task) -> f64 {
        self.declared
            .get(&task.id)
            .copied()
            .or_else(|| self.mean_work(task.ty))
            .unwrap_or(1.0)
    }

    /// The kind map.
    pub fn kinds(&self) -> KindMap {
        self.kinds
    }

    /// `task` ran `slots` at `alloc` and did `delta` of its work, on a box of no GPU model
    /// ([`Self::observe_on`]).
    pub fn observe(&mut self, task: &Task, alloc: &Resources, delta: f64, slots: f64) {
        self.sample(task, GpuModel::NONE, alloc, delta, slots, false);
    }

    /// `task` ran `slots` at `alloc` on a box of GPU model `model` and did `delta` of its work.
    /// Samples without progress (a stalled task, an allocation below its need) or without time
    /// are ignored.
    pub fn observe_on(
        &mut self,
        task: &Task,
        model: GpuModel,
        alloc: &Resources,
        delta: f64,
        slots: f64,
    ) {
        self.sample(task, model, alloc, delta, slots, false);
    }

    /// As [`Self::observe_on`], for the first sample of a run, since its start: it holds the
    /// run's start-up (an agent's task process loading its model), so it makes no ordinary pair
    /// with the next slot (counted there, a start-up would raise the ordinary slots' loss, which
    /// a switch's must stand above: a restart's cost measured low); the next slot at the same
    /// allocation measures the start-up's cost instead, and while that is costly
    /// ([`Self::start_cost`]) this slot is no speed sample and makes no pair (module doc).
    pub fn observe_start_on(
        &mut self,
        task: &Task,
        model: GpuModel,
        alloc: &Resources,
        delta: f64,
        slots: f64,
    ) {
        self.sample(task, model, alloc, delta, slots, true);
    }

    /// [`Self::observe_start_on`] on a box of no GPU model.
    pub fn observe_start(&mut self, task: &Task, alloc: &Resources, delta: f64, slots: f64) {
        self.sample(task, GpuModel::NONE, alloc, delta, slots, true);
    }

    fn sample(
        &mut self,
        task: &Task,
        model: GpuModel,
        alloc: &Resources,
        delta: f64,
        slots: f64,
        start: bool,
    ) {
        if !(delta > 1e-9 && slots > 1e-9 && delta.is_finite() && slots.is_finite()) {
            return;
        }
        let key = self.key(task, model);
        let model = key.1;
        let a = self.kinds.units(alloc);
        let min = self.kinds.canonical(&task.min_demand);
        let work = self.work(task);
        let c = class_for(&mut self.classes, key, min);
        // Per unit of work; capped so that a runaway sample cannot overflow the sums.
        let t = ((slots / delta / work).min(1e9) * NANO).round() as u128;
        if let Some((_, _, u)) = self
            .switched
            .remove(&task.id)
            .filter(|(m, b, _)| *m == model && *b == a)
        {
            // A ratio of one task's own times: the same whatever order the agents hear the
            // tasks in, and whatever the task's size.
            let kept = if u == u128::MAX {
                0.0
            } else {
                (t as f64 / (u as f64).max(1.0)).min(1.0)
            };
            c.switches.0 += 1;
            c.switches.1 += (kept * NANO).round() as u128;
        }
        let cells = if start {
            &mut c.start_cells
        } else {
            &mut c.cells
        };
        let cell = cells.entry(a).or_insert((0, 0));
        cell.0 += 1;
        cell.1 += t;
        match self.last.insert(task.id, (model, a, t, start)) {
            // Its last sample was on another GPU model: another model's times.
            Some((m, ..)) if m != model => {}
            Some((_, b, u, earlier_start)) if b != a => {
                let ratio = (t as f64 / (u as f64).max(1.0)).min(1e6);
                let pairs = if earlier_start {
                    &mut c.start_pairs
                } else {
                    &mut c.pairs
                };
                let pair = pairs.entry((b, a)).or_insert((0, 0));
                pair.0 += 1;
                pair.1 += (ratio * NANO).round() as u128;
            }
            // The earlier slot held its run's start-up: not slot-to-slot noise, but a measure
            // of the start-up's cost, as a switch's slot against its next.
            Some((_, _, u, true)) => {
                let kept = (t as f64 / (u as f64).max(1.0)).min(1.0);
                c.starts.0 += 1;
                c.starts.1 += (kept * NANO).round() as u128;
            }
            Some((_, _, u, false)) => {
                // An ordinary pair: what the earlier slot lost against this one, as a switch's
                // slot is measured against its next (`u`, `t`: job times, the earlier first).
                let lost = 1.0 - (t as f64 / (u as f64).max(1.0)).min(1.0);
                let nanos = (lost * NANO).round() as u128;
                c.ordinary.0 += 1;
                c.ordinary.1 += nanos;
                c.ordinary.2 += (lost * lost * NANO).round() as u128;
            }
            None => {}
        }
        c.refit();
    }

    /// Profile hints for `task`'s class from its submitter: each `(alloc, slots)` says the task
    /// takes `slots` alone at `alloc` (module doc). A hint names no GPU model: hints are kept
    /// at [`GpuModel::NONE`], and speak for every model the class has not run on. Hints
    /// without a positive finite time are ignored, as is a hint the class already holds.
    pub fn hint(&mut self, task: &Task, hints: &[(Resources, f64)]) {
        let min = self.kinds.canonical(&task.min_demand);
        let kinds = self.kinds;
        let work = self.work(task);
        let mut fresh = false;
        let c = class_for(&mut self.classes, (task.ty, GpuModel::NONE), min);
        for (alloc, slots) in hints {
            if !(slots.is_finite() && *slots > 1e-9) {
                continue;
            }
            let t = ((slots / work).min(1e9) * NANO).round() as u128;
            fresh |= c.hints.insert((kinds.units(alloc), t));
        }
        while c.hints.len() > MAX_HINTS {
            c.hints.pop_last();
        }
        if fresh {
            c.refit();
        }
    }

    /// `task` is done: its last sample makes no more pairs.
    pub fn forget(&mut self, task: TaskId) {
        self.last.remove(&task);
        self.switched.remove(&task);
        self.declared.remove(&task);
    }

    /// [`Self::observe_switch_on`] on a box of no GPU model.
    pub fn observe_switch(&mut self, task: &Task, alloc: &Resources, delta: f64, slots: f64) {
        self.observe_switch_on(task, GpuModel::NONE, alloc, delta, slots);
    }

    /// `task` ran `slots` at `alloc`, its new allocation, on a box of GPU model `model`, and
    /// did `delta` of its work: the slot of its switch, no speed sample
    /// ([`crate::ledger::Ledger::set_progress`]). Its next sample at `alloc` says what fraction
    /// of a slot the switch kept ([`Self::switch_cost`]).
    pub fn observe_switch_on(
        &mut self,
        task: &Task,
        model: GpuModel,
        alloc: &Resources,
        delta: f64,
        slots: f64,
    ) {
        if !(slots > 1e-9 && slots.is_finite() && delta.is_finite()) {
            return;
        }
        let key = self.key(task, model);
        let a = self.kinds.units(alloc);
        let work = self.work(task);
        let t = if delta > 1e-9 {
            ((slots / delta / work).min(1e9) * NANO).round() as u128
        } else {
            u128::MAX
        };
        self.switched.insert(task.id, (key.1, a, t));
        if t != u128::MAX {
            let min = self.kinds.canonical(&task.min_demand);
            let c = class_for(&mut self.classes, key, min);
            let cell = c.switch_cells.entry(a).or_insert((0, 0));
            cell.0 += 1;
            cell.1 += t;
            c.refit();
        }
    }

    /// The fraction of a slot's progress a re-allocation of `class` costs, as measured (each
    /// switch's slot against the same task's next slot, beyond what ordinary slots lose against
    /// their next; module doc): 0 where switches are free, were never measured or lose too
    /// little to stand out of the noise, 1 where a switch's slot makes no progress. Of the
    /// class's GPU models, the one with the most switches measured speaks.
    pub fn switch_cost(&self, class: TaskTypeId) -> f64 {
        models::of_class(&self.classes, class)
            .max_by(|(m1, c1), (m2, c2)| c1.switches.0.cmp(&c2.switches.0).then(m2.cmp(m1)))
            .map_or(0.0, |(_, c)| c.switch_cost())
    }

    /// The fraction of its first slot a run's start-up costs `class` (a task process loading
    /// its model), measured as [`Self::switch_cost`] is: each run's first slot against the same
    /// task's next slot at that allocation, beyond the ordinary slots' loss. While it is under
    /// [`COSTLY_SWITCH`] first slots are speed samples and make pairs; past it they do neither.
    pub fn start_cost(&self, class: TaskTypeId) -> f64 {
        models::of_class(&self.classes, class)
            .max_by(|(m1, c1), (m2, c2)| c1.starts.0.cmp(&c2.starts.0).then(m2.cmp(m1)))
            .map_or(0.0, |(_, c)| c.start_cost())
    }

    /// Estimated slots `task` takes alone at `alloc` (all of its work) on a box of no GPU
    /// model ([`Self::slots_on`]).
    pub fn slots(&self, task: &Task, alloc: &Resources) -> f64 {
        self.slots_on(task, GpuModel::NONE, alloc)
    }

    /// Estimated slots `task` takes alone at `alloc` (all of its work) on a box of GPU model
    /// `model`: its class's fit there, else its fit on another model scaled by how the models
    /// compare (`estimate/models.rs`), else the prior.
    pub fn slots_on(&self, task: &Task, model: GpuModel, alloc: &Resources) -> f64 {
        let a = self.kinds.canonical(alloc);
        let min = self.kinds.canonical(&task.min_demand);
        let (ty, model) = self.key(task, model);
        match models::speaking(&self.classes, ty, model) {
            // Per unit of work (module doc).
            Some((c, pace)) => c.slots(&min, &a) * self.work(task) * pace,
            // Before any sample the prior is a mean task's.
            None => {
                PRIOR_SLOTS * prior_shape(&min, &a) * self.work(task)
                    / self.mean_work(ty).unwrap_or(1.0)
            }
        }
    }

    /// The offsets of `task`'s model terms ([`offsets`]) on a box of GPU model `model`: those
    /// of the fit that speaks there, else the prior's (1 for every kind: [`prior_shape`] is of
    /// the form `θ / (1 + a)`).
    pub fn offsets_on(&self, task: &Task, model: GpuModel) -> [f64; 3] {
        let (ty, model) = self.key(task, model);
        match models::speaking(&self.classes, ty, model) {
            Some((c, _)) if c.theta.is_some() => offsets(&c.min),
            _ => [1.0; 3],
        }
    }

    /// [`Self::offsets_on`] on a box of no GPU model.
    pub fn offsets(&self, task: &Task) -> [f64; 3] {
        self.offsets_on(task, GpuModel::NONE)
    }

    /// Samples held for `class`, on every GPU model.
    pub fn samples(&self, class: TaskTypeId) -> usize {
        models::of_class(&self.classes, class)
            .map(|(_, c)| usize::try_from(c.samples()).unwrap_or(usize::MAX))
            .fold(0, usize::saturating_add)
    }

    /// What the estimator holds of each class it has heard of, per GPU model it ran on, in
    /// class order: what an operator reads to see what the policy is told of a class's speed.
    pub fn summary(&self) -> Vec<ClassSummary> {
        self.classes
            .iter()
            .map(|((id, model), c)| {
                // A task of the class's mean declared work (one unit where none is declared).
                let work = self.mean_work(*id).unwrap_or(1.0);
                let double = c.min.map(|m| 2.0 * m);
                ClassSummary {
                    class: *id,
                    gpu_model: *model,
                    samples: usize::try_from(c.samples()).unwrap_or(usize::MAX),
                    hints: c.hints.len(),
                    min: c.min,
                    fitted: c.fitted(),
                    slots_at_min: c.slots(&c.min, &c.min) * work,
                    slots_at_double: c.slots(&c.min, &double) * work,
                    switch_cost: c.switch_cost(),
                    start_cost: c.start_cost(),
                }
            })
            .collect()
    }
}

/// One class as the estimator holds it ([`Estimator::summary`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClassSummary {
    /// The class.
    pub class: TaskTypeId,
    /// The GPU model its samples here ran on ([`GpuModel::NONE`]: none named, or a class that
    /// uses no GPU).
    #[serde(default)]
    pub gpu_model: GpuModel,
    /// Speed samples held (observed slots and distinct profile hints).
    pub samples: usize,
    /// Distinct profile hints among them.
    pub hints: usize,
    /// The least minimum demand of its tasks heard of, in the canonical kinds ([`KINDS`]).
    pub min: [f64; 3],
    /// Whether samples or hints set its estimates (else the prior's).
    pub fitted: bool,
    /// Estimated slots alone at `min`, for a task of the class's mean declared work (one unit
    /// where none is declared).
    pub slots_at_min: f64,
    /// The same at twice `min` in every kind it asks for: how the class scales.
    pub slots_at_double: f64,
    /// What a re-allocation costs it ([`Estimator::switch_cost`]).
    pub switch_cost: f64,
    /// What a run's start-up costs it ([`Estimator::start_cost`]).
    pub start_cost: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    fn task(ty: u16, min: [u32; 3]) -> Task {
        Task::new(1, min).of_type(ty)
    }

    fn est() -> Estimator {
        Estimator::new(KindMap::from_names(&["cpu", "gpu", "mem"]))
    }

    #[test]
    fn kind_names_map_to_the_canonical_kinds_and_absent_ones_are_zero() {
        let m = KindMap::from_names(&["GPUs", "cores", "disk"]);
        assert_eq!(m, KindMap([Some(1), Some(0), None]));
        assert_eq!(m.canonical(&Resources(vec![2, 8, 100])), [8.0, 2.0, 0.0]);
    }

    /// A switch's cost is measured from each re-allocated task's own slots: the switch's slot
    /// against its next slot at the new allocation, whatever the task's size and whatever order
    /// the tasks are heard in; free switches (or none) measure 0.
    #[test]
    fn the_switch_cost_is_each_task_s_switch_slot_against_its_next() {
        let at = |g| Resources(vec![2, g, 1]);
        let sized = |e: &mut Estimator, id: u64, size: f64, keep: f64| {
            let mut t = task(0, [2, 1, 1]);
            t.id = TaskId(id);
            e.observe(&t, &at(1), 0.1 / size, 1.0);
            // Re-allocated to 2 GPUs: the switch's slot keeps `keep` of the new speed.
            e.observe_switch(&t, &at(2), keep * 0.2 / size, 1.0);
            e.observe(&t, &at(2), 0.2 / size, 1.0);
        };
        let mut e = est();
        assert_eq!(e.switch_cost(TaskTypeId(0)), 0.0);
        sized(&mut e, 1, 1.0, 0.5);
        sized(&mut e, 2, 7.0, 0.7);
        assert!((e.switch_cost(TaskTypeId(0)) - 0.4).abs() < 1e-9);
        let mut other = est();
        sized(&mut other, 2, 7.0, 0.7);
        sized(&mut other, 1, 1.0, 0.5);
        assert_eq!(
            other.switch_cost(TaskTypeId(0)),
            e.switch_cost(TaskTypeId(0))
        );
        // A slot without progress costs all of it; a switch slot as fast as the next, nothing.
        let mut stalled = est();
        sized(&mut stalled, 1, 1.0, 0.0);
        assert_eq!(stalled.switch_cost(TaskTypeId(0)), 1.0);
        let mut free = est();
        sized(&mut free, 1, 1.0, 1.0);
        sized(&mut free, 2, 1.0, 1.2);
        assert_eq!(free.switch_cost(TaskTypeId(0)), 0.0);
        // A switch slot whose next sample is at yet another allocation measures nothing.
        let mut moved = est();
        let t = task(0, [2, 1, 1]);
        moved.observe_switch(&t, &at(2), 0.05, 1.0);
        moved.observe(&t, &at(3), 0.2, 1.0);
        assert_eq!(moved.switch_cost(TaskTypeId(0)), 0.0);
        // Where switches cost, their slots are no speed samples; where they are free, they are.
        assert_eq!(e.samples(TaskTypeId(0)), 4);
        assert_eq!(free.samples(TaskTypeId(0)), 6);
    }

    /// A switch's loss counts only as far as it stands out of what one task's ordinary
    /// consecutive slots lose against each other: a switch slot with two progress steps where
    /// the next has three is noise where ordinary slots vary as much, a cost where they are
    /// steady, and a cost where many switches all lose a third.
    #[test]
    fn a_switch_s_loss_counts_only_beyond_the_slot_to_slot_noise() {
        let at = |g| Resources(vec![2, g, 1]);
        // A task whose slots at 1 GPU hold `steps` progress steps of 1/120 each, then a switch
        // to 2 GPUs holding 2 steps, then a slot there holding 3.
        let run = |e: &mut Estimator, id: u64, steps: &[u32]| {
            let mut t = task(0, [2, 1, 1]);
            t.id = TaskId(id);
            for s in steps {
                e.observe(&t, &at(1), f64::from(*s) / 120.0, 1.0);
            }
            e.observe_switch(&t, &at(2), 2.0 / 120.0, 1.0);
            e.observe(&t, &at(2), 3.0 / 120.0, 1.0);
        };
        let mut steady = est();
        run(&mut steady, 1, &[3, 3, 3, 3]);
        assert!((steady.switch_cost(TaskTypeId(0)) - 1.0 / 3.0).abs() < 1e-6);
        let mut noisy = est();
        run(&mut noisy, 1, &[3, 2, 3, 3, 2]);
        assert_eq!(noisy.switch_cost(TaskTypeId(0)), 0.0);
        // The same noise, but twenty switches that each lose a third: the mean loss stands out.
        for id in 2..22 {
            run(&mut noisy, id, &[3, 2, 3, 3, 2]);
        }
        let c = noisy.switch_cost(TaskTypeId(0));
        // Beyond the ordinary pairs' mean loss (a third of one pair in four).
        assert!((c - (1.0 / 3.0 - 1.0 / 12.0)).abs() < 1e-6, "{c}");
        // Slots that only slow down as a task progresses (the simulator's formulas) lose
        // nothing against each other: the switches' mean, as without ordinary pairs.
        let mut slowing = est();
        run(&mut slowing, 1, &[6, 5, 4, 3]);
        assert!((slowing.switch_cost(TaskTypeId(0)) - 1.0 / 3.0).abs() < 1e-6);
    }

    /// A run's first slot holds its start-up (a process loading its model): a speed sample, but
    /// no ordinary pair with the slot after it, so a start-up does not pass for slot-to-slot
    /// noise that a switch's loss would have to stand above.
    #[test]
    fn a_run_s_start_up_is_no_slot_to_slot_noise() {
        let at = |g| Resources(vec![2, g, 1]);
        // Each task starts with a slot of one progress step (start-up), runs slots of three,
        // then switches to 2 GPUs: a switch slot of two steps and a slot of three.
        let run = |e: &mut Estimator, id: u64, start_up: bool| {
            let mut t = task(0, [2, 1, 1]);
            t.id = TaskId(id);
            if start_up {
                e.observe_start(&t, &at(1), 1.0 / 120.0, 1.0);
            } else {
                e.observe(&t, &at(1), 1.0 / 120.0, 1.0);
            }
            for _ in 0..3 {
                e.observe(&t, &at(1), 3.0 / 120.0, 1.0);
            }
            e.observe_switch(&t, &at(2), 2.0 / 120.0, 1.0);
            e.observe(&t, &at(2), 3.0 / 120.0, 1.0);
        };
        let (mut started, mut counted) = (est(), est());
        for id in 1..4 {
            run(&mut started, id, true);
            run(&mut counted, id, false);
        }
        // The switches lose a third; counted as an ordinary pair, the start-up (two thirds
        // lost, one pair in four) would hide that.
        assert!((started.switch_cost(TaskTypeId(0)) - 1.0 / 3.0).abs() < 1e-6);
        assert_eq!(counted.switch_cost(TaskTypeId(0)), 0.0);
        // The start-ups are measured as switches are: a run's first slot against its next at
        // the same allocation. They lose two thirds, so the first slots are no speed samples:
        // four a task (the switch slots are none either, switches being costly).
        assert!((started.start_cost(TaskTypeId(0)) - 2.0 / 3.0).abs() < 1e-6);
        assert_eq!(started.samples(TaskTypeId(0)), 12);
        assert_eq!(counted.start_cost(TaskTypeId(0)), 0.0);
    }

    /// The summary says per class what the estimates say.
    #[test]
    fn the_summary_says_what_the_estimates_say() {
        let mut e = est();
        let at = |g| Resources(vec![2, g, 1]);
        let mut t = task(3, [2, 1, 1]);
        for id in 0..3u64 {
            t.id = TaskId(id);
            e.observe_start(&t, &at(1), 1.0 / 12.0, 1.0);
            e.observe(&t, &at(1), 1.0 / 12.0, 1.0);
            e.observe_switch(&t, &at(2), 1.0 / 12.0, 1.0);
            e.observe(&t, &at(2), 1.0 / 9.0, 1.0);
        }
        let s = e.summary();
        assert_eq!(s.len(), 1);
        let c = &s[0];
        assert_eq!(c.class, TaskTypeId(3));
        assert_eq!(c.samples, e.samples(TaskTypeId(3)));
        assert!(c.fitted && c.hints == 0);
        assert_eq!(c.min, [2.0, 1.0, 1.0]);
        assert_eq!(c.slots_at_min, e.slots(&t, &at(1)));
        assert_eq!(c.slots_at_double, e.slots(&t, &Resources(vec![4, 2, 2])));
        assert_eq!(c.switch_cost, e.switch_cost(TaskTypeId(3)));
        assert_eq!(c.start_cost, 0.0);
        assert!(c.switch_cost > 0.2);
    }

    /// A task re-shared right after it starts: its slow first slot and the slot after the
    /// switch would make a pair that shows the new allocation faster than it is. Once the
    /// class's start-ups measure costly, first slots make no pairs and are no speed samples.
    #[test]
    fn a_costly_start_up_makes_no_pair() {
        let at = |g| Resources(vec![2, g, 1]);
        // Half serial (Amdahl): 12 slots alone at one GPU, 9 at two. A start-up loses half a
        // slot.
        let step = |g: u32| 1.0 / (6.0 + 6.0 / f64::from(g));
        let feed = |e: &mut Estimator, first_as_start: bool| {
            let first = |e: &mut Estimator, t: &Task, g: u32| {
                if first_as_start {
                    e.observe_start(t, &at(g), step(g) / 2.0, 1.0);
                } else {
                    e.observe(t, &at(g), step(g) / 2.0, 1.0);
                }
            };
            for id in 0..6u64 {
                let mut t = task(0, [2, 1, 1]);
                t.id = TaskId(id);
                first(e, &t, 1);
                if id % 2 == 0 {
                    // Kept at one GPU: the start-up's cost shows against the next slot; later,
                    // a switch to two GPUs after ordinary slots (a true pair).
                    for _ in 0..3 {
                        e.observe(&t, &at(1), step(1), 1.0);
                    }
                } else {
                    // Re-shared at once: a switch slot, then slots at two GPUs.
                    e.observe_switch(&t, &at(2), step(2) / 2.0, 1.0);
                    for _ in 0..2 {
                        e.observe(&t, &at(2), step(2), 1.0);
                    }
                    continue;
                }
                e.observe_switch(&t, &at(2), step(2) / 2.0, 1.0);
                e.observe(&t, &at(2), step(2), 1.0);
            }
        };
        let (mut started, mut counted) = (est(), est());
        feed(&mut started, true);
        feed(&mut counted, false);
        let t = task(0, [2, 1, 1]);
        let ratio = |e: &Estimator| e.slots(&t, &at(2)) / e.slots(&t, &at(1));
        assert!((started.start_cost(TaskTypeId(0)) - 0.5).abs() < 1e-6);
        assert!((ratio(&started) - 0.75).abs() < 0.01, "{}", ratio(&started));
        assert!((started.slots(&t, &at(1)) - 12.0).abs() < 0.2);
        // Taken as ordinary slots, the start-ups bend the shape: two GPUs look faster.
        assert!(ratio(&counted) < 0.65, "{}", ratio(&counted));
    }

    /// Where first slots are as fast as the next (the simulator's: its tasks start at full
    /// speed), marking them as starts changes no estimate: they are speed samples and make
    /// pairs as any slot does.
    #[test]
    fn free_start_ups_change_no_estimate() {
        let at = |g| Resources(vec![2, g, 1]);
        let step = |g: u32| f64::from(g) / 12.0 + 0.01;
        let feed = |e: &mut Estimator, first_as_start: bool| {
            for id in 0..4u64 {
                let mut t = task(0, [2, 1, 1]);
                t.id = TaskId(id);
                let g0 = 1 + (id % 2) as u32;
                if first_as_start {
                    e.observe_start(&t, &at(g0), step(g0), 1.0);
                } else {
                    e.observe(&t, &at(g0), step(g0), 1.0);
                }
                e.observe(&t, &at(g0), step(g0), 1.0);
                e.observe_switch(&t, &at(4), step(4), 1.0);
                e.observe(&t, &at(4), step(4), 1.0);
                e.observe(&t, &at(3), step(3), 1.0);
            }
        };
        let (mut started, mut counted) = (est(), est());
        feed(&mut started, true);
        feed(&mut counted, false);
        let t = task(0, [2, 1, 1]);
        assert_eq!(started.start_cost(TaskTypeId(0)), 0.0);
        for g in 1..6 {
            assert_eq!(started.slots(&t, &at(g)), counted.slots(&t, &at(g)));
        }
        assert_eq!(
            started.samples(TaskTypeId(0)),
            counted.samples(TaskTypeId(0))
        );
    }

    #[test]
    fn an_unseen_class_gets_the_prior_and_the_prior_falls_with_more() {
        let e = est();
        let t = task(3, [2, 0, 1]);
        let at_min = e.slots(&t, &Resources(vec![2, 0, 1]));
        assert!((at_min - PRIOR_SLOTS).abs() < 1e-9);
        let more = e.slots(&t, &Resources(vec![8, 0, 4]));
        assert!(more < at_min && more >= 0.3 * PRIOR_SLOTS);
        // GPUs the task never asked for change nothing in the prior.
        assert_eq!(more, e.slots(&t, &Resources(vec![8, 4, 4])));
    }

    #[test]
    fn it_recovers_a_model_of_its_own_form_from_progress() {
        // T(a) = 2 + 12/cpu + 6/(1 + gpu) for a class that asks for CPUs but may hold no GPU
        // (Amdahl's term where it asks for the kind, the offset one where it may hold none),
        // observed as progress per slot.
        let truth = |c: f64, g: f64| 2.0 + 12.0 / c + 6.0 / (1.0 + g);
        let mut e = est();
        let t = task(0, [1, 0, 1]);
        for c in [1u32, 2, 4, 8] {
            for g in [0u32, 1, 2, 4] {
                let a = Resources(vec![c, g, 1]);
                e.observe(&t, &a, 1.0 / truth(f64::from(c), f64::from(g)), 1.0);
            }
        }
        for (c, g) in [(3u32, 3u32), (6, 1), (1, 4), (5, 0)] {
            let got = e.slots(&t, &Resources(vec![c, g, 1]));
            let want = truth(f64::from(c), f64::from(g));
            assert!((got - want).abs() < 1e-6 * want, "{got} vs {want}");
        }
        // Memory never varied: no term, however much of it.
        assert_eq!(
            e.slots(&t, &Resources(vec![2, 2, 1])),
            e.slots(&t, &Resources(vec![2, 2, 30]))
        );
    }

    #[test]
    fn a_task_that_scales_linearly_is_estimated_exactly() {
        // T(g) = 16 / g (GPU-bound, linear up to 16): the term θ / (1 + g) could not say it
        // (fitted to these samples it put 16 GPUs near 2 slots); Amdahl's θ / g does.
        let mut e = est();
        let t = task(0, [2, 1, 0]);
        for g in [1u32, 2, 3, 5, 8] {
            e.observe(&t, &Resources(vec![2, g, 0]), f64::from(g) / 16.0, 1.0);
        }
        for g in [4u32, 12, 16] {
            let got = e.slots(&t, &Resources(vec![2, g, 0]));
            assert!((got - 16.0 / f64::from(g)).abs() < 1e-6, "{g} GPUs: {got}");
        }
        assert_eq!(e.offsets(&t), [0.0, 0.0, 1.0]);
        // A class not yet fitted speaks through the prior, whose terms are θ / (1 + a).
        assert_eq!(e.offsets(&task(5, [2, 1, 0])), [1.0; 3]);
    }

    #[test]
    fn tasks_of_one_class_with_other_minimums_fit_alike_in_either_order() {
        // One task of the class asks for no GPU, another for one: whichever an agent hears of
        // first, the class is anchored at the least (so its GPU term keeps the offset 1) and
        // every estimate is the same to the bit.
        let mut a = task(3, [2, 0, 1]);
        a.id = TaskId(1);
        let mut b = task(3, [2, 1, 1]);
        b.id = TaskId(2);
        let run = |first: &Task, second: &Task| {
            let mut e = est();
            for (t, g) in [(first, 1u32), (second, 2), (first, 4), (second, 3)] {
                let t2 = 2.0 + 6.0 / (1.0 + f64::from(g));
                e.observe(t, &Resources(vec![2, g, 1]), 1.0 / t2, 1.0);
            }
            (1..8u32)
                .map(|g| e.slots(&b, &Resources(vec![2, g, 1])).to_bits())
                .chain([e.offsets(&b).map(f64::to_bits)[1]])
                .collect::<Vec<_>>()
        };
        assert_eq!(run(&a, &b), run(&b, &a));
        let mut e = est();
        e.observe(&b, &Resources(vec![2, 1, 1]), 0.1, 1.0);
        e.observe(&b, &Resources(vec![2, 2, 1]), 0.2, 1.0);
        assert_eq!(e.offsets(&b)[1], 0.0);
        e.observe(&a, &Resources(vec![2, 1, 1]), 0.1, 1.0);
        assert_eq!(
            e.offsets(&b)[1],
            1.0,
            "a task asking for no GPU re-anchors the class"
        );
    }

    #[test]
    fn the_view_s_figures_say_what_the_estimator_says_at_every_allocation() {
        // A view carries a task's time at its minimum, each kind's gain there and the terms'
        // offsets; from those, `slots_at` must give the estimator's time anywhere, for a class
        // with Amdahl terms, one whose tasks may hold no GPU, and one the prior speaks for.
        let kinds = KindMap::from_names(&["cpu", "gpu", "mem"]);
        let mut e = Estimator::new(kinds);
        let amdahl = task(0, [2, 1, 1]);
        let offset = task(1, [1, 0, 1]);
        for c in [2u32, 3, 6] {
            for g in [1u32, 2, 7] {
                let t = 1.0 + 8.0 / f64::from(c) + 20.0 / f64::from(g);
                e.observe(&amdahl, &Resources(vec![c, g, 1]), 1.0 / t, 1.0);
                let t = 3.0 + 5.0 / f64::from(c) + 4.0 / (1.0 + f64::from(g));
                e.observe(&offset, &Resources(vec![c, g - 1, 1]), 1.0 / t, 1.0);
            }
        }
        let largest = Resources(vec![32, 16, 8]);
        for t in [&amdahl, &offset, &task(2, [1, 1, 0])] {
            let v = crate::view::TaskEstimate::of(&e, t, &largest);
            for c in 2..12u32 {
                for g in 1..10u32 {
                    let a = Resources(vec![c, g, 1]);
                    let (got, want) = (v.slots_at(&kinds, &t.min_demand, &a), e.slots(t, &a));
                    assert!((got - want).abs() < 1e-9 * want, "{a:?}: {got} vs {want}");
                }
            }
        }
    }

    #[test]
    fn one_allocation_scales_the_prior_to_what_was_seen() {
        let mut e = est();
        let t = task(1, [2, 0, 0]);
        let a = Resources(vec![2, 0, 0]);
        e.observe(&t, &a, 0.25, 1.0);
        e.observe(&t, &a, 0.0, 1.0); // a stall: ignored
        assert_eq!(e.samples(TaskTypeId(1)), 1);
        assert!((e.slots(&t, &a) - 4.0).abs() < 1e-9);
        assert!(e.slots(&t, &Resources(vec![4, 0, 0])) < 4.0);
        // Another class is untouched.
        assert!((e.slots(&task(2, [2, 0, 0]), &a) - PRIOR_SLOTS).abs() < 1e-9);
    }

    #[test]
    fn profile_hints_speak_before_any_observation_and_yield_to_observations() {
        // The class truly takes 1 + 8/g slots; its submitter's profile says so at 1 and 4
        // GPUs. Before any progress the estimate is the hints', not the prior's.
        let truth = |g: f64| 1.0 + 8.0 / g;
        let mut e = est();
        let t = task(4, [1, 1, 1]);
        let at = |g: u32| Resources(vec![1, g, 1]);
        let hints = [(at(1), truth(1.0)), (at(4), truth(4.0))];
        e.hint(&t, &hints);
        assert_eq!(e.samples(TaskTypeId(4)), 2);
        for g in [1u32, 2, 4, 8] {
            let want = truth(f64::from(g));
            assert!((e.slots(&t, &at(g)) - want).abs() < 1e-6 * want, "g {g}");
        }
        // The same hints again (another task of the class): counted once, nothing changes.
        let mut u = t.clone();
        u.id = TaskId(2);
        let before = e.slots(&t, &at(2));
        e.hint(&u, &hints);
        assert_eq!(e.samples(TaskTypeId(4)), 2);
        assert_eq!(e.slots(&t, &at(2)).to_bits(), before.to_bits());
        // Hints without a time are ignored; another class is untouched.
        e.hint(&task(5, [1, 1, 1]), &[(at(2), 0.0), (at(2), f64::NAN)]);
        assert_eq!(e.samples(TaskTypeId(5)), 0);
        // The tasks turn out twice as slow as the profile says: observations outweigh it.
        for id in 10..40u64 {
            let mut v = t.clone();
            v.id = TaskId(id);
            for g in [1u32, 2, 4] {
                e.observe(&v, &at(g), 1.0 / (2.0 * truth(f64::from(g))), 1.0);
            }
        }
        let r = e.slots(&t, &at(2)) / truth(2.0);
        assert!(r > 1.9 && r < 2.05, "{r}");
    }

    #[test]
    fn hints_are_a_bounded_set_the_same_in_any_order() {
        let t = task(6, [1, 0, 1]);
        let hints: Vec<(Resources, f64)> = (0..(MAX_HINTS as u32 + 20))
            .map(|i| (Resources(vec![1 + i % 9, 0, 1]), 5.0 + f64::from(i)))
            .collect();
        let run = |order: Vec<usize>| {
            let mut e = est();
            for chunk in order.chunks(7) {
                let h: Vec<(Resources, f64)> = chunk.iter().map(|&i| hints[i].clone()).collect();
                e.hint(&t, &h);
            }
            (
                e.samples(TaskTypeId(6)),
                e.slots(&t, &Resources(vec![4, 0, 1])),
            )
        };
        let forward: Vec<usize> = (0..hints.len()).collect();
        let backward: Vec<usize> = forward.iter().rev().copied().collect();
        let (n, a) = run(forward);
        let (m, b) = run(backward);
        assert_eq!(n, MAX_HINTS);
        assert_eq!((n, a.to_bits()), (m, b.to_bits()));
    }

    #[test]
    fn the_order_samples_come_in_changes_nothing() {
        // Agents hear progress in other orders than the simulator (each task's own reports in
        // time order, the tasks interleaved otherwise); their estimates must agree to the bit.
        let samples: Vec<(u64, u32, u32, f64)> = (0..40u32)
            .map(|i| {
                (
                    u64::from(1 + i % 4),
                    1 + i % 5,
                    i % 3,
                    0.013 + 0.0071 * f64::from(i % 7),
                )
            })
            .collect();
        let run = |order: &[usize]| {
            let mut e = est();
            for &i in order {
                let (id, c, g, d) = samples[i];
                let mut t = task(0, [1, 0, 1]);
                t.id = TaskId(id);
                e.observe(&t, &Resources(vec![c, g, 1]), d, 1.0);
            }
            let t = task(0, [1, 0, 1]);
            [
                e.slots(&t, &Resources(vec![3, 1, 1])),
                e.slots(&t, &Resources(vec![7, 2, 1])),
            ]
        };
        let in_time: Vec<usize> = (0..samples.len()).collect();
        // Task by task, each task's samples still in their own order.
        let mut by_task = in_time.clone();
        by_task.sort_by_key(|&i| std::cmp::Reverse(samples[i].0));
        assert_ne!(in_time, by_task);
        assert_eq!(
            run(&in_time).map(f64::to_bits),
            run(&by_task).map(f64::to_bits)
        );
    }

    #[test]
    fn task_sizes_do_not_bend_the_shape() {
        // Tasks of one class differ 30-fold in size, and the large ones happen to run with more
        // GPUs (as they would where sharing hands spare units to whoever still runs): the
        // samples' job times then *grow* with the GPUs. Each task's own consecutive samples at
        // two allocations say how the class responds; the estimate must follow them.
        let shape = |c: f64, g: f64| 1.0 + 4.0 / c + 6.0 / g;
        let mut e = est();
        for id in 0..30u64 {
            let size = if id % 2 == 0 { 1.0 } else { 30.0 };
            let base = if size > 1.0 { 4 } else { 1 };
            let mut t = task(7, [1, 1, 1]);
            t.id = TaskId(id);
            for (c, g) in [(2u32, base), (2, base + 1), (3, base + 1), (2, base)] {
                let slots = size * shape(f64::from(c), f64::from(g));
                e.observe(&t, &Resources(vec![c, g, 1]), 1.0 / slots, 1.0);
            }
            e.forget(t.id);
        }
        let t = task(7, [1, 1, 1]);
        let at = |c: u32, g: u32| e.slots(&t, &Resources(vec![c, g, 1]));
        for ((c0, g0), (c1, g1)) in [((2, 1), (2, 5)), ((1, 1), (4, 1)), ((2, 2), (3, 4))] {
            let want = shape(f64::from(c1), f64::from(g1)) / shape(f64::from(c0), f64::from(g0));
            let got = at(c1, g1) / at(c0, g0);
            assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        }
        assert!(at(2, 5) < at(2, 1), "more GPUs estimated slower");
    }

    #[test]
    fn samples_at_an_allocation_no_pair_touches_are_not_overruled_by_the_pairs() {
        // A class that scales linearly (32 slots on one core, 8 on four): its elastic tasks
        // re-share between one and two cores and their pairs, measured across short re-shares,
        // say two cores gain less than they do (0.64 where the truth is 0.5); its rigid tasks
        // run only at four, 40 samples of 8 slots. The estimate at four must follow those
        // samples, not the pairs' shape carried out to four cores (15.8 slots).
        let mut e = est();
        for id in 0..4u64 {
            let mut t = task(5, [1, 0, 1]);
            t.id = TaskId(id);
            for (c, slots) in [(1u32, 32.0), (1, 32.0), (2, 32.0 * 0.64), (2, 32.0 * 0.64)] {
                e.observe(&t, &Resources(vec![c, 0, 1]), 1.0 / slots, 1.0);
            }
            e.forget(t.id);
        }
        for id in 10..14u64 {
            let mut t = task(5, [4, 0, 1]);
            t.id = TaskId(id);
            for _ in 0..10 {
                e.observe(&t, &Resources(vec![4, 0, 1]), 1.0 / 8.0, 1.0);
            }
            e.forget(t.id);
        }
        let t = task(5, [1, 0, 1]);
        let four = e.slots(&t, &Resources(vec![4, 0, 1]));
        assert!(
            (four - 8.0).abs() < 0.15 * 8.0,
            "{four} slots at four cores"
        );
        let one = e.slots(&t, &Resources(vec![1, 0, 1]));
        assert!(one > four, "{one} at one core, {four} at four");
    }

    #[test]
    fn declared_work_scales_each_task_s_estimate() {
        // Tasks of one class differ 30-fold in size at one allocation: without declarations
        // every task is estimated at the class's mean; with them, at its own size.
        let slots_per_epoch = 2.0;
        let alloc = Resources(vec![2, 1, 1]);
        let run = |declare: bool| {
            let mut e = est();
            for id in 0..20u64 {
                let epochs = if id % 2 == 0 { 1.0 } else { 30.0 };
                let mut t = task(3, [1, 1, 1]);
                t.id = TaskId(id);
                if declare {
                    e.declare(&t, epochs);
                }
                e.observe(&t, &alloc, 0.1, 0.1 * epochs * slots_per_epoch);
                e.forget(t.id);
            }
            e
        };
        let with = run(true);
        let mut short = task(3, [1, 1, 1]);
        short.id = TaskId(100);
        let mut long = short.clone();
        long.id = TaskId(101);
        let mut unsaid = short.clone();
        unsaid.id = TaskId(102);
        let mut e = with.clone();
        e.declare(&short, 1.0);
        e.declare(&long, 30.0);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6 * b;
        assert!(close(e.slots(&short, &alloc), 2.0));
        assert!(close(e.slots(&long, &alloc), 60.0));
        // Undeclared: the class's mean declared work (15.5 epochs).
        assert!(close(e.slots(&unsaid, &alloc), 31.0));
        let without = run(false);
        assert!(close(without.slots(&long, &alloc), 31.0));
        // Bad declarations are ignored, and a task declares once.
        e.declare(&unsaid, f64::NAN);
        e.declare(&unsaid, -1.0);
        e.declare(&unsaid, 1e-12);
        assert!(close(e.slots(&unsaid, &alloc), 31.0));
        e.declare(&long, 1.0);
        assert!(close(e.slots(&long, &alloc), 60.0));
    }

    #[test]
    fn before_any_sample_the_prior_scales_by_work_over_the_mean() {
        let mut e = est();
        let a = Resources(vec![1, 0, 1]);
        let mut small = task(5, [1, 0, 1]);
        let mut big = small.clone();
        big.id = TaskId(2);
        let prior = e.slots(&small, &a);
        e.declare(&small, 1.0);
        e.declare(&big, 3.0);
        assert!((e.slots(&small, &a) - prior / 2.0).abs() < 1e-9);
        // A lone task is its class's mean, exactly.
        let mut lone = Estimator::new(e.kinds());
        lone.declare(&big, 0.3);
        assert_eq!(lone.relative_work(&big).to_bits(), 1f64.to_bits());
        assert_eq!(lone.slots(&big, &a).to_bits(), prior.to_bits());
        assert!((e.slots(&big, &a) - prior * 1.5).abs() < 1e-9);
        // A class that declares nothing is untouched by another's declarations.
        small.ty = TaskTypeId(6);
        small.id = TaskId(9);
        assert_eq!(e.slots(&small, &a).to_bits(), prior.to_bits());
    }

    #[test]
    fn a_kind_only_the_samples_vary_is_not_taken_for_useless() {
        // Tasks on a 1-GPU box and on a 4-GPU box, each re-shared CPUs only: the pairs vary
        // CPUs alone. GPUs still speed the class up (the samples say so), and must stay in the
        // estimate, or a gain-aware share would never hand a GPU out again to learn better.
        let truth = |c: f64, g: f64| 1.0 + 4.0 / (1.0 + c) + 12.0 / (1.0 + g);
        let mut e = est();
        for id in 0..10u64 {
            let g = if id % 2 == 0 { 1 } else { 4 };
            let mut t = task(3, [1, 1, 1]);
            t.id = TaskId(id);
            for c in [1u32, 2, 3] {
                let slots = truth(f64::from(c), f64::from(g));
                e.observe(&t, &Resources(vec![c, g, 1]), 1.0 / slots, 1.0);
            }
        }
        let t = task(3, [1, 1, 1]);
        let at = |g: u32| e.slots(&t, &Resources(vec![2, g, 1]));
        assert!(at(4) < 0.8 * at(1), "{} vs {}", at(4), at(1));
    }

    proptest! {
        #[test]
        fn more_of_any_kind_is_never_estimated_slower(
            samples in proptest::collection::vec((1u32..16, 0u32..8, 1u32..8, 0.01f64..1.0), 0..30),
            a in (1u32..16, 0u32..8, 1u32..8),
            k in 0usize..3,
        ) {
            let mut e = est();
            let t = task(0, [1, 0, 1]);
            for (c, g, m, d) in samples {
                e.observe(&t, &Resources(vec![c, g, m]), d, 1.0);
            }
            let base = Resources(vec![a.0, a.1, a.2]);
            let mut more = base.clone();
            more.0[k] += 1;
            let (x, y) = (e.slots(&t, &base), e.slots(&t, &more));
            prop_assert!(x.is_finite() && x > 0.0);
            prop_assert!(y <= x + 1e-9, "{y} > {x}");
        }

        /// Agents hear the tasks' progress in other orders than the simulator: however the
        /// tasks' events interleave (each task's own in order), the estimates and the measured
        /// switch cost are the same to the bit.
        #[test]
        fn estimates_and_costs_do_not_depend_on_the_order_tasks_are_heard_in(
            events in proptest::collection::vec(
                proptest::collection::vec((0u32..4, 0.01f64..1.0, proptest::bool::ANY), 1..6),
                1..5,
            ),
            seed in proptest::prelude::any::<u64>(),
        ) {
            let feed = |order: &[usize]| {
                let mut e = est();
                let mut next = vec![0usize; events.len()];
                for &i in order {
                    let (g, d, switch) = events[i][next[i]];
                    next[i] += 1;
                    let mut t = task(0, [1, 0, 1]);
                    t.id = TaskId(i as u64);
                    let a = Resources(vec![2, g, 1]);
                    // Each task's first event is its run's start (its start-up).
                    if next[i] == 1 {
                        e.observe_start(&t, &a, d, 1.0);
                    } else if switch {
                        e.observe_switch(&t, &a, d, 1.0);
                    } else {
                        e.observe(&t, &a, d, 1.0);
                    }
                }
                let t = task(0, [1, 0, 1]);
                let slots: Vec<u64> = (0..4)
                    .map(|g| e.slots(&t, &Resources(vec![2, g, 1])).to_bits())
                    .collect();
                let costs = [e.switch_cost(TaskTypeId(0)), e.start_cost(TaskTypeId(0))];
                (slots, costs.map(f64::to_bits), e.samples(TaskTypeId(0)))
            };
            let in_turn: Vec<usize> = events
                .iter()
                .enumerate()
                .flat_map(|(i, ev)| std::iter::repeat_n(i, ev.len()))
                .collect();
            // A seeded shuffle of the same multiset: each task's events keep their order.
            let mut shuffled = in_turn.clone();
            let mut x = seed | 1;
            for j in (1..shuffled.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                shuffled.swap(j, (x % (j as u64 + 1)) as usize);
            }
            prop_assert_eq!(feed(&in_turn), feed(&shuffled));
        }
    }
}
