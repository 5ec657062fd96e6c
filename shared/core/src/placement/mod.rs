//! Locality-aware online placement of parameter-server training jobs, after Yu, Liu, Wu, Ji and
//! Bentley (arXiv 2108.02917): decide, as each job arrives, how many workers it gets, where they
//! run and where its parameter servers (PS) sit, slot by slot, so that jobs finish soon; earlier
//! jobs' commitments are never revoked.
//!
//! The model (ours; the paper's abstract states the goal and the method, not the formulas):
//!
//! - Time is cut into slots of `slot_seconds`. In each slot a running job has its `ps` parameter
//!   servers on one box (the *host*) and between `workers.0` and `workers.1` workers spread over
//!   the boxes; each worker and each PS holds its demand on its box for the whole slot.
//! - A worker on box `m` does `r(m, h) = 1 / (compute + 2·gradient_bytes / bw(m, h))` iterations
//!   per second (push gradients, pull parameters), where `bw` is the `internal` bandwidth when
//!   `m` is the host and the `external` bandwidth otherwise. Edge links are slow, so a remote
//!   worker is worth much less than a local one.
//! - The host's network interface carries every remote worker's traffic: their
//!   `Σ 2·gradient_bytes·r` must stay within `external` bytes per second.
//! - A job is done when its workers' iterations add up to `iterations`; its training time runs
//!   from its arrival to that moment (fractions of a slot count).
//!
//! Every one of these is linear in the number of workers per (box, host) pair once the host is
//! fixed, which is what makes the placement a mixed packing (capacities, interfaces) and
//! covering (iterations) integer program: the crate `tapfinger-jobs` solves its relaxation with
//! `good_lp` and rounds it (a solver is a heavy dependency, kept out of the core). Here
//! ([`simple`]): locality-oblivious spreading, pack-first, and the exact optimum by enumeration
//! for small instances.

pub mod gang;
pub mod random;
pub mod simple;

use serde::{Deserialize, Serialize};

/// Boxes, their capacities and the network between them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cluster {
    /// Units of each resource kind per box (the same kinds, in the same order, on every box).
    pub capacity: Vec<Vec<u32>>,
    /// Bytes per second between a worker and a PS on the same box.
    pub internal: f64,
    /// Bytes per second between two boxes, and through a PS host's network interface.
    pub external: f64,
    /// Seconds per slot.
    pub slot_seconds: f64,
}

impl Cluster {
    /// Number of boxes.
    pub fn boxes(&self) -> usize {
        self.capacity.len()
    }
}

/// A parameter-server training job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Slot in which it arrives.
    pub arrival: usize,
    /// Iterations (worker steps) to train.
    pub iterations: f64,
    /// Seconds of compute per iteration of one worker.
    pub compute: f64,
    /// Bytes of gradients (and of parameters) exchanged per iteration.
    pub gradient_bytes: f64,
    /// Fewest and most workers while it runs.
    pub workers: (u32, u32),
    /// Parameter servers (all on the host).
    pub ps: u32,
    /// Units of each kind one worker holds.
    pub worker_demand: Vec<u32>,
    /// Units of each kind one PS holds.
    pub ps_demand: Vec<u32>,
}

impl Job {
    /// Iterations per second of one worker on box `m` with the PS on `host`.
    pub fn rate(&self, c: &Cluster, m: usize, host: usize) -> f64 {
        let bw = if m == host { c.internal } else { c.external };
        1.0 / (self.compute + 2.0 * self.gradient_bytes / bw)
    }

    /// The same job with no fewest workers: what a placement being built up or trimmed is
    /// checked against before the minimum applies.
    pub fn without_minimum(&self) -> Job {
        Job {
            workers: (0, self.workers.1),
            ..self.clone()
        }
    }

    /// Most remote workers the host's interface carries.
    pub fn max_remote(&self, c: &Cluster) -> u32 {
        let per =
            2.0 * self.gradient_bytes / (self.compute + 2.0 * self.gradient_bytes / c.external);
        // A tiny slack so that a float product at the limit still counts as within it.
        ((c.external / per) * (1.0 + 1e-9))
            .floor()
            .min(f64::from(u32::MAX)) as u32
    }
}

