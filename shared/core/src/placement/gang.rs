//! A gang as the scheduler sees it ([`GangShape`]: how many workers and parameter servers, what
//! each holds, and the two numbers of the locality model a user states), and its placement *now*,
//! on the units the boxes have free this round, as the members of one
//! [`GangClaim`](crate::protocol::GangClaim).
//!
//! The online placers of this module's parent plan a job slot by slot, changing its workers from
//! one slot to the next. A gang that runs as processes cannot: its members are fixed when it
//! starts (a framework's world size is set at rendezvous). So a gang is placed once, by the
//! first slot of the placer's schedule on what is free now, and keeps that placement until it
//! ends. Its members are listed in rank order: the parameter servers first (all on the host),
//! then the workers, the host's first and then box by box, so that consecutive ranks sit
//! together.

use super::{Cluster, Free, Job, SlotPlacement};
use crate::resources::Resources;
use crate::task::NodeId;
// The shape is part of the task description (every layer reads it); its placement is here.
pub use crate::task::{GangShape, MAX_MEMBERS, validate};
use serde::{Deserialize, Serialize};

/// Bytes per second within a box and between boxes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Links {
    /// Within a box.
    pub internal: f64,
    /// Between two boxes, and through the host's network interface.
    pub external: f64,
}

impl Links {
    /// Edge boxes: 1 Gbit/s between boxes, 5 GB/s within one (what the agent assumes).
    pub const EDGE: Links = Links {
        internal: 5e9,
        external: 1.25e8,
    };
}

/// Chooses a gang's placement now: the first slot of a placer's schedule on what is free, which
/// the gang keeps until it ends. The core has the plain ones ([`super::simple::PackFirst`],
/// [`super::simple::Spread`]); the crate `tapfinger-jobs` adds the locality-aware LP rounding
/// and maps each [`GangPlacer`] name to its placer. A driver passes the one it was configured
/// with (the simulator: its scenario's; the agent: `agent.toml`'s).
pub trait PlaceNow: Send + Sync {
    /// The name this placer goes by.
    fn kind(&self) -> GangPlacer;
    /// The placement of job `j` in its arrival slot on what `free` holds, or `None` if nothing
    /// fits.
    fn place_now(
        &self,
        c: &Cluster,
        free: &Free,
        j: &Job,
        rng: &mut crate::Rng,
    ) -> Option<SlotPlacement>;
}

impl std::fmt::Debug for dyn PlaceNow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind().name())
    }
}

/// The name of a way a gang's members are put on the boxes ([`PlaceNow`] places them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GangPlacer {
    /// Locality-aware: the LP rounding (in the crate `tapfinger-jobs`).
    #[default]
    Locality,
    /// The PS on the roomiest box, workers there first ([`super::simple::PackFirst`]).
    PackFirst,
    /// Locality-oblivious: workers dealt one per box in turn ([`super::simple::Spread`]).
    Spread,
}

impl GangPlacer {
    /// Every placer, in table order.
    pub const ALL: [GangPlacer; 3] = [
        GangPlacer::Locality,
        GangPlacer::PackFirst,
        GangPlacer::Spread,
    ];

