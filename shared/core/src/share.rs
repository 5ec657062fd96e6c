//! How a node's spare units are shared among its running tasks each slot: the elastic
//! policies' re-share ([`crate::policy::Policy::rebalance`]).
//!
//! Elastic policies start a task at (or near) its minimum demand and, once per slot, hand the
//! node's units that no task's floor holds to the running tasks. Here: Tiresias's least-attained
//! round robin, also the learned policy's elastic share, and its gain-aware form, which asks the
//! online speed estimator ([`crate::view::TaskEstimate`]) which kinds a task can use: never a
//! true speed model.

use crate::estimate::COSTLY_SWITCH;
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
    let spare = if gainful { Spare::Gainful } else { Spare::All };
    share_with(view, hold_gpus, |tasks, allocs, free, held| {
        round_robin(view, tasks, allocs, free, held, spare);
    })
}

/// The frame of every re-share: the node's running tasks in [`least_attained_order`] from the
/// allocations the view shows them at, its free units, and the kind held where `hold_gpus`
/// (GPUs), handed to `share`; the tasks' new allocations.
fn share_with(
    view: &View<'_>,
    hold_gpus: bool,
    share: impl FnOnce(&[&RunningView], &mut [Resources], &mut Resources, Option<usize>),
) -> Vec<(TaskId, Resources)> {
    let held = if hold_gpus {
        view.cluster.kinds.0[1]
    } else {
        None
    };
    let tasks = least_attained_order(view);
    let mut allocs: Vec<Resources> = tasks.iter().map(|r| r.alloc.clone()).collect();
    let mut free = view.node().free.clone();
    share(&tasks, &mut allocs, &mut free, held);
    tasks
        .iter()
        .zip(allocs)
        .map(|(r, a)| (r.task.id, a))
        .collect()
}

/// The gain-aware share on the online estimator: each spare unit of CPU and GPU, one at a time,
/// to the running task whose estimated job time ([`estimated_slots`]) it cuts by the largest
/// fraction — a greedy step towards the largest sum of the tasks' log speeds, a proportionally
/// fair share of speed — among tasks it saves at least [`MIN_GAIN`] of their job time at their
/// minimum demand; the units no task's estimate says it gains from, memory (a need more than a
/// speed) and kinds without a canonical place are then shared as [`least_attained_shares`]
/// shares them. With `hold_gpus` the GPU kind is not re-shared.
///
/// Where a task's class pays for a re-allocation (a measured
/// [`crate::view::TaskEstimate::switch_cost`] of at least [`COSTLY_SWITCH`]: a restart, a
/// slowed slot), the share avoids switches that buy nothing. Such a task, once it has run a
/// slot, first gets back what it holds; the greedy step moves it only where
/// the remaining time a unit saves is worth the slot fraction the switch loses; and it takes
/// nothing from the round robin. A costly task just started is shared as a free one: its first
/// allocation costs no switch, and it is how its class comes to run at more than its minimum,
/// so that the estimator can learn what each kind gains it. (Given only the units the estimate
/// said it gained from, a class whose CPU and memory had grown together was credited to memory
/// and ran at its minimum CPU for good: `gen:30091`, 40.5 slots against Tiresias's 5.9.) Units
/// nobody takes stay idle, so an arrival takes them without moving anyone.
/// Where switches are free (or not yet measured) the share is as before. The strict
/// work-conserving mask reads what this share leaves idle (`NetConfig::strict_conserving`), so
/// a node does not wait for units a costly task will not take.
///
/// Why fractions: the estimate of a task's job time is its class's, not its own (sizes differ
/// within a class), and a fraction of it is the same for a long task as for a short one; it
/// does not depend on progress either, so a task's share does not drift every slot as it
/// advances. Optimus's rule, each unit to the task whose *remaining* time it cuts most, changed
/// allocations more often and did worse on the generated development scenarios and on the
/// presets' development seeds (docs/DECISIONS.md, "Sharing rules").
///
/// With `finish_first` the tasks the estimator says can finish within this
/// slot first get the fewest units that do it, those that need fewest first, and then nothing
/// more: a slot's units finish what they can before they speed up the rest.
pub fn gain_greedy_shares(
    view: &View<'_>,
    hold_gpus: bool,
    finish_first: bool,
) -> Vec<(TaskId, Resources)> {
    share_with(view, hold_gpus, |tasks, allocs, free, held| {
        keep_costly(view, tasks, allocs, free, held);
        let done = if finish_first {
            self::finish_first(view, tasks, allocs, free, held)
        } else {
            vec![false; tasks.len()]
        };
        greedy(view, tasks, allocs, free, held, &done);
        round_robin(view, tasks, allocs, free, held, Spare::AllButSettledCostly);
    })
}