/// Where a job runs in one slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotPlacement {
    /// The slot.
    pub slot: usize,
    /// The box holding the job's PS.
    pub host: usize,
    /// Workers per box.
    pub workers: Vec<u32>,
}

impl SlotPlacement {
    /// Total workers.
    pub fn total(&self) -> u32 {
        self.workers.iter().sum()
    }

    /// Iterations it does in one full slot.
    pub fn iterations(&self, job: &Job, c: &Cluster) -> f64 {
        self.workers
            .iter()
            .enumerate()
            .map(|(m, &n)| f64::from(n) * job.rate(c, m, self.host))
            .sum::<f64>()
            * c.slot_seconds
    }
}

/// Free units per box and kind, slot by slot (slots never touched are wholly free).
#[derive(Debug, Clone)]
pub struct Free {
    /// Each box's units per kind.
    capacity: Vec<Vec<u32>>,
    /// Free units per slot, box and kind, for the slots touched so far.
    slots: Vec<Vec<Vec<u32>>>,
}

impl Free {
    /// A cluster with nothing placed.
    pub fn new(c: &Cluster) -> Self {
        Self {
            capacity: c.capacity.clone(),
            slots: Vec::new(),
        }
    }

    /// Free units of kind `k` on box `m` in slot `t`.
    pub fn get(&self, t: usize, m: usize, k: usize) -> u32 {
        self.slots.get(t).map_or(self.capacity[m][k], |s| s[m][k])
    }

    fn slot_mut(&mut self, t: usize) -> &mut Vec<Vec<u32>> {
        while self.slots.len() <= t {
            self.slots.push(self.capacity.clone());
        }
        &mut self.slots[t]
    }

    /// Take units away in slot `t` (background load, or another job).
    pub fn take(&mut self, t: usize, m: usize, k: usize, units: u32) {
        let s = self.slot_mut(t);
        s[m][k] = s[m][k].saturating_sub(units);
    }

    /// Whether `p` fits job `j` in its slot: the worker range, every box's free units (workers
    /// and, on the host, the PS) and the host's interface.
    pub fn fits(&self, c: &Cluster, j: &Job, p: &SlotPlacement) -> bool {
        let total = p.total();
        if total < j.workers.0 || total > j.workers.1 || p.host >= c.boxes() {
            return false;
        }
        if total - p.workers[p.host] > j.max_remote(c) {
            return false;
        }
        (0..c.boxes()).all(|m| {
            (0..c.capacity[m].len()).all(|k| {
                let mut need = p.workers[m] * j.worker_demand[k];
                if m == p.host {
                    need += j.ps * j.ps_demand[k];
                }
                need <= self.get(p.slot, m, k)
            })
        })
    }

    /// Hold what `p` uses.
    pub fn commit(&mut self, j: &Job, p: &SlotPlacement) {
        for m in 0..p.workers.len() {
            for k in 0..j.worker_demand.len() {
                let mut need = p.workers[m] * j.worker_demand[k];
                if m == p.host {
                    need += j.ps * j.ps_demand[k];
                }
                self.take(p.slot, m, k, need);
            }
        }
    }
}

/// A job's placement over the slots it runs in, and when it finishes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Schedule {
    /// Placements in slot order (a slot not listed: the job waits).
    pub slots: Vec<SlotPlacement>,
    /// Training time in slots from arrival to the last iteration.
    pub training_slots: f64,
    /// Worker-slots held.
    pub worker_slots: u32,
}

