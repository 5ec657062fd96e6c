//! The action masks, in sampling (training) and greedy (deployment) decisions alike: the
//! work-conserving mask (and its strict form), the exclusive-first mask and the wait-for-faster
//! mask.

use super::*;
use burn::tensor::Device;
use tapfinger_core::view::TaskEstimate;

#[test]
fn greedy_decisions_are_feasible_and_work_conserving() {
    work_conserving_in(true);
}

#[test]
fn sampled_decisions_are_work_conserving_too_and_the_ablation_may_pass() {
    // The mask acts in training (sampling) as in deployment: no rule only evaluation sees.
    work_conserving_in(false);
    let device = Device::flex();
    device.seed(6);
    let mut cfg = NetConfig::variant(dims(), "nomask").unwrap();
    cfg.work_conserving = false;
    let mut policy = TapfingerPolicy::untrained(cfg, device);
    let mut rng = tapfinger_core::seeded_rng(2);
    let idle_passes = (100..160)
        .flat_map(|seed| {
            let view = random_view(seed);
            let ids: Vec<_> = view.nodes.iter().map(|n| n.id).collect();
            ids.into_iter().map(move |id| (view.clone(), id))
        })
        .filter(|(view, id)| {
            let v = view.for_agent(*id).unwrap();
            v.node().running.is_empty()
                && v.feasible().next().is_some()
                && policy.decide(&v, &mut rng) == Decision::Pass
        })
        .count();
    assert!(
        idle_passes > 0,
        "without the mask an untrained policy never passed idle"
    );
}

/// The units no task running on the node could take: its free units less each running task's
/// room to its cap (`None` where a running task has no cap: it could take them all).
fn untakable(v: &View<'_>) -> Option<Resources> {
    let mut spare = v.node().free.clone();
    for &i in &v.node().running {
        let r = &v.cluster.running[i];
        let m = r.task.max_demand.as_ref()?;
        for k in 0..spare.len() {
            spare.0[k] = spare.0[k].saturating_sub(m.get(k).saturating_sub(r.alloc.get(k)));
        }
    }
    Some(spare)
}

/// The strict form: no node passes while a window task fits in units its running tasks could
/// not take, busy or idle, in sampling and greedy decisions alike; the default form lets a
/// busy node pass.
#[test]
fn the_strict_form_holds_busy_nodes_to_it_too() {
    let passes_busy = |strict: bool, greedy: bool| {
        let device = Device::flex();
        device.seed(6);
        let mut cfg = NetConfig::new(dims());
        cfg.strict_conserving = strict;
        let mut policy = TapfingerPolicy::untrained(cfg, device).greedy(greedy);
        let mut rng = tapfinger_core::seeded_rng(2);
        let (mut busy_with_work, mut passed) = (0, 0);
        for seed in 100..220 {
            // Running tasks that cannot grow (as in a trace), every other one capped a unit
            // above what it holds.
            let mut view = random_view(seed);
            for (i, r) in view.running.iter_mut().enumerate() {
                let mut t = (*r.task).clone();
                let mut cap = r.alloc.clone();
                if i % 2 == 1 {
                    cap.0[0] += 1;
                }
                t.max_demand = Some(cap);
                r.task = std::sync::Arc::new(t);
            }
            for node in &view.nodes {
                let v = view.for_agent(node.id).unwrap();
                let idle_units_fit = untakable(&v).is_some_and(|spare| {
                    v.feasible()
                        .take(dims().window)
                        .any(|t| t.min_demand.fits_in(&spare))
                });
                let pass = policy.decide(&v, &mut rng) == Decision::Pass;
                if strict {
                    assert!(
                        !(idle_units_fit && pass),
                        "a node passed with work that fits units no running task could take"
                    );
                }
                if idle_units_fit && !node.running.is_empty() {
                    busy_with_work += 1;
                    passed += usize::from(pass);
                }
            }
        }
        assert!(
            busy_with_work > 5,
            "too few busy nodes with work ({busy_with_work})"
        );
        passed
    };
    for greedy in [true, false] {
        assert_eq!(passes_busy(true, greedy), 0);
    }
    assert!(
        passes_busy(false, false) > 0,
        "without the strict form an untrained policy never passed on a busy node"
    );
}

