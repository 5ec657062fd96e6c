//! The placements the LP rounding is measured against, all slot by slot from the job's arrival:
//!
//! - [`Exact`]: in every slot the placement with the most iterations, found by enumerating every
//!   host and every split of workers over the boxes. Slots do not interact within one job, so
//!   this is the least training time the job can have on what is free (the brute-force optimum
//!   for small instances; it grows as `workers^boxes`).
//! - [`PackFirst`]: the PS on the box with the most room, then workers on the host first and on
//!   the roomiest other boxes after it, as many as fit.
//! - [`Spread`]: locality-oblivious: the PS on the box with the most room, workers dealt one per
//!   box in turn, as many as fit (how a scheduler that ignores the network spreads a gang).

use super::gang::{GangPlacer, PlaceNow};
use super::{Cluster, Free, Job, MAX_SLOTS, Placer, Schedule, SlotPlacement, finish};

/// Room left on box `m` in slot `t` (units of every kind added up).
pub fn room(free: &Free, c: &Cluster, t: usize, m: usize) -> u32 {
    (0..c.capacity[m].len()).map(|k| free.get(t, m, k)).sum()
}

/// Boxes by room, most first (ties: lower index).
fn by_room(free: &Free, c: &Cluster, t: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..c.boxes()).collect();
    v.sort_by_key(|&m| std::cmp::Reverse(room(free, c, t, m)));
    v
}

/// The roomiest box that can hold the job's PS in slot `t`.
fn host(free: &Free, c: &Cluster, j: &Job, t: usize) -> Option<usize> {
    by_room(free, c, t)
        .into_iter()
        .find(|&h| (0..c.capacity[h].len()).all(|k| j.ps * j.ps_demand[k] <= free.get(t, h, k)))
}

/// Add workers one at a time in the order `next` gives, while they fit.
fn fill(
    free: &Free,
    c: &Cluster,
    j: &Job,
    t: usize,
    h: usize,
    mut next: impl FnMut(&SlotPlacement) -> Option<usize>,
) -> Option<SlotPlacement> {
    let loose = j.without_minimum();
    let mut p = SlotPlacement {
        slot: t,
        host: h,
        workers: vec![0; c.boxes()],
    };
    while p.total() < j.workers.1 {
        let Some(m) = next(&p) else { break };
        p.workers[m] += 1;
        if !free.fits(c, &loose, &p) {
            p.workers[m] -= 1;
            break;
        }
    }
    (p.total() >= j.workers.0 && p.total() > 0).then_some(p)
}

/// Run a per-slot rule from the job's arrival until the job is done.
pub fn per_slot(
    c: &Cluster,
    j: &Job,
    mut rule: impl FnMut(usize) -> Option<SlotPlacement>,
) -> Option<Schedule> {
    let mut placements = Vec::new();
    let mut done = 0.0;
    for t in j.arrival..j.arrival + MAX_SLOTS {
        if let Some(p) = rule(t) {
            done += p.iterations(j, c);
            placements.push(p);
            if done >= j.iterations * (1.0 - 1e-12) {
                return finish(c, j, placements);
            }
        }
    }
    None
}

/// Pack-first's placement in slot `t`: the PS on the roomiest box, workers on it until it is
/// full, then on the roomiest others.
pub fn pack_slot(c: &Cluster, free: &Free, j: &Job, t: usize) -> Option<SlotPlacement> {
    let h = host(free, c, j, t)?;
    let mut order = vec![h];
    order.extend(by_room(free, c, t).into_iter().filter(|&m| m != h));
    let loose = j.without_minimum();
    let mut blocked = vec![false; c.boxes()];
    fill(free, c, j, t, h, |p| {
        order.iter().copied().find(|&m| {
            if blocked[m] {
                return false;
            }
            let mut q = p.clone();
            q.workers[m] += 1;
            blocked[m] = !free.fits(c, &loose, &q);
            !blocked[m]
        })
    })
}

/// PS on the roomiest box, workers there first, then on the roomiest others.
#[derive(Debug, Clone, Copy, Default)]
pub struct PackFirst;

impl Placer for PackFirst {
    fn name(&self) -> &'static str {
        "pack-first"
    }
    fn place(&self, c: &Cluster, free: &Free, j: &Job, _: &mut crate::Rng) -> Option<Schedule> {
        per_slot(c, j, |t| pack_slot(c, free, j, t))
    }
}