/// Turn a list of placements into a schedule: the job finishes in the first slot where its
/// iterations add up, partway through it; placements after that slot are dropped. `None` when
/// they never add up.
pub fn finish(c: &Cluster, j: &Job, placements: Vec<SlotPlacement>) -> Option<Schedule> {
    let mut done = 0.0;
    let mut kept = Vec::new();
    for p in placements {
        let it = p.iterations(j, c);
        if it <= 0.0 {
            continue;
        }
        let slot = p.slot;
        kept.push(p);
        if done + it >= j.iterations * (1.0 - 1e-12) {
            let frac = ((j.iterations - done) / it).clamp(0.0, 1.0);
            let worker_slots = kept.iter().map(SlotPlacement::total).sum();
            return Some(Schedule {
                slots: kept,
                training_slots: (slot - j.arrival) as f64 + frac,
                worker_slots,
            });
        }
        done += it;
    }
    None
}

/// Why job `j` can never run on cluster `c`, even empty, or `None` if it can: its PS and fewest
/// workers need more than the whole cluster, or they fit the cluster's total but not its boxes
/// (a Kueue user's "admitted but unschedulable": 8 GPUs free as 2 × 4 do not hold a 6-GPU
/// worker), or the host's interface cannot carry the remote workers the fewest need. Said at
/// submit, so that such a job is refused rather than left waiting forever.
pub fn never_fits(c: &Cluster, j: &Job) -> Option<String> {
    let free = Free::new(c);
    if simple::Exact::best_slot_within(c, &free, j, 0, j.workers.0.max(1)).is_some() {
        return None;
    }
    let kinds = j.worker_demand.len();
    let need: Vec<u64> = (0..kinds)
        .map(|k| u64::from(j.ps * j.ps_demand[k]) + u64::from(j.workers.0 * j.worker_demand[k]))
        .collect();
    let total: Vec<u64> = (0..kinds)
        .map(|k| c.capacity.iter().map(|b| u64::from(b[k])).sum())
        .collect();
    if need.iter().zip(&total).any(|(n, t)| n > t) {
        return Some(format!(
            "its {} PS and {} workers need {need:?} units in all; the whole cluster has {total:?}",
            j.ps, j.workers.0
        ));
    }
    let largest: Vec<u32> = (0..kinds)
        .map(|k| c.capacity.iter().map(|b| b[k]).max().unwrap_or(0))
        .collect();
    Some(format!(
        "its {} PS and {} workers fit the cluster's total ({need:?} of {total:?} units) but not its boxes: no box holds the PS ({:?} each) with room left, the largest box has {largest:?}, and the host's interface carries at most {} remote workers",
        j.ps,
        j.workers.0,
        j.ps_demand,
        j.max_remote(c)
    ))
}

/// Slots a placer may look ahead from a job's arrival before it calls the job unplaceable.
pub const MAX_SLOTS: usize = 400;

/// A way to place one job on what is free.
pub trait Placer {
    /// Name in tables.
    fn name(&self) -> &'static str;
    /// The job's schedule on `free`, or `None` if it cannot run within [`MAX_SLOTS`].
    fn place(&self, c: &Cluster, free: &Free, j: &Job, rng: &mut crate::Rng) -> Option<Schedule>;
}

/// What an online run gives: each job's training time in slots (`None`: refused, never fits).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    /// Per job, in arrival order.
    pub training_slots: Vec<Option<f64>>,
}

impl Outcome {
    /// Sum of the placed jobs' training times.
    pub fn total(&self) -> f64 {
        self.training_slots.iter().flatten().sum()
    }

    /// Mean over the placed jobs.
    pub fn mean(&self) -> f64 {
        let n = self.training_slots.iter().flatten().count();
        self.total() / n.max(1) as f64
    }
}

/// Place jobs online in arrival order on `free` (which may carry background load): each job is
/// placed once, on what the jobs before it left, and its placement is never revisited.
pub fn run_online(
    c: &Cluster,
    mut free: Free,
    jobs: &[Job],
    placer: &dyn Placer,
    seed: u64,
) -> Outcome {
    let mut rng = crate::seeded_rng(seed);
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| jobs[i].arrival);
    let mut out = vec![None; jobs.len()];
    for i in order {
        if let Some(s) = placer.place(c, &free, &jobs[i], &mut rng) {
            for p in &s.slots {
                free.commit(&jobs[i], p);
            }
            out[i] = Some(s.training_slots);
        }
    }
    Outcome {
        training_slots: out,
    }
}