/// Whether re-allocating running task `r` costs (its class's measured
/// [`crate::view::TaskEstimate::switch_cost`] is at least [`COSTLY_SWITCH`]) and it has run a
/// slot at the allocation in force (a task claimed this slot starts at whatever it gets, free).
fn settled_and_costly(view: &View<'_>, r: &RunningView) -> bool {
    r.est.switch_cost >= COSTLY_SWITCH && r.started < view.cluster.slot
}

/// [`gain_greedy_shares`]'s first step: each task that pays for a switch gets back, from the
/// node's spare units, what it holds now (all of it where the units are there), so that an
/// arrival or a departure does not move it; [`greedy`] then moves it only for a gain worth
/// its switch.
fn keep_costly(
    view: &View<'_>,
    tasks: &[&RunningView],
    allocs: &mut [Resources],
    free: &mut Resources,
    held: Option<usize>,
) {
    for (r, a) in tasks.iter().zip(allocs.iter_mut()) {
        if !settled_and_costly(view, r) {
            continue;
        }
        for k in (0..free.len()).filter(|&k| Some(k) != held) {
            let back = r.in_force.get(k).saturating_sub(a.get(k)).min(free.get(k));
            a.0[k] += back;
            free.0[k] -= back;
        }
    }
}

/// [`gain_greedy_shares`]'s greedy part: CPU and GPU units, one at a time, to the task whose
/// estimated job time the unit cuts by the largest fraction, while some cut is at least
/// [`MIN_GAIN`] of the task's job time at its minimum demand; where the view's priority classes
/// count, class by class (the highest first), as the round robin shares.
fn greedy(
    view: &View<'_>,
    tasks: &[&RunningView],
    allocs: &mut [Resources],
    free: &mut Resources,
    held: Option<usize>,
    done: &[bool],
) {
    for c in 0..2 {
        let Some(k) = view.cluster.kinds.0[c].filter(|&k| Some(k) != held && k < free.len()) else {
            continue;
        };
        for run in class_runs(view, tasks) {
            greedy_kind(
                view,
                &tasks[run.clone()],
                &mut allocs[run.clone()],
                free,
                k,
                &done[run],
            );
        }
    }
}

