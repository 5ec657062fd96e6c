//! The learned policy placing a gang's members itself
//! ([`Policy::place_gang`](crate::policy::Policy::place_gang)): the alternative to handing gangs
//! to a gang placer, measured against them in the simulator (`NAME+policy` in `compare`).
//!
//! The network was trained to choose, for one box, which task of its window to start. A gang
//! member is shown to it as exactly that: a task of its own (the member's demand, the gang's
//! class and arrival, the estimator's view of it), at the front of a candidate box's window, on
//! a snapshot where every box's free units are what the members placed so far leave. The box
//! whose decision gives the member the highest probability gets it; one batched forward pass
//! scores every candidate box. Members go in rank order: the parameter servers first (all on
//! one box, the host: the locality model reads the first member's box as the host), then
//! workers, one at a time, up to the gang's most workers while any box has room; if fewer than
//! its fewest fit, the next host in the network's order is tried. A pipeline's stages go in
//! order (packed as the placers pack them where that order leaves one without a box).
//!
//! The network sees no link speed and no gang: it places members as it would start tasks, which
//! is what this measures against the locality-aware placer. Nothing is held by a placement: it
//! becomes a gang claim, decided all or nothing in the round.

use super::TapfingerPolicy;
use crate::policy::GangAsk;
use crate::resources::Resources;
use crate::task::{NodeId, Task};
use crate::view::{ClusterView, PendingView};
use std::sync::Arc;

impl TapfingerPolicy {
    /// See the module doc.
    pub(super) fn place_members(&self, ask: &GangAsk<'_>) -> Option<Vec<(NodeId, Resources)>> {
        let shape = ask.task.gang.as_deref()?;
        let member = |d: &Resources| {
            let t = Task {
                min_demand: d.clone(),
                max_demand: Some(d.clone()),
                gang: None,
                ..ask.task.clone()
            };
            PendingView {
                est: (ask.estimate)(&t),
                class: t.priority,
                task: Arc::new(t),
            }
        };
        let free: Vec<Resources> = ask.free.iter().map(|(_, f)| f.clone()).collect();
        if !shape.stages.is_empty() {
            let mut left = free;
            let mut placed = Vec::with_capacity(shape.stages.len());
            for s in &shape.stages {
                let Some(&b) = self.ranked_boxes(ask, &member(s), &left).first() else {
                    // What the network's order cannot fit, packing may: the placer's way.
                    return shape.place_stages(ask.free);
                };
                left[b] = left[b].checked_sub(s).ok()?;
                placed.push((ask.free[b].0, s.clone()));
            }
            return Some(placed);
        }
        // Every PS on the host: hosts are ranked for the PS's total demand, and the first with
        // room for the fewest workers besides is taken (which boxes the workers then go to does
        // not change how many fit: they all ask for the same units).
        let mut all_ps = Resources::zeros(shape.ps_demand.len());
        for _ in 0..shape.ps {
            all_ps = all_ps.checked_add(&shape.ps_demand).ok()?;
        }
        let worker = member(&shape.worker_demand);
        for host in self.ranked_boxes(ask, &member(&all_ps), &free) {
            let mut left = free.clone();
            left[host] = left[host].checked_sub(&all_ps).ok()?;
            let mut workers = vec![0u32; left.len()];
            for _ in 0..shape.workers.1 {
                let Some(&b) = self.ranked_boxes(ask, &worker, &left).first() else {
                    break;
                };
                left[b] = left[b].checked_sub(&shape.worker_demand).ok()?;
                workers[b] += 1;
            }
            if workers.iter().sum::<u32>() < shape.workers.0 {
                continue;
            }
            // Rank order: the PS, then the host's workers, then box by box (consecutive ranks
            // together).
            let mut out: Vec<(NodeId, Resources)> = (0..shape.ps)
                .map(|_| (ask.free[host].0, shape.ps_demand.clone()))
                .collect();
            for b in std::iter::once(host).chain((0..left.len()).filter(|&b| b != host)) {
                for _ in 0..workers[b] {
                    out.push((ask.free[b].0, shape.worker_demand.clone()));
                }
            }
            return Some(out);
        }
        None
    }

