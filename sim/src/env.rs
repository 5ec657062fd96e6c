//! The simulator's front: a scenario prepared for episodes ([`Simulator`]: best isolated
//! runtimes, allocation grids), and, from `episode.rs`, what an episode reports
//! ([`EpisodeResult`]), who may watch it ([`Observer`]) and how it fails ([`SimError`]).
//! Scheduling state is the shared [`tapfinger::ledger::Ledger`], decisions come from the
//! policies and winners from the protocol.

use crate::scenario::Scenario;
use std::sync::Arc;
use tapfinger::{Policy, Resources, Task};

pub use crate::episode::{
    EpisodeResult, ForecastPoint, NoObserver, Observer, PreFit, SimError, SlotRecord, TaskRecord,
};

/// A scenario prepared for running episodes: per-type, per-node best isolated runtimes.
pub struct Simulator {
    /// The scenario, validated.
    sc: Scenario,
    /// Every agent runs its own protocol instance and they must agree (a check; slower).
    replicas: bool,
    /// `[type][node]`: best isolated (slots, fractional slots, allocation) on that node, if the
    /// type can run there.
    best: Vec<Vec<Option<(u64, f64, Resources)>>>,
    /// `[type][node]`: per resource kind, the least units × slots one unit of the type's work
    /// holds on that node at any allocation ([`crate::bound`]), if the type can run there.
    thrift: Vec<Vec<Option<Vec<f64>>>>,
    /// The cluster's capacity per kind ([`crate::bound::pool`]).
    pool: Vec<f64>,
    /// How gangs are placed, if not as the scenario says.
    gang_placer: Option<tapfinger::placement::gang::GangPlacer>,
    /// The forecast's history and model ([`Simulator::prefit`]), once made.
    prefit: std::sync::Mutex<std::collections::BTreeMap<u64, Arc<crate::episode::PreFit>>>,
    /// What every episode's speed estimator starts from ([`Simulator::warm`]; `None`: nothing).
    warm: Option<tapfinger::estimate::Estimator>,
    /// What every episode's size book starts from ([`Simulator::with_sizes`]; `None`: nothing).
    sizes: Option<tapfinger::sizes::SizeBook>,
}

use crate::grid::allocations;

