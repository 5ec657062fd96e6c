use super::*;
use proptest::prelude::*;

pub(super) fn task(id: u64, arrival: u64, min: [u32; 2], reachable: &[u32]) -> Arc<Task> {
    Arc::new(Task::new(id, min).arriving(arrival).on(reachable))
}

pub(super) fn two_nodes() -> Ledger<()> {
    let mut l = Ledger::new(2, 1);
    l.set_node(NodeId(0), Resources(vec![8, 2]));
    l.set_node(NodeId(1), Resources(vec![4, 1]));
    l
}

/// Done on node 0 with exit code 0.
pub(super) fn succeeded() -> TaskState {
    TaskState::Done {
        node: NodeId(0),
        code: Some(0),
        epoch: 1,
    }
}

pub(super) fn running(node: u32, alloc: [u32; 2]) -> TaskState {
    TaskState::Running {
        node: NodeId(node),
        alloc: Resources(alloc.to_vec()),
        progress: 0.0,
        started: 0,
    }
}

#[test]
fn windows_hold_the_oldest_tasks_first_then_by_each_nodes_rank() {
    let mut l = two_nodes();
    l.insert(task(5, 1, [1, 0], &[0, 1]), TaskState::Pending, ());
    l.insert(task(9, 0, [1, 0], &[0]), TaskState::Pending, ());
    l.insert(task(2, 1, [1, 0], &[0, 1]), TaskState::Pending, ());
    let v = l.view(3, 0, 1, None);
    let ids = |n: usize| -> Vec<u64> {
        v.nodes[n]
            .window
            .iter()
            .map(|&i| v.pending[i].task.id.0)
            .collect()
    };
    // Same-age tasks 2 and 5 in each node's own order.
    let by_rank = |n: u32| -> Vec<u64> {
        let mut same = vec![2u64, 5];
        same.sort_by_key(|t| super::rank(TaskId(*t), NodeId(n)));
        same
    };
    assert_eq!(ids(0), vec![9, by_rank(0)[0]]);
    assert_eq!(v.nodes[0].overflow, 1);
    assert_eq!(ids(1), by_rank(1));
    assert_eq!(v.nodes[1].overflow, 0);
    // Tasks in at least one window, by id.
    let pending: Vec<u64> = v.pending.iter().map(|p| p.task.id.0).collect();
    let mut want = vec![9, by_rank(0)[0]];
    want.extend(by_rank(1));
    want.sort_unstable();
    want.dedup();
    assert_eq!(pending, want);
}

#[test]
fn a_filter_skips_tasks_and_counts_only_allowed_ones_as_overflow() {
    let mut l = two_nodes();
    for id in 0..5 {
        l.insert(task(id, id, [1, 0], &[0]), TaskState::Pending, ());
    }
    let odd = |e: &Entry<()>| e.task.id.0 % 2 == 1;
    let v = l.view(0, 0, 1, Some(&odd));
    let w: Vec<u64> = v.nodes[0]
        .window
        .iter()
        .map(|&i| v.pending[i].task.id.0)
        .collect();
    assert_eq!(w, vec![1, 3]);
    assert_eq!(v.nodes[0].overflow, 0);
}

#[test]
fn free_used_reward_and_attained_follow_the_states() {
    let mut l = two_nodes();
    l.insert(task(1, 0, [2, 1], &[0, 1]), TaskState::Pending, ());
    l.insert(task(2, 0, [1, 0], &[0]), TaskState::Pending, ());
    assert_eq!(l.reward(NodeId(0)), -2.0);
    assert_eq!(l.reward(NodeId(1)), -1.0);
    l.set_state(TaskId(1), running(0, [3, 1])).unwrap();
    assert_eq!(l.free(NodeId(0)), Resources(vec![5, 1]));
    assert_eq!(l.used(NodeId(0)), Resources(vec![3, 1]));
    assert_eq!(l.queue_len(NodeId(1)), 0);
    assert_eq!(l.reward(NodeId(0)), -2.0);
    assert_eq!(l.reward(NodeId(1)), 0.0);
    l.accrue_service();
    l.accrue_service();
    assert_eq!(l.get(TaskId(1)).unwrap().attained, 2.0);
    let v = l.view(0, 0, 1, None);
    assert_eq!(v.running[0].attained, 2.0);
    // Back to pending: the units come back, the attained service stays.
    l.set_state(TaskId(1), TaskState::Pending).unwrap();
    assert_eq!(l.free(NodeId(0)), Resources(vec![8, 2]));
    assert_eq!(l.queue_len(NodeId(1)), 1);
    assert_eq!(l.get(TaskId(1)).unwrap().attained, 2.0);
}

