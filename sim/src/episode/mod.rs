//! One episode, step by step: the simulator's driver of the shared protocol and ledger.
//!
//! Each slot: tasks arrive ([`Episode::arrive`]); decision steps repeat ([`Episode::step`]) — every agent's policy sees the same
//! view of the [`Ledger`] and proposes; the round is resolved by the shared [`Protocol`] — until
//! a step commits nothing (elastic nodes show their running tasks at their minimum
//! demands, see [`Ledger::set_elastic`]); elastic policies re-allocate ([`Episode::rebalance`]); rewards are paid ([`Episode::pay`]); running tasks
//! progress ([`Episode::progress`]). The view, the queues, free units and the reward are the
//! ledger's, exactly as in every agent; only time and speed are the simulator's.
//!
//! A round's resolution is a pure function of the set of proposals, the same on every member, so
//! by default one protocol instance (agent 0's) receives every agent's message and decides for
//! all: the cost of a step grows with the number of agents, not with its square. With
//! `replicas` every agent runs its own instance, every message reaches every instance, and the
//! episode fails if any two decide a round differently (the tests run this way).

use crate::scenario::Scenario;
use crate::workload;
use std::sync::Arc;
use tapfinger::ledger::{Ledger, TaskState};
use tapfinger::protocol::{Output, ProtocolConfig};
use tapfinger::view::ClusterView;
use tapfinger::{NodeId, Policy, Protocol, Resources, Round, RoundOutcome, Task, TaskId};

mod advance;
mod devices;
mod forecast;
mod gangs;
mod learning;
mod preempt;
mod records;
pub use forecast::{ForecastPoint, PreFit};
pub use records::{EpisodeResult, NoObserver, Observer, SimError, SlotRecord, TaskRecord};

/// A check of the ledger (tests only; see `Episode::audit`).
#[cfg(test)]
type Audit = Box<dyn Fn(&Ledger<SimMeta>, bool)>;

/// A task's best isolated completion time in slots and its least area per resource kind, given
/// its size (its record's bounds).
pub(crate) type LowerBound<'a> = Box<dyn Fn(&Task, f64) -> (u64, Vec<f64>) + 'a>;

/// What the simulator keeps per task beside the ledger's state.
#[derive(Debug, Clone, Default)]
struct SimMeta {
    /// Failed runs (below the true need in `fail` mode).
    failures: u32,
    /// Slot of the (last) start.
    start: u64,
    /// Allocation in the previous slot it ran (a change costs the switch penalty).
    prev: Option<Resources>,
    /// Times its GPU count changed from one slot it ran to the next: on an agent, each one
    /// restarts the task with its new devices.
    gpu_changes: u32,
    /// Its accuracy reports, plateau and resources held ([`learning`]).
    learning: learning::Learning,
    /// Its checkpoints and preemptions ([`preempt`]).
    checkpoints: preempt::Checkpoints,
}

/// Counters of one slot's decisions.
#[derive(Default)]
struct Decisions {
    conflicts: u32,
    commits: u32,
    steps: u32,
}

/// Where an episode's randomness comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seeds {
    /// Arrivals and task sizes.
    pub(crate) workload: u64,
    /// The agents' own randomness (sampling policies).
    pub(crate) policy: u64,
}

