//! The locality-aware placer: the job's placement program over a horizon of slots, relaxed to a
//! linear program (solved by `good_lp` with its pure-Rust `microlp` backend), rounded randomly
//! with a seeded RNG, repaired, best of several draws; the horizon is the shortest for which
//! the relaxation is feasible (binary search). This is our reading of Yu et al.'s method; their
//! abstract states "an approximation algorithm based on randomized rounding" of "a mixed packing
//! and covering integer program".
//!
//! For slots `t` of the horizon and boxes `h`, `m`, the variables are `y[t][h]` (the PS sit on
//! `h` in slot `t`; 0–1 relaxed to [0, 1]) and `n[t][h][m]` (workers on `m` with the PS on `h`;
//! integers relaxed to ≥ 0). Constraints:
//!
//! - one host per slot: `Σ_h y[t][h] ≤ 1`;
//! - the worker range: `workers.0 · y[t][h] ≤ Σ_m n[t][h][m] ≤ workers.1 · y[t][h]`;
//! - packing, per box, kind and slot: workers' and (on the host) PS demand within what is free;
//! - packing, the host's interface: `Σ_{m≠h} n[t][h][m] ≤ max_remote · y[t][h]`;
//! - covering: `Σ n[t][h][m] · r(m, h) · slot_seconds ≥ iterations`.
//!
//! The objective is the job's work weighted by the slot it is done in (the LP's proxy for its
//! completion time: local workers do more per slot, so locality comes out of it), plus a small
//! weight on the worker- and PS-slots held, so that where the time is the same the job takes as
//! little as it needs and leaves room for the jobs after it.

use good_lp::{Expression, ProblemVariables, ResolutionError, Solution, SolverModel, variable};
use rand::RngExt;
use tapfinger_core::placement::gang::{GangPlacer, PlaceNow};
use tapfinger_core::placement::simple::{pack_slot, per_slot};
use tapfinger_core::placement::{Cluster, Free, Job, Placer, Schedule, SlotPlacement, finish};

/// The LP-rounding placer.
#[derive(Debug, Clone, Copy)]
pub struct Rounding {
    /// Rounding draws per horizon; the best is kept.
    pub draws: usize,
}

impl Rounding {
    /// The default: 8 draws per horizon (the placer `locality` stands for).
    pub const DEFAULT: Self = Self { draws: 8 };
}

