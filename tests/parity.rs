//! Parity of the two drivers: the simulator and N agents' node cores, fed the same arrivals and
//! the same progress, show every policy the same views, pay the same rewards, start the same
//! tasks on the same nodes with the same allocations, and finish them in the same slots.
//!
//! The simulator runs an episode and records what its policies saw, what every round started,
//! the rewards and each running task's progress per slot. Then N [`NodeCore`]s (one per node,
//! each with its own instance of the same policy and the simulator's per-agent seed) replay it
//! over an in-memory bus, in lock step: each slot the tasks arriving in it are submitted, rounds
//! run until one starts nothing, and the progress the simulator computed is reported by the
//! node that runs each task (its exit when it finished). Every policy the agent accepts is
//! checked, the elastic ones included, the learned one, and the elastic general model (as
//! shipped, with its GPUs held, and drawing each claim's floor): the node cores re-share each
//! slot exactly as the simulator does, and every peer learns the new shares. With profile hints
//! (the simulator's `profile_hints`, the agents' specs' `[[profile]]`) the estimates agree too,
//! and with declared work (the simulator's `declare_work`, the agents' specs' `work`).

// Test helpers may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use std::collections::BTreeSet;
use support::scenarios::scenario_with;
use tapfinger_sim::{Scenario, Simulator, policies};

mod support {
    pub(crate) mod replay;
    pub(crate) mod scenarios;
}
use support::replay::{Recording, check_parity, replay};

/// The policies an agent runs: every baseline (the clairvoyant reference reads the
/// simulator's speed model and runs in the simulator only).
fn agent_policies() -> Vec<&'static str> {
    policies::all_policies()
        .into_iter()
        .filter(|p| *p != policies::CLAIRVOYANT)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn agents_and_the_simulator_agree_for_every_baseline(
        sc in scenario_with(false),
        policy in 0usize..64,
        seed in 0u64..1000,
    ) {
        let names = agent_policies();
        check_parity(sc, names[policy % names.len()], seed, None)?;
    }
}

#[test]
fn agents_and_the_simulator_agree_for_the_learned_policy() {
    let mut sc = Scenario::load("synthetic3").unwrap();
    sc.tasks = 40;
    for seed in [100, 101, 102] {
        check_parity(sc.clone(), policies::TAPFINGER, seed, None).unwrap();
    }
}

/// The shipped general model's weights, written to a folder of their own (`tag`) with `set`
/// settings of its configuration turned on.
/// The folder is removed when the returned handle drops, at the test's end.
fn general_with(tag: &str, set: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(&format!("tapfinger-parity-{tag}-"))
        .tempdir()
        .unwrap();
    tapfinger::model::checkpoint::GENERAL
        .write_to(dir.path(), |j| {
            for key in set {
                j["config"]["net"][*key] = serde_json::Value::Bool(true);
            }
        })
        .unwrap();
    dir
}

#[test]
fn agents_and_the_simulator_re_share_alike_with_the_elastic_general_model() {
    // Its form with the GPUs held (the agent cannot change a running process's devices), its
    // weights drawing floors (their allocation heads, untrained there, choose each claim's
    // floor) and re-sharing by estimated gain (`NetConfig::gain_share`).
    let held = general_with("held", &["elastic", "hold_gpus"]);
    let floors = general_with("floors", &["floors"]);
    let gain = general_with("gain", &["elastic", "gain_share"]);
    // Generated clusters with GPU and CPU-only boxes, several task classes; the shipped general
    // model (the default of `gen:N`), its form with the GPUs held, one drawing floors and one
    // re-sharing by estimated gain.
    for model in [
        None,
        Some(held.path()),
        Some(floors.path()),
        Some(gain.path()),
    ] {
        for g in [8, 10] {
            let mut sc = Scenario::load(&format!("gen:{g}")).unwrap();
            sc.tasks = sc.tasks.min(40);
            let mut resized = 0;
            for seed in [100, 101] {
                resized += check_parity(sc.clone(), policies::TAPFINGER, seed, model).unwrap();
            }
            // Re-sharing happened, so the comparison above covered it.
            assert!(resized > 0, "gen:{g}: no task was re-shared");
        }
    }
}