/// An episode in progress.
pub(crate) struct Episode<'a> {
    /// The scenario: nodes, task types and their true speed.
    sc: &'a Scenario,
    /// A task's best isolated completion time on any node it can reach (its record's bound).
    lower_bound: LowerBound<'a>,
    /// One policy per agent (agent i decides for node i).
    policies: Vec<Box<dyn Policy>>,
    /// Agent 0's protocol instance, or every agent's in the replicated mode.
    protocols: Vec<Protocol>,
    /// Each agent's own seeded randomness (derived from the episode seed and its index).
    rngs: Vec<tapfinger::Rng>,
    /// Node ids by index.
    ids: Vec<NodeId>,
    /// Which agents re-allocate their running tasks every slot.
    elastic: Vec<bool>,
    /// The cluster's scheduling state, the same structure every agent keeps.
    ledger: Ledger<SimMeta>,
    /// Every task of the episode, by arrival (and id).
    arrivals: Vec<Arc<Task>>,
    /// Each task's work over its type's, by id (the simulator's secret, like the speed model).
    sizes: Vec<f64>,
    /// Who submitted each task and which recurring job it runs, by id, where the workload's
    /// recurring jobs say ([`crate::workload::recurring`]; a trace's rows say it themselves).
    identities: Vec<Option<tapfinger::sizes::Identity>>,
    /// The seed of the tasks' accuracy reports (the workload's: the same whatever the policy).
    curve_seed: u64,
    /// Nodes that made room for a waiting task, which they propose until it starts ([`preempt`]).
    rooms: std::collections::BTreeMap<NodeId, tapfinger::slot::Room>,
    /// Victims in their grace: (the slot it ends, node, task, units still taken).
    draining: Vec<(u64, NodeId, TaskId, Resources)>,
    /// Rooms whose task had not started by the end of their first slot ([`tapfinger::slot::Room::late`]).
    rooms_unused: u64,
    /// The forecast for the interval under way (predicted, last value, fitted), and the
    /// intervals judged ([`forecast`]).
    pending_forecast: Option<(f64, f64, bool)>,
    forecasts: Vec<ForecastPoint>,
    /// The forecast's interval, and the history before the episode and the model fitted on it
    /// ([`forecast`]).
    prefit: Option<(u64, Arc<forecast::PreFit>)>,
    /// The first task of `arrivals` not yet arrived.
    next_arrival: usize,
    /// Finished tasks (a finished task leaves the ledger; this is all that is kept of it).
    records: Vec<TaskRecord>,
    /// One record per slot run.
    slots: Vec<SlotRecord>,
    /// Each agent's summed reward.
    returns: Vec<f64>,
    /// Messages the agents would have exchanged (each to every other agent).
    messages: u64,
    /// Capacity per kind over the cluster (for utilization).
    total_capacity: Vec<f64>,
    /// How gangs are placed ([`gangs`]).
    placer: tapfinger::placement::gang::GangPlacer,
    /// Each gang's work and true compute time (the simulator's secret).
    truths: std::collections::BTreeMap<TaskId, crate::gangs::GangTruth>,
    /// Each node's GPU devices where they are shared in fractions ([`devices`]).
    devices: Option<devices::Devices>,
    /// A check of the ledger run after every step (`false`) and after the slot's re-shares,
    /// before it runs (`true`) (tests only).
    #[cfg(test)]
    audit: Option<Audit>,
}