#[test]
fn a_node_added_late_queues_what_it_can_run_and_dead_nodes_leave_the_view() {
    let mut l: Ledger<()> = Ledger::new(4, 1);
    l.set_node(NodeId(0), Resources(vec![4, 1]));
    l.insert(task(1, 0, [1, 0], &[0, 7]), TaskState::Pending, ());
    l.insert(task(2, 0, [1, 0], &[0]), running(7, [1, 0]), ());
    // A task on an unknown node keeps its place (not in the view until the node is live).
    assert_eq!(l.view(0, 0, 1, None).running.len(), 0);
    l.set_node(NodeId(7), Resources(vec![2, 0]));
    assert_eq!(l.queue_len(NodeId(7)), 1);
    assert_eq!(l.free(NodeId(7)), Resources(vec![1, 0]));
    let v = l.view(0, 0, 1, None);
    assert_eq!(v.nodes.len(), 2);
    assert_eq!(v.running.len(), 1);
    l.set_live(NodeId(7), false);
    let v = l.view(0, 0, 1, None);
    assert_eq!(v.nodes.len(), 1);
    assert!(v.running.is_empty());
}

#[test]
fn a_refused_rebalance_changes_nothing() {
    let mut l = two_nodes();
    l.insert(task(1, 0, [2, 0], &[0]), running(0, [2, 0]), ());
    l.insert(task(2, 0, [2, 0], &[0]), running(0, [2, 0]), ());
    let before = l.free(NodeId(0));
    let e = l
        .rebalance(NodeId(0), &[(TaskId(1), Resources(vec![1, 0]))])
        .unwrap_err();
    assert!(matches!(e, LedgerError::OutOfBounds { .. }), "{e}");
    let e = l
        .rebalance(
            NodeId(0),
            &[
                (TaskId(1), Resources(vec![5, 0])),
                (TaskId(2), Resources(vec![4, 0])),
            ],
        )
        .unwrap_err();
    assert!(matches!(e, LedgerError::OverCapacity { .. }), "{e}");
    let e = l
        .rebalance(NodeId(1), &[(TaskId(1), Resources(vec![2, 0]))])
        .unwrap_err();
    assert!(matches!(e, LedgerError::NotRunningHere { .. }), "{e}");
    assert_eq!(l.free(NodeId(0)), before);
    let changed = l
        .rebalance(NodeId(0), &[(TaskId(1), Resources(vec![6, 1]))])
        .unwrap();
    assert_eq!(changed, vec![(TaskId(1), Resources(vec![6, 1]))]);
    assert_eq!(l.free(NodeId(0)), Resources(vec![0, 1]));
    // Not elastic: what may be claimed is what is free.
    assert_eq!(l.claimable(NodeId(0)), Resources(vec![0, 1]));
}

#[test]
fn an_elastic_node_shows_its_tasks_at_their_minimum_and_re_shares_afresh() {
    let mut l = two_nodes();
    l.insert(task(1, 0, [2, 0], &[0]), running(0, [6, 1]), ());
    l.insert(task(2, 0, [2, 0], &[0]), running(0, [2, 0]), ());
    l.set_elastic(NodeId(0), true);
    assert!(l.is_elastic(NodeId(0)) && !l.is_elastic(NodeId(1)));
    // In force: 8 of 8 CPUs; to a claim and in the views: the minimums only.
    assert_eq!(l.free(NodeId(0)), Resources(vec![0, 1]));
    assert_eq!(l.claimable(NodeId(0)), Resources(vec![4, 2]));
    let v = l.view(0, 0, 1, None);
    assert_eq!(v.nodes[0].free, Resources(vec![4, 2]));
    assert!(v.running.iter().all(|r| r.alloc == Resources(vec![2, 0])));
    // A re-share naming one task puts the other back to its minimum; only changes come back.
    let changed = l
        .rebalance(NodeId(0), &[(TaskId(2), Resources(vec![5, 2]))])
        .unwrap();
    assert_eq!(
        changed,
        vec![
            (TaskId(1), Resources(vec![2, 0])),
            (TaskId(2), Resources(vec![5, 2]))
        ]
    );
    assert_eq!(l.free(NodeId(0)), Resources(vec![1, 0]));
    // Nodes heard of later share as every node does.
    l.set_all_elastic(true);
    l.set_node(NodeId(5), Resources(vec![1, 1]));
    assert!(l.is_elastic(NodeId(1)) && l.is_elastic(NodeId(5)));
}