/// Where re-allocations cost (synthetic3's switch slots run at half speed), both drivers'
/// estimators measure the cost alike, and the gain-aware share that reads it (leaving the units
/// a costly class does not gain from idle) re-shares alike.
#[test]
fn agents_and_the_simulator_agree_where_switches_cost() {
    let gain = general_with("gain-switch", &["elastic", "gain_share"]);
    let mut sc = Scenario::load("synthetic3").unwrap();
    assert!(sc.switch_weight < 1.0);
    sc.tasks = 40;
    let mut resized = 0;
    for seed in [100, 101] {
        resized += check_parity(sc.clone(), policies::TAPFINGER, seed, Some(gain.path())).unwrap();
    }
    assert!(resized > 0, "no task was re-shared");
    // The views compared showed classes whose switches measured costly, so the share's costly
    // branch acted in both drivers.
    let sim = Simulator::new(sc);
    let mut rec = Recording::default();
    let learned = policies::learned(&sim, Some(gain.path())).unwrap();
    sim.run_observed(learned, 100, &mut rec).unwrap();
    let costly = rec.views.values().flatten().any(|v| {
        v.running
            .iter()
            .any(|r| r.est.switch_cost >= tapfinger::estimate::COSTLY_SWITCH)
    });
    assert!(costly, "no class measured a costly switch");
}

/// With profile hints (the simulator's `profile_hints`; on agents, the specs' `[[profile]]`),
/// both drivers' estimators start from the same hints, so the views still agree to the bit,
/// the gain-aware share (which reads the estimates) included.
#[test]
fn agents_and_the_simulator_agree_with_profile_hints() {
    let gain = general_with("hints", &["elastic", "gain_share"]);
    let mut sc = Scenario::load("gen:8").unwrap();
    sc.tasks = sc.tasks.min(40);
    sc.profile_hints = true;
    for model in [None, Some(gain.path())] {
        check_parity(sc.clone(), policies::TAPFINGER, 100, model).unwrap();
    }
    check_parity(sc, "tiresias", 101, None).unwrap();
}

/// With declared work (the simulator's `declare_work`; on agents, the specs' `work`), both
/// drivers' estimators scale each task's estimate alike, so the views agree to the bit, for
/// the learned policy and for Optimus, which scales its own model by each task's size.
#[test]
fn agents_and_the_simulator_agree_with_declared_work() {
    let gain = general_with("declared", &["elastic", "gain_share"]);
    let mut sc = Scenario::load("gen:8").unwrap();
    assert!(
        sc.task_size.is_some(),
        "gen:8 no longer draws heavy-tailed sizes"
    );
    sc.tasks = sc.tasks.min(40);
    sc.declare_work = true;
    check_parity(sc.clone(), policies::TAPFINGER, 100, Some(gain.path())).unwrap();
    check_parity(sc.clone(), "optimus", 101, None).unwrap();
    // The views compared showed tasks of other sizes than their class's mean.
    let sim = Simulator::new(sc);
    let mut rec = Recording::default();
    let learned = policies::learned(&sim, Some(gain.path())).unwrap();
    sim.run_observed(learned, 100, &mut rec).unwrap();
    let sized = rec.views.values().flatten().any(|v| {
        v.pending.iter().any(|p| (p.est.size - 1.0).abs() > 0.1)
            && v.running.iter().any(|r| (r.est.size - 1.0).abs() > 0.1)
    });
    assert!(
        sized,
        "no view showed a task of another size than its class's mean"
    );
}

/// Gangs: the simulator and the agents propose the same gangs from the same boxes (the
/// ledger's one rule), place them alike, start the same members on the same boxes in the same
/// rounds, and end them in the same slots.
#[test]
fn agents_and_the_simulator_agree_with_gangs() {
    let mut sc = Scenario::load("gang-edge").unwrap();
    sc.tasks = 30;
    let mut gangs = 0;
    for (policy, seed) in [("tiresias", 100), ("optimus", 101), ("first-fit-max", 102)] {
        check_parity(sc.clone(), policy, seed, None).unwrap();
        let r = Simulator::new(sc.clone())
            .run(
                policies::build(&Simulator::new(sc.clone()), policy).unwrap(),
                seed,
            )
            .unwrap();
        gangs += r.tasks.iter().filter(|t| t.members > 1).count();
    }
    // Gangs ran, several across boxes, so the comparison above covered them.
    assert!(gangs >= 10, "{gangs} gangs");
}

