//! Tests of the learned policy's plumbing: batching equivalence and exact masks.

use super::batch::{Dims, batch};
use super::net::{Net, NetConfig};
use super::*;
use burn::tensor::Device;
use std::sync::Arc;
use tapfinger_core::task::{NodeId, Task, TaskId, TaskTypeId};
use tapfinger_core::view::{ClusterView, NodeView, PendingView, RunningView};

/// A one-unit class-0 task of type 0 that arrived at slot 0 and may run on nodes 0 and 1.
pub(crate) fn test_task(id: u64) -> Arc<Task> {
    Arc::new(Task::new(id, [1]).on(&[0, 1]))
}

/// A task of type 0 asking for 1 CPU and 1 GPU, up to 8 of each, that may run on `reachable`:
/// the GPU-bound task of the feature and mask tests (with [`gpu_bound`]).
pub(crate) fn gpu_task(id: u64, reachable: &[u32]) -> Task {
    Task::new(id, [1, 1]).at_most([8, 8]).on(reachable)
}

/// A GPU-bound estimate for tests: 10 slots at the minimum, one more GPU saves 30 % of that
/// (θ_gpu = 0.3 · 10 · 2 · 3 = 18 at a 1-GPU minimum: T(g) = 10 + 18 · (1/(1 + g) − 1/2)),
/// from 3 samples; `at_max` as given.
pub(crate) fn gpu_bound(at_max: f64) -> tapfinger_core::view::TaskEstimate {
    tapfinger_core::view::TaskEstimate {
        at_min: 10.0,
        at_max,
        gain: [0.0, 0.3, 0.0],
        samples: 3,
        switch_cost: 0.0,
        size: 1.0,
        offset: [1.0; 3],
    }
}

/// A random but valid cluster view: 2 kinds, 2 types.
pub(crate) fn random_view(seed: u64) -> ClusterView {
    let mut rng = tapfinger_core::seeded_rng(seed);
    let n_nodes = rng.random_range(1..=5usize);
    let n_pending = rng.random_range(0..=8usize);
    let pending: Vec<PendingView> = (0..n_pending)
        .map(|i| PendingView {
            on: Vec::new(),
            class: 0,
            task: Arc::new(Task {
                id: TaskId(i as u64),
                ty: TaskTypeId(rng.random_range(0..2u16)),
                min_demand: Resources(vec![rng.random_range(1..=4), rng.random_range(0..=2)]),
                max_demand: if rng.random_bool(0.5) {
                    Some(Resources(vec![8, 8]))
                } else {
                    None
                },
                priority: 0,
                reachable: vec![],
                arrival: 0,
                gang: None,
            }),
            est: Default::default(),
            size: None,
            done: 0.0,
        })
        .collect();
    let mut running = Vec::new();
    let mut nodes = Vec::new();
    for n in 0..n_nodes {
        let capacity = Resources(vec![rng.random_range(2..=16), rng.random_range(1..=16)]);
        let mut free = capacity.clone();
        let mut mine = Vec::new();
        for _ in 0..rng.random_range(0..3usize) {
            let a = Resources(vec![
                rng.random_range(0..=free.get(0)),
                rng.random_range(0..=free.get(1)),
            ]);
            if a.is_zero() {
                continue;
            }
            free = free.checked_sub(&a).unwrap();
            mine.push(running.len());
            running.push(RunningView {
                converging: false,
                in_force: Default::default(),
                task: Arc::new(Task {
                    id: TaskId(100 + running.len() as u64),
                    ty: TaskTypeId(1),
                    min_demand: a.clone(),
                    max_demand: None,
                    priority: 0,
                    reachable: vec![],
                    arrival: 0,
                    gang: None,
                }),
                node: NodeId(n as u32),
                alloc: a,
                started: 0,
                progress: 0.3,
                attained: 1.0,
                est: Default::default(),
                est_alloc: 0.0,
                size: None,
                done: 0.0,
            });
        }
        let window: Vec<usize> = (0..n_pending).filter(|_| rng.random_bool(0.6)).collect();
        nodes.push(NodeView {
            gpu: Default::default(),
            id: NodeId(n as u32),
            capacity,
            free,
            window,
            overflow: 0,
            running: mine,
        });
    }
    ClusterView {
        forecast: Vec::new(),
        slot: 3,
        step: 0,
        num_types: 2,
        classes: false,
        kinds: Default::default(),
        nodes,
        pending,
        running,
    }
}

