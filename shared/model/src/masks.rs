//! The speed-aware exceptions of the action masks (`TapfingerPolicy::blocked` and
//! `pass_blocked` apply them, in training and deployment alike): whether a task runs much
//! faster on another box's GPU model, and whether it is better off waiting for one, both by the
//! estimator's figures in the view, never by a speed model.

use tapfinger_core::resources::Resources;
use tapfinger_core::view::View;

/// How many times faster (by the estimator, alone at its minimum demand) a task must run on
/// another box it may run on for the strict work-conserving mask to let a node pass it
/// (the strict mask's one exception; see `NetConfig::strict_conserving`).
pub const FASTER_ELSEWHERE: f64 = 1.5;

/// Whether pending task `p` runs at least [`FASTER_ELSEWHERE`] times faster on another box of
/// the view it may run on (one whose capacity holds it) than on the deciding node, by the
/// estimator's figures for each box's GPU model: the one reason the strict work-conserving
/// mask lets a node pass a task that fits. Where GPU models differ, starting a task on a
/// slow box (a K80 runs some of Gavel's jobs at 0.07 times a V100's speed) holds it there for
/// its whole run, while waiting for a fast one finishes it sooner (Gavel's heterogeneity-aware
/// policies are built on it). On a cluster of one model the figures are the same on every box
/// and this is never true.
pub(super) fn faster_elsewhere(view: &View<'_>, p: &tapfinger_core::view::PendingView) -> bool {
    let here = p.est_on(view.node().gpu).at_min;
    other_models(view, p).any(|(_, there)| there * FASTER_ELSEWHERE <= here)
}

/// The other boxes pending task `p` may run on (whose capacity holds its minimum demand) with
/// another GPU model than the deciding node's, each with the estimator's time for `p` alone
/// there at its minimum demand.
fn other_models<'a>(
    view: &'a View<'_>,
    p: &'a tapfinger_core::view::PendingView,
) -> impl Iterator<Item = (&'a tapfinger_core::view::NodeView, f64)> + 'a {
    let me = view.node();
    let t = &p.task;
    t.reachable
        .iter()
        .filter(move |&&id| id != view.me)
        .filter_map(|&id| view.cluster.node_index(id).map(|i| &view.cluster.nodes[i]))
        .filter(move |n| n.gpu != me.gpu && t.min_demand.fits_in(&n.capacity))
        .map(move |n| (n, p.est_on(n.gpu).at_min))
}

/// Whether pending task `p` is better off waiting for another box than starting on the deciding
/// one (the wait-for-faster mask, `NetConfig::wait_faster`; by the estimator, never a speed
/// model): another box it may run on, of another GPU model, runs it alone at its minimum demand
/// at least [`FASTER_ELSEWHERE`] times faster, and has room for that demand — free now, or freed
/// as its running tasks and the tasks queued there before it end ([`room_after`]) — soon
/// enough that waiting and running there still ends [`FASTER_ELSEWHERE`] times sooner than
/// running here. The factor on the whole wait is the slack for what the estimate does not know
/// (smaller tasks may take that room first), so that a task waits only where waiting clearly
/// pays.
pub(super) fn waits_for_faster(view: &View<'_>, p: &tapfinger_core::view::PendingView) -> bool {
    let here = p.est_on(view.node().gpu).at_min;
    other_models(view, p).any(|(n, there)| {
        there * FASTER_ELSEWHERE <= here
            && room_after(view, n, p).is_some_and(|wait| (wait + there) * FASTER_ELSEWHERE <= here)
    })
}

/// Slots until node `n` has room for pending task `p`'s minimum demand, were its queue served
/// in order: the tasks of its window ahead of `p` (all of them where `p` is not in it) each
/// start as soon as their minimum demand fits and hold it for their estimated time there,
/// and units come back as its running tasks end ([`left`]). `None` if `p` would never fit.
/// Why the queue: at a busy cluster's load the older tasks waiting for the same fast box take
/// its room first, and a wait counted on its running tasks alone held tasks back for boxes
/// that stayed taken (docs/DECISIONS.md, "Masks and action rules").
fn room_after(
    view: &View<'_>,
    n: &tapfinger_core::view::NodeView,
    p: &tapfinger_core::view::PendingView,
) -> Option<f64> {
    let mut holds: Vec<(f64, Resources)> = n
        .running
        .iter()
        .filter_map(|&r| view.cluster.running.get(r))
        .map(|r| (left(view.cluster.slot, r), r.alloc.clone()))
        .collect();
    let ahead = n
        .window
        .iter()
        .filter_map(|&i| view.cluster.pending.get(i))
        .take_while(|q| q.task.id != p.task.id)
        .filter(|q| q.task.min_demand.fits_in(&n.capacity));
    let (mut free, mut now) = (n.free.clone(), 0.0_f64);
    for q in ahead.chain(std::iter::once(p)) {
        let need = &q.task.min_demand;
        while !need.fits_in(&free) {
            // The next hold to end gives its units back.
            let (i, _) = holds
                .iter()
                .enumerate()
                .min_by(|a, b| a.1.0.total_cmp(&b.1.0))?;
            let (end, units) = holds.swap_remove(i);
            now = now.max(end);
            free = free.saturating_add(&units);
        }
        if q.task.id == p.task.id {
            return Some(now);
        }
        free = free.saturating_sub(need);
        holds.push((now + q.est_on(n.gpu).at_min, need.clone()));
    }
    None
}

/// Running task `r`'s estimated slots left at `slot`: once it has reported
/// [`PACE_AFTER`] of its progress, at the pace it has shown (slots run per unit of progress);
/// before, its share of the estimator's time for it at its allocation. Why its own pace: the
/// estimator knows a class's mean work, and a task many times its class's mean (a trace's
/// heavy tail) would look always about to end, so that tasks would keep waiting for its box.
fn left(slot: u64, r: &tapfinger_core::view::RunningView) -> f64 {
    let p = r.progress.clamp(0.0, 1.0);
    let ran = slot.saturating_sub(r.started) as f64;
    if p >= PACE_AFTER && ran > 0.0 {
        ran * (1.0 - p) / p
    } else {
        (1.0 - p) * r.est_alloc.max(0.0)
    }
}

/// The progress after which a running task's own pace, not the estimator's, says when it ends.
const PACE_AFTER: f64 = 0.05;