impl<'a> Episode<'a> {
    /// Prepare an episode of `sim` with one policy per node (node i is agent i).
    pub(crate) fn new(
        sc: &'a Scenario,
        lower_bound: LowerBound<'a>,
        policies: Vec<Box<dyn Policy>>,
        seeds: Seeds,
        replicas: bool,
        placer: Option<tapfinger::placement::gang::GangPlacer>,
    ) -> Result<Self, SimError> {
        let n = sc.nodes.len();
        if policies.len() != n {
            return Err(SimError::PolicyCount {
                policies: policies.len(),
                nodes: n,
            });
        }
        let ids: Vec<NodeId> = (0..n).map(|i| NodeId(i as u32)).collect();
        let protocols = ids
            .iter()
            .take(if replicas { n } else { 1 })
            .map(|&id| {
                Protocol::new(
                    id,
                    ids.iter().copied(),
                    Round::default(),
                    ProtocolConfig::default(),
                )
            })
            .collect();
        let rngs = (0..n)
            .map(|i| {
                tapfinger::seeded_rng(
                    seeds
                        .policy
                        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                        .wrapping_add(i as u64 + 1),
                )
            })
            .collect();
        let (cpu_kind, gpu_kind) = sc.cpu_gpu_kinds();
        let mut ledger = Ledger::new(sc.window, gpu_kind)
            .with_priorities(sc.priorities)
            .with_shrink(sc.shrink.filter(|s| s.enabled).map(|_| cpu_kind))
            .with_kinds(tapfinger::estimate::KindMap::from_names(&sc.kind_names()));
        if sc.cluster_reward {
            ledger = ledger.with_cluster_reward(sc.reward);
        }
        for ((id, node), p) in ids.iter().zip(&sc.nodes).zip(&policies) {
            ledger.set_node(*id, node.capacity.clone());
            ledger.set_gpu_model(*id, node.gpu_key());
            ledger.set_elastic(*id, p.elastic());
            ledger.set_floors(*id, p.floors());
        }
        let total_capacity = (0..sc.space.len())
            .map(|k| {
                sc.nodes
                    .iter()
                    .map(|nd| f64::from(nd.capacity.get(k)))
                    .sum()
            })
            .collect();
        let mut arrivals = workload::generate(sc, seeds.workload);
        let capacities: Vec<Resources> = sc.nodes.iter().map(|n| n.capacity.clone()).collect();
        let mut truths = sc.gangs.as_ref().map_or_else(Default::default, |g| {
            g.assign(&mut arrivals, &capacities, seeds.workload, sc.slot_seconds)
        });
        // A trace's gangs bring their own truths (its ids are its rows in arrival order).
        for (i, t) in sc.trace.iter().flatten().enumerate() {
            if let Some(g) = &t.gang {
                truths.insert(TaskId(i as u64), g.truth());
            }
        }
        if sc.profile_hints {
            crate::profile::hint_profiles(sc, &arrivals, &mut ledger);
        }
        let devices = devices::Devices::of(sc);
        if let Some(d) = devices.as_ref().filter(|_| sc.pack_shares) {
            d.state(&mut ledger, &ids);
        }
        Ok(Self {
            sc,
            lower_bound,
            elastic: policies.iter().map(|p| p.elastic()).collect(),
            policies,
            protocols,
            rngs,
            ids,
            ledger,
            arrivals: arrivals.into_iter().map(Arc::new).collect(),
            sizes: workload::sizes(sc, seeds.workload, sc.tasks as usize),
            identities: workload::identities(sc, seeds.workload, sc.tasks as usize),
            curve_seed: seeds.workload,
            rooms: Default::default(),
            draining: Vec::new(),
            rooms_unused: 0,
            pending_forecast: None,
            forecasts: Vec::new(),
            prefit: None,
            next_arrival: 0,
            records: Vec::new(),
            slots: Vec::new(),
            returns: vec![0.0; n],
            messages: 0,
            total_capacity,
            placer: placer
                .or(sc.gangs.as_ref().map(|g| g.placer))
                .unwrap_or_default(),
            truths,
            devices,
            #[cfg(test)]
            audit: None,
        })
    }

    /// Run to the end (every task finished) or to the scenario's slot limit.
    /// Forecast per interval of so many slots from this history and model ([`forecast`]; the
    /// simulator fits it once).
    pub(crate) fn with_prefit(mut self, prefit: Option<(u64, Arc<PreFit>)>) -> Self {
        if self.sc.reserve {
            self.ledger.set_reservation(prefit.as_ref().map(|p| p.0));
        }
        self.prefit = prefit;
        self
    }

    /// Start from what the cluster learned before ([`tapfinger::estimate::Estimator::carried`])
    /// instead of an empty estimator (`None`: empty); the scenario's profile hints apply on
    /// top, as at a start.
    /// Start from what the cluster's size book learned before ([`Simulator::with_sizes`]).
    pub(crate) fn with_sizes(mut self, book: Option<&tapfinger::sizes::SizeBook>) -> Self {
        if let Some(b) = book {
            self.ledger.set_sizes(b.clone());
        }
        self
    }