/// [`gain_greedy_shares`]'s slot-finishing step: per priority class (the highest first), the
/// running task that the fewest spare CPU and GPU units would let finish within this slot by
/// the estimator (its remaining `1 − progress` of its estimated job time at most one slot)
/// gets them, then the next, while the units last; which tasks are set to finish (the greedy
/// step gives them nothing more: a unit beyond what finishes a task in this slot ends it no
/// sooner).
///
/// Why: jobs end on slot boundaries, so a slot's units that finish a task now take a whole
/// slot off its time, while spread evenly (the greedy step's proportional fairness) they may
/// finish none. Shortest-remaining-first in miniature: it looks one slot ahead only, since the
/// estimate of a task's remaining time is its class's, which a task's own size may belie. A
/// task that pays for switches and has run keeps what it holds (as in the greedy step).
fn finish_first(
    view: &View<'_>,
    tasks: &[&RunningView],
    allocs: &mut [Resources],
    free: &mut Resources,
    held: Option<usize>,
) -> Vec<bool> {
    let mut done = vec![false; tasks.len()];
    let kinds: Vec<usize> = (0..2)
        .filter_map(|c| view.cluster.kinds.0[c].filter(|&k| Some(k) != held && k < free.len()))
        .collect();
    // The units a task needs beyond `a` to finish this slot within `free` (each the kind that
    // cuts its time most): None where it cannot.
    let need = |r: &RunningView, a: &Resources, free: &Resources| -> Option<Resources> {
        let left = (1.0 - r.progress).max(0.0);
        let mut a = a.clone();
        let mut add = Resources(vec![0; free.len()]);
        loop {
            let now = estimated_slots(view, r, &a);
            if left * now <= 1.0 {
                return Some(add);
            }
            let mut best: Option<(usize, f64)> = None;
            for &k in &kinds {
                let cap = r.task.max_demand.as_ref().map_or(u32::MAX, |m| m.get(k));
                if a.0[k] >= cap || add.0[k] >= free.0[k] {
                    continue;
                }
                let mut more = a.clone();
                more.0[k] += 1;
                let cut = now - estimated_slots(view, r, &more);
                if cut > MIN_GAIN * r.est.at_min && best.is_none_or(|(_, b)| cut > b) {
                    best = Some((k, cut));
                }
            }
            let (k, _) = best?;
            a.0[k] += 1;
            add.0[k] += 1;
        }
    };
    for run in class_runs(view, tasks) {
        loop {
            let mut best: Option<(usize, Resources, u32)> = None;
            for i in run.clone() {
                if done[i] || settled_and_costly(view, tasks[i]) {
                    continue;
                }
                if let Some(add) = need(tasks[i], &allocs[i], free) {
                    let n: u32 = add.0.iter().sum();
                    if best.as_ref().is_none_or(|(_, _, b)| n < *b) {
                        best = Some((i, add, n));
                    }
                }
            }
            let Some((i, add, _)) = best else { break };
            for k in 0..free.len() {
                allocs[i].0[k] += add.0[k];
                free.0[k] -= add.0[k];
            }
            done[i] = true;
        }
    }
    done
}

/// [`greedy`] for one kind `k` among `tasks` (one class).
fn greedy_kind(
    view: &View<'_>,
    tasks: &[&RunningView],
    allocs: &mut [Resources],
    free: &mut Resources,
    k: usize,
    done: &[bool],
) {
    while free.0[k] > 0 {
        let mut best: Option<(usize, f64)> = None;
        for (i, r) in tasks.iter().enumerate() {
            if done[i] {
                continue;
            }
            let cap = r.task.max_demand.as_ref().map_or(u32::MAX, |m| m.get(k));
            if allocs[i].0[k] >= cap {
                continue;
            }
            let now = estimated_slots(view, r, &allocs[i]);
            let mut more = allocs[i].clone();
            more.0[k] += 1;
            let cut = now - estimated_slots(view, r, &more);
            let fraction = cut / now;
            // A task kept at what it holds moves only where the remaining time the unit saves
            // is worth the slot fraction its switch loses (once moved, the switch is paid).
            let worth = !(settled_and_costly(view, r) && allocs[i] == r.in_force)
                || (1.0 - r.progress).max(0.0) * cut >= r.est.switch_cost;
            if worth && cut > MIN_GAIN * r.est.at_min && best.is_none_or(|(_, b)| fraction > b) {
                best = Some((i, fraction));
            }
        }
        let Some((i, _)) = best else { break };
        allocs[i].0[k] += 1;
        free.0[k] -= 1;
    }
}

/// A running task's job time in slots alone at allocation `a`, from the estimator's figures in
/// its view ([`crate::view::TaskEstimate::slots_at`]).
pub fn estimated_slots(view: &View<'_>, r: &RunningView, a: &Resources) -> f64 {
    r.est.slots_at(&view.cluster.kinds, &r.task.min_demand, a)
}

