//! An in-memory cluster of node cores for tests, in the manner of raft-rs's harness: the nodes
//! exchange messages through a bus with a fixed delay (every message encoded and decoded as the
//! wire would), can be cut into partition sides, killed and replaced; their tasks run for a time
//! set by their allocation. It records every start, finish and overlap of two copies, so tests
//! judge from what ran, not from what the nodes say.

// A test harness: a failed encode or an unknown policy is a bug in the test, said at once.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use tapfinger_core::Resources;
use tapfinger_core::node::{Action, NodeConfig, NodeCore, TaskState};
use tapfinger_core::spec::TaskSpec;
use tapfinger_core::task::{NodeId, Task, TaskId};
use tapfinger_core::wire::{Body, Envelope};

/// Milliseconds per step of the cluster (and the bus delay of every message).
pub const STEP: u64 = 10;

/// N node cores, their network and their tasks (see the crate doc).
pub struct Cluster {
    /// The node cores, by index (node i has id i).
    pub nodes: Vec<NodeCore>,
    /// Which nodes are alive (a dead one hears and says nothing).
    pub alive: Vec<bool>,
    /// Messages in flight: (deliver at, to, envelope).
    pub bus: Vec<(u64, usize, Envelope)>,
    /// Copies running: (ends at, node, task).
    pub running: Vec<(u64, usize, TaskId)>,
    /// Finishes per task (more than one: a task ran to completion twice).
    pub finished: BTreeMap<TaskId, u32>,
    /// Starts in all.
    pub starts: u32,
    /// Starts per task.
    pub started: BTreeMap<TaskId, u32>,
    /// The epoch of every start of each task, in order.
    pub epochs: BTreeMap<TaskId, Vec<u64>>,
    /// (task, ms) whenever two copies of a task ran at the same time.
    pub overlaps: Vec<(TaskId, u64)>,
    /// The side of a partition each node is on (messages cross only within a side).
    pub side: Vec<u8>,
    /// Links cut one way, (from, to), on top of the sides: a heal that reaches some nodes
    /// before others.
    pub cut: BTreeSet<(usize, usize)>,
    /// Work of a task in ms at one core.
    pub work_ms: u64,
    /// Drop every finish message (to check that heartbeats make good a lost one).
    pub lose_finishes: bool,
    /// The cluster's clock (ms).
    pub now: u64,
    /// Extra delay (ms) of every message to each node: a slow node decides its rounds later
    /// than the others.
    pub inbound_delay: Vec<u64>,
    /// How long a stopped copy takes to end (ms; 0: at once). A real process dies some time
    /// after its stop (a supervisor kills its group; on a loaded box, hundreds of ms).
    pub stop_ms: u64,
    /// Stopped copies still alive: (ends at, node, task).
    pub stopping: Vec<(u64, usize, TaskId)>,
    /// Cores each live copy uses, by (node, task): what the copies use, not what nodes say.
    pub cores: BTreeMap<(usize, TaskId), u64>,
    /// (node, cores in use, ms) whenever the copies alive on a node used more cores than it has.
    pub breaches: Vec<(usize, u64, u64)>,
}

/// The spec every harness task carries.
pub fn spec() -> TaskSpec {
    TaskSpec::from_toml("command = [\"x\"]\nmin_demand = { cpu = 1 }\n").unwrap()
}

impl Cluster {
    /// `n` nodes (4 cores each) deciding with the baseline `policy`.
    pub fn new(n: usize, policy: &str) -> Self {
        Self::with(n, policy, |_| {})
    }

    /// As [`Cluster::new`], each node's configuration changed by `tweak` first.
    pub fn with(n: usize, policy: &str, tweak: impl Fn(&mut NodeConfig)) -> Self {
        let ctx = tapfinger_policies::baselines::BaselineContext {
            num_types: 1,
            cpu_kind: 0,
            gpu_kind: 1,
            profile: Vec::new(),
        };
        let nodes = (0..n)
            .map(|i| {
                let mut cfg = NodeConfig::short(NodeId(i as u32), Resources(vec![4, 0]));
                tweak(&mut cfg);
                NodeCore::new(
                    cfg,
                    tapfinger_policies::baselines::by_name(policy, &ctx).unwrap(),
                    i as u64,
                )
            })
            .collect();
        Self {
            nodes,
            alive: vec![true; n],
            bus: Vec::new(),
            running: Vec::new(),
            finished: BTreeMap::new(),
            starts: 0,
            started: BTreeMap::new(),
            epochs: BTreeMap::new(),
            overlaps: Vec::new(),
            side: vec![0; n],
            cut: BTreeSet::new(),
            work_ms: 1000,
            lose_finishes: false,
            now: 0,
            inbound_delay: vec![0; n],
            stop_ms: 0,
            stopping: Vec::new(),
            cores: BTreeMap::new(),
            breaches: Vec::new(),
        }
    }

