//! The parity tests' replay: a simulated episode recorded ([`Recording`]) and replayed on N
//! node cores over an in-memory bus, in lock step ([`check_parity`]), comparing at every round
//! what each saw and started, each slot's shares and rewards, and every task's end (the module
//! doc of `tests/parity.rs` says what is compared and why).

use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use tapfinger::node::{Action, NodeConfig, NodeCore, TaskState};
use tapfinger::spec::TaskSpec;
use tapfinger::view::ClusterView;
use tapfinger::{NodeId, Policy, Resources, RoundOutcome, TaskId};
use tapfinger_sim::env::Observer;
use tapfinger_sim::{Scenario, Simulator, policies};

/// What the simulator's episode showed and did.
#[derive(Default)]
pub(crate) struct Recording {
    /// The view decided from at each step, per slot, in order.
    pub(crate) views: BTreeMap<u64, Vec<ClusterView>>,
    rounds: Vec<RoundOutcome>,
    rewards: BTreeMap<u64, Vec<f64>>,
    /// Allocations in force (starts, then re-shares), and a copy of them at each slot's end.
    alloc: BTreeMap<TaskId, Resources>,
    allocs: BTreeMap<u64, BTreeMap<TaskId, Resources>>,
    progress: BTreeMap<u64, Vec<(TaskId, f64, bool)>>,
    /// The plateau detector's judgements per slot (shrinking on).
    judged: BTreeMap<u64, Vec<(TaskId, bool)>>,
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
    fn judged(&mut self, slot: u64, task: TaskId, converging: bool) {
        self.judged
            .entry(slot)
            .or_default()
            .push((task, converging));
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
    /// Preemptions per node: the tasks stopped for a higher class, in order.
    preempted: Vec<Vec<TaskId>>,
    /// The slot being replayed.
    slot: u64,
    /// The victims' grace in slots (the scenario's; each task's `grace_seconds` says the same).
    grace: u64,
    /// Victims in their grace: (node, task, the last slot of its grace).
    dying: Vec<(usize, TaskId, u64)>,
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
                    steps: Vec::new(),
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
                    // The scenario's classes, shrinking and preemption, as an agent's config
                    // gives them.
                    priorities: sc.priorities,
                    shrink_kind: sc
                        .shrink
                        .filter(|s| s.enabled)
                        .map(|_| sc.cpu_gpu_kinds().0),
                    preempt: sc.checkpoint_slots.is_some(),
                };
                let mut core = NodeCore::new(cfg, p, agent_seed(seed, i));
                // Gangs are placed as the simulator places them: the scenario's placer and links.
                if let Some(g) = &sc.gangs {
                    core.set_gangs(tapfinger::ledger::GangPlacement {
                        placer: tapfinger::jobs::placer(g.placer),
                        links: g.links,
                    });
                }
                core
            })
            .collect::<Vec<_>>();
        let n = cores.len();
        Self {
            cores,
            now: 0,
            starts: vec![Vec::new(); n],
            gang_starts: vec![Vec::new(); n],
            resizes: vec![Vec::new(); n],
            preempted: vec![Vec::new(); n],
            slot: 0,
            grace: sc.preempt_grace_slots,
            dying: Vec::new(),
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
                // A victim of preemption: its process ends at once without a grace, which frees
                // its units; with one, while the last slot of its grace runs ([`Agents::ends`]),
                // as the simulator frees them.
                Action::Preempt { task } => {
                    self.preempted[i].push(task);
                    if self.grace == 0 {
                        let out = self.cores[i].on_exit(task, None, true);
                        queue.extend(out.into_iter().map(|a| (i, a)));
                    } else {
                        self.dying.push((i, task, self.slot + self.grace));
                    }
                }
                // When a gang's host ends it, every other member box stops its members (whose
                // processes ended already in this replay).
                Action::Stop { task } if self.cores[i].tasks()[&task].task.gang.is_some() => {}
                other => panic!("node {i}: unexpected {other:?}"),
            }
        }
    }

    /// The victims whose grace ends with the current slot: their processes end now.
    fn ends(&mut self) {
        let slot = self.slot;
        let (due, rest): (Vec<_>, Vec<_>) = self.dying.drain(..).partition(|d| d.2 <= slot);
        self.dying = rest;
        for (i, task, _) in due {
            let out = self.cores[i].on_exit(task, None, true);
            self.settle(i, out);
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

fn spec(sc: &Scenario, task: TaskId) -> TaskSpec {
    TaskSpec::from_toml(&format!("command = [\"task-{}\"]\n{}", task.0, grace(sc))).unwrap()
}

/// The scenario's grace as a task spec's `grace_seconds` (in seconds of the agents' slots).
fn grace(sc: &Scenario) -> String {
    let ms = sc.preempt_grace_slots * 2 * HEARTBEAT;
    assert_eq!(
        ms % 1000,
        0,
        "a grace of whole seconds of the replay's slots"
    );
    format!("grace_seconds = {}\n", ms / 1000)
}

/// [`spec`] with the profiling runs of `task`'s type as its profile hints (`[[profile]]`, in
/// seconds of the agents' slots), as the simulator's `profile_hints` gives every task.
fn hinted_spec(sc: &Scenario, task: &tapfinger::Task) -> TaskSpec {
    let names = sc.kind_names();
    let mut text = format!("command = [\"task-{}\"]\n{}", task.id.0, grace(sc));
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
pub(crate) fn check_parity(
    sc: Scenario,
    policy: &str,
    seed: u64,
    model: Option<&std::path::Path>,
) -> Result<usize, TestCaseError> {
    replay(sc, policy, seed, model).map(|r| r.resized)
}

/// What a replay did, so a test can tell that a rule it means to compare was exercised.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Replayed {
    /// Running tasks the node cores resized (re-shares and ceilings).
    pub(crate) resized: usize,
    /// Tasks the node cores preempted.
    pub(crate) preempted: usize,
    /// Judgements of convergence the runners reported (shrinking on).
    pub(crate) converging: usize,
}

/// [`check_parity`], returning what the replay did. With preemption on, a victim's process ends
/// at once without a grace, and while the last slot of its grace runs with one (the scenario's
/// `grace_slots`, whole seconds of the replay's 200 ms slots); tasks never checkpoint: a task
/// resumed from a checkpoint shows that progress in the simulator's views from its start, but
/// on agents only from its runner's first report, which this replay does not compare.
pub(crate) fn replay(
    sc: Scenario,
    policy: &str,
    seed: u64,
    model: Option<&std::path::Path>,
) -> Result<Replayed, TestCaseError> {
    assert!(
        sc.checkpoint_slots.is_none_or(|k| k > sc.max_slots),
        "the replay's tasks never checkpoint"
    );
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
        r.agents.slot = slot;
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
    // Only elastic policies and the ceilings of shrinking tasks resize.
    let shrinking = sc.shrink.is_some_and(|s| s.enabled);
    prop_assert!(
        elastic || shrinking || resized == 0,
        "{} seed {}: a non-elastic policy resized tasks",
        policy,
        seed
    );
    r.check_done(&result)?;
    prop_assert_eq!(r.round, r.rec.rounds.len());
    let preempted = r.agents.preempted.iter().map(Vec::len).sum();
    let sim_preempted: u32 = result.tasks.iter().map(|t| t.preemptions).sum();
    prop_assert_eq!(
        preempted,
        sim_preempted as usize,
        "{} seed {}: preemptions",
        policy,
        seed
    );
    Ok(Replayed {
        resized,
        preempted,
        converging: r.rec.judged.values().flatten().filter(|j| j.1).count(),
    })
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
                spec(sc, t.id)
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

    /// The slot runs: each runner reports its tasks' convergence as the simulator judged it,
    /// then their progress (or exit).
    fn run_slot(&mut self, slot: u64) {
        self.agents.ends();
        for (task, converging) in self.rec.judged.get(&slot).cloned().unwrap_or_default() {
            if let Some(r) = self.agents.cores[0].tasks()[&task].state.running_on() {
                let r = r.0 as usize;
                self.agents.cores[r].on_report(task, &BTreeMap::new(), converging);
            }
        }
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