impl Default for Rounding {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A relaxed solution: `y[t][h]` and `n[t][h][m]`, `t` from the job's arrival.
struct Relaxed {
    /// `y[t][h]`: the share of slot `t` the job's PS is on host `h`.
    y: Vec<Vec<f64>>,
    /// `n[t][h][m]`: its workers on box `m` with the PS on `h`, in slot `t`.
    n: Vec<Vec<Vec<f64>>>,
}

/// What the relaxation asks for.
#[derive(Clone, Copy, PartialEq)]
enum Goal {
    /// Cover the job's iterations, as early as possible (the module doc's program).
    Cover,
    /// The most iterations in the job's arrival slot, no covering: a placement that is kept
    /// until the job ends ([`Rounding::place_now`]).
    MostWork,
}

/// Solve the relaxation over `horizon` slots from the job's arrival; `None` when infeasible.
// Indices written as in the program above (t, h, m, k) read better than iterator chains here.
#[allow(clippy::needless_range_loop)]
fn relax(c: &Cluster, free: &Free, j: &Job, horizon: usize, goal: Goal) -> Option<Relaxed> {
    let boxes = c.boxes();
    let kinds = j.worker_demand.len();
    let mut vars = ProblemVariables::new();
    let y: Vec<Vec<_>> = (0..horizon)
        .map(|_| {
            (0..boxes)
                .map(|_| vars.add(variable().min(0.0).max(1.0)))
                .collect()
        })
        .collect();
    let n: Vec<Vec<Vec<_>>> = (0..horizon)
        .map(|_| {
            (0..boxes)
                .map(|_| (0..boxes).map(|_| vars.add(variable().min(0.0))).collect())
                .collect()
        })
        .collect();
    // Work done in slot t, as a fraction of the job, weighs t + ½ (the LP's proxy for the
    // job's completion time: work pushed earlier finishes it sooner); the units held weigh a
    // tenth of that at most (fewer, local workers where the time is the same).
    let units = 0.1 / (f64::from(j.workers.1 + j.ps) * horizon as f64);
    // The least work one worker does in a slot (remote), as a fraction of the job.
    let least = j.rate(c, 1.min(boxes - 1), 0) * c.slot_seconds / j.iterations;
    let mut objective = Expression::with_capacity(horizon * boxes * (boxes + 1));
    for t in 0..horizon {
        let when = t as f64 + 0.5;
        for h in 0..boxes {
            let ps_weight = match goal {
                Goal::Cover => units,
                Goal::MostWork => units * least,
            };
            objective.add_mul(ps_weight * f64::from(j.ps), y[t][h]);
            for m in 0..boxes {
                let work = j.rate(c, m, h) * c.slot_seconds / j.iterations;
                let weight = match goal {
                    Goal::Cover => when * work + units,
                    // Minimising minus the work; units held weigh a tenth of a worker's
                    // least work at most, so they only break ties.
                    Goal::MostWork => -work + units * least,
                };
                objective.add_mul(weight, n[t][h][m]);
            }
        }
    }
    let mut model = vars.minimise(objective).using(good_lp::microlp);
    let mut covered = Expression::with_capacity(horizon * boxes * boxes);
    for t in 0..horizon {
        let slot = j.arrival + t;
        let mut hosts = Expression::with_capacity(boxes);
        for h in 0..boxes {
            hosts.add_mul(1.0, y[t][h]);
            let mut total = Expression::with_capacity(boxes);
            let mut remote = Expression::with_capacity(boxes);
            for m in 0..boxes {
                total.add_mul(1.0, n[t][h][m]);
                if m != h {
                    remote.add_mul(1.0, n[t][h][m]);
                }
                covered.add_mul(j.rate(c, m, h) * c.slot_seconds, n[t][h][m]);
            }
            let mut lo = Expression::with_capacity(1);
            lo.add_mul(f64::from(j.workers.0), y[t][h]);
            let mut hi = Expression::with_capacity(1);
            hi.add_mul(f64::from(j.workers.1), y[t][h]);
            let mut nic = Expression::with_capacity(1);
            nic.add_mul(f64::from(j.max_remote(c)), y[t][h]);
            model.add_constraint(total.clone().geq(lo));
            model.add_constraint(total.leq(hi));
            model.add_constraint(remote.leq(nic));
        }
        model.add_constraint(hosts.leq(1.0));
        for m in 0..boxes {
            for k in 0..kinds {
                let mut used = Expression::with_capacity(boxes + 1);
                for h in 0..boxes {
                    used.add_mul(f64::from(j.worker_demand[k]), n[t][h][m]);
                }
                used.add_mul(f64::from(j.ps * j.ps_demand[k]), y[t][m]);
                model.add_constraint(used.leq(f64::from(free.get(slot, m, k))));
            }
        }
    }
    if goal == Goal::Cover {
        model.add_constraint(covered.geq(j.iterations));
    }
    match model.solve() {
        Ok(s) => Some(Relaxed {
            y: y.iter()
                .map(|r| r.iter().map(|&v| s.value(v)).collect())
                .collect(),
            n: n.iter()
                .map(|r| {
                    r.iter()
                        .map(|q| q.iter().map(|&v| s.value(v)).collect())
                        .collect()
                })
                .collect(),
        }),
        // Infeasible is the expected "horizon too short". A solver failure is treated the same:
        // the caller then tries a longer horizon, and falls back to pack-first's schedule.
        Err(
            ResolutionError::Infeasible | ResolutionError::Unbounded | ResolutionError::Other(_),
        )
        | Err(ResolutionError::Str(_)) => None,
    }
}

/// One rounding of the relaxed solution: per slot a host drawn with probability `y`, workers
/// rounded up or down at random around `n / y`, then repaired until the slot fits.
fn round(
    c: &Cluster,
    free: &Free,
    j: &Job,
    r: &Relaxed,
    rng: &mut tapfinger_core::Rng,
) -> Vec<SlotPlacement> {
    let boxes = c.boxes();
    let mut out = Vec::new();
    for (t, ys) in r.y.iter().enumerate() {
        let u: f64 = rng.random_range(0.0..1.0);
        let mut acc = 0.0;
        let Some(h) = (0..boxes).find(|&h| {
            acc += ys[h];
            u < acc
        }) else {
            continue;
        };
        let y = ys[h].max(1e-9);
        let mut p = SlotPlacement {
            slot: j.arrival + t,
            host: h,
            workers: (0..boxes)
                .map(|m| {
                    let x = (r.n[t][h][m] / y).max(0.0);
                    let base = x.floor();
                    let up = rng.random_range(0.0..1.0) < x - base;
                    (base as u32) + u32::from(up)
                })
                .collect(),
        };
        if repair(c, free, j, &mut p) {
            out.push(p);
        }
    }
    out
}

/// Make a placement fit: drop workers (remote ones first, from the box where a worker does
/// least) while it does not, then top it up to the job's minimum on the host first. `false`
/// when it cannot be made to fit (the PS do not fit on the host, or the minimum cannot be met).
fn repair(c: &Cluster, free: &Free, j: &Job, p: &mut SlotPlacement) -> bool {
    let loose = j.without_minimum();
    // Remote boxes first, the slowest first; the host last.
    let mut drop_order: Vec<usize> = (0..c.boxes()).filter(|&m| m != p.host).collect();
    drop_order.push(p.host);
    while p.total() > j.workers.1 || (p.total() > 0 && !free.fits(c, &loose, p)) {
        let Some(&m) = drop_order.iter().find(|&&m| p.workers[m] > 0) else {
            break;
        };
        p.workers[m] -= 1;
    }
    if !free.fits(c, &loose, p) {
        return false;
    }
    let mut add_order = vec![p.host];
    add_order.extend((0..c.boxes()).filter(|&m| m != p.host));
    while p.total() < j.workers.0 {
        let Some(m) = add_order.iter().copied().find(|&m| {
            let mut q = p.clone();
            q.workers[m] += 1;
            free.fits(c, &loose, &q)
        }) else {
            return false;
        };
        p.workers[m] += 1;
    }
    p.total() > 0
}

/// Where the rounding fell short of the job's work, add workers in the horizon's earliest slots
/// first (on the host, then on the roomiest other boxes, while they fit), and pack-first
/// placements in its slots that drew no host, until the work is covered or nothing more fits.
/// (Rounding keeps each slot's expected work; a short draw would otherwise push the job past
/// the horizon.)
fn augment(c: &Cluster, free: &Free, j: &Job, placements: &mut Vec<SlotPlacement>, horizon: usize) {
    let mut done: f64 = placements.iter().map(|p| p.iterations(j, c)).sum();
    let loose = j.without_minimum();
    for t in j.arrival..j.arrival + horizon {
        if done >= j.iterations {
            break;
        }
        let Some(i) = placements.iter().position(|p| p.slot == t) else {
            if let Some(p) = pack_slot(c, free, j, t) {
                done += p.iterations(j, c);
                placements.push(p);
                placements.sort_by_key(|p| p.slot);
            }
            continue;
        };
        let p = &mut placements[i];
        while done < j.iterations && p.total() < j.workers.1 {
            let mut order: Vec<usize> = (0..c.boxes()).filter(|&m| m != p.host).collect();
            order.sort_by_key(|&m| {
                std::cmp::Reverse(
                    (0..c.capacity[m].len())
                        .map(|k| free.get(t, m, k))
                        .sum::<u32>(),
                )
            });
            order.insert(0, p.host);
            let Some(m) = order.into_iter().find(|&m| {
                let mut q = p.clone();
                q.workers[m] += 1;
                free.fits(c, &loose, &q)
            }) else {
                break;
            };
            p.workers[m] += 1;
            done += j.rate(c, m, p.host) * c.slot_seconds;
        }
    }
}

/// Rounded placements over the horizon, then pack-first slots after it until the job is done.
fn complete(
    c: &Cluster,
    free: &Free,
    j: &Job,
    mut placements: Vec<SlotPlacement>,
    horizon: usize,
) -> Option<Schedule> {
    if let Some(s) = finish(c, j, placements.clone()) {
        return Some(s);
    }
    let done: f64 = placements.iter().map(|p| p.iterations(j, c)).sum();
    let rest = Job {
        arrival: j.arrival + horizon,
        iterations: j.iterations - done,
        ..j.clone()
    };
    let tail = per_slot(c, &rest, |t| pack_slot(c, free, &rest, t))?;
    placements.extend(tail.slots);
    finish(c, j, placements)
}

impl PlaceNow for Rounding {
    fn kind(&self) -> GangPlacer {
        GangPlacer::Locality
    }
    fn place_now(
        &self,
        c: &Cluster,
        free: &Free,
        j: &Job,
        rng: &mut tapfinger_core::Rng,
    ) -> Option<SlotPlacement> {
        Rounding::place_now(self, c, free, j, rng)
    }
}

impl Rounding {
    /// The placement in the job's arrival slot that it keeps until it ends (a gang,
    /// [`tapfinger_core::placement::gang`]): the relaxation of that slot's most iterations (no covering), rounded
    /// `draws` times and repaired, each draw topped up with workers (host first, then the
    /// roomiest boxes) while they fit; the draw with the most iterations is kept, then (the
    /// relaxation is often indifferent between hosts) the one whose host has the most room,
    /// as pack-first's, then the one with the fewest workers. Pack-first's placement is a
    /// candidate beside the draws, and stands in where the relaxation fails; `None` if nothing
    /// fits.
    pub fn place_now(
        &self,
        c: &Cluster,
        free: &Free,
        j: &Job,
        rng: &mut tapfinger_core::Rng,
    ) -> Option<SlotPlacement> {
        // Where the relaxation fails or no draw survives its repair, pack-first's placement
        // stands in (as in `place`).
        let packed = || pack_slot(c, free, j, j.arrival);
        let Some(relaxed) = relax(c, free, j, 1, Goal::MostWork) else {
            return packed();
        };
        let mut best: Option<(f64, SlotPlacement)> = None;
        let room =
            |p: &SlotPlacement| tapfinger_core::placement::simple::room(free, c, p.slot, p.host);
        let draws = (0..self.draws.max(1)).filter_map(|_| {
            let mut drawn = round(c, free, j, &relaxed, rng);
            augment(c, free, j, &mut drawn, 1);
            drawn.into_iter().find(|p| p.slot == j.arrival)
        });
        // Pack-first's placement is one more candidate: the relaxation may split the PS over
        // several hosts (each half host's workers count as local), and then every draw keeps
        // one host with half the workers.
        let candidates: Vec<SlotPlacement> = draws.chain(packed()).collect();
        for p in candidates {
            let it = p.iterations(j, c);
            let better = best.as_ref().is_none_or(|(b, q)| {
                let same = it <= *b * (1.0 + 1e-12);
                !same
                    || (it >= *b
                        && (room(&p), std::cmp::Reverse(p.total()))
                            > (room(q), std::cmp::Reverse(q.total())))
            });
            if better && free.fits(c, j, &p) {
                best = Some((it, p));
            }
        }
        best.map(|(_, p)| p).or_else(packed)
    }
}

impl Placer for Rounding {
    fn name(&self) -> &'static str {
        "lp-rounding"
    }