    /// Carry out node `from`'s actions: broadcasts go on the bus, starts run for the task's
    /// work divided by its cores, stops end the copy.
    pub fn act(&mut self, from: usize, actions: Vec<Action>) {
        for a in actions {
            match a {
                Action::Broadcast(e)
                    if self.lose_finishes && matches!(e.body, Body::Finished(_)) => {}
                Action::Broadcast(e) => {
                    // Encode and decode as the wire would: what a node sends must pass.
                    let bytes = tapfinger_core::wire::encode(&e).unwrap();
                    let e = tapfinger_core::wire::decode(&bytes).unwrap();
                    for to in 0..self.nodes.len() {
                        if to != from {
                            let at = self.now + STEP + self.inbound_delay[to];
                            self.bus.push((at, to, e.clone()));
                        }
                    }
                }
                Action::Start { task, alloc, .. } => {
                    self.starts += 1;
                    *self.started.entry(task).or_default() += 1;
                    // The epoch the starting node gave this copy (what the task would be told).
                    let epoch = self.nodes[from]
                        .tasks()
                        .get(task)
                        .map_or(0, |t| t.meta.epoch);
                    self.epochs.entry(task).or_default().push(epoch);
                    if self.running.iter().any(|(_, _, t)| *t == task) {
                        self.overlaps.push((task, self.now));
                    }
                    // 1 s of work at 1 core (by default), 250 ms at 4.
                    let cores = u64::from(alloc.get(0).max(1));
                    let ms = self.work_ms / cores;
                    self.running.push((self.now + ms, from, task));
                    self.cores.insert((from, task), cores);
                    self.check_capacity(from);
                }
                // The harness's policies are not elastic; a task's run time is set at its start.
                Action::Refused { .. } | Action::Resize { .. } => {}
                Action::Stop { task } | Action::Preempt { task } => {
                    let here = |(_, n, t): &(u64, usize, TaskId)| *n == from && *t == task;
                    let alive = self.running.iter().any(here);
                    self.running.retain(|c| !here(c));
                    // No copy here (it ended meanwhile, or was lost in a restart): its end is
                    // told at once, as an executor tells a stop of what it does not run.
                    if self.stop_ms == 0 || !alive {
                        self.cores.remove(&(from, task));
                        let more = self.nodes[from].on_exit(task, None, true);
                        self.act(from, more);
                    } else {
                        self.stopping.push((self.now + self.stop_ms, from, task));
                    }
                }
            }
        }
    }

    /// One step: deliver due messages, finish due tasks, tick every live node; asserts that no
    /// node allocates more than its capacity.
    pub fn step(&mut self) {
        self.now += STEP;
        let now = self.now;
        let due: Vec<(u64, usize, Envelope)> = {
            let (due, later): (Vec<_>, Vec<_>) =
                self.bus.drain(..).partition(|(t, _, _)| *t <= now);
            self.bus = later;
            due
        };
        for (_, to, e) in due {
            let from = e.from.0 as usize;
            if self.alive[to] && self.side[to] == self.side[from] && !self.cut.contains(&(from, to))
            {
                let acts = self.nodes[to].on_message(e, now);
                self.act(to, acts);
            }
        }
        let (ended, dying): (Vec<_>, Vec<_>) =
            self.stopping.drain(..).partition(|(t, _, _)| *t <= now);
        self.stopping = dying;
        for (_, node, task) in ended {
            self.cores.remove(&(node, task));
            if self.alive[node] {
                let acts = self.nodes[node].on_exit(task, None, true);
                self.act(node, acts);
            }
        }
        let (done, rest): (Vec<_>, Vec<_>) =
            self.running.drain(..).partition(|(t, _, _)| *t <= now);
        self.running = rest;
        for (_, node, task) in done {
            self.cores.remove(&(node, task));
            if self.alive[node] {
                *self.finished.entry(task).or_default() += 1;
                let acts = self.nodes[node].on_exit(task, Some(0), false);
                self.act(node, acts);
            }
        }
        for i in 0..self.nodes.len() {
            if self.alive[i] {
                let acts = self.nodes[i].tick(now);
                self.act(i, acts);
                let used = self.nodes[i].used();
                assert!(
                    used.fits_in(&Resources(vec![4, 0])),
                    "node {i} allocates {used} at {now} ms"
                );
            }
        }
    }

    /// Submit task `id` (1 core, reachable everywhere) at node `at`.
    pub fn submit(&mut self, at: usize, id: u64) {
        self.submit_with(at, id, 0, 1);
    }