/// The strict form's one exception: a node may pass a task that fits if it runs
/// [`crate::FASTER_ELSEWHERE`] times faster on another box it may run on, by the
/// estimator's figures for each box's GPU model; never a task without such a box.
#[test]
fn the_strict_form_lets_a_task_wait_for_a_much_faster_gpu_model() {
    use tapfinger_core::estimate::GpuModel;
    let (slow, fast) = (GpuModel::of("k80"), GpuModel::of("v100"));
    let device = Device::flex();
    device.seed(6);
    let mut cfg = NetConfig::new(dims());
    cfg.strict_conserving = true;
    let mut policy = TapfingerPolicy::untrained(cfg, device).greedy(false);
    let mut rng = tapfinger_core::seeded_rng(2);
    let (mut waited, mut checked) = (0, 0);
    for seed in 100..220 {
        let mut view = random_view(seed);
        for r in view.running.iter_mut() {
            let mut t = (*r.task).clone();
            t.max_demand = Some(r.alloc.clone());
            r.task = std::sync::Arc::new(t);
        }
        // The last box is a V100 box; every pending task runs there 3 times as fast, but one in
        // five only 1.2 times (that one must not wait).
        if view.nodes.len() < 2 {
            continue;
        }
        let last = view.nodes.len() - 1;
        let ids: Vec<tapfinger_core::task::NodeId> = view.nodes.iter().map(|n| n.id).collect();
        for (i, n) in view.nodes.iter_mut().enumerate() {
            n.gpu = if i == last { fast } else { slow };
        }
        for (i, p) in view.pending.iter_mut().enumerate() {
            p.est.at_min = 9.0;
            let speedup = if i % 5 == 4 { 1.2 } else { 3.0 };
            let on_fast = TaskEstimate {
                at_min: 9.0 / speedup,
                ..p.est.clone()
            };
            p.on = vec![(fast, on_fast)];
            let mut t = (*p.task).clone();
            t.reachable = ids.clone();
            p.task = std::sync::Arc::new(t);
        }
        let fast_id = view.nodes[last].id;
        let fast_cap = view.nodes[last].capacity.clone();
        for node in view.nodes.iter().take(last) {
            let v = view.for_agent(node.id).unwrap();
            let Some(spare) = untakable(&v) else { continue };
            // Window tasks that fit the units no one takes, and whether each may wait.
            let fits: Vec<bool> = v
                .node()
                .window
                .iter()
                .take(dims().window)
                .map(|&i| &v.cluster.pending[i])
                .filter(|p| p.task.min_demand.fits_in(&spare))
                .map(|p| {
                    p.est_on(fast).at_min * 1.5 <= p.est.at_min
                        && p.task.reachable.contains(&fast_id)
                        && p.task.min_demand.fits_in(&fast_cap)
                })
                .collect();
            if fits.is_empty() {
                continue;
            }
            checked += 1;
            if policy.decide(&v, &mut rng) == Decision::Pass {
                assert!(
                    fits.iter().all(|may_wait| *may_wait),
                    "a node passed a task that fits and runs no faster elsewhere"
                );
                waited += 1;
            }
        }
    }
    assert!(checked > 10, "too few busy nodes with work ({checked})");
    assert!(
        waited > 0,
        "no task ever waited for the faster box ({checked} checked)"
    );
}