impl Simulator {
    /// Prepare a scenario.
    pub fn new(sc: Scenario) -> Self {
        let best = per_type_and_node(&sc, |t, n, grid| {
            // On a box of a GPU model the type lists: as a task of 1/pace the work.
            let size = 1.0 / t.pace(n);
            grid.iter()
                .filter_map(|a| {
                    t.speed
                        .isolated_sized(a, sc.slot_seconds, size)
                        .map(|x| (x.0, x.1, a.clone()))
                })
                .min_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)))
        });
        let thrift = thrift(&sc);
        Self {
            pool: crate::bound::pool(&sc),
            thrift,
            sc,
            best,
            replicas: false,
            prefit: Default::default(),
            gang_placer: None,
            warm: None,
            sizes: None,
        }
    }

    /// Start every episode's size book from `book` (what a cluster's agents had learned of its
    /// tasks' sizes before: a later stretch of a deployment, whose agents keep their history),
    /// not from nothing. Its classes must be this scenario's (the same ids).
    pub fn with_sizes(mut self, book: tapfinger::sizes::SizeBook) -> Self {
        self.sizes = Some(book);
        self
    }

    /// Start every episode's speed estimator from `e` (what a cluster had learned: a twin's
    /// [`crate::twin::warm_estimator`]), not from nothing, so that training, evaluation and a
    /// gate on this simulator see what the cluster's agents would see. [`Simulator::run_warm`]
    /// with an estimator of its own starts from that one instead.
    pub fn warm(mut self, e: tapfinger::estimate::Estimator) -> Self {
        self.warm = Some(e);
        self
    }

    /// Place gangs with `placer` instead of the scenario's (`None`: the scenario's).
    pub fn gang_placer(mut self, placer: Option<tapfinger::placement::gang::GangPlacer>) -> Self {
        self.gang_placer = placer;
        self
    }

    /// Run every agent's own protocol instance and fail an episode if any two decide a round
    /// differently (a check of the protocol; the default resolves each round once, which gives
    /// the same result because resolution depends only on the set of proposals).
    pub fn replicated(mut self, on: bool) -> Self {
        self.replicas = on;
        self
    }

    /// Order the queues by priority class as `p` says instead of as the scenario does.
    pub fn priorities(mut self, p: tapfinger::ledger::Priorities) -> Self {
        self.sc.priorities = p;
        self
    }

    /// Keep converging tasks' units (`--no-shrink`): the detector still judges and reports,
    /// nothing shrinks. A scenario without `[shrink]` is unchanged.
    pub fn no_shrink(mut self) -> Self {
        if let Some(s) = self.sc.shrink.as_mut() {
            s.enabled = false;
        }
        self
    }

    /// Let lower classes make room for waiting tasks (`--preempt`), tasks checkpointing every
    /// `checkpoint_slots` slots (the scenario's period if it has one).
    pub fn preempt(mut self, checkpoint_slots: Option<u64>) -> Self {
        self.sc.checkpoint_slots = checkpoint_slots.or(self.sc.checkpoint_slots).or(Some(5));
        self
    }

    /// Every task carries its type's profiling runs as profile hints (`--profile-hints`,
    /// `profile::hint_profiles`).
    pub fn profile_hints(mut self) -> Self {
        self.sc.profile_hints = true;
        self
    }

    /// Where GPUs are shared in fractions, claims state the packing prior (`--pack-shares`,
    /// [`crate::scenario::Scenario::pack_shares`]).
    pub fn pack_shares(mut self) -> Self {
        self.sc.pack_shares = true;
        self
    }

    /// Every task declares its work (its size) to the speed estimator (`--declare-work`,
    /// [`crate::scenario::ScenarioFile::declare_work`]).
    pub fn declare_work(mut self) -> Self {
        self.sc.declare_work = true;
        self
    }

    /// A run's first slot keeps `w` of its progress, whatever the scenario's `start_weight`
    /// says (`--start-weight`; `w` in (0, 1], checked by the caller).
    pub fn start_weight(mut self, w: f64) -> Self {
        self.sc.start_weight = w;
        self
    }

    /// Forecast each episode's arrivals per interval of `slots` slots (`--forecast`).
    pub fn forecast(mut self, slots: u64) -> Self {
        self.sc.forecast_interval_slots = Some(slots.max(1));
        self
    }

    /// Keep capacity for forecast urgent arrivals (`--reserve`; with a forecast interval,
    /// [`tapfinger::ledger::Ledger::set_reservation`]).
    pub fn reserve(mut self) -> Self {
        self.sc.reserve = true;
        self
    }

    /// Pay the policies RLPTO's cluster reward ([`Scenario::cluster_reward`]): what an RLPTO
    /// model is trained on.
    pub fn cluster_reward(mut self) -> Self {
        self.sc.cluster_reward = true;
        self
    }

    /// The scenario.
    pub fn scenario(&self) -> &Scenario {
        &self.sc
    }

    /// Input sizes of the learned policy on this scenario.
    pub fn dims(&self) -> tapfinger::model::batch::Dims {
        tapfinger::model::batch::Dims::per_preset(
            self.sc.space.len(),
            self.sc.types.len(),
            self.sc.window,
        )
    }

    /// Best isolated slots for a task: min over its reachable nodes.
    pub fn lower_bound(&self, task: &Task) -> u64 {
        task.reachable
            .iter()
            .filter_map(|n| {
                self.best[usize::from(task.ty.0)][n.0 as usize]
                    .as_ref()
                    .map(|b| b.0)
            })
            .min()
            .unwrap_or(u64::MAX)
    }

    /// [`Simulator::lower_bound`] for a task `size` times its type's work (heavy-tailed
    /// sizes): its isolated slots at each node's best allocation, stepped as the simulator steps
    /// a sized task (more work at every allocation never makes another allocation best).
    pub fn lower_bound_sized(&self, task: &Task, size: f64) -> u64 {
        if (size - 1.0).abs() < 1e-12 {
            return self.lower_bound(task);
        }
        let ty = &self.sc.types[usize::from(task.ty.0)];
        task.reachable
            .iter()
            .filter_map(|n| {
                let best = self.best[usize::from(task.ty.0)][n.0 as usize].as_ref()?;
                Some((best, size / ty.pace(&self.sc.nodes[n.0 as usize])))
            })
            .filter_map(|((_, _, a), size)| ty.speed.isolated_sized(a, self.sc.slot_seconds, size))
            .map(|(slots, _)| slots)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// A task's least area per resource kind at `size` times its type's work: slots × its share
    /// of the cluster's capacity, at its thriftiest allocation on any reachable node
    /// ([`crate::bound`]).
    pub fn area_sized(&self, task: &Task, size: f64) -> Vec<f64> {
        let per_node = &self.thrift[usize::from(task.ty.0)];
        self.pool
            .iter()
            .enumerate()
            .map(|(k, &c)| {
                let least = task
                    .reachable
                    .iter()
                    .filter_map(|n| per_node[n.0 as usize].as_ref().map(|t| t[k]))
                    .fold(f64::INFINITY, f64::min);
                if c > 0.0 && least.is_finite() {
                    size * least / c
                } else {
                    0.0
                }
            })
            .collect()
    }

    /// Run one episode with one policy instance per node (node i is agent i).
    pub fn run(
        &self,
        policies: Vec<Box<dyn Policy>>,
        seed: u64,
    ) -> Result<EpisodeResult, SimError> {
        self.run_observed(policies, seed, &mut NoObserver)
    }

    /// [`Simulator::run`] with gangs placed by `placer` (`None`: as [`Simulator::gang_placer`]
    /// or the scenario says).
    pub fn run_placed(
        &self,
        policies: Vec<Box<dyn Policy>>,
        seed: u64,
        placer: Option<tapfinger::placement::gang::GangPlacer>,
    ) -> Result<EpisodeResult, SimError> {
        self.episode(policies, seed, seed, placer, None)?
            .run(seed, &mut NoObserver)
    }

    /// [`Simulator::run`], reporting views, rounds and rewards to `observe` (audits, training).
    pub fn run_observed(
        &self,
        policies: Vec<Box<dyn Policy>>,
        seed: u64,
        observe: &mut dyn Observer,
    ) -> Result<EpisodeResult, SimError> {
        self.run_split(policies, seed, seed, observe)
    }

    /// [`Simulator::run_observed`] starting from what the cluster's speed estimator learned
    /// before (`warm`: an earlier episode's on the same boxes and classes, as
    /// [`Observer::ended`] hands it over), not from nothing: a
    /// stretch of a longer deployment, whose agents' estimator lives on.
    pub fn run_warm(
        &self,
        policies: Vec<Box<dyn Policy>>,
        seed: u64,
        observe: &mut dyn Observer,
        warm: Option<&tapfinger::estimate::Estimator>,
    ) -> Result<EpisodeResult, SimError> {
        self.episode(policies, seed, seed, None, warm)?
            .run(seed, observe)
    }

    /// [`Simulator::run_observed`] with the workload (arrivals, task sizes) drawn from
    /// `workload_seed` and the agents' randomness from `policy_seed`: rollouts that share a
    /// workload and differ in their decisions (training's input-dependent baseline). With both
    /// seeds equal it is `run_observed`.
    pub fn run_split(
        &self,
        policies: Vec<Box<dyn Policy>>,
        workload_seed: u64,
        policy_seed: u64,
        observe: &mut dyn Observer,
    ) -> Result<EpisodeResult, SimError> {
        self.episode(policies, workload_seed, policy_seed, None, None)?
            .run(workload_seed, observe)
    }

    fn episode(
        &self,
        policies: Vec<Box<dyn Policy>>,
        workload_seed: u64,
        policy_seed: u64,
        placer: Option<tapfinger::placement::gang::GangPlacer>,
        warm: Option<&tapfinger::estimate::Estimator>,
    ) -> Result<crate::episode::Episode<'_>, SimError> {
        // The scenario's forecast, else the one a policy reads (an RLPTO model's).
        let every = self
            .sc
            .forecast_interval_slots
            .or_else(|| policies.iter().find_map(|p| p.forecast_interval()));
        let prefit = every.map(|e| (e, self.prefit(e)));
        crate::episode::Episode::new(
            &self.sc,
            Box::new(move |t: &Task, size: f64| {
                (self.lower_bound_sized(t, size), self.area_sized(t, size))
            }),
            policies,
            crate::episode::Seeds {
                workload: workload_seed,
                policy: policy_seed,
            },
            self.replicas,
            placer.or(self.gang_placer),
        )
        .map(|e| {
            e.with_prefit(prefit)
                .with_estimator(warm.or(self.warm.as_ref()))
                .with_sizes(self.sizes.as_ref())
        })
    }

    /// The arrivals before the episodes and the forecast model fitted on them, per interval of
    /// `every` slots, made on first use (once per simulator and interval: a fit takes seconds).
    pub fn prefit(&self, every: u64) -> Arc<crate::episode::PreFit> {
        let mut fits = self.prefit.lock().unwrap_or_else(|e| e.into_inner());
        fits.entry(every)
            .or_insert_with(|| Arc::new(crate::episode::PreFit::fit(&self.sc, every)))
            .clone()
    }
}

