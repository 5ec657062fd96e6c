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
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use support::scenarios::scenario_with;
use tapfinger::node::{Action, NodeConfig, NodeCore, TaskState};
use tapfinger::spec::TaskSpec;
use tapfinger::view::ClusterView;
use tapfinger::{NodeId, Policy, Resources, RoundOutcome, TaskId};
use tapfinger_sim::env::Observer;
use tapfinger_sim::{Scenario, Simulator, policies};

mod support {
    pub(crate) mod scenarios;
}

/// What the simulator's episode showed and did.
#[derive(Default)]
struct Recording {
    /// The view decided from at each step, per slot, in order.
    views: BTreeMap<u64, Vec<ClusterView>>,
    rounds: Vec<RoundOutcome>,
    rewards: BTreeMap<u64, Vec<f64>>,
    /// Allocations in force (starts, then re-shares), and a copy of them at each slot's end.
    alloc: BTreeMap<TaskId, Resources>,
    allocs: BTreeMap<u64, BTreeMap<TaskId, Resources>>,
    progress: BTreeMap<u64, Vec<(TaskId, f64, bool)>>,
}

impl Observer for Recording {
    fn wants_views(&self) -> bool {
        true
    }
    fn decision_view(&mut self, v: &ClusterView) {
        self.views.entry(v.slot).or_default().push(v.clone());
    }
    fn round(&mut self, o: &RoundOutcome) {
        self.rounds.push(o.clone());
        for c in &o.commits {
            self.alloc.insert(c.task, c.alloc.clone());
        }
    }
    fn reallocated(&mut self, _slot: u64, _node: NodeId, changed: &[(TaskId, Resources)]) {
        self.alloc.extend(changed.iter().cloned());
    }
    fn slot_end(&mut self, slot: u64, rewards: &[f64]) {
        self.rewards.insert(slot, rewards.to_vec());
        self.allocs.insert(slot, self.alloc.clone());
    }
    fn progressed(&mut self, slot: u64, task: TaskId, progress: f64, finished: bool) {
        if finished {
            self.alloc.remove(&task);
        }
        self.progress
            .entry(slot)
            .or_default()
            .push((task, progress, finished));
    }
}

/// The simulator's seed of agent `i`'s policy randomness (as its episode derives it).
fn agent_seed(seed: u64, i: usize) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(i as u64 + 1)
}

const HEARTBEAT: u64 = 100;

/// N node cores on a bus that delivers every broadcast to every other node at once.
struct Agents {
    cores: Vec<NodeCore>,
    now: u64,
    /// Starts per node: (task, allocation), in order.
    starts: Vec<Vec<(TaskId, Resources)>>,
    /// Gang starts per node: (gang, this node's members' units), in order.
    gang_starts: Vec<Vec<(TaskId, Resources)>>,
    /// Re-shares per node: (task, allocation), in order.
    resizes: Vec<Vec<(TaskId, Resources)>>,
}

impl Agents {
    fn new(sc: &Scenario, policies: Vec<Box<dyn Policy>>, seed: u64) -> Self {
        let ids: BTreeSet<NodeId> = (0..sc.nodes.len()).map(|i| NodeId(i as u32)).collect();
        let cores = policies
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                let cfg = NodeConfig {
                    me: NodeId(i as u32),
                    name: format!("n{i}"),
                    capacity: sc.nodes[i].capacity.clone(),
                    kind_names: sc.kind_names(),
                    labels: BTreeMap::new(),
                    incarnation: 1,
                    num_types: sc.types.len(),
                    window: sc.window,
                    service_kind: sc.cpu_gpu_kinds().1,
                    // A slot is two heartbeats: progress spreads in the first, rounds run in
                    // the second.
                    slot_ms: 2 * HEARTBEAT,
                    round_ms: u64::MAX / 4,
                    heartbeat_ms: HEARTBEAT,
                    peer_timeout_ms: u64::MAX / 4,
                    autonomy_ms: u64::MAX / 4,
                    forget_ms: u64::MAX / 4,
                    known: ids.clone(),
                    lease_age_ms: None,
                    addr: "127.0.0.1".into(),
                    priorities: Default::default(),
                    shrink_kind: None,
                    preempt: false,
                };
                NodeCore::new(cfg, p, agent_seed(seed, i))
            })
            .collect::<Vec<_>>();
        let n = cores.len();
        Self {
            cores,
            now: 0,
            starts: vec![Vec::new(); n],
            gang_starts: vec![Vec::new(); n],
            resizes: vec![Vec::new(); n],
        }
    }

    /// Carry out `actions` of node `from` and everything they cause, until the bus is quiet.
    fn settle(&mut self, from: usize, actions: Vec<Action>) {
        let mut queue: VecDeque<(usize, Action)> = actions.into_iter().map(|a| (from, a)).collect();
        while let Some((i, a)) = queue.pop_front() {
            match a {
                Action::Broadcast(env) => {
                    for j in 0..self.cores.len() {
                        if j != i {
                            let out = self.cores[j].on_message(env.clone(), self.now);
                            queue.extend(out.into_iter().map(|a| (j, a)));
                        }
                    }
                }
                Action::Start {
                    task,
                    alloc,
                    gang: None,
                    ..
                } => self.starts[i].push((task, alloc)),
                Action::Start { task, alloc, .. } => self.gang_starts[i].push((task, alloc)),
                Action::Resize { task, alloc } => self.resizes[i].push((task, alloc)),
                // When a gang's host ends it, every other member box stops its members (whose
                // processes ended already in this replay).
                Action::Stop { task } if self.cores[i].tasks()[&task].task.gang.is_some() => {}
                other => panic!("node {i}: unexpected {other:?}"),
            }
        }
    }

    /// Every node ticks once, in order, at the current time.
    fn tick_all(&mut self) {
        for i in 0..self.cores.len() {
            let out = self.cores[i].tick(self.now);
            self.settle(i, out);
        }
    }
}