fn work_conserving_in(greedy: bool) {
    let device = Device::flex();
    device.seed(6);
    let mut policy = TapfingerPolicy::untrained(NetConfig::new(dims()), device).greedy(greedy);
    let mut rng = tapfinger_core::seeded_rng(2);
    let mut checked = 0;
    for seed in 100..160 {
        let view = random_view(seed);
        for node in &view.nodes {
            let v = view.for_agent(node.id).unwrap();
            let idle_with_work = node.running.is_empty() && v.feasible().next().is_some();
            checked += usize::from(idle_with_work);
            match policy.decide(&v, &mut rng) {
                Decision::Pass => {
                    assert!(!idle_with_work, "an idle node passed with feasible work")
                }
                Decision::Claim { task, alloc, .. } => {
                    let t = v
                        .window()
                        .find(|t| t.id == task)
                        .expect("claimed task is in the window");
                    assert!(t.allows(&alloc, &node.free));
                }
            }
        }
    }
    assert!(
        checked > 5,
        "too few idle nodes with work to test the guard ({checked})"
    );
}

/// The exclusive-first mask: on box 0, window in queue order — task 1 (class 0, box 1 may run
/// it too), task 2 (class 0, only box 0), task 3 (class 0, younger, box 1 too), task 4 (class
/// 1, younger, box 1 too). Task 3 may not overtake task 2; the others may be chosen, and
/// without the mask, or where task 2 does not fit, all of them.
#[test]
fn the_exclusive_first_mask_keeps_a_younger_task_of_its_class_from_overtaking_a_box_s_own() {
    let task = |id, ty: u16, reach: &[u32]| {
        let mut t = crate::tests::gpu_task(id, reach);
        t.ty = tapfinger_core::TaskTypeId(ty);
        t.arrival = id;
        std::sync::Arc::new(t)
    };
    let node = |id| NodeView {
        gpu: Default::default(),
        id: NodeId(id),
        capacity: Resources(vec![8, 8]),
        free: Resources(vec![8, 8]),
        window: if id == 0 {
            vec![0, 1, 2, 3]
        } else {
            vec![0, 2, 3]
        },
        overflow: 0,
        running: vec![],
    };
    let mut view = ClusterView {
        slot: 5,
        kinds: tapfinger_core::estimate::KindMap::from_names(&["cpu", "gpu"]),
        nodes: vec![node(0), node(1)],
        pending: [
            (1, 0, vec![0, 1]),
            (2, 0, vec![0]),
            (3, 0, vec![0, 1]),
            (4, 1, vec![0, 1]),
        ]
        .into_iter()
        .map(|(id, ty, reach)| PendingView {
            on: Vec::new(),
            class: 0,
            task: task(id, ty, &reach),
            est: crate::tests::gpu_bound(3.0),
            size: None,
            done: 0.0,
        })
        .collect(),
        ..Default::default()
    };
    let blocked = |view: &ClusterView, on: bool| {
        let mut cfg = NetConfig::new(Dims::general(10));
        cfg.elastic = true;
        cfg.exclusive_first = on;
        let policy = TapfingerPolicy::untrained(cfg, Device::flex());
        let v = view.for_agent(NodeId(0)).unwrap();
        let window: Vec<&tapfinger_core::Task> = v.window().collect();
        policy.blocked(&v, &window)[..4].to_vec()
    };
    assert_eq!(blocked(&view, true), [false, false, true, false]);
    assert_eq!(blocked(&view, false), [false; 4]);
    // Task 2 asks for more than box 0 has free: nothing waits for it.
    std::sync::Arc::make_mut(&mut view.pending[1].task).min_demand = Resources(vec![9, 1]);
    assert_eq!(blocked(&view, true), [false, true, false, false]);
    // Sampled decisions, as in training, never take task 3 while task 2 fits.
    let view = {
        let mut v = view;
        std::sync::Arc::make_mut(&mut v.pending[1].task).min_demand = Resources(vec![1, 1]);
        v
    };
    let device = Device::flex();
    device.seed(8);
    let mut cfg = NetConfig::new(Dims::general(10));
    cfg.elastic = true;
    cfg.exclusive_first = true;
    let mut policy = TapfingerPolicy::untrained(cfg, device);
    let mut rng = tapfinger_core::seeded_rng(1);
    let v = view.for_agent(NodeId(0)).unwrap();
    let mut taken = std::collections::BTreeSet::new();
    for _ in 0..200 {
        if let Decision::Claim { task, .. } = policy.decide(&v, &mut rng) {
            taken.insert(task.0);
        }
    }
    assert!(!taken.contains(&3), "task 3 overtook task 2: {taken:?}");
    assert!(taken.len() >= 2, "{taken:?}");
}