    fn place(
        &self,
        c: &Cluster,
        free: &Free,
        j: &Job,
        rng: &mut tapfinger_core::Rng,
    ) -> Option<Schedule> {
        // Pack-first's schedule is a feasible integer solution: its length bounds the horizon.
        let packed = per_slot(c, j, |t| pack_slot(c, free, j, t))?;
        let mut hi = packed.training_slots.ceil().max(1.0) as usize;
        let mut best_relaxed = relax(c, free, j, hi, Goal::Cover);
        let mut lo = 1;
        while lo < hi {
            let mid = (lo + hi) / 2;
            match relax(c, free, j, mid, Goal::Cover) {
                Some(r) => {
                    hi = mid;
                    best_relaxed = Some(r);
                }
                None => lo = mid + 1,
            }
        }
        let Some(relaxed) = best_relaxed else {
            return Some(packed);
        };
        let mut best: Option<Schedule> = None;
        for _ in 0..self.draws.max(1) {
            let mut placements = round(c, free, j, &relaxed, rng);
            augment(c, free, j, &mut placements, hi);
            let Some(s) = complete(c, free, j, placements, hi) else {
                continue;
            };
            let better = best.as_ref().is_none_or(|b| {
                (s.training_slots, s.worker_slots) < (b.training_slots, b.worker_slots)
            });
            if better {
                best = Some(s);
            }
        }
        best.or(Some(packed))
    }
}