/// The window order: with many tasks of the same age in every window, the simulator's windows
/// are the agents' (each node's own order of same-age tasks), for a baseline and the learned
/// policy.
#[test]
fn agents_and_the_simulator_order_same_age_tasks_alike() {
    let mut sc = Scenario::load("hetero6").unwrap();
    sc.tasks = 36;
    sc.lambda = 12.0;
    for (policy, seed) in [("tiresias", 100), (policies::TAPFINGER, 101)] {
        check_parity(sc.clone(), policy, seed, None).unwrap();
    }
    // Same-age tasks filled windows, and the nodes ordered them differently.
    let sim = Simulator::new(sc.clone());
    let mut rec = Recording::default();
    sim.run_observed(policies::build(&sim, "tiresias").unwrap(), 100, &mut rec)
        .unwrap();
    let differ = rec.views.values().flatten().any(|v| {
        let firsts: BTreeSet<_> = v.nodes.iter().filter_map(|n| n.window.first()).collect();
        firsts.len() > 1
    });
    assert!(differ, "every node's window began with the same task");
}

#[test]
fn the_checked_policies_include_the_elastic_ones() {
    let names = agent_policies();
    assert!(names.contains(&"tiresias-np") && names.contains(&"optimus-np"));
    assert!(names.contains(&"tiresias") && names.contains(&"optimus"));
    assert!(names.len() >= 8, "{names:?}");
}

/// The slot step's forked rules compared: priority classes with preemption (the plan, the
/// victims, the room and its proposal, the requeue), shrinking converging tasks (the shrink
/// step, the re-share, the ceilings, and every node's view of who converges), and GPUs shared in
/// quarters. Each case checks that its rule acted, so the comparison covered it.
#[test]
fn agents_and_the_simulator_agree_with_preemption_shrinking_and_quarter_gpus() {
    // priority-edge with preemption; the replay's tasks never checkpoint (`replay`'s doc says
    // why).
    let text = include_str!("../sim/presets/priority-edge.toml")
        .replace("aging_slots = 50", "aging_slots = 50\npreempt = true");
    let mut sc = Scenario::from_toml(&text, "priority-preempt", None).unwrap();
    sc.checkpoint_slots = Some(sc.max_slots + 1);
    sc.tasks = 60;
    // Without a grace, then with one of 5 slots (one second of the replay's slots): the
    // victims' units stay taken on their box, in every node's view, until the grace's last slot
    // has run, and their box does not claim them again meanwhile.
    for grace in [0, 5] {
        sc.preempt_grace_slots = grace;
        let mut preempted = 0;
        for policy in ["random", "first-fit-max", "tiresias"] {
            for seed in [100, 101] {
                preempted += replay(sc.clone(), policy, seed, None).unwrap().preempted;
            }
        }
        eprintln!("priority-edge with preemption, grace {grace}: {preempted} preemptions replayed");
        assert!(
            preempted > 0,
            "nothing was preempted with a grace of {grace}"
        );
    }

    // converging-edge: shrinking on, a policy that holds its allocations and an elastic one.
    let mut sc = Scenario::load("converging-edge").unwrap();
    sc.tasks = 40;
    let (mut converging, mut resized) = (0, 0);
    for policy in ["first-fit-max", "tiresias"] {
        for seed in [100, 101] {
            let r = replay(sc.clone(), policy, seed, None).unwrap();
            converging += r.converging;
            resized += r.resized;
        }
    }
    eprintln!("converging-edge: {converging} judged converging, {resized} resized");
    assert!(
        converging > 0 && resized > 0,
        "{converging} judged converging, {resized} resized"
    );

    // small-gpu-edge: one GPU per box shared in quarters.
    let mut sc = Scenario::load("small-gpu-edge").unwrap();
    assert!(tapfinger::spec::units_per_device(&sc.space).is_some());
    sc.tasks = 40;
    for policy in ["first-fit-max", "tiresias", policies::TAPFINGER] {
        check_parity(sc.clone(), policy, 100, None).unwrap();
    }
}