/// Which tasks [`round_robin`] hands the CPU and GPU units to.
#[derive(Debug, Clone, Copy)]
enum Spare {
    /// Every task, up to its maximum demand.
    All,
    /// Tasks whose estimate says the kind's next unit saves at least [`MIN_GAIN`].
    Gainful,
    /// Nothing to a task whose class pays for a switch ([`COSTLY_SWITCH`]) once it has run a
    /// slot, as `All` for the others (a costly task just started among them).
    AllButSettledCostly,
}

/// Hands `free` out to `tasks` (in [`least_attained_order`]) kind by kind, one unit at a time
/// round robin, up to each task's maximum demand, skipping the `held` kind; where the view's
/// priority classes count, the highest class's tasks share until none of them can take more,
/// then the next class's do; CPU and GPU only to the tasks `spare` says, memory and kinds
/// without a canonical place to all (but, with [`Spare::AllButSettledCostly`], nothing at all
/// to a task that pays for switches and has run).
fn round_robin(
    view: &View<'_>,
    tasks: &[&RunningView],
    allocs: &mut [Resources],
    free: &mut Resources,
    held: Option<usize>,
    spare: Spare,
) {
    let canonical = |k: usize| view.cluster.kinds.0.iter().position(|c| *c == Some(k));
    for k in (0..free.len()).filter(|&k| Some(k) != held) {
        for std::ops::Range {
            start: from,
            end: to,
        } in class_runs(view, tasks)
        {
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
                    let gainful = match spare {
                        Spare::All | Spare::AllButSettledCostly => false,
                        Spare::Gainful => true,
                    };
                    // A task that pays for switches and has run keeps what it holds (or what
                    // the greedy step moved it to): a unit more would be a switch for nothing.
                    let settled =
                        matches!(spare, Spare::AllButSettledCostly) && settled_and_costly(view, r);
                    let useful = !settled
                        && (!gainful
                            || canonical(k).is_none_or(|c| c == 2 || r.est.gain[c] >= MIN_GAIN));
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
        }
    }
}