#[test]
fn a_claim_on_a_node_with_floors_holds_its_task_at_or_above_that_floor_for_the_run() {
    let mut l = two_nodes();
    l.set_elastic(NodeId(0), true);
    l.set_floors(NodeId(0), true);
    l.insert(task(1, 0, [2, 0], &[0]), TaskState::Pending, ());
    l.insert(task(2, 0, [2, 0], &[0]), running(0, [2, 0]), ());
    // The claim starts task 1 with 5 CPUs and a GPU: its floor for the run.
    l.set_state(TaskId(1), running(0, [5, 1]));
    assert_eq!(
        l.floor(&l.get(TaskId(1)).unwrap().task.clone()),
        &Resources(vec![5, 1])
    );
    assert_eq!(l.claimable(NodeId(0)), Resources(vec![1, 1]));
    let v = l.view(0, 0, 1, None);
    let shown = |id| {
        v.running
            .iter()
            .find(|r| r.task.id == TaskId(id))
            .unwrap()
            .alloc
            .clone()
    };
    assert_eq!(shown(1), Resources(vec![5, 1]));
    assert_eq!(shown(2), Resources(vec![2, 0]));
    // No re-share takes it under its floor; one naming only task 2 leaves task 1 at it.
    let e = l
        .rebalance(NodeId(0), &[(TaskId(1), Resources(vec![4, 1]))])
        .unwrap_err();
    assert!(matches!(e, LedgerError::OutOfBounds { .. }), "{e}");
    l.rebalance(NodeId(0), &[(TaskId(2), Resources(vec![3, 1]))])
        .unwrap();
    assert_eq!(l.used(NodeId(0)), Resources(vec![8, 2]));
    // The same copy re-allocated keeps the floor it started with.
    l.set_state(TaskId(1), running(0, [6, 1]));
    assert_eq!(l.claimable(NodeId(0)), Resources(vec![1, 1]));
    // Once it has finished its floor is gone with it.
    l.set_state(
        TaskId(1),
        TaskState::Done {
            node: NodeId(0),
            code: Some(0),
            epoch: 1,
        },
    );
    assert_eq!(l.claimable(NodeId(0)), Resources(vec![6, 2]));
    // Without floors (every elastic baseline) a start above the minimum sets no floor.
    l.set_floors(NodeId(0), false);
    l.insert(task(3, 0, [1, 0], &[0]), running(0, [4, 0]), ());
    assert_eq!(l.claimable(NodeId(0)), Resources(vec![5, 2]));
}

proptest! {
    /// Whatever the order of changes, each node's used units are the sum of the allocations of
    /// the tasks running there, and its queue holds exactly its reachable pending tasks.
    #[test]
    fn the_indices_always_match_the_states(ops in prop::collection::vec((0u64..6, 0u8..4, 0u32..3, 0u32..4), 1..60)) {
        let mut l: Ledger<()> = Ledger::new(3, 1);
        l.set_node(NodeId(0), Resources(vec![100, 100]));
        for (id, op, node, units) in ops {
            let id_t = TaskId(id);
            if !l.contains(id_t) {
                l.insert(task(id, id / 2, [1, 0], &[0, 1, 2]), TaskState::Pending, ());
            }
            match op {
                0 => { l.set_state(id_t, TaskState::Pending); }
                1 => { l.set_state(id_t, running(node, [units, 1])); }
                2 => { l.set_state(id_t, TaskState::Done { node: NodeId(node), code: Some(0), epoch: 1 }); }
                _ => l.set_node(NodeId(node), Resources(vec![100, 100])),
            }
        }
        for n in 0..3 {
            let node = NodeId(n);
            let mut used = Resources::zeros(2);
            let mut queued = 0;
            for (_, e) in l.iter() {
                match &e.state {
                    TaskState::Running { node: m, alloc, .. } if *m == node => add_each(&mut used, alloc),
                    TaskState::Pending if l.nodes.contains_key(&node) => queued += 1,
                    _ => {}
                }
            }
            if l.nodes.contains_key(&node) {
                prop_assert_eq!(l.used(node), used);
            }
            prop_assert_eq!(l.queue_len(node), queued);
        }
    }
}

