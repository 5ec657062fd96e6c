//! How a node's spare units are shared among its running tasks each slot: the elastic
//! policies' re-share ([`crate::policy::Policy::rebalance`]).
//!
//! Elastic policies start a task at (or near) its minimum demand and, once per slot, hand the
//! node's units that no task's floor holds to the running tasks. Here: Tiresias's least-attained
//! round robin, also the learned policy's elastic share, and its gain-aware form, which asks the
//! online speed estimator ([`crate::view::TaskEstimate`]) which kinds a task can use: never a
//! true speed model.

use crate::resources::Resources;
use crate::task::TaskId;
use crate::view::{RunningView, View};

/// Attained service above which a task drops to Tiresias's low-priority queue (service-kind slots).
pub const TIRESIAS_THRESHOLD: f64 = 16.0;

/// The least relative gain (the fraction of its job time at its minimum demand that one more
/// unit saves, [`crate::view::TaskEstimate::gain`]) for which a task gets spare units of a kind
/// in the gain-aware share ([`least_attained_shares_by`]).
pub const MIN_GAIN: f64 = 1e-3;

/// Tiresias's elastic sharing of a node, also the learned policy's in its elastic form: the
/// running tasks (shown at their minimum demand) in least-attained-service order (the queue under
/// [`TIRESIAS_THRESHOLD`] first, then by arrival), and the node's spare units of each kind handed
/// out one by one, round robin in that order, up to each task's maximum demand; where the
/// view's priority classes count, class by class (the highest first, each as far as its tasks
/// take units before the next gets any). With
/// `hold_gpus` the GPU kind is not re-shared: every task keeps the GPUs it holds (the agent
/// cannot change a running process's devices).
pub fn least_attained_shares(view: &View<'_>, hold_gpus: bool) -> Vec<(TaskId, Resources)> {
    least_attained_shares_by(view, hold_gpus, false)
}

/// [`least_attained_shares`], and with `gainful` a task takes spare units only of the kinds
/// whose next unit the speed estimator says saves at least [`MIN_GAIN`] of its job time (the
/// view's estimate, learned from observed progress: never a true speed model), so that units
/// a task cannot use go to one that can. Kinds without a canonical place are shared as before.
pub fn least_attained_shares_by(
    view: &View<'_>,
    hold_gpus: bool,
    gainful: bool,
) -> Vec<(TaskId, Resources)> {
    let held = if hold_gpus {
        view.cluster.kinds.0[1]
    } else {
        None
    };
    let tasks = least_attained_order(view);
    let mut allocs: Vec<Resources> = tasks.iter().map(|r| r.alloc.clone()).collect();
    let mut free = view.node().free.clone();
    round_robin(view, &tasks, &mut allocs, &mut free, held, gainful);
    tasks
        .iter()
        .zip(allocs)
        .map(|(r, a)| (r.task.id, a))
        .collect()
}

/// Hands `free` out to `tasks` (in [`least_attained_order`]) kind by kind, one unit at a time
/// round robin, up to each task's maximum demand, skipping the `held` kind; where the view's
/// priority classes count, the highest class's tasks share until none of them can take more,
/// then the next class's do. With `gainful`, as [`least_attained_shares_by`] says.
fn round_robin(
    view: &View<'_>,
    tasks: &[&RunningView],
    allocs: &mut [Resources],
    free: &mut Resources,
    held: Option<usize>,
    gainful: bool,
) {
    let canonical = |k: usize| view.cluster.kinds.0.iter().position(|c| *c == Some(k));
    for k in (0..free.len()).filter(|&k| Some(k) != held) {
        let mut from = 0;
        while from < tasks.len() {
            let c = class(view, tasks[from]);
            let to = from
                + tasks[from..]
                    .iter()
                    .take_while(|r| class(view, r) == c)
                    .count();
            // Round robin over the class's queue until nobody can take another unit of kind k.
            loop {
                let mut gave = false;
                for (i, r) in tasks.iter().enumerate().take(to).skip(from) {
                    if free.0[k] == 0 {
                        break;
                    }
                    let cap = r.task.max_demand.as_ref().map_or(u32::MAX, |m| m.get(k));
                    // Memory is a need more than a speed: a task short of it fails, so it is
                    // shared whatever its estimated gain.
                    let useful = !gainful
                        || canonical(k).is_none_or(|c| c == 2 || r.est.gain[c] >= MIN_GAIN);
                    if allocs[i].0[k] < cap && useful {
                        allocs[i].0[k] += 1;
                        free.0[k] -= 1;
                        gave = true;
                    }
                }
                if !gave || free.0[k] == 0 {
                    break;
                }
            }
            from = to;
        }
    }
}

/// The running tasks of the agent's node in Tiresias's order: priority class where the view's
/// classes count, then the queue under [`TIRESIAS_THRESHOLD`] before the one above it, then
/// arrival, then id.
fn least_attained_order<'a>(view: &View<'a>) -> Vec<&'a RunningView> {
    let mut tasks: Vec<&RunningView> = view.running().collect();
    tasks.sort_by(|a, b| {
        let qa = a.attained >= TIRESIAS_THRESHOLD;
        let qb = b.attained >= TIRESIAS_THRESHOLD;
        class(view, a)
            .cmp(&class(view, b))
            .then(qa.cmp(&qb))
            .then(a.task.arrival.cmp(&b.task.arrival))
            .then(a.task.id.cmp(&b.task.id))
    });
    tasks
}

/// A running task's priority class where the view's classes count, else 0.
fn class(view: &View<'_>, r: &RunningView) -> u8 {
    if view.cluster.classes {
        r.task.priority
    } else {
        0
    }
}