    pub(crate) fn with_estimator(mut self, warm: Option<&tapfinger::estimate::Estimator>) -> Self {
        if let Some(e) = warm {
            self.ledger.set_estimator(e.carried());
            if self.sc.profile_hints {
                let tasks: Vec<Task> = self.arrivals.iter().map(|t| (**t).clone()).collect();
                crate::profile::hint_profiles(self.sc, &tasks, &mut self.ledger);
            }
        }
        self
    }

    pub(crate) fn run(
        mut self,
        seed: u64,
        observe: &mut dyn Observer,
    ) -> Result<EpisodeResult, SimError> {
        let max_slots = self.sc.max_slots;
        let mut slot = 0u64;
        while self.records.len() < self.arrivals.len() {
            if slot >= max_slots {
                return Err(self.did_not_finish());
            }
            self.forecast(slot);
            let first = self.next_arrival;
            self.arrive(slot);
            if observe.wants_estimates() {
                let arrived: Vec<TaskId> = self.arrivals[first..self.next_arrival]
                    .iter()
                    .map(|t| t.id)
                    .collect();
                observe.expected(slot, &arrived, &self.ledger.expected(slot));
            }
            let mut d = Decisions::default();
            loop {
                let outcome = self.step(slot, d.steps, observe)?;
                #[cfg(test)]
                if let Some(a) = &self.audit {
                    a(&self.ledger, false);
                }
                d.steps += 1;
                d.conflicts += outcome.contested;
                d.commits += (outcome.commits.len() + outcome.gangs.len()) as u32;
                if observe.wants_views() {
                    observe.view(&self.view(slot, d.steps));
                }
                if outcome.slot_ended {
                    break;
                }
            }
            // The slot step's end ([`tapfinger::slot`]): lower classes make room for waiting
            // tasks that fit nowhere ([`preempt`]); converging tasks shrink a step (RLPTO), the
            // elastic policies re-share, the ceilings are held.
            self.preempt(slot);
            let ids = self.ids.clone();
            let end = tapfinger::slot::end_of_slot(&mut self.ledger, &ids);
            self.rebalance(slot, d.steps, observe)?;
            for (node, changed) in end.finish(&mut self.ledger) {
                observe.reallocated(slot, node, &changed);
            }
            self.end_grace(slot);
            #[cfg(test)]
            if let Some(a) = &self.audit {
                a(&self.ledger, true);
            }
            let in_system = (self.next_arrival - self.records.len()) as u32;
            let waiting = self
                .ledger
                .values()
                .filter(|e| e.state == TaskState::Pending)
                .count() as u32;
            let utilization = self.utilization();
            self.pay(slot, observe);
            self.progress(slot, observe);
            self.progress_gangs(slot, observe);
            self.slots.push(SlotRecord {
                slot,
                in_system,
                waiting,
                utilization,
                conflicts: d.conflicts,
                commits: d.commits,
                steps: d.steps,
            });
            slot += 1;
        }
        // The book first: a twin writes it into the workload it exports at the end.
        observe.sizes(self.ledger.sizes());
        observe.ended(slot, self.ledger.estimator());
        let estimates = self.ledger.estimator().summary();
        let mut tasks = self.records;
        tasks.sort_by_key(|r| r.id);
        Ok(EpisodeResult {
            policy: self
                .policies
                .first()
                .map(|p| p.name().to_string())
                .unwrap_or_default(),
            seed,
            tasks,
            slots: self.slots,
            returns: self.returns,
            messages: self.messages,
            rooms_unused: self.rooms_unused,
            forecasts: self.forecasts,
            estimates,
        })
    }

    fn did_not_finish(&self) -> SimError {
        let sc = self.sc;
        let stalled = self
            .ledger
            .values()
            .filter(|e| match &e.state {
                TaskState::Running { alloc, .. } => {
                    !sc.types[usize::from(e.task.ty.0)].need.fits_in(alloc)
                }
                _ => false,
            })
            .count();
        SimError::DidNotFinish {
            slots: sc.max_slots,
            unfinished: self.arrivals.len() - self.records.len(),
            stalled,
        }
    }