/// The strict form counts the units the node's re-share would leave idle: a running task whose
/// class pays for a switch (a measured cost, and it has run a slot) keeps what it holds unless
/// a move is worth it, so the spare units it could grow into stay idle, and a node must not pass
/// a task that fits in them. Where switches are free the same task takes them, and the node may
/// wait for it.
#[test]
fn the_strict_form_counts_the_units_a_costly_task_would_leave_idle() {
    let device = Device::flex();
    device.seed(6);
    let mut cfg = NetConfig::new(dims());
    cfg.strict_conserving = true;
    // The shipped general model's sharing: elastic, gain-aware, finishing first.
    (cfg.elastic, cfg.gain_share, cfg.finish_first) = (true, true, true);
    let mut policy = TapfingerPolicy::untrained(cfg, device).greedy(false);
    let mut rng = tapfinger_core::seeded_rng(2);
    let (mut checked, mut passed_free) = (0, 0);
    for seed in 100..260 {
        for costly in [true, false] {
            let mut view = random_view(seed);
            view.slot = view.slot.max(5);
            for r in view.running.iter_mut() {
                // Every running task may grow to take its node's whole capacity, and has run.
                let mut t = (*r.task).clone();
                t.max_demand = Some(Resources(vec![64; r.alloc.len()]));
                r.task = std::sync::Arc::new(t);
                r.started = 0;
                r.in_force = r.alloc.clone();
                r.est.switch_cost = if costly { 0.5 } else { 0.0 };
            }
            for node in &view.nodes {
                let v = view.for_agent(node.id).unwrap();
                if node.running.is_empty() || v.feasible().next().is_none() {
                    continue;
                }
                let pass = policy.decide(&v, &mut rng) == Decision::Pass;
                let idle = policy.idle_after_share(&v);
                let fits_idle = v
                    .feasible()
                    .take(dims().window)
                    .any(|t| t.min_demand.fits_in(&idle));
                if costly {
                    checked += usize::from(fits_idle);
                    assert!(
                        !(fits_idle && pass),
                        "a busy node passed while a task fits units its costly tasks leave idle"
                    );
                } else {
                    // Free switches: the running tasks take every spare unit up to their caps.
                    assert!(!fits_idle, "units left idle though switches are free");
                    passed_free += usize::from(pass);
                }
            }
        }
    }
    assert!(
        checked > 5,
        "too few busy nodes with idle units ({checked})"
    );
    assert!(
        passed_free > 0,
        "with free switches a busy node never waited for its tasks to grow"
    );
}