    /// The boxes of `ask.free` (by index) with room for `member` in `left`, the one whose
    /// decision gives the member the highest probability first.
    fn ranked_boxes(
        &self,
        ask: &GangAsk<'_>,
        member: &PendingView,
        left: &[Resources],
    ) -> Vec<usize> {
        let fits: Vec<usize> = (0..left.len())
            .filter(|&b| member.task.min_demand.fits_in(&left[b]))
            .collect();
        if fits.len() <= 1 {
            return fits;
        }
        let Some(scores) = self.scores(ask, member, left, &fits) else {
            // A numerical failure: the boxes in order, as a placer without scores would.
            return fits;
        };
        let mut order: Vec<usize> = (0..fits.len()).collect();
        order.sort_by(|&i, &j| scores[j].total_cmp(&scores[i]).then(i.cmp(&j)));
        order.into_iter().map(|i| fits[i]).collect()
    }

    /// Per box of `fits`: the member's probability in that box's decision (one batched pass).
    fn scores(
        &self,
        ask: &GangAsk<'_>,
        member: &PendingView,
        left: &[Resources],
        fits: &[usize],
    ) -> Option<Vec<f64>> {
        let mut views = Vec::with_capacity(fits.len());
        for &b in fits {
            let me = ask.free[b].0;
            let whole = shown(ask.cluster, me, member, ask.free, left)?;
            views.push(whole.focus(me, self.cfg.focus).into_owned());
        }
        let dims = &self.cfg.dims;
        let (mut blocked_all, mut pass) = (Vec::new(), Vec::new());
        let mut items = Vec::with_capacity(views.len());
        for (v, &b) in views.iter().zip(fits) {
            let view = v.for_agent(ask.free[b].0)?;
            let window: Vec<&Task> = view.window().take(dims.window).collect();
            let blocked = self.blocked(&view, &window);
            pass.push(self.pass_blocked(&view, &window, &blocked));
            blocked_all.extend(blocked);
            items.push((v, ask.free[b].0));
        }
        let flat = self.pointer_pass(&items, &blocked_all, &pass)?;
        // The member's probability at each box: slot 0 of its softmax over window and pass.
        let prob = |l: &[f32]| {
            let max = l.iter().copied().fold(f32::MIN, f32::max);
            let z: f64 = l.iter().map(|x| f64::from(x - max).exp()).sum();
            f64::from(l[0] - max).exp() / z
        };
        Some(flat.chunks(dims.window + 1).map(prob).collect())
    }
}