fn spec(task: TaskId) -> TaskSpec {
    TaskSpec::from_toml(&format!("command = [\"task-{}\"]\n", task.0)).unwrap()
}

/// [`spec`] with the profiling runs of `task`'s type as its profile hints (`[[profile]]`, in
/// seconds of the agents' slots), as the simulator's `profile_hints` gives every task.
fn hinted_spec(sc: &Scenario, task: &tapfinger::Task) -> TaskSpec {
    let names = sc.kind_names();
    let mut text = format!("command = [\"task-{}\"]\n", task.id.0);
    for run in policies::profile(sc).iter().filter(|r| r.ty == task.ty) {
        let alloc: Vec<String> = names
            .iter()
            .zip(&run.alloc.0)
            .map(|(n, v)| format!("{n} = {v}"))
            .collect();
        let seconds = run.slots * (2 * HEARTBEAT) as f64 / 1000.0;
        text += &format!(
            "[[profile]]\nalloc = {{ {} }}\nseconds = {seconds:?}\n",
            alloc.join(", ")
        );
    }
    TaskSpec::from_toml(&text).unwrap()
}

/// The gangs `outcome` started with members on node `i`: (gang, the units of its members there).
fn gang_units(outcome: &RoundOutcome, i: usize) -> Vec<(TaskId, Resources)> {
    outcome
        .gangs
        .iter()
        .filter_map(|g| {
            let mut here: Option<Resources> = None;
            for (_, a) in g.members.iter().filter(|(n, _)| n.0 as usize == i) {
                here = Some(match here {
                    Some(x) => x.checked_add(a).unwrap(),
                    None => a.clone(),
                });
            }
            here.map(|u| (g.task, u))
        })
        .collect()
}

/// A view with only what a policy decides from (the slot and step are compared apart).
fn normalized(v: &ClusterView) -> ClusterView {
    ClusterView {
        slot: 0,
        step: 0,
        ..v.clone()
    }
}

/// The allocations in force of the tasks running anywhere, as `core` knows them.
fn running_allocs(core: &NodeCore) -> BTreeMap<TaskId, Resources> {
    core.tasks()
        .iter()
        .filter_map(|(id, e)| match &e.state {
            TaskState::Running { alloc, .. } => Some((id, alloc.clone())),
            _ => None,
        })
        .collect()
}