impl PlaceNow for PackFirst {
    fn kind(&self) -> GangPlacer {
        GangPlacer::PackFirst
    }
    fn place_now(
        &self,
        c: &Cluster,
        free: &Free,
        j: &Job,
        _: &mut crate::Rng,
    ) -> Option<SlotPlacement> {
        pack_slot(c, free, j, j.arrival)
    }
}

/// PS on the roomiest box, one worker per box in turn (locality-oblivious).
#[derive(Debug, Clone, Copy, Default)]
pub struct Spread;

impl Placer for Spread {
    fn name(&self) -> &'static str {
        "spread"
    }
    fn place(&self, c: &Cluster, free: &Free, j: &Job, _: &mut crate::Rng) -> Option<Schedule> {
        per_slot(c, j, |t| spread_slot(c, free, j, t))
    }
}

impl PlaceNow for Spread {
    fn kind(&self) -> GangPlacer {
        GangPlacer::Spread
    }
    fn place_now(
        &self,
        c: &Cluster,
        free: &Free,
        j: &Job,
        _: &mut crate::Rng,
    ) -> Option<SlotPlacement> {
        spread_slot(c, free, j, j.arrival)
    }
}

/// Spread's placement in slot `t`: the PS on the roomiest box, workers dealt one per box in turn.
pub fn spread_slot(c: &Cluster, free: &Free, j: &Job, t: usize) -> Option<SlotPlacement> {
    let h = host(free, c, j, t)?;
    let loose = j.without_minimum();
    let mut turn = 0usize;
    fill(free, c, j, t, h, |p| {
        // The next box in turn that still takes a worker.
        (0..c.boxes())
            .map(|i| (turn + i) % c.boxes())
            .find(|&m| {
                let mut q = p.clone();
                q.workers[m] += 1;
                free.fits(c, &loose, &q)
            })
            .inspect(|&m| turn = m + 1)
    })
}

/// The most iterations in every slot, by enumeration (small instances only).
#[derive(Debug, Clone, Copy, Default)]
pub struct Exact;

impl Exact {
    /// The placement with the most iterations in slot `t` (ties: fewer workers, then the
    /// earlier host and split), if any fits.
    pub fn best_slot(c: &Cluster, free: &Free, j: &Job, t: usize) -> Option<SlotPlacement> {
        Self::best_slot_within(c, free, j, t, j.workers.1)
    }

    /// [`Exact::best_slot`] with at most `most` workers (the job's range still applies).
    pub fn best_slot_within(
        c: &Cluster,
        free: &Free,
        j: &Job,
        t: usize,
        most: u32,
    ) -> Option<SlotPlacement> {
        let j = &Job {
            workers: (j.workers.0, most.min(j.workers.1)),
            ..j.clone()
        };
        let mut best: Option<(f64, SlotPlacement)> = None;
        let mut p = SlotPlacement {
            slot: t,
            host: 0,
            workers: vec![0; c.boxes()],
        };
        for h in 0..c.boxes() {
            p.host = h;
            enumerate(c, free, j, &mut p, 0, &mut best);
        }
        best.map(|(_, p)| p)
    }
}

/// Every split of up to `workers.1` workers over boxes `m..`, keeping the best that fits.
fn enumerate(
    c: &Cluster,
    free: &Free,
    j: &Job,
    p: &mut SlotPlacement,
    m: usize,
    best: &mut Option<(f64, SlotPlacement)>,
) {
    if m == c.boxes() {
        if p.total() > 0 && free.fits(c, j, p) {
            let it = p.iterations(j, c);
            let better = match best {
                None => true,
                Some((b, q)) => it > *b * (1.0 + 1e-12) || (it >= *b && p.total() < q.total()),
            };
            if better {
                *best = Some((it, p.clone()));
            }
        }
        return;
    }
    let used: u32 = p.workers[..m].iter().sum();
    for n in 0..=j.workers.1 - used {
        p.workers[m] = n;
        enumerate(c, free, j, p, m + 1, best);
    }
    p.workers[m] = 0;
}

impl Placer for Exact {
    fn name(&self) -> &'static str {
        "exact"
    }
    fn place(&self, c: &Cluster, free: &Free, j: &Job, _: &mut crate::Rng) -> Option<Schedule> {
        per_slot(c, j, |t| Self::best_slot(c, free, j, t))
    }
}