/// `cluster` as box `me` would see it with `member` first in its window and every box of `free`
/// at the units `left` says.
fn shown(
    cluster: &ClusterView,
    me: NodeId,
    member: &PendingView,
    free: &[(NodeId, Resources)],
    left: &[Resources],
) -> Option<ClusterView> {
    let mut c = cluster.clone();
    for ((id, _), l) in free.iter().zip(left) {
        if let Some(i) = c.node_index(*id) {
            c.nodes[i].free = l.clone();
        }
    }
    // The pending list stays sorted by id: the member goes in at its gang's place, and every
    // window index behind it moves up one.
    let at = c.pending.partition_point(|p| p.task.id < member.task.id);
    c.pending.insert(at, member.clone());
    for n in &mut c.nodes {
        for w in &mut n.window {
            if *w >= at {
                *w += 1;
            }
        }
    }
    let i = c.node_index(me)?;
    c.nodes[i].window.insert(0, at);
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::batch::Dims;
    use crate::model::net::NetConfig;
    use crate::placement::gang::GangShape;
    use crate::task::{TaskId, TaskTypeId};
    use crate::view::NodeView;
    use burn::tensor::Device;
    use rand::RngExt;

    fn gang(workers: (u32, u32), ps: u32) -> Task {
        Task {
            id: TaskId(7),
            ty: TaskTypeId(0),
            min_demand: Resources(vec![1, 1]),
            max_demand: None,
            priority: 0,
            reachable: vec![],
            arrival: 0,
            gang: Some(Box::new(GangShape {
                workers,
                ps,
                worker_demand: Resources(vec![2, 3]),
                ps_demand: Resources(vec![1, 2]),
                compute_seconds: 0.5,
                gradient_bytes: 1e8,
                restarts: 0,
                stages: Vec::new(),
            })),
        }
    }

    /// How many `d` fit in `f`.
    fn count(f: &Resources, d: &Resources) -> u32 {
        f.0.iter()
            .zip(&d.0)
            .filter(|(_, d)| **d > 0)
            .map(|(f, d)| f / d)
            .min()
            .unwrap_or(0)
    }

    /// On random free units: a placement is whole (every PS on the first member's box, the
    /// workers within the gang's range, no box given more than it has free, as many workers as
    /// fit up to the most), and there is one exactly when some host leaves room for the fewest
    /// workers.
    #[test]
    fn members_fit_their_boxes_and_a_gang_is_placed_exactly_when_it_fits() {
        let device = Device::flex();
        device.seed(5);
        let policy = TapfingerPolicy::untrained(NetConfig::new(Dims::per_preset(2, 2, 10)), device)
            .greedy(true);
        let mut rng = crate::seeded_rng(11);
        let (mut placed, mut refused) = (0, 0);
        for _ in 0..60 {
            let n = rng.random_range(1..=4usize);
            let free: Vec<(NodeId, Resources)> = (0..n)
                .map(|i| {
                    let f = Resources(vec![rng.random_range(0..=8), rng.random_range(0..=12)]);
                    (NodeId(i as u32), f)
                })
                .collect();
            let cluster = ClusterView {
                num_types: 2,
                nodes: free
                    .iter()
                    .map(|(id, f)| NodeView {
                        id: *id,
                        capacity: Resources(vec![8, 12]),
                        free: f.clone(),
                        window: vec![],
                        overflow: 0,
                        running: vec![],
                    })
                    .collect(),
                ..Default::default()
            };
            let lo = rng.random_range(1..=3u32);
            let task = gang(
                (lo, lo + rng.random_range(0..=4u32)),
                rng.random_range(1..=2u32),
            );
            let shape = task.gang.as_deref().unwrap().clone();
            let estimate = |_: &Task| crate::view::TaskEstimate::default();
            let ask = GangAsk {
                cluster: &cluster,
                task: &task,
                free: &free,
                estimate: &estimate,
            };
            let mut all_ps = Resources::zeros(2);
            for _ in 0..shape.ps {
                all_ps = all_ps.checked_add(&shape.ps_demand).unwrap();
            }
            // The most workers any host leaves room for.
            let most = (0..n)
                .filter(|&h| all_ps.fits_in(&free[h].1))
                .map(|h| {
                    (0..n)
                        .map(|b| {
                            let f = if b == h {
                                free[b].1.checked_sub(&all_ps).unwrap()
                            } else {
                                free[b].1.clone()
                            };
                            count(&f, &shape.worker_demand)
                        })
                        .sum::<u32>()
                })
                .max();
            let Some(members) = policy.place_members(&ask) else {
                assert!(
                    most.is_none_or(|m| m < lo),
                    "refused, yet {most:?} workers fit"
                );
                refused += 1;
                continue;
            };
            placed += 1;
            let ps = shape.ps as usize;
            let host = members[0].0;
            assert!(
                members[..ps]
                    .iter()
                    .all(|m| *m == (host, shape.ps_demand.clone()))
            );
            let workers = (members.len() - ps) as u32;
            assert!(
                (lo..=shape.workers.1).contains(&workers),
                "{workers} workers"
            );
            for (id, f) in &free {
                let mut used = Resources::zeros(2);
                for (_, a) in members.iter().filter(|(m, _)| m == id) {
                    used = used.checked_add(a).unwrap();
                }
                assert!(used.fits_in(f), "box {id} given {used} of {f}");
            }
            // As many workers as fit after this host, up to the most.
            let after: u32 = free
                .iter()
                .map(|(id, f)| {
                    let f = if *id == host {
                        f.checked_sub(&all_ps).unwrap()
                    } else {
                        f.clone()
                    };
                    count(&f, &shape.worker_demand)
                })
                .sum();
            assert_eq!(workers, after.min(shape.workers.1));
        }
        assert!(
            placed > 10 && refused > 5,
            "{placed} placed, {refused} refused"
        );
    }
}