proptest! {
    /// On an elastic node with floors, whatever the order of changes, what a claim may take is
    /// the capacity less the floors of the tasks running there, each floor at least the task's
    /// minimum demand and the allocation its run started with.
    #[test]
    fn claimable_units_are_the_capacity_less_the_floors(ops in prop::collection::vec((0u64..6, 0u8..3, 1u32..5, 0u32..3), 1..60)) {
        let mut l: Ledger<()> = Ledger::new(3, 1);
        l.set_node(NodeId(0), Resources(vec![100, 100]));
        l.set_elastic(NodeId(0), true);
        l.set_floors(NodeId(0), true);
        let mut started: std::collections::BTreeMap<u64, Resources> = Default::default();
        for (id, op, units, more) in ops {
            let id_t = TaskId(id);
            if !l.contains(id_t) {
                l.insert(task(id, id / 2, [1, 0], &[0]), TaskState::Pending, ());
            }
            let runs = matches!(l.get(id_t).unwrap().state, TaskState::Running { .. });
            match op {
                0 => { l.set_state(id_t, TaskState::Pending); started.remove(&id); }
                // A start, or (if it runs) a re-allocation of the same copy.
                1 if runs => { l.set_state(id_t, running(0, [units + more, 1])); }
                1 => { l.set_state(id_t, running(0, [units, 1])); started.insert(id, Resources(vec![units, 1])); }
                _ => { l.set_state(id_t, TaskState::Done { node: NodeId(0), code: Some(0), epoch: 1 }); started.remove(&id); }
            }
        }
        let mut floors = Resources::zeros(2);
        for (id, alloc) in &started {
            let t = l.get(TaskId(*id)).unwrap().task.clone();
            prop_assert_eq!(l.floor(&t), alloc);
            add_each(&mut floors, alloc);
        }
        let mut want = Resources(vec![100, 100]);
        sub_each(&mut want, &floors);
        prop_assert_eq!(l.claimable(NodeId(0)), want);
    }
}

#[test]
fn windows_order_same_age_tasks_differently_per_node_and_keep_age_first() {
    let mut l: Ledger<()> = Ledger::new(3, 1);
    for n in 0..4 {
        l.set_node(NodeId(n), Resources(vec![8, 2]));
    }
    l.insert(task(99, 0, [1, 0], &[0, 1, 2, 3]), TaskState::Pending, ());
    for id in 0..8 {
        l.insert(task(id, 1, [1, 0], &[0, 1, 2, 3]), TaskState::Pending, ());
    }
    let v = l.view(2, 0, 1, None);
    let windows: Vec<Vec<u64>> = v
        .nodes
        .iter()
        .map(|n| n.window.iter().map(|&i| v.pending[i].task.id.0).collect())
        .collect();
    // The older task heads every window; after it, the nodes do not all agree.
    assert!(windows.iter().all(|w| w[0] == 99), "{windows:?}");
    assert!(
        windows.iter().any(|w| w[1..] != windows[0][1..]),
        "{windows:?}"
    );
    assert_eq!(l.view(2, 0, 1, None), v, "deterministic");
}