fn dims() -> Dims {
    Dims::per_preset(2, 2, 10)
}

fn floats(t: burn::tensor::Tensor<2>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

#[test]
fn batched_and_single_forward_passes_agree() {
    let device = Device::flex();
    device.seed(3);
    let cfg = NetConfig::new(dims());
    let net = Net::new(&cfg, &device);
    let views: Vec<ClusterView> = (0..4).map(random_view).collect();
    let items: Vec<(&ClusterView, NodeId)> = views
        .iter()
        .map(|v| (v, NodeId(v.nodes.len() as u32 - 1)))
        .collect();
    let all = batch(&items, &dims());
    let enc = net.encode(&all, &device);
    let blocked = vec![false; all.graphs * 10];
    let ptr = floats(net.pointer_logits(&enc, &all, &blocked, &[], &device));
    let val = net
        .value(&enc, &all, &device)
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let slots = vec![0usize; all.graphs];
    let prev = vec![1.0f32; all.graphs * 2];
    let (lo, hi) = (vec![1u32; all.graphs], vec![6u32; all.graphs]);
    let q = net::AllocQuery {
        slot: &slots,
        kind: 1,
        prev: &prev,
        lo: &lo,
        hi: &hi,
        two_point: None,
    };
    let alloc = floats(net.alloc_logits(&enc, &all, &q, &device));
    let units = cfg.max_units + 1;
    // Not vacuous: graphs differ, and empty window slots are masked.
    assert!(
        val.windows(2).any(|w| (w[0] - w[1]).abs() > 1e-6),
        "values {val:?}"
    );
    for (g, item) in items.iter().enumerate() {
        let n_window = item.0.nodes[item.0.node_index(item.1).unwrap()]
            .window
            .len()
            .min(10);
        for s in n_window..10 {
            assert_eq!(ptr[g * 11 + s], net::MASKED);
        }
    }
    for (g, item) in items.iter().enumerate() {
        let one = batch(&[*item], &dims());
        let e1 = net.encode(&one, &device);
        let p1 = floats(net.pointer_logits(&e1, &one, &blocked[..10], &[], &device));
        let v1 = net
            .value(&e1, &one, &device)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        let q1 = net::AllocQuery {
            slot: &slots[..1],
            kind: 1,
            prev: &prev[..2],
            lo: &lo[..1],
            hi: &hi[..1],
            two_point: None,
        };
        let a1 = floats(net.alloc_logits(&e1, &one, &q1, &device));
        for (x, y) in p1.iter().zip(&ptr[g * 11..(g + 1) * 11]) {
            assert!(
                (x - y).abs() <= 1e-4 * (1.0 + x.abs()),
                "graph {g}: pointer {x} vs {y}"
            );
        }
        assert!(
            (v1[0] - val[g]).abs() < 1e-4,
            "graph {g}: value {} vs {}",
            v1[0],
            val[g]
        );
        for (x, y) in a1.iter().zip(&alloc[g * units..(g + 1) * units]) {
            assert!(
                (x - y).abs() <= 1e-4 * (1.0 + x.abs()),
                "graph {g}: allocation {x} vs {y}"
            );
        }
    }
}

#[test]
fn sampled_decisions_are_always_feasible() {
    let device = Device::flex();
    device.seed(5);
    let mut policy = TapfingerPolicy::untrained(NetConfig::new(dims()), device);
    let mut rng = tapfinger_core::seeded_rng(9);
    let mut claims = 0;
    for seed in 0..60 {
        let view = random_view(seed);
        for node in &view.nodes {
            let v = view.for_agent(node.id).unwrap();
            match policy.decide(&v, &mut rng) {
                Decision::Pass => {}
                Decision::Claim { task, alloc, prob } => {
                    claims += 1;
                    let t = v
                        .window()
                        .find(|t| t.id == task)
                        .expect("claimed task is in the window");
                    assert!(
                        t.allows(&alloc, &node.free),
                        "{task}: {alloc} not in [{}, {}]",
                        t.min_demand,
                        t.cap(&node.free)
                    );
                    assert!(prob > 0.0 && prob <= 1.0);
                }
            }
        }
    }
    assert!(
        claims > 20,
        "an untrained policy should still claim often ({claims})"
    );
}

#[test]
fn sampling_never_returns_masked_entries() {
    let mut rng = tapfinger_core::seeded_rng(1);
    for _ in 0..1000 {
        let (i, p) = sample(&[net::MASKED, 0.3, net::MASKED, -0.2], &mut rng).unwrap();
        assert!(i == 1 || i == 3);
        assert!(p > 0.0);
    }
    assert!(sample(&[f32::NAN], &mut rng).is_none());
}

#[test]
fn ablation_variants_decide_feasibly() {
    for name in net::VARIANTS {
        let device = Device::flex();
        device.seed(8);
        let cfg = NetConfig::variant(dims(), name).unwrap();
        let mut policy = TapfingerPolicy::untrained(cfg.clone(), device);
        let mut rng = tapfinger_core::seeded_rng(4);
        for seed in 200..230 {
            let view = random_view(seed);
            for node in &view.nodes {
                let v = view.for_agent(node.id).unwrap();
                let first = v.feasible().next().map(|t| t.id);
                match policy.decide(&v, &mut rng) {
                    Decision::Pass => {
                        assert!(
                            cfg.selection == net::Selection::Pointer || first.is_none(),
                            "{name} passed with work"
                        )
                    }
                    Decision::Claim { task, alloc, .. } => {
                        let t = v.window().find(|t| t.id == task).unwrap();
                        assert!(t.allows(&alloc, &node.free), "{name}");
                        if cfg.selection == net::Selection::Fifo {
                            assert_eq!(Some(task), first, "vanilla takes the oldest feasible task");
                        }
                    }
                }
            }
        }
    }
    assert!(NetConfig::variant(dims(), "nope").is_none());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Property: on any random view, every sampled decision is feasible (the masks are exact),
    /// and `label` of the policy's own decision reproduces exactly what it recorded — so that
    /// imitation labels are expressed in the same action space the policy samples from.
    #[test]
    fn masks_are_exact_and_labels_match_decisions(seed in 0u64..1_000_000, policy_seed in 0u64..4) {
        let device = Device::flex();
        device.seed(policy_seed);
        let recorder: Recorder = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut policy = TapfingerPolicy::untrained(NetConfig::new(dims()), device)
            .recording(recorder.clone());
        let mut rng = tapfinger_core::seeded_rng(seed ^ 0xABCD);
        let view = random_view(seed);
        for node in &view.nodes {
            let v = view.for_agent(node.id).unwrap();
            let decision = policy.decide(&v, &mut rng);
            if let Decision::Claim { task, alloc, .. } = &decision {
                let t = v.window().find(|t| t.id == *task).expect("claimed task is in the window");
                proptest::prop_assert!(t.allows(alloc, &node.free), "{}: {} not allowed", task, alloc);
            }
            let recorded = recorder.lock().unwrap().pop().expect("every decision is recorded");
            let label = policy.label(&v, &decision).expect("the policy's own decision is expressible");
            proptest::prop_assert_eq!(label.slot, recorded.slot);
            proptest::prop_assert_eq!(&label.units, &recorded.units);
            proptest::prop_assert_eq!(&label.lo, &recorded.lo);
            proptest::prop_assert_eq!(&label.hi, &recorded.hi);
            proptest::prop_assert_eq!(&label.blocked, &recorded.blocked);
        }
    }
}

#[test]
fn labels_refuse_decisions_the_network_cannot_express() {
    let policy = TapfingerPolicy::untrained(NetConfig::new(dims()), Device::flex());
    for seed in 0..40 {
        let view = random_view(seed);
        for node in &view.nodes {
            let v = view.for_agent(node.id).unwrap();
            // A task that is not in the window.
            let absent = Decision::Claim {
                task: TaskId(u64::MAX),
                alloc: Resources(vec![1, 1]),
                prob: 1.0,
            };
            assert!(policy.label(&v, &absent).is_none());
            // An allocation above the free units.
            if let Some(t) = v.feasible().next() {
                let mut too_much = node.free.clone();
                too_much.0[0] += 1;
                let over = Decision::Claim {
                    task: t.id,
                    alloc: too_much,
                    prob: 1.0,
                };
                assert!(policy.label(&v, &over).is_none());
            }
            // Passing is expressible unless the work-conserving mask forbids it: an idle node
            // with a task that fits.
            let masked = v.node().running.is_empty() && v.feasible().next().is_some();
            match policy.label(&v, &Decision::Pass) {
                Some(pass) => {
                    assert!(!masked, "a masked pass was labelled");
                    assert_eq!(pass.slot, dims().window);
                }
                None => assert!(masked, "an allowed pass was refused"),
            }
        }
    }
}

#[test]
fn a_focused_view_keeps_the_deciders_window_and_each_kept_nodes_tasks_exactly() {
    for seed in 0..300 {
        let v = random_view(seed);
        let ids = |c: &ClusterView, n: &NodeView| -> (Vec<TaskId>, Vec<TaskId>) {
            (
                n.window.iter().map(|&w| c.pending[w].task.id).collect(),
                n.running.iter().map(|&r| c.running[r].task.id).collect(),
            )
        };
        for me in v.nodes.iter().map(|n| n.id) {
            for k in 1..=3 {
                let f = v.focus(me, k);
                assert!(f.nodes.len() <= k || v.nodes.len() <= k, "seed {seed}");
                if v.nodes.len() <= k {
                    assert!(matches!(f, std::borrow::Cow::Borrowed(_)));
                }
                assert!(
                    f.node_index(me).is_some(),
                    "seed {seed}: the decider is kept"
                );
                for n in &f.nodes {
                    let orig = &v.nodes[v.node_index(n.id).unwrap()];
                    assert_eq!(ids(&f, n), ids(&v, orig), "seed {seed} node {:?}", n.id);
                    assert_eq!((&n.free, n.overflow), (&orig.free, orig.overflow));
                }
                // Nothing beyond the kept nodes' windows and running tasks.
                let referenced: std::collections::BTreeSet<usize> = f
                    .nodes
                    .iter()
                    .flat_map(|n| n.window.iter().copied())
                    .collect();
                if let std::borrow::Cow::Owned(f) = &f {
                    assert_eq!(referenced.len(), f.pending.len(), "seed {seed}");
                }
                let a = f.for_agent(me).unwrap();
                let b = v.for_agent(me).unwrap();
                let w = |x: &tapfinger_core::view::View<'_>| {
                    x.window().map(|t| t.id).collect::<Vec<_>>()
                };
                assert_eq!(w(&a), w(&b));
            }
        }
    }
}