/// The wait-for-faster mask: box 0 has a K80, box 1 a V100 on which the estimator puts the one
/// pending task three times faster (10 slots against 30) but whose running task holds its
/// units. Where that task ends in 5 slots, waiting and running there (15) beats starting on box
/// 0 by more than [`super::FASTER_ELSEWHERE`], so box 0 may not take it and passes, in greedy
/// and sampled decisions alike; where it ends in 20 slots, or without the mask, box 0 may.
#[test]
fn the_wait_for_faster_mask_holds_a_task_for_a_faster_box_that_frees_soon() {
    use tapfinger_core::estimate::GpuModel;
    let (k80, v100) = (GpuModel::of("k80"), GpuModel::of("v100"));
    let node = |id, gpu, free: Vec<u32>, window: Vec<usize>, running: Vec<usize>| NodeView {
        gpu,
        id: NodeId(id),
        capacity: Resources(vec![8, 8]),
        free: Resources(free),
        window,
        overflow: 0,
        running,
    };
    let on = |at_min| TaskEstimate {
        at_min,
        at_max: at_min,
        ..crate::tests::gpu_bound(at_min)
    };
    let mut t = crate::tests::gpu_task(1, &[0, 1]);
    // A rigid job: one GPU, no more.
    t.max_demand = Some(Resources(vec![1, 1]));
    // The running task has run `left` slots for half its work: its own pace and the
    // estimator's figure (2 × left for all of it) agree that it ends in `left` slots.
    let view = |left: f64| ClusterView {
        slot: 100,
        kinds: tapfinger_core::estimate::KindMap::from_names(&["cpu", "gpu"]),
        nodes: vec![
            node(0, k80, vec![8, 8], vec![0], vec![]),
            node(1, v100, vec![0, 0], vec![0], vec![0]),
        ],
        pending: vec![PendingView {
            on: vec![(k80, on(30.0)), (v100, on(10.0))],
            class: 0,
            task: std::sync::Arc::new(t.clone()),
            est: on(30.0),
            size: None,
            done: 0.0,
        }],
        running: vec![tapfinger_core::view::RunningView {
            task: std::sync::Arc::new(crate::tests::gpu_task(2, &[1])),
            node: NodeId(1),
            alloc: Resources(vec![8, 8]),
            in_force: Resources(vec![8, 8]),
            started: 100 - left as u64,
            progress: 0.5,
            attained: 0.0,
            est: on(2.0 * left),
            est_alloc: 2.0 * left,
            converging: false,
            size: None,
            done: 0.0,
        }],
        ..Default::default()
    };
    let policy = |on: bool, greedy: bool| {
        let mut cfg = NetConfig::new(Dims::general(10));
        cfg.elastic = true;
        cfg.wait_faster = on;
        let device = Device::flex();
        device.seed(3);
        TapfingerPolicy::untrained(cfg, device).greedy(greedy)
    };
    let blocked = |view: &ClusterView, on: bool| {
        let v = view.for_agent(NodeId(0)).unwrap();
        let window: Vec<&tapfinger_core::Task> = v.window().collect();
        policy(on, true).blocked(&v, &window)[0]
    };
    assert!(blocked(&view(5.0), true), "a V100 free in 5 slots: wait");
    assert!(
        !blocked(&view(20.0), true),
        "a V100 free in 20 slots: start here"
    );
    assert!(!blocked(&view(5.0), false), "no mask: start here");
    // The estimator says 5 slots left, but the task has taken 40 slots for half its work (a job
    // many times its class's mean): its own pace says 40, so box 0 starts it.
    let mut slow = view(5.0);
    slow.running[0].started = 60;
    assert!(
        !blocked(&slow, true),
        "the running task's own pace: start here"
    );
    // Before it has shown a pace (under 5 % done), the estimator's figure speaks.
    slow.running[0].progress = 0.01;
    slow.running[0].est_alloc = 5.0;
    assert!(blocked(&slow, true), "no pace yet: the estimate, wait");
    // An older task queued on box 1 that needs all of it takes the room first, for 30 slots
    // there: the wait is 5 + 30, and box 0 starts the task.
    let mut queued = view(5.0);
    let mut older = crate::tests::gpu_task(0, &[1]);
    older.min_demand = Resources(vec![8, 8]);
    queued.pending.insert(
        0,
        PendingView {
            on: vec![(v100, on(30.0))],
            class: 0,
            task: std::sync::Arc::new(older),
            est: on(30.0),
            size: None,
            done: 0.0,
        },
    );
    queued.nodes[0].window = vec![1];
    queued.nodes[1].window = vec![0, 1];
    assert!(
        !blocked(&queued, true),
        "a queue ahead on box 1: start here"
    );
    let soon = view(5.0);
    let v = soon.for_agent(NodeId(0)).unwrap();
    let mut rng = tapfinger_core::seeded_rng(4);
    for greedy in [true, false] {
        let mut p = policy(true, greedy);
        for _ in 0..50 {
            assert_eq!(p.decide(&v, &mut rng), Decision::Pass, "greedy {greedy}");
        }
    }
    let mut p = policy(false, true);
    assert!(matches!(p.decide(&v, &mut rng), Decision::Claim { .. }));
}