/// Run `policy` on `sc` in the simulator, replay it on node cores, and compare. `model`: the
/// learned policy's checkpoint folder (`None`: the one shipped for the scenario). Returns how
/// many times the node cores resized a running task.
fn check_parity(
    sc: Scenario,
    policy: &str,
    seed: u64,
    model: Option<&std::path::Path>,
) -> Result<usize, TestCaseError> {
    let sim = Simulator::new(sc.clone());
    let build = |sim: &Simulator| -> Vec<Box<dyn Policy>> {
        if policy == policies::TAPFINGER {
            policies::learned(sim, model).unwrap()
        } else {
            policies::build(sim, policy).unwrap()
        }
    };
    let elastic = build(&sim)[0].elastic();
    let mut rec = Recording::default();
    let result = sim.run_observed(build(&sim), seed, &mut rec).unwrap();
    let mut r = Replay {
        agents: Agents::new(&sc, build(&sim), seed),
        rec,
        policy,
        seed,
        round: 0,
    };
    r.warm_up();
    let mut tasks = tapfinger_sim::workload::generate(&sc, seed);
    // The episode's gangs, as it draws them (a share of the tasks, each with its shape).
    if let Some(g) = &sc.gangs {
        let capacities: Vec<Resources> = sc.nodes.iter().map(|n| n.capacity.clone()).collect();
        g.assign(&mut tasks, &capacities, seed, sc.slot_seconds);
    }
    let sizes = tapfinger_sim::workload::sizes(&sc, seed, sc.tasks as usize);
    let mut next = 0;
    for slot in 0..result.slots.len() as u64 {
        r.submit(&sc, &tasks, &sizes, &mut next, slot);
        r.check_rounds(slot)?;
        r.check_shares(slot)?;
        r.run_slot(slot);
        r.agents.now += HEARTBEAT;
        r.agents.tick_all(); // heartbeats: the progress and the shares spread
        r.check_known_shares(slot)?;
        r.agents.now += HEARTBEAT;
    }
    let resized: usize = r.agents.resizes.iter().map(Vec::len).sum();
    prop_assert!(
        elastic || resized == 0,
        "{} seed {}: a non-elastic policy resized tasks",
        policy,
        seed
    );
    r.check_done(&result)?;
    prop_assert_eq!(r.round, r.rec.rounds.len());
    Ok(resized)
}

/// The node cores replaying a simulated episode, and what the simulator recorded of it.
struct Replay<'a> {
    agents: Agents,
    rec: Recording,
    policy: &'a str,
    seed: u64,
    /// The simulator's rounds replayed so far.
    round: usize,
}