    /// Submit task `id` of priority class `class` needing `cpus` cores (reachable everywhere)
    /// at node `at`.
    pub fn submit_with(&mut self, at: usize, id: u64, class: u8, cpus: u32) {
        let reachable: Vec<NodeId> = (0..self.nodes.len() as u32).map(NodeId).collect();
        let task = Task {
            id: TaskId(id),
            ty: tapfinger_core::TaskTypeId(0),
            min_demand: Resources(vec![cpus, 0]),
            max_demand: None,
            priority: class,
            reachable,
            arrival: self.now / 200,
            gang: None,
        };
        let acts = self.nodes[at].submit(task, spec());
        self.act(at, acts);
    }

    /// Node `i` dies: it hears nothing, ticks no more, and its copies are gone.
    pub fn kill(&mut self, i: usize) {
        self.alive[i] = false;
        self.running.retain(|(_, n, _)| *n != i);
        self.stopping.retain(|(_, n, _)| *n != i);
        self.cores.retain(|(n, _), _| *n != i);
    }

    /// Assert that every node knows the same tasks with the same states (outcomes) as node 0.
    pub fn assert_agree(&self) {
        let o = self.outcomes();
        for (i, m) in o.iter().enumerate() {
            for (id, s) in m {
                assert_eq!(
                    Some(s),
                    o[0].get(id),
                    "node {i} and node 0 disagree on {id}"
                );
            }
            assert_eq!(m.len(), o[0].len(), "node {i} knows other tasks");
        }
    }

    /// Restart node `i` with no memory at all (a new incarnation, the `min` policy, nothing
    /// replayed), its copies gone with it: a box whose agent lost everything but its identity.
    pub fn forget(&mut self, i: usize) {
        self.running.retain(|(_, n, _)| *n != i);
        self.cores.retain(|(n, _), _| *n != i);
        let ctx = tapfinger_policies::baselines::BaselineContext {
            num_types: 1,
            cpu_kind: 0,
            gpu_kind: 1,
            profile: Vec::new(),
        };
        let mut cfg = self.nodes[i].config().clone();
        cfg.incarnation += 1;
        self.nodes[i] = NodeCore::new(
            cfg,
            tapfinger_policies::baselines::by_name("min", &ctx).unwrap(),
            99,
        );
    }

    /// Record a breach if the copies alive on `node` (running or stopping) use more cores than
    /// it has (4).
    fn check_capacity(&mut self, node: usize) {
        let used: u64 = self
            .cores
            .iter()
            .filter(|((n, _), _)| *n == node)
            .map(|(_, c)| c)
            .sum();
        if used > 4 {
            self.breaches.push((node, used, self.now));
        }
    }
}

impl Cluster {
    /// Five nodes running the `min` policy, warmed up, with 15 tasks of `work_ms` each
    /// submitted round the nodes and under way.
    pub fn busy(work_ms: u64) -> Self {
        let mut c = Self::new(5, "min");
        c.work_ms = work_ms;
        for _ in 0..40 {
            c.step();
        }
        for id in 0..15u64 {
            c.submit((id % 5) as usize, id);
        }
        for _ in 0..20 {
            c.step();
        }
        c
    }

    /// Warm up (60 steps: the nodes hear each other and hold their leases), then submit tasks
    /// `0..tasks` round-robin over the nodes, a step after every fourth.
    pub fn warm_and_load(&mut self, tasks: u64) {
        for _ in 0..60 {
            self.step();
        }
        let n = self.nodes.len() as u64;
        for id in 0..tasks {
            self.submit((id % n) as usize, id);
            if id % 4 == 0 {
                self.step();
            }
        }
    }

    /// Run until every task of `0..n` finished somewhere, or `limit` steps.
    pub fn run_until_finished(&mut self, n: usize, limit: u32) {
        let mut steps = 0;
        while self.finished.len() < n && steps < limit {
            self.step();
            steps += 1;
        }
    }

    /// Each node's view of each task's outcome (node, code, epoch).
    pub fn outcomes(&self) -> Vec<BTreeMap<TaskId, TaskState>> {
        self.nodes
            .iter()
            .map(|n| {
                n.tasks()
                    .iter()
                    .map(|(id, t)| (id, t.state.clone()))
                    .collect()
            })
            .collect()
    }
}

/// Multiplier of [`lcg`].
pub const LCG_A: u64 = 6_364_136_223_846_793_005;
/// Increment of [`lcg`].
pub const LCG_C: u64 = 1_442_695_040_888_963_407;

/// A linear congruential sequence from `state` (pseudo-random, the same on every run): the
/// delays and losses of the harness's tests and sweeps.
pub fn lcg(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state = state.wrapping_mul(LCG_A).wrapping_add(LCG_C);
        state >> 33
    }
}