/// One idle node and one waiting task (id 7) asking for `big` CPUs and a GPU.
fn beyond_the_grid(big: u32) -> ClusterView {
    ClusterView {
        forecast: Vec::new(),
        slot: 0,
        step: 0,
        num_types: 2,
        classes: false,
        kinds: Default::default(),
        nodes: vec![NodeView {
            gpu: Default::default(),
            id: NodeId(0),
            capacity: Resources(vec![2 * big, 4]),
            free: Resources(vec![2 * big, 4]),
            window: vec![0],
            overflow: 0,
            running: vec![],
        }],
        pending: vec![PendingView {
            on: Vec::new(),
            class: 0,
            task: Arc::new(Task {
                id: TaskId(7),
                ty: TaskTypeId(0),
                min_demand: Resources(vec![big, 1]),
                max_demand: None,
                priority: 0,
                reachable: vec![NodeId(0)],
                arrival: 0,
                gang: None,
            }),
            est: Default::default(),
            size: None,
            done: 0.0,
        }],
        running: vec![],
    }
}

/// An elastic model claims at the minimum demand, so a task asking for more units of a kind than
/// the allocation head's grid holds is still selectable (it would otherwise wait forever); a
/// model that draws allocations cannot express it and passes.
#[test]
fn an_elastic_model_claims_a_task_beyond_the_allocation_grid() {
    let device = Device::flex();
    device.seed(3);
    let cfg = NetConfig::new(dims());
    let big = cfg.max_units as u32 + 8;
    let view = beyond_the_grid(big);
    let v = view.for_agent(NodeId(0)).unwrap();
    let mut rng = tapfinger_core::seeded_rng(1);
    let mut elastic = cfg.clone();
    elastic.elastic = true;
    let mut policy = TapfingerPolicy::untrained(elastic, device.clone()).greedy(true);
    assert_eq!(
        policy.decide(&v, &mut rng),
        Decision::Claim {
            task: TaskId(7),
            alloc: Resources(vec![big, 1]),
            prob: 1.0
        }
    );
    let mut fixed = TapfingerPolicy::untrained(cfg, device).greedy(true);
    assert_eq!(fixed.decide(&v, &mut rng), Decision::Pass);
}