/// [`Simulator`]'s `thrift` table: per type and node, per kind, the least `a_k / progress per
/// slot` over the allocations its best runtime is chosen from, at the fastest progress any
/// point of a run makes, so that a task whose allocation changes as it runs is bounded too.
fn thrift(sc: &Scenario) -> Vec<Vec<Option<Vec<f64>>>> {
    let kinds = sc.kind_names().len();
    per_type_and_node(sc, |t, n, grid| {
        let pace = t.pace(n);
        let mut least = vec![f64::INFINITY; kinds];
        for a in grid {
            let d = t.speed.peak_delta(&a, sc.slot_seconds) * pace;
            if d > 0.0 {
                for (k, l) in least.iter_mut().enumerate() {
                    *l = l.min(f64::from(a.get(k)) / d);
                }
            }
        }
        least.iter().all(|l| l.is_finite()).then_some(least)
    })
}

/// `f` of every task type on every node where its minimum fits, given the grid of allocations
/// it may run at there (from its minimum and need up to its cap or the node); `None` elsewhere.
fn per_type_and_node<T>(
    sc: &Scenario,
    f: impl Fn(&crate::scenario::TaskType, &crate::scenario::NodeDef, Vec<Resources>) -> Option<T>,
) -> Vec<Vec<Option<T>>> {
    sc.types
        .iter()
        .map(|t| {
            sc.nodes
                .iter()
                .map(|n| {
                    if !t.min_demand.fits_in(&n.capacity) {
                        return None;
                    }
                    let hi = t
                        .max_demand
                        .as_ref()
                        .map_or(n.capacity.clone(), |m| m.min_each(&n.capacity));
                    let lo = t.min_demand.max_each(&t.need).min_each(&hi);
                    f(t, n, allocations(&lo, &hi))
                })
                .collect()
        })
        .collect()
}