    fn view(&self, slot: u64, step: u32) -> ClusterView {
        let types = self.sc.types.len();
        self.ledger.view(slot, step, types, None)
    }

    fn violation(&self, i: usize, slot: u64, reason: String) -> SimError {
        SimError::PolicyViolation {
            policy: self.policies[i].name().to_string(),
            agent: self.ids[i],
            slot,
            reason,
        }
    }

    /// The tasks arriving in `slot` join the queues of the nodes that can run them.
    fn arrive(&mut self, slot: u64) {
        while let Some(t) = self.arrivals.get(self.next_arrival)
            && t.arrival == slot
        {
            if self.sc.declare_work {
                // As an agent's ledger takes a spec's `work` when it first hears of the task.
                self.ledger.declare(t, workload::size_of(&self.sizes, t.id));
            }
            self.ledger
                .insert(t.clone(), TaskState::Pending, SimMeta::default());
            // Who submitted it, where a trace or the recurring jobs say: as an agent's spec
            // names it.
            if let Some(who) = self
                .sc
                .trace
                .as_ref()
                .and_then(|tr| tr.get(t.id.0 as usize))
                .and_then(crate::trace::TraceTask::identity)
                .or_else(|| self.identities.get(t.id.0 as usize).cloned().flatten())
            {
                self.ledger.set_identity(t.id, who);
            }
            self.next_arrival += 1;
        }
    }

    /// One decision step: every agent proposes from the view, the messages are delivered, each
    /// protocol instance decides, and the commits start their tasks.
    fn step(
        &mut self,
        slot: u64,
        step: u32,
        observe: &mut dyn Observer,
    ) -> Result<RoundOutcome, SimError> {
        let n = self.ids.len();
        let view = self.view(slot, step);
        if observe.wants_views() {
            observe.decision_view(&view);
        }
        let round = self.protocols[0].round();
        let now = slot * 1_000_000 + u64::from(step);
        let protocol_error = |source| SimError::Protocol { round, source };
        let mut sends = Vec::with_capacity(n);
        let mut decided: Vec<Option<RoundOutcome>> = vec![None; self.protocols.len()];
        for i in 0..n {
            let Some(v) = view.for_agent(self.ids[i]) else {
                continue;
            };
            let decision = self.policies[i].decide(&v, &mut self.rngs[i]);
            let proposal = tapfinger::policy::to_proposal(&decision, &v)
                .map_err(|e| self.violation(i, slot, e.to_string()))?;
            let proposal = tapfinger::slot::with_prior(proposal, self.ids[i], &self.ledger);
            // In the slot step's order ([`tapfinger::slot::propose`]): a room this node made
            // by preemption ([`preempt`]), a pending gang it owns that fits ([`gangs`]), the
            // policy's claim.
            let me = self.ids[i];
            let proposal = tapfinger::slot::propose(
                self.room_proposal(i),
                self.gang_proposal(i),
                proposal,
                |t| self.dying(me, t),
            );
            // Every agent states its claimable units, as an agent does: gangs place members
            // only on boxes that stated them.
            let free = self.ledger.claimable(self.ids[i]);
            match (self.protocols.get_mut(i), decided.get_mut(i)) {
                (Some(p), Some(d)) => {
                    let out = p
                        .propose_offering(proposal, free, now)
                        .map_err(protocol_error)?;
                    collect(out, &mut sends, d);
                }
                // An agent without an instance of its own: its message, as it would send it.
                _ => {
                    let mut m = tapfinger::Message::new(round, self.ids[i], proposal);
                    m.free = free;
                    sends.push(m);
                }
            }
        }
        // What the agents would exchange: every message to every other agent.
        self.messages += sends.len() as u64 * (n as u64).saturating_sub(1);
        for (i, decided) in decided.iter_mut().enumerate() {
            for m in &sends {
                if m.from == self.ids[i] {
                    continue;
                }
                let out = self.protocols[i]
                    .receive(m.clone(), now)
                    .map_err(protocol_error)?;
                collect(out, &mut Vec::new(), decided);
            }
        }
        let Some(outcome) = decided[0].take() else {
            return Err(SimError::Undecided(round));
        };
        if decided.iter().skip(1).any(|d| d.as_ref() != Some(&outcome)) {
            return Err(SimError::Divergence(round));
        }
        observe.round(&outcome);
        for c in &outcome.commits {
            let free = self.ledger.claimable(c.agent);
            if !c.alloc.fits_in(&free) {
                let reason = format!(
                    "committed allocation {} does not fit the node's claimable units {free}",
                    c.alloc
                );
                return Err(self.violation(c.agent.0 as usize, slot, reason));
            }
            // A preempted task resumes from its last checkpoint.
            let resume = self
                .ledger
                .get(c.task)
                .map_or(0.0, |e| e.meta.checkpoints.resume);
            self.ledger.set_state(
                c.task,
                TaskState::Running {
                    node: c.agent,
                    alloc: c.alloc.clone(),
                    progress: resume,
                    started: slot,
                },
            );
            if let Some(m) = self.ledger.meta_mut(c.task) {
                m.start = slot;
                m.prev = None;
            }
        }
        self.start_gangs(&outcome, slot)?;
        Ok(outcome)
    }