    /// Name in tables and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            GangPlacer::Locality => "locality",
            GangPlacer::PackFirst => "pack-first",
            GangPlacer::Spread => "spread",
        }
    }

    /// The placer of that name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl GangShape {
    /// The placement model's job for this shape: `slots` slots of its most workers' local work,
    /// so that a placer fills the first slot as well as it can.
    fn job(&self, c: &Cluster, slots: f64) -> Job {
        let mut j = Job {
            arrival: 0,
            iterations: 1.0,
            compute: self.compute_seconds,
            gradient_bytes: self.gradient_bytes,
            workers: self.workers,
            ps: self.ps,
            worker_demand: self.worker_demand.0.clone(),
            ps_demand: self.ps_demand.0.clone(),
        };
        j.iterations =
            (f64::from(self.workers.1) * j.rate(c, 0, 0) * c.slot_seconds * slots).max(1.0);
        j
    }

    /// Place the gang on the units the boxes have free now (`free`, one entry per box), or
    /// `None` if it does not fit them. Members in rank order (module doc).
    pub fn place(
        &self,
        placer: &dyn PlaceNow,
        free: &[(NodeId, Resources)],
        links: Links,
        rng: &mut crate::Rng,
    ) -> Option<Vec<(NodeId, Resources)>> {
        if free.is_empty() || validate(self).is_err() {
            return None;
        }
        if !self.stages.is_empty() {
            return self.place_stages(free);
        }
        let kinds = self.worker_demand.len();
        let c = Cluster {
            capacity: free
                .iter()
                .map(|(_, f)| (0..kinds).map(|k| f.get(k)).collect())
                .collect(),
            internal: links.internal,
            external: links.external,
            slot_seconds: 1.0,
        };
        let j = self.job(&c, 4.0);
        let room = Free::new(&c);
        // The placement is kept until the gang ends: the most work now, not a schedule that
        // changes slot by slot.
        let first = placer.place_now(&c, &room, &j, rng)?;
        room.fits(&c, &j, &first)
            .then(|| self.members(&first, free))
    }

    /// A pipeline's members in rank order, each on the box of the member before it if it fits
    /// there (consecutive stages together: their activations cross no link), else on the box
    /// with the most room that holds it. Where that leaves a member without a box, the members
    /// are packed largest first, each on the box with the least room that holds it. `None` if
    /// neither fits them all.
    pub(crate) fn place_stages(
        &self,
        free: &[(NodeId, Resources)],
    ) -> Option<Vec<(NodeId, Resources)>> {
        let room = |f: &Resources| f.0.iter().map(|x| u64::from(*x)).sum::<u64>();
        let mut left: Vec<Resources> = free.iter().map(|(_, f)| f.clone()).collect();
        let mut boxes: Vec<Option<usize>> = vec![None; self.stages.len()];
        let mut prev: Option<usize> = None;
        for (r, m) in self.stages.iter().enumerate() {
            let mut order: Vec<usize> = (0..left.len()).collect();
            order.sort_by_key(|&i| std::cmp::Reverse(room(&left[i])));
            if let Some(p) = prev {
                order.retain(|&i| i != p);
                order.insert(0, p);
            }
            let Some(b) = order.into_iter().find(|&i| m.fits_in(&left[i])) else {
                boxes.clear();
                break;
            };
            left[b] = left[b].checked_sub(m).ok()?;
            boxes[r] = Some(b);
            prev = Some(b);
        }
        if boxes.is_empty() {
            left = free.iter().map(|(_, f)| f.clone()).collect();
            boxes = vec![None; self.stages.len()];
            let mut by_size: Vec<usize> = (0..self.stages.len()).collect();
            by_size.sort_by_key(|&r| std::cmp::Reverse(room(&self.stages[r])));
            for r in by_size {
                let m = &self.stages[r];
                let b = (0..left.len())
                    .filter(|&i| m.fits_in(&left[i]))
                    .min_by_key(|&i| room(&left[i]))?;
                left[b] = left[b].checked_sub(m).ok()?;
                boxes[r] = Some(b);
            }
        }
        self.stages
            .iter()
            .zip(boxes)
            .map(|(m, b)| b.map(|b| (free[b].0, m.clone())))
            .collect()
    }

    /// The members of placement `p` over the boxes of `free`, in rank order.
    fn members(&self, p: &SlotPlacement, free: &[(NodeId, Resources)]) -> Vec<(NodeId, Resources)> {
        let host = free[p.host].0;
        let mut out: Vec<(NodeId, Resources)> = (0..self.ps)
            .map(|_| (host, self.ps_demand.clone()))
            .collect();
        let order = std::iter::once(p.host).chain((0..free.len()).filter(|&m| m != p.host));
        for m in order {
            for _ in 0..p.workers[m] {
                out.push((free[m].0, self.worker_demand.clone()));
            }
        }
        out
    }

    /// Iterations per second of a gang placed as `members` (rank order: the first `ps` are the
    /// PS, on the host), with `compute_seconds` per iteration: each worker on the host does
    /// `1 / (compute + 2·gradient_bytes / internal)`, each elsewhere the same over `external`.
    pub fn rate(&self, members: &[(NodeId, Resources)], links: Links, compute_seconds: f64) -> f64 {
        let Some((host, _)) = members.first() else {
            return 0.0;
        };
        members
            .iter()
            .skip(self.ps as usize)
            .map(|(m, _)| {
                let bw = if m == host {
                    links.internal
                } else {
                    links.external
                };
                1.0 / (compute_seconds + 2.0 * self.gradient_bytes / bw)
            })
            .sum()
    }

    /// Why the gang can never run on boxes of these capacities, even all free (its PS and
    /// fewest workers need more than the whole cluster, or fit the total but not the boxes),
    /// or `None` if it can. Said at submit, so that such a gang is refused, not left pending.
    pub fn never_fits(&self, capacities: &[Resources], links: Links) -> Option<String> {
        if let Err(e) = validate(self) {
            return Some(e);
        }
        let kinds = self.worker_demand.len();
        let c = Cluster {
            capacity: capacities
                .iter()
                .map(|f| (0..kinds).map(|k| f.get(k)).collect())
                .collect(),
            internal: links.internal,
            external: links.external,
            slot_seconds: 1.0,
        };
        if c.boxes() == 0 {
            return Some("the cluster has no box".into());
        }
        if !self.stages.is_empty() {
            return self.stages_never_fit(capacities);
        }
        super::never_fits(&c, &self.job(&c, 1.0))
    }
}

impl GangShape {
    /// [`GangShape::never_fits`] for a pipeline: its members add up to more than the cluster, or
    /// they do not pack on the empty boxes in rank order (as [`GangShape::place`] puts them).
    fn stages_never_fit(&self, capacities: &[Resources]) -> Option<String> {
        let kinds = capacities.first().map_or(0, Resources::len);
        let mut need = Resources::zeros(kinds);
        for m in &self.stages {
            need = need.checked_add(m).unwrap_or_else(|_| need.clone());
        }
        let mut total = Resources::zeros(kinds);
        for c in capacities {
            total = total.checked_add(c).unwrap_or_else(|_| total.clone());
        }
        if !need.fits_in(&total) {
            return Some(format!(
                "its {} members need {need} units in all; the whole cluster has {total}",
                self.stages.len()
            ));
        }
        let empty: Vec<(NodeId, Resources)> = capacities
            .iter()
            .enumerate()
            .map(|(i, c)| (NodeId(i as u32), c.clone()))
            .collect();
        if self.place_stages(&empty).is_none() {
            return Some(format!(
                "its {} members ({}) fit the cluster's total ({need} of {total} units) but not its boxes, placed in rank order",
                self.stages.len(),
                self.stages
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        None
    }
}