#[test]
fn a_gang_holds_its_members_units_on_every_box_and_no_re_share_takes_them() {
    let mut l = two_nodes();
    l.set_elastic(NodeId(0), true);
    let mut g = (*task(3, 0, [1, 0], &[])).clone();
    g.gang = Some(Box::new(crate::placement::gang::GangShape {
        workers: (1, 2),
        ps: 1,
        worker_demand: Resources(vec![2, 1]),
        ps_demand: Resources(vec![1, 0]),
        compute_seconds: 1.0,
        gradient_bytes: 1e6,
        restarts: 0,
        stages: Vec::new(),
    }));
    l.insert(Arc::new(g), TaskState::Pending, ());
    assert_eq!(l.pending_gangs().collect::<Vec<_>>(), vec![TaskId(3)]);
    // In no node's queue: no policy claims a gang one node at a time.
    assert_eq!(l.queue_len(NodeId(0)) + l.queue_len(NodeId(1)), 0);
    l.insert(task(4, 0, [1, 0], &[0]), running(0, [1, 0]), ());
    let members = vec![
        (NodeId(0), Resources(vec![1, 0])),
        (NodeId(0), Resources(vec![2, 1])),
        (NodeId(1), Resources(vec![2, 1])),
    ];
    l.set_state(
        TaskId(3),
        TaskState::Gang {
            members: members.clone(),
            progress: 0.0,
            started: 0,
        },
    );
    assert_eq!(l.pending_gangs().count(), 0);
    assert_eq!(l.held(NodeId(0)), Resources(vec![3, 1]));
    assert_eq!(l.free(NodeId(0)), Resources(vec![4, 1]));
    assert_eq!(l.claimable(NodeId(0)), Resources(vec![4, 1]));
    assert_eq!(l.free(NodeId(1)), Resources(vec![2, 0]));
    assert_eq!(l.gangs_on(NodeId(1)).collect::<Vec<_>>(), vec![TaskId(3)]);
    assert_eq!(l[&TaskId(3)].state.running_on(), Some(NodeId(0)));
    // The single task may grow into what the gang left (4 + its 1), not beyond.
    assert!(
        l.rebalance(NodeId(0), &[(TaskId(4), Resources(vec![5, 1]))])
            .is_ok()
    );
    assert!(
        l.rebalance(NodeId(0), &[(TaskId(4), Resources(vec![6, 1]))])
            .is_err()
    );
    // Ended: every member's units come back at once.
    l.set_state(
        TaskId(3),
        TaskState::Done {
            node: NodeId(0),
            code: Some(0),
            epoch: 1,
        },
    );
    assert_eq!(l.held(NodeId(0)), Resources(vec![0, 0]));
    assert_eq!(l.free(NodeId(1)), Resources(vec![4, 1]));
    assert_eq!(l.gangs_on(NodeId(0)).count(), 0);
}

proptest! {
    /// Windows in priority order: every node's window is the first tasks of its queue sorted
    /// by (effective class, arrival, id) — a full sort, the reference — whatever the classes,
    /// ages, aging and window size; the rest is counted as overflow; and a task of class `c`
    /// that has waited `c × aging` slots is in class 0, ahead of every task that arrived after
    /// it (no class waits forever behind newer work).
    #[test]
    fn windows_serve_the_highest_effective_class_first(
        tasks in proptest::collection::vec((0u8..4, 0u64..200), 0..40),
        slot in 200u64..400,
        aging in proptest::option::of(1u64..60),
        honour in any::<bool>(),
        size in 1usize..8,
    ) {
        let p = Priorities { honour, aging_slots: aging };
        let mut l: Ledger<()> = Ledger::new(size, 1).with_priorities(p);
        l.set_node(NodeId(0), Resources(vec![8, 2]));
        for (i, (class, arrival)) in tasks.iter().enumerate() {
            let mut t = (*task(i as u64, *arrival, [1, 0], &[0])).clone();
            t.priority = *class;
            l.insert(Arc::new(t), TaskState::Pending, ());
        }
        let v = l.view(slot, 0, 1, None);
        let got: Vec<u64> = v.nodes[0].window.iter().map(|&i| v.pending[i].task.id.0).collect();
        let mut all: Vec<(u8, u64, u64, u64)> = tasks
            .iter()
            .enumerate()
            .map(|(i, (c, a))| {
                let c = if honour { *c } else { 0 };
                let id = i as u64;
                (p.effective(c, *a, slot), *a, super::rank(TaskId(id), NodeId(0)), id)
            })
            .collect();
        all.sort_unstable();
        let want: Vec<u64> = all.iter().take(size).map(|x| x.3).collect();
        prop_assert_eq!(&got, &want);
        prop_assert_eq!(v.nodes[0].overflow, tasks.len() - got.len());
        if let (true, Some(a)) = (honour, aging) {
            for (class, arrival) in &tasks {
                if slot - arrival >= u64::from(*class) * a {
                    prop_assert_eq!(p.effective(*class, *arrival, slot), 0);
                }
            }
        }
    }
}