/// An elastic model with floors draws each claim's allocation (its floor) with the allocation
/// head: feasible, above the minimum demand on some claims, recorded as the head chose it and
/// expressed again by `label` (what imitation trains on); a task beyond the head's grid is still
/// claimed, at its minimum. The same weights without floors claim at the minimum only.
#[test]
fn a_model_with_floors_draws_each_claims_floor_and_labels_express_it() {
    let device = Device::flex();
    device.seed(11);
    let mut cfg = NetConfig::new(dims());
    cfg.elastic = true;
    cfg.floors = true;
    let recorder: Recorder = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut policy =
        TapfingerPolicy::untrained(cfg.clone(), device.clone()).recording(recorder.clone());
    assert!(policy.floors() && policy.elastic());
    let mut plain_cfg = cfg.clone();
    plain_cfg.floors = false;
    let mut plain = TapfingerPolicy::untrained(plain_cfg, device);
    assert!(!plain.floors());
    let mut rng = tapfinger_core::seeded_rng(4);
    let (mut claims, mut above) = (0, 0);
    for seed in 0..80 {
        let view = random_view(seed);
        for node in &view.nodes {
            let v = view.for_agent(node.id).unwrap();
            let decision = policy.decide(&v, &mut rng);
            let recorded = recorder.lock().unwrap().pop().expect("recorded");
            if let Decision::Claim { task, alloc, .. } = &decision {
                claims += 1;
                let t = v.window().find(|t| t.id == *task).unwrap();
                assert!(t.allows(alloc, &node.free), "{task}: {alloc}");
                assert_eq!(recorded.units, alloc.0, "the floor is what the head drew");
                above += usize::from(*alloc != t.min_demand);
            }
            let label = policy.label(&v, &decision).expect("expressible");
            assert_eq!((label.slot, &label.units), (recorded.slot, &recorded.units));
            assert_eq!((&label.lo, &label.hi), (&recorded.lo, &recorded.hi));
            if let Decision::Claim { task, alloc, .. } = plain.decide(&v, &mut rng) {
                let t = v.window().find(|t| t.id == task).unwrap();
                assert_eq!(alloc, t.min_demand, "without floors: the minimum");
            }
        }
    }
    assert!(
        claims > 20 && above > 5,
        "{claims} claims, {above} above the minimum"
    );
}

