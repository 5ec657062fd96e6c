//! Whole episodes. Gangs: after every decision step and every slot's progress, the ledger is
//! audited from its task entries alone (not from the books it keeps beside them).

use super::*;
use crate::env::Simulator;
use crate::scenario::{Scenario, ScenarioFile};
use proptest::prelude::*;
use std::collections::BTreeMap;
use tapfinger::placement::gang::GangPlacer;

/// The gang-edge preset with the given load, share of gangs and links.
fn scenario(lambda: f64, tasks: i64, share: f64, external: f64) -> Scenario {
    let text = include_str!("../../presets/gang-edge.toml");
    let mut f: ScenarioFile = toml::from_str(text).unwrap();
    f.lambda = lambda;
    f.tasks = tasks;
    let g = f.gangs.as_mut().unwrap();
    g.share = share;
    g.external = external;
    Scenario::from_file(f, "test", None).unwrap()
}

/// Every invariant of gangs in `l`, from its task entries:
/// - a gang holds all its members (its PS on one box, then its workers, within its range) or,
///   pending, nothing on any box;
/// - every box's units in use are exactly its single tasks' and its gang members';
/// - the gang members and the single tasks' minimum demands fit every box; once the slot's
///   re-shares are done (`settled`), so do the single tasks' allocations in force (between a
///   start and its box's re-share an elastic box may show more: see [`Ledger::claimable`]).
fn audit(l: &Ledger<SimMeta>, capacity: &[Resources], settled: bool) {
    let mut used: BTreeMap<NodeId, Resources> = BTreeMap::new();
    let mut held: BTreeMap<NodeId, Resources> = BTreeMap::new();
    let mut least: BTreeMap<NodeId, Resources> = BTreeMap::new();
    let add = |m: &mut BTreeMap<NodeId, Resources>, n: NodeId, a: &Resources| {
        let e = m.entry(n).or_insert_with(|| Resources::zeros(a.len()));
        *e = e.checked_add(a).unwrap();
    };
    for (id, e) in l.iter() {
        match (&e.state, &e.task.gang) {
            (TaskState::Running { node, alloc, .. }, None) => {
                add(&mut used, *node, alloc);
                add(&mut least, *node, &e.task.min_demand);
            }
            (TaskState::Gang { members, .. }, Some(s)) => {
                let (ps, workers) = members.split_at((s.ps as usize).min(members.len()));
                assert_eq!(ps.len(), s.ps as usize, "{id}: {members:?}");
                assert!(ps.iter().all(|(n, a)| *n == ps[0].0 && *a == s.ps_demand));
                assert!(workers.iter().all(|(_, a)| *a == s.worker_demand));
                let w = workers.len() as u32;
                assert!(s.workers.0 <= w && w <= s.workers.1, "{id}: {w} workers");
                for (n, a) in members {
                    add(&mut used, *n, a);
                    add(&mut held, *n, a);
                    add(&mut least, *n, a);
                }
            }
            (TaskState::Pending, Some(_)) => {
                for n in 0..capacity.len() {
                    assert!(l.gangs_on(NodeId(n as u32)).all(|g| g != id), "{id}");
                }
            }
            (TaskState::Pending, None) => {}
            (s, g) => panic!("{id}: state {s:?} with gang {g:?}"),
        }
    }
    for (n, cap) in capacity.iter().enumerate() {
        let id = NodeId(n as u32);
        let zero = Resources::zeros(cap.len());
        let u = used.get(&id).unwrap_or(&zero);
        assert_eq!(
            l.used(id),
            *u,
            "box {id}: the books disagree with the tasks"
        );
        assert_eq!(l.held(id), *held.get(&id).unwrap_or(&zero), "box {id}");
        let m = least.get(&id).unwrap_or(&zero);
        assert!(m.fits_in(cap), "box {id} holds at least {m} of {cap}");
        assert!(!settled || u.fits_in(cap), "box {id} holds {u} of {cap}");
    }
}