    /// Elastic policies re-allocate the tasks running on their node. A re-allocation reads and
    /// changes only its own node, so every node re-allocates from one view of the cluster
    /// (rebuilding it for each node would make a slot cost quadratic in the node count).
    fn rebalance(
        &mut self,
        slot: u64,
        steps: u32,
        observe: &mut dyn Observer,
    ) -> Result<(), SimError> {
        let busy: Vec<usize> = (0..self.ids.len())
            .filter(|&i| self.elastic[i] && self.ledger.running_on(self.ids[i]).next().is_some())
            .collect();
        if busy.is_empty() {
            return Ok(());
        }
        let view = self.view(slot, steps);
        for i in busy {
            let node = self.ids[i];
            let Some(v) = view.for_agent(node) else {
                continue;
            };
            let changes = self.policies[i].rebalance(&v, &mut self.rngs[i]);
            let changed = self
                .ledger
                .rebalance(node, &changes)
                .map_err(|e| self.violation(i, slot, e.to_string()))?;
            observe.reallocated(slot, node, &changed);
            if observe.wants_views() {
                observe.view(&self.view(slot, steps));
            }
        }
        Ok(())
    }

    /// Allocated / capacity per kind over the cluster, for the slot as it will run.
    fn utilization(&self) -> Vec<f64> {
        let mut used = vec![0.0; self.total_capacity.len()];
        for id in &self.ids {
            let u = self.ledger.used(*id);
            for (k, x) in used.iter_mut().enumerate() {
                *x += f64::from(u.get(k));
            }
        }
        used.iter()
            .zip(&self.total_capacity)
            .map(|(u, c)| if *c > 0.0 { u / c } else { 0.0 })
            .collect()
    }

    /// Every node's reward for the slot (the ledger's definition).
    fn pay(&mut self, slot: u64, observe: &mut dyn Observer) {
        let rewards: Vec<f64> = self.ids.iter().map(|id| self.ledger.reward(*id)).collect();
        for (r, x) in self.returns.iter_mut().zip(&rewards) {
            *r += x;
        }
        observe.slot_end(slot, &rewards);
    }

    /// Task `id`'s work over its type's (1 without heavy-tailed sizes).
    fn size(&self, id: TaskId) -> f64 {
        crate::workload::size_of(&self.sizes, id)
    }
}

fn collect(
    out: Vec<Output>,
    sends: &mut Vec<tapfinger::Message>,
    decided: &mut Option<RoundOutcome>,
) {
    for o in out {
        match o {
            Output::Send(m) => sends.push(m),
            Output::Decided(d) => *decided = Some(d),
        }
    }
}

#[cfg(test)]
mod tests;