#[test]
fn a_blind_ledger_orders_by_arrival_alone_and_a_high_class_goes_first_otherwise() {
    let urgent = |id, arrival, class| {
        let mut t = (*task(id, arrival, [1, 0], &[0])).clone();
        t.priority = class;
        Arc::new(t)
    };
    let window = |p: Priorities| -> Vec<u64> {
        let mut l: Ledger<()> = Ledger::new(2, 1).with_priorities(p);
        l.set_node(NodeId(0), Resources(vec![8, 2]));
        l.insert(urgent(1, 0, 2), TaskState::Pending, ());
        l.insert(urgent(2, 5, 2), TaskState::Pending, ());
        l.insert(urgent(3, 9, 0), TaskState::Pending, ());
        let v = l.view(10, 0, 1, None);
        v.nodes[0]
            .window
            .iter()
            .map(|&i| v.pending[i].task.id.0)
            .collect()
    };
    assert_eq!(window(Priorities::BLIND), vec![1, 2]);
    let no_aging = Priorities {
        honour: true,
        aging_slots: None,
    };
    assert_eq!(window(no_aging), vec![3, 1]);
    // Aged 10 slots at 5 a class: task 1 is in class 0 and older than task 3.
    let aging = Priorities {
        honour: true,
        aging_slots: Some(5),
    };
    assert_eq!(window(aging), vec![1, 3]);
}

#[test]
fn a_task_counts_its_runs_not_its_re_shares() {
    let mut l = two_nodes();
    l.insert(task(1, 0, [1, 0], &[0, 1]), TaskState::Pending, ());
    assert_eq!(l[&TaskId(1)].runs, 0);
    l.set_state(TaskId(1), running(0, [2, 0])).unwrap();
    l.set_alloc(TaskId(1), Resources(vec![3, 0]));
    assert_eq!(l[&TaskId(1)].runs, 1);
    l.set_state(TaskId(1), TaskState::Pending).unwrap();
    l.set_state(TaskId(1), running(1, [1, 0])).unwrap();
    assert_eq!(l[&TaskId(1)].runs, 2);
}

/// The first slot at a task's new allocation carries the switch's cost (a restart on new
/// devices, a slowed slot): where switches measure costly it is no sample for the speed
/// estimator, the slots after it are. Before, a slowed slot counted at the new allocation and
/// made the extra units look useless.
#[test]
fn the_slot_after_a_re_allocation_is_no_speed_sample() {
    let mut l = two_nodes().with_kinds(crate::estimate::KindMap([Some(0), Some(1), None]));
    let t = task(1, 0, [2, 1], &[0]);
    l.insert(t.clone(), running(0, [2, 1]), ());
    // The re-share of the running copy to `alloc` (its node and start unchanged).
    let reshare = |l: &mut Ledger<()>, alloc: [u32; 2], progress: f64| {
        let at = Resources(alloc.to_vec());
        let state = TaskState::Running {
            node: NodeId(0),
            alloc: at,
            progress,
            started: 0,
        };
        l.set_state(TaskId(1), state);
    };
    l.set_progress(TaskId(1), 0.1, 1.0);
    assert_eq!(l.estimator().samples(t.ty), 1);
    reshare(&mut l, [4, 1], 0.1);
    // The switch's slot: half as fast as the allocation would run. Until a switch is measured
    // it counts as a speed sample, as switches are believed free.
    l.set_progress(TaskId(1), 0.2, 2.0);
    assert_eq!(l.estimator().samples(t.ty), 2);
    // The steady slot at the new allocation: 0.2 a slot, 5 slots for the whole task. Against
    // it, the switch's slot lost half a slot: switches cost, and their slots are no samples.
    l.set_progress(TaskId(1), 0.4, 3.0);
    assert!((l.estimator().switch_cost(t.ty) - 0.5).abs() < 1e-9);
    assert_eq!(l.estimator().samples(t.ty), 2);
    // The samples say 10 slots at 2 cores and 5 at 4. The fit (θ ≥ 0, so not exact) reads 5.5
    // at 4 cores; with the switch's slot counted as a speed it read 7.
    let at_4 = l.estimator().slots(&t, &Resources(vec![4, 1]));
    assert!((at_4 - 5.0).abs() < 0.6, "{at_4}");
    // An unchanged allocation is no switch: the next slot is a sample.
    reshare(&mut l, [4, 1], 0.4);
    l.set_progress(TaskId(1), 0.6, 4.0);
    assert_eq!(l.estimator().samples(t.ty), 3);
    // Progress that reaches 1 ends the task somewhere in the slot: no sample (as a full slot it
    // would say 0.4 a slot was 0.2).
    l.set_progress(TaskId(1), 1.0, 5.0);
    assert_eq!(l.estimator().samples(t.ty), 3);
}