impl Replay<'_> {
    /// Heartbeats until every node holds its lease, then one more period; a node proposes two
    /// periods after it got its lease, so its first round is slot 0 of the episode.
    fn warm_up(&mut self) {
        loop {
            self.agents.tick_all();
            if self
                .agents
                .cores
                .iter()
                .all(|c| c.lease_held(self.agents.now))
            {
                break;
            }
            self.agents.now += HEARTBEAT;
        }
        self.agents.now += HEARTBEAT;
        self.agents.tick_all();
        self.agents.now += HEARTBEAT;
    }

    /// The slot's arrivals, each submitted at the first node that can run it (its owner).
    fn submit(
        &mut self,
        sc: &Scenario,
        tasks: &[tapfinger::Task],
        sizes: &[f64],
        next: &mut usize,
        slot: u64,
    ) {
        while let Some(t) = tasks.get(*next).filter(|t| t.arrival == slot) {
            // Submitted at the first node that can run it (its owner).
            let at = t.reachable[0].0 as usize;
            let mut s = if sc.profile_hints {
                hinted_spec(sc, t)
            } else {
                spec(t.id)
            };
            if sc.declare_work {
                s.work = Some(tapfinger_sim::workload::size_of(sizes, t.id));
            }
            let out = self.agents.cores[at].submit(t.clone(), s);
            self.agents.settle(at, out);
            *next += 1;
        }
    }

    /// Every round of the slot: each node sees the simulator's view, and starts what it started.
    fn check_rounds(&mut self, slot: u64) -> Result<(), TestCaseError> {
        let views = &self.rec.views[&slot];
        for (step, expected) in views.iter().enumerate() {
            for (i, core) in self.agents.cores.iter().enumerate() {
                let v = core.view();
                prop_assert_eq!((v.slot, v.step as usize), (slot, step), "node {} round", i);
                prop_assert_eq!(
                    normalized(&v),
                    normalized(expected),
                    "{} seed {}: node {} sees another view at slot {} step {}",
                    self.policy,
                    self.seed,
                    i,
                    slot,
                    step
                );
            }
            let before: Vec<usize> = self.agents.starts.iter().map(Vec::len).collect();
            let gangs_before: Vec<usize> = self.agents.gang_starts.iter().map(Vec::len).collect();
            self.agents.tick_all();
            let outcome = &self.rec.rounds[self.round];
            self.round += 1;
            for (i, b) in gangs_before.iter().enumerate() {
                let started = self.agents.gang_starts[i][*b..].to_vec();
                prop_assert_eq!(
                    started,
                    gang_units(outcome, i),
                    "{} seed {}: node {} gang starts",
                    self.policy,
                    self.seed,
                    i
                );
            }
            for (i, b) in before.iter().enumerate() {
                let started: Vec<(TaskId, Resources)> = self.agents.starts[i][*b..].to_vec();
                let expected: Vec<(TaskId, Resources)> = outcome
                    .commits
                    .iter()
                    .filter(|c| c.agent.0 as usize == i)
                    .map(|c| (c.task, c.alloc.clone()))
                    .collect();
                prop_assert_eq!(
                    started,
                    expected,
                    "{} seed {}: node {} starts",
                    self.policy,
                    self.seed,
                    i
                );
            }
        }
        Ok(())
    }

    /// The slot's shares and rewards: every node re-shared its own tasks as the simulator did.
    fn check_shares(&self, slot: u64) -> Result<(), TestCaseError> {
        let expected = &self.rec.allocs[&slot];
        for (i, core) in self.agents.cores.iter().enumerate() {
            let own: BTreeMap<TaskId, Resources> = running_allocs(core)
                .into_iter()
                .filter(|(t, _)| core.tasks()[t].state.running_on() == Some(core.id()))
                .collect();
            let want: BTreeMap<TaskId, Resources> = expected
                .iter()
                .filter(|(t, _)| own.contains_key(t))
                .map(|(t, a)| (*t, a.clone()))
                .collect();
            prop_assert_eq!(
                &own,
                &want,
                "{} seed {}: node {} shares in slot {}",
                self.policy,
                self.seed,
                i,
                slot
            );
        }
        for (i, core) in self.agents.cores.iter().enumerate() {
            prop_assert_eq!(
                core.reward(),
                self.rec.rewards[&slot][i],
                "{} seed {}: node {} reward in slot {}",
                self.policy,
                self.seed,
                i,
                slot
            );
        }
        Ok(())
    }

    /// The slot runs: each runner reports its tasks' progress (or exit).
    fn run_slot(&mut self, slot: u64) {
        for (task, p, finished) in self.rec.progress.get(&slot).cloned().unwrap_or_default() {
            if let TaskState::Gang { members, .. } = &self.agents.cores[0].tasks()[&task].state {
                // A gang ends when its host (rank 0's box) exits, after its other boxes.
                if finished {
                    let mut boxes: Vec<usize> = members.iter().map(|(n, _)| n.0 as usize).collect();
                    boxes.dedup();
                    let host = boxes[0];
                    boxes.retain(|b| *b != host);
                    boxes.sort_unstable();
                    boxes.dedup();
                    for r in boxes.into_iter().chain([host]) {
                        let out = self.agents.cores[r].on_exit(task, Some(0), false);
                        self.agents.settle(r, out);
                    }
                }
                continue;
            }
            let runner = self.agents.cores[0].tasks()[&task]
                .state
                .running_on()
                .unwrap();
            let r = runner.0 as usize;
            if finished {
                let out = self.agents.cores[r].on_exit(task, Some(0), false);
                self.agents.settle(r, out);
            } else {
                self.agents.cores[r].on_progress(task, p);
            }
        }
    }

    /// After the heartbeats: every peer knows every running task's shares.
    fn check_known_shares(&self, slot: u64) -> Result<(), TestCaseError> {
        let running: BTreeMap<TaskId, Resources> = self.rec.allocs[&slot]
            .iter()
            .filter(|(t, _)| {
                matches!(
                    self.agents.cores[0].tasks()[*t].state,
                    TaskState::Running { .. }
                )
            })
            .map(|(t, a)| (*t, a.clone()))
            .collect();
        for (i, core) in self.agents.cores.iter().enumerate() {
            prop_assert_eq!(
                &running_allocs(core),
                &running,
                "{} seed {}: node {} knows other shares after slot {}",
                self.policy,
                self.seed,
                i,
                slot
            );
        }
        Ok(())
    }

    /// Every task finished where and when the simulator says, as every node knows it.
    fn check_done(&self, result: &tapfinger_sim::EpisodeResult) -> Result<(), TestCaseError> {
        for rec_task in &result.tasks {
            for core in &self.agents.cores {
                let e = &core.tasks()[&TaskId(rec_task.id)];
                prop_assert!(
                    matches!(e.state, TaskState::Done { node, code: Some(0), .. } if node.0 == rec_task.node),
                    "{} seed {}: task {} is {:?}",
                    self.policy,
                    self.seed,
                    rec_task.id,
                    e.state
                );
            }
        }
        Ok(())
    }
}

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