/// Where each priority class's tasks sit in `tasks` (in [`least_attained_order`]: class by
/// class), the highest class first; one run of all where the view's classes do not count.
fn class_runs(view: &View<'_>, tasks: &[&RunningView]) -> Vec<std::ops::Range<usize>> {
    let mut runs = Vec::new();
    let mut from = 0;
    while from < tasks.len() {
        let c = class(view, tasks[from]);
        let to = from
            + tasks[from..]
                .iter()
                .take_while(|r| class(view, r) == c)
                .count();
        runs.push(from..to);
        from = to;
    }
    runs
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::{Estimator, KindMap};
    use crate::task::{NodeId, Task};
    use crate::view::{ClusterView, NodeView, TaskEstimate};
    use std::collections::BTreeMap;
    use std::sync::Arc;

    fn task(id: u64) -> Task {
        Task::new(id, [1, 1, 1]).arriving(id)
    }

    fn running(id: u64, progress: f64, est: TaskEstimate) -> RunningView {
        RunningView {
            task: Arc::new(task(id)),
            node: NodeId(0),
            alloc: Resources(vec![1, 1, 1]),
            started: 0,
            progress,
            attained: 0.0,
            est,
            est_alloc: 0.0,
            converging: false,
            in_force: Resources(vec![1, 1, 1]),
            size: None,
            done: 0.0,
        }
    }

    fn cluster(running: Vec<RunningView>, free: [u32; 3]) -> ClusterView {
        ClusterView {
            kinds: KindMap([Some(0), Some(1), Some(2)]),
            nodes: vec![NodeView {
                gpu: Default::default(),
                id: NodeId(0),
                capacity: Resources(vec![8, 8, 8]),
                free: Resources(free.to_vec()),
                window: vec![],
                overflow: 0,
                running: (0..running.len()).collect(),
            }],
            running,
            ..Default::default()
        }
    }

    /// The job time the share reads off a view is the estimator's own: the view's time at the
    /// minimum demand and one unit's gain per kind (as `TaskEstimate::of` shows them to every
    /// view) fix the estimator's model.
    #[test]
    fn the_estimated_slots_are_the_estimators() {
        // T(a) = 2 + 12/(1 + cpu) + 6/(1 + gpu), memory useless; samples from two tasks that
        // each ran at two allocations (so the model's shape comes from their pairs).
        let truth = |a: &Resources| {
            2.0 + 12.0 / (1.0 + f64::from(a.0[0])) + 6.0 / (1.0 + f64::from(a.0[1]))
        };
        let mut est = Estimator::new(KindMap([Some(0), Some(1), Some(2)]));
        for (id, allocs) in [(1, [[1, 1, 1], [3, 1, 2]]), (2, [[1, 2, 1], [2, 4, 3]])] {
            for a in allocs {
                let a = Resources(a.to_vec());
                est.observe(&task(id), &a, 0.1, 0.1 * truth(&a));
            }
        }
        let t = task(3);
        // What a view shows of it, on a cluster whose largest box has 8 of each kind.
        let r = running(
            3,
            0.0,
            TaskEstimate::of(&est, &t, &Resources(vec![8, 8, 8])),
        );
        let c = cluster(vec![r.clone()], [0, 0, 0]);
        let view = c.for_agent(NodeId(0)).unwrap();
        for a in [[1, 1, 1], [4, 1, 1], [1, 5, 2], [7, 3, 8]] {
            let a = Resources(a.to_vec());
            let (mine, theirs) = (estimated_slots(&view, &r, &a), est.slots(&t, &a));
            assert!(
                (mine - theirs).abs() < 1e-6 * theirs,
                "{a:?}: {mine} vs {theirs}"
            );
        }
    }

    /// Spare GPUs go where they cut a task's job time by the largest fraction: mostly to the task
    /// that gains more from them, however far along either is; memory is shared round robin
    /// whatever the gains.
    #[test]
    fn the_gain_greedy_share_gives_units_where_they_cut_the_largest_fraction() {
        let est = |g: f64| TaskEstimate {
            at_min: 10.0,
            gain: [0.0, g, 0.0],
            ..Default::default()
        };
        let share = |p2: f64| -> BTreeMap<TaskId, Resources> {
            let c = cluster(
                vec![running(1, 0.0, est(0.1)), running(2, p2, est(0.2))],
                [0, 4, 4],
            );
            gain_greedy_shares(&c.for_agent(NodeId(0)).unwrap(), false, false)
                .into_iter()
                .collect()
        };
        // Fractions of their job times the next GPU cuts: task 2's 0.2, 0.125, 0.086, 0.063;
        // task 1's 0.1, 0.056.
        let fresh = share(0.0);
        assert_eq!(fresh[&TaskId(1)], Resources(vec![1, 2, 3]));
        assert_eq!(fresh[&TaskId(2)], Resources(vec![1, 4, 3]));
        // Progress changes nothing: a share does not drift as its tasks advance.
        assert_eq!(share(0.9), fresh);
        // The plain share splits the GPUs evenly.
        let c = cluster(
            vec![running(1, 0.0, est(0.1)), running(2, 0.0, est(0.2))],
            [0, 4, 4],
        );
        let plain: BTreeMap<TaskId, Resources> =
            least_attained_shares(&c.for_agent(NodeId(0)).unwrap(), false)
                .into_iter()
                .collect();
        assert_eq!(plain[&TaskId(1)], Resources(vec![1, 3, 3]));
    }

    /// Where priority classes count, the urgent class's tasks take the units they gain from
    /// first, even where a batch task would gain more.
    #[test]
    fn the_gain_greedy_share_serves_the_urgent_class_first() {
        let est = |g: f64| TaskEstimate {
            at_min: 10.0,
            gain: [0.0, g, 0.0],
            ..Default::default()
        };
        let mut urgent = running(1, 0.0, est(0.1));
        Arc::make_mut(&mut urgent.task).priority = 0;
        let mut batch = running(2, 0.0, est(0.2));
        Arc::make_mut(&mut batch.task).priority = 2;
        let mut c = cluster(vec![urgent, batch], [0, 4, 0]);
        let share = |c: &ClusterView| -> BTreeMap<TaskId, Resources> {
            gain_greedy_shares(&c.for_agent(NodeId(0)).unwrap(), false, false)
                .into_iter()
                .collect()
        };
        // Priority-blind: the batch task gains more (as above).
        assert_eq!(share(&c)[&TaskId(2)], Resources(vec![1, 4, 1]));
        c.classes = true;
        assert_eq!(share(&c)[&TaskId(1)], Resources(vec![1, 5, 1]));
        assert_eq!(share(&c)[&TaskId(2)], Resources(vec![1, 1, 1]));
    }

    /// With `finish_first`, the tasks a slot's spare units can finish get them first (those
    /// needing fewest first) and nothing beyond; the rest goes by the greedy step. Three tasks
    /// linear in GPUs (8 / g slots; Amdahl's term), one GPU each, five spare: the one three
    /// quarters done needs one more GPU to finish within the slot, the half-done one three,
    /// the fresh one seven (more than there are).
    #[test]
    fn finishing_first_hands_a_slot_s_units_to_the_tasks_they_finish() {
        let est = TaskEstimate {
            at_min: 8.0,
            gain: [0.0, 0.5, 0.0],
            offset: [1.0, 0.0, 1.0],
            ..Default::default()
        };
        let c = cluster(
            vec![
                running(1, 0.0, est.clone()),
                running(2, 0.5, est.clone()),
                running(3, 0.75, est),
            ],
            [0, 5, 0],
        );
        let view = c.for_agent(NodeId(0)).unwrap();
        let gpus = |finish: bool| -> Vec<u32> {
            gain_greedy_shares(&view, false, finish)
                .into_iter()
                .map(|(_, a)| a.0[1])
                .collect()
        };
        // The view says 8 / g: one more GPU halves the fresh task's time.
        let r = &c.running[0];
        assert!((estimated_slots(&view, r, &Resources(vec![1, 8, 1])) - 1.0).abs() < 1e-9);
        assert_eq!(gpus(true), vec![2, 4, 2]);
        // Without it the greedy step spreads them (equal fractions: in Tiresias's order), and
        // only the task three quarters done finishes within the slot.
        assert_eq!(gpus(false), vec![3, 3, 2]);
    }

    /// Units no estimate gains from still go out (round robin), and held GPUs stay put.
    #[test]
    fn useless_units_are_shared_round_robin_and_held_gpus_stay() {
        let flat = TaskEstimate {
            at_min: 10.0,
            ..Default::default()
        };
        let c = cluster(
            vec![running(1, 0.0, flat.clone()), running(2, 0.0, flat)],
            [2, 2, 0],
        );
        let view = c.for_agent(NodeId(0)).unwrap();
        let s: BTreeMap<TaskId, Resources> = gain_greedy_shares(&view, false, false)
            .into_iter()
            .collect();
        assert_eq!(s[&TaskId(1)], Resources(vec![2, 2, 1]));
        assert_eq!(s[&TaskId(2)], Resources(vec![2, 2, 1]));
        let held: BTreeMap<TaskId, Resources> =
            gain_greedy_shares(&view, true, false).into_iter().collect();
        assert_eq!(held[&TaskId(1)], Resources(vec![2, 1, 1]));
        assert_eq!(held[&TaskId(2)], Resources(vec![2, 1, 1]));
    }

    /// Where a class pays for re-allocations, the gain-aware share leaves the units its tasks
    /// that have run do not gain from idle (an arrival then takes them without re-dealing
    /// anyone's); a class whose switches are free still gets them round robin. A costly task
    /// just started is shared as a free one: its first allocation costs no switch, and it is
    /// how the estimator comes to see its class at more than its minimum.
    #[test]
    fn a_class_that_pays_for_switches_takes_no_units_it_does_not_gain_from() {
        let est = |switch_cost: f64| TaskEstimate {
            at_min: 10.0,
            switch_cost,
            ..Default::default()
        };
        let shares = |slot: u64| -> BTreeMap<TaskId, Resources> {
            let mut c = cluster(
                vec![running(1, 0.0, est(0.5)), running(2, 0.0, est(0.0))],
                [2, 2, 2],
            );
            c.slot = slot;
            gain_greedy_shares(&c.for_agent(NodeId(0)).unwrap(), false, false)
                .into_iter()
                .collect()
        };
        // Both have run (started in slot 0, now slot 3): the costly one keeps what it holds.
        let s = shares(3);
        assert_eq!(s[&TaskId(1)], Resources(vec![1, 1, 1]));
        assert_eq!(s[&TaskId(2)], Resources(vec![3, 3, 3]));
        // Both started this slot: round robin to both.
        let s = shares(0);
        assert_eq!(s[&TaskId(1)], Resources(vec![2, 2, 2]));
        assert_eq!(s[&TaskId(2)], Resources(vec![2, 2, 2]));
        // Below the threshold, as before: round robin to both.
        let c = cluster(
            vec![running(1, 0.0, est(0.05)), running(2, 0.0, est(0.0))],
            [2, 2, 2],
        );
        let s: BTreeMap<TaskId, Resources> =
            gain_greedy_shares(&c.for_agent(NodeId(0)).unwrap(), false, false)
                .into_iter()
                .collect();
        assert_eq!(s[&TaskId(1)], Resources(vec![2, 2, 2]));
    }

    /// A task that pays for switches and has run keeps what it holds through an arrival, takes
    /// no unit it does not gain from, and moves for a gain only where the remaining time saved
    /// is worth its switch; a task just started, or one whose switches are free, is shared
    /// round robin.
    #[test]
    fn a_costly_task_keeps_what_it_holds_and_moves_only_for_a_gain_worth_its_switch() {
        let est = |g: f64, switch_cost: f64| TaskEstimate {
            at_min: 10.0,
            gain: [0.0, g, 0.0],
            switch_cost,
            ..Default::default()
        };
        let at = |v: [u32; 3]| Resources(v.to_vec());
        let mut kept = running(1, 0.5, est(0.0, 0.5));
        kept.in_force = at([2, 3, 1]);
        let mut fresh = running(2, 0.0, est(0.0, 0.5));
        fresh.started = 5;
        let free_switches = running(3, 0.0, est(0.0, 0.0));
        let mut c = cluster(vec![kept, fresh, free_switches], [4, 4, 4]);
        c.slot = 5;
        let s: BTreeMap<TaskId, Resources> =
            gain_greedy_shares(&c.for_agent(NodeId(0)).unwrap(), false, false)
                .into_iter()
                .collect();
        assert_eq!(s[&TaskId(1)], at([2, 3, 1]));
        assert_eq!(s[&TaskId(2)], at([3, 2, 3]));
        assert_eq!(s[&TaskId(3)], at([2, 2, 3]));
        // One task at 3 GPUs (its floor 1), halfway, 2 spare GPUs beyond. One more GPU cuts its job time by 3·g
        // slots (the estimator's form), its remaining time by 1.5·g: worth a switch that loses
        // half a slot from g = 1/3.
        let share = |g: f64, cost: f64| {
            let mut r = running(1, 0.5, est(g, cost));
            r.in_force = at([1, 3, 1]);
            let mut c = cluster(vec![r], [0, 4, 0]);
            c.slot = 5;
            gain_greedy_shares(&c.for_agent(NodeId(0)).unwrap(), false, false)[0]
                .1
                .clone()
        };
        assert_eq!(share(0.1, 0.5), at([1, 3, 1]));
        assert_eq!(share(0.4, 0.5), at([1, 5, 1]));
        assert_eq!(share(0.1, 0.0), at([1, 5, 1]));
    }
}