/// A model with floors claims a task beyond its allocation grid at the task's minimum.
#[test]
fn a_model_with_floors_claims_a_task_beyond_the_grid_at_its_minimum() {
    let mut cfg = NetConfig::new(dims());
    let big = cfg.max_units as u32 + 8;
    cfg.elastic = true;
    cfg.floors = true;
    let view = beyond_the_grid(big);
    let v = view.for_agent(NodeId(0)).unwrap();
    let mut policy = TapfingerPolicy::untrained(cfg, Device::flex()).greedy(true);
    let d = policy.decide(&v, &mut tapfinger_core::seeded_rng(1));
    assert_eq!(
        d,
        Decision::Claim {
            task: TaskId(7),
            alloc: Resources(vec![big, 1]),
            prob: 1.0
        }
    );
    assert!(policy.label(&v, &d).is_some_and(|r| r.units.is_empty()));
}

/// A task whose cap is below its minimum has no legal floor: a model with floors passes on it,
/// deciding alone and in a step's batched pass alike.
#[test]
fn a_model_with_floors_passes_on_a_task_without_a_legal_floor_batched_or_alone() {
    let mut cfg = NetConfig::new(dims());
    cfg.elastic = true;
    cfg.floors = true;
    cfg.focus = 2;
    let mut view = beyond_the_grid(4);
    let mut t = (*view.pending[0].task).clone();
    t.max_demand = Some(Resources(vec![2, 1]));
    view.pending[0].task = Arc::new(t);
    let v = view.for_agent(NodeId(0)).unwrap();
    let device = Device::flex();
    let mut alone = TapfingerPolicy::untrained(cfg.clone(), device.clone()).greedy(true);
    let shared = step_batch::SharedStep::default();
    let mut batched = TapfingerPolicy::untrained(cfg, device)
        .greedy(true)
        .batched(shared.clone());
    let mut rng = tapfinger_core::seeded_rng(1);
    assert_eq!(alone.decide(&v, &mut rng), Decision::Pass);
    assert_eq!(batched.decide(&v, &mut rng), Decision::Pass);
    assert_eq!(shared.lock().unwrap().passes().0, 1, "the batched pass ran");
}

mod golden;
mod masks;