/// A task learned only once it is done (from an outcome or a journal) counts its declared work
/// towards its class's mean, as on the agents that heard it earlier, and holds no entry of its
/// own: its class's next task is estimated against that mean.
#[test]
fn a_task_learned_done_counts_its_declared_work_and_is_let_go() {
    let mut l = two_nodes();
    let done = task(1, 0, [1, 0], &[0]);
    let next = task(2, 0, [1, 0], &[0]);
    l.declare(&done, 4.0);
    l.insert(
        done.clone(),
        TaskState::Done {
            node: NodeId(0),
            code: Some(0),
            epoch: 1,
        },
        (),
    );
    l.declare(&next, 2.0);
    let est = l.estimator();
    // The class's mean is 3 (both count); the done task's own entry is gone.
    assert!((est.relative_work(&next) - 2.0 / 3.0).abs() < 1e-12);
    assert_eq!(est.relative_work(&done), 1.0);
}

/// Boxes of two GPU models: a task's progress on each is a sample of its class on that
/// model, a view shows each running task's estimate on its own box's model and each pending
/// task's on every model of the live boxes, and each box in the view says its model.
#[test]
fn progress_is_learned_per_gpu_model_and_views_show_each_box_s_figures() {
    use crate::estimate::GpuModel;
    let mut l = two_nodes().with_kinds(crate::estimate::KindMap([Some(0), Some(1), None]));
    let (fast, slow) = (GpuModel::of("v100"), GpuModel::of("k80"));
    l.set_gpu_model(NodeId(0), fast);
    l.set_gpu_model(NodeId(1), slow);
    // Two tasks of one class at one GPU: 10 slots on the V100 box, 30 on the K80 box.
    for (id, node, step) in [(1, 0, 0.1), (2, 1, 1.0 / 30.0)] {
        l.insert(task(id, 0, [1, 1], &[0, 1]), running(node, [1, 1]), ());
        for s in 1..=3 {
            l.set_progress(TaskId(id), step * f64::from(s), f64::from(s));
        }
    }
    l.insert(task(3, 0, [1, 1], &[0, 1]), TaskState::Pending, ());
    let v = l.view(3, 0, 1, None);
    assert_eq!(
        v.nodes.iter().map(|n| n.gpu).collect::<Vec<_>>(),
        [fast, slow]
    );
    let at_min = |e: &crate::view::TaskEstimate| e.at_min;
    let close = |x: f64, y: f64| (x - y).abs() < 1e-6 * y;
    for r in &v.running {
        let want = if r.node == NodeId(0) { 10.0 } else { 30.0 };
        assert!(
            close(at_min(&r.est), want) && close(r.est_alloc, want),
            "{r:?}"
        );
    }
    let p = &v.pending[0];
    assert!(close(at_min(p.est_on(fast)), 10.0), "{p:?}");
    assert!(close(at_min(p.est_on(slow)), 30.0), "{p:?}");
    // A box of one model: no per-model figures to carry.
    let mut one = two_nodes();
    one.insert(task(3, 0, [1, 1], &[0, 1]), TaskState::Pending, ());
    assert!(one.view(0, 0, 1, None).pending[0].on.is_empty());
}