fn run(
    sc: &Scenario,
    policy: &str,
    seed: u64,
    replicas: bool,
    placer: GangPlacer,
) -> EpisodeResult {
    let sim = Simulator::new(sc.clone()).replicated(replicas);
    let policies = if policy == crate::policies::TAPFINGER {
        crate::policies::learned(&sim, None).unwrap()
    } else {
        crate::policies::build(&sim, policy).unwrap()
    };
    let capacity: Vec<Resources> = sc.nodes.iter().map(|n| n.capacity.clone()).collect();
    let mut e = Episode::new(
        sc,
        Box::new(|_: &Task, _: f64| (1, Vec::new())),
        policies,
        Seeds {
            workload: seed,
            policy: seed,
        },
        replicas,
        Some(placer),
    )
    .unwrap();
    e.audit = Some(Box::new(move |l: &Ledger<SimMeta>, settled| {
        audit(l, &capacity, settled)
    }));
    e.run(seed, &mut NoObserver).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// No partial gang ever holds units, no box is ever over its capacity, and every task
    /// (gangs too) finishes, whatever the load, the share of gangs, the links, the placer and
    /// the policy.
    #[test]
    fn no_partial_gang_ever_holds_resources(
        seed in 0u64..1000,
        lambda in 0.5f64..4.0,
        share in 0.0f64..1.0,
        edge in any::<bool>(),
        placer in 0usize..3,
        policy in 0usize..3,
        replicas in any::<bool>(),
    ) {
        let external = if edge { 1.25e8 } else { 1.25e9 };
        let sc = scenario(lambda, 30, share, external);
        let policy = ["optimus", "drf", "random"][policy];
        let r = run(&sc, policy, seed, replicas, GangPlacer::ALL[placer]);
        prop_assert_eq!(r.tasks.len(), 30);
    }
}

#[test]
fn gangs_run_whole_and_finish_and_the_audit_sees_a_broken_book() {
    let sc = scenario(2.0, 30, 0.5, 1.25e8);
    let r = run(&sc, "optimus", 3, false, GangPlacer::Locality);
    let gangs: Vec<&TaskRecord> = r.tasks.iter().filter(|t| t.members > 0).collect();
    assert!(gangs.len() >= 8, "{} gangs", gangs.len());
    assert!(gangs.iter().all(|t| t.jct >= t.lower_bound));
    // The audit is not vacuous: a gang recorded with a member the books do not hold fails it.
    let mut l: Ledger<SimMeta> = Ledger::new(4, 0);
    let cap = vec![Resources(vec![16, 64]); 2];
    for (i, c) in cap.iter().enumerate() {
        l.set_node(NodeId(i as u32), c.clone());
    }
    l.insert(
        Arc::new(Task {
            id: TaskId(1),
            ty: tapfinger::TaskTypeId(0),
            min_demand: Resources(vec![20, 1]),
            max_demand: None,
            priority: 0,
            reachable: vec![NodeId(0)],
            arrival: 0,
            gang: None,
        }),
        TaskState::Running {
            node: NodeId(0),
            alloc: Resources(vec![20, 1]),
            progress: 0.0,
            started: 0,
        },
        SimMeta::default(),
    );
    let over = std::panic::catch_unwind(|| audit(&l, &cap, false));
    assert!(over.is_err(), "a box over its capacity passed the audit");
}

/// A preemption grace holds the victims' units: while a victim ends, its box's capacity in the
/// ledger is lowered by what it held (so claims on that box see less), never above what the box
/// offers, and what runs there fits what is left. (It fails with the holding taken out.)
#[test]
fn a_preemption_grace_lowers_the_box_until_its_victims_have_ended() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let text = include_str!("../../presets/priority-edge.toml").replace(
        "aging_slots = 50",
        "aging_slots = 50\npreempt = true\ngrace_slots = 3",
    );
    let sc = Scenario::from_toml(&text, "test", None).unwrap();
    let sim = Simulator::new(sc.clone());
    let capacity: Vec<Resources> = sc.nodes.iter().map(|n| n.capacity.clone()).collect();
    let mut e = Episode::new(
        &sc,
        Box::new(|_: &Task, _: f64| (1, Vec::new())),
        crate::policies::build(&sim, "first-fit-max").unwrap(),
        Seeds {
            workload: 100,
            policy: 100,
        },
        false,
        None,
    )
    .unwrap();
    // Steps at which some box's capacity was lowered (a grace in effect).
    let lowered = Rc::new(RefCell::new(0u32));
    let seen = lowered.clone();
    e.audit = Some(Box::new(move |l: &Ledger<SimMeta>, settled| {
        for (n, cap) in capacity.iter().enumerate() {
            let id = NodeId(n as u32);
            let now = l.capacity(id);
            assert!(now.fits_in(cap), "box {id}: capacity {now} above {cap}");
            if now != *cap {
                *seen.borrow_mut() += 1;
            }
            // first-fit-max is not elastic: what runs fits what the box has left, held units
            // set aside, once the slot has settled.
            assert!(
                !settled || l.used(id).fits_in(&now),
                "box {id}: {} of {now}",
                l.used(id)
            );
        }
    }));
    let r = e.run(100, &mut NoObserver).unwrap();
    assert!(
        r.tasks.iter().any(|t| t.preemptions > 0),
        "nothing was preempted"
    );
    assert!(
        *lowered.borrow() > 0,
        "no box's capacity was ever held for a victim"
    );
    assert_eq!(r.rooms_unused, 0);
}

/// A task's GPU count changing while it runs is counted (on an agent each change restarts the
/// task): elastic Tiresias re-shares a GPU preset's GPUs, so some task's changes; first-fit-max
/// never re-allocates, so none does.
#[test]
fn gpu_changes_are_counted_where_an_elastic_share_moves_gpus() {
    let mut sc = Scenario::load("hetero6").unwrap();
    sc.tasks = 60;
    let sim = Simulator::new(sc);
    let changes = |policy: &str| -> u32 {
        let r = sim
            .run(crate::policies::build(&sim, policy).unwrap(), 0)
            .unwrap();
        r.tasks.iter().map(|t| t.gpu_changes).sum()
    };
    assert!(changes("tiresias") > 0);
    assert_eq!(changes("first-fit-max"), 0);
}

/// `start_weight` slows a run's first slot: alone on the cluster (no queue, no switch), each
/// task finishes at most one slot later than at full speed, and some do finish later.
#[test]
fn a_run_s_first_slot_is_slowed_by_the_start_weight() {
    let jcts = |start_weight: f64| -> Vec<u64> {
        (0..12)
            .map(|seed| {
                let mut sc = Scenario::load("synthetic3").unwrap();
                sc.tasks = 1;
                sc.start_weight = start_weight;
                let sim = Simulator::new(sc);
                let ps = crate::policies::build(&sim, "first-fit-max").unwrap();
                sim.run(ps, seed).unwrap().tasks[0].jct
            })
            .collect()
    };
    let (full, half) = (jcts(1.0), jcts(0.5));
    for (f, h) in full.iter().zip(&half) {
        assert!(*h >= *f && *h <= *f + 1, "{full:?} {half:?}");
    }
    assert!(
        half.iter().sum::<u64>() > full.iter().sum::<u64>(),
        "{full:?} {half:?}"
    );
}

/// With `start_weight`, the estimator the policies read measures the start-up from the
/// progress it sees (a first slot against the next), as an agent's does; at full speed it
/// measures none.
#[test]
fn the_estimator_measures_the_start_weight() {
    let measured = |start_weight: f64| -> f64 {
        let mut sc = Scenario::load("synthetic3").unwrap();
        sc.tasks = 40;
        sc.start_weight = start_weight;
        let sim = Simulator::new(sc.clone());
        let policies = crate::policies::build(&sim, "first-fit-max").unwrap();
        let mut e = Episode::new(
            &sc,
            Box::new(|_: &Task, _: f64| (1, Vec::new())),
            policies,
            Seeds {
                workload: 3,
                policy: 3,
            },
            false,
            None,
        )
        .unwrap();
        let seen = std::rc::Rc::new(std::cell::Cell::new(0.0f64));
        let last = seen.clone();
        e.audit = Some(Box::new(move |l: &Ledger<SimMeta>, _| {
            let est = l.estimator();
            let cost = (0..3)
                .map(|ty| est.start_cost(tapfinger::TaskTypeId(ty)))
                .fold(0.0, f64::max);
            last.set(cost);
        }));
        e.run(3, &mut NoObserver).unwrap();
        seen.get()
    };
    assert_eq!(measured(1.0), 0.0);
    let half = measured(0.5);
    // Formula speeds fall as a task progresses, so the slot after the first is a little
    // slower than the first's true speed: the measure is at most the half lost.
    assert!((0.3..=0.5).contains(&half), "{half}");
}
