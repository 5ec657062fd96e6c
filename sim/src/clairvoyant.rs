//! The clairvoyant reference's own rule: a policy that reads the simulator's true speed model
//! (and, in heavy-tailed scenarios, each task's true size), elastic like the elastic baselines,
//! with a short look-ahead. Reports run it as part of the reference (`report::run_one_with`),
//! which also knows the whole workload in advance and keeps, per workload, the best of this
//! rule's schedule and every baseline's: sound by construction (never worse than the best
//! baseline). It runs in the simulator only and is marked `*` in every report: a reference,
//! never a deployable policy nor the yardstick of success. Its rule also runs alone, by name
//! ([`RULE`], [`RULE_STARTED`], [`RULE_UNSIZED`]: with every task's true size, only the
//! running tasks', none), to measure what each piece of knowledge is worth.

use crate::grid::allocations;
use crate::scenario::Scenario;
use tapfinger::lookahead::{self, Item};
use tapfinger::view::View;
use tapfinger::{Decision, Policy, Resources, TaskId};

/// Name of the clairvoyant reference.
pub const CLAIRVOYANT: &str = "clairvoyant";

/// The clairvoyant reference's own rule alone (no best-of with the baselines), knowing every
/// task's true size: a reference, by name only.
pub const RULE: &str = "clairvoyant-rule";

/// That rule knowing only the running tasks' true sizes (a waiting task's work is its type's).
pub const RULE_STARTED: &str = "clairvoyant-rule-started";

/// That rule knowing no task's size (every task's work is its type's), only the true speeds.
pub const RULE_UNSIZED: &str = "clairvoyant-rule-unsized";

/// Whether `name` is the clairvoyant reference or one of its rule's variants: they read the
/// true speed model, and reports mark them and never rank them among the baselines.
pub fn is_clairvoyant(name: &str) -> bool {
    NAMES.contains(&name)
}

/// The clairvoyant reference and its rule's variants, by name.
pub const NAMES: [&str; 4] = [CLAIRVOYANT, RULE, RULE_STARTED, RULE_UNSIZED];

/// Clairvoyant reference: knows each type's true isolated runtime at every allocation, and
/// re-allocates elastically like the elastic baselines, so it is never handicapped against them.
///
/// It plans with the shared look-ahead planner ([`tapfinger::lookahead`]) on the true tables:
/// per decision and per slot it plays the node's tasks out under three ways of sharing (each at
/// its knee, each in turn at its fastest, a round robin) and keeps the best; it starts the first
/// task that plan starts (shortest remaining first) at the smallest allocation that meets the
/// task's true need, and re-shares by the plan once per slot. The deployable `lookahead` policy
/// runs the same planner on the estimator's figures. (An earlier rule let a task wait for a
/// better node: tuned on `hetero6`, it collapsed elsewhere, up to 2.3× the best baseline's JCT
/// on generated scenarios.)
#[derive(Debug, Clone)]
pub struct Clairvoyant {
    /// `[type]`: (allocation, slots), ascending by allocation size; only allocations that meet
    /// the type's true need.
    table: Vec<lookahead::Rows>,
    /// Each task's work over its type's, by id (empty: all 1).
    sizes: std::sync::Arc<Vec<f64>>,
    /// Only running tasks' sizes are known (what their progress reveals); a waiting task's is
    /// its type's.
    started_only: bool,
}

impl Clairvoyant {
    /// The same reference, knowing each task's true size in the episode of workload `seed`.
    pub fn with_sizes(mut self, sc: &Scenario, seed: u64) -> Self {
        self.sizes = std::sync::Arc::new(crate::workload::sizes(sc, seed, sc.tasks as usize));
        self
    }

    /// The same reference, knowing only the running tasks' true sizes (a waiting task's work is
    /// its type's): what a scheduler could learn of sizes from the progress tasks report.
    pub fn started_only(mut self) -> Self {
        self.started_only = true;
        self
    }

    /// Tabulate the true isolated runtimes up to the largest node.
    pub fn new(sc: &Scenario) -> Self {
        let kinds = sc.space.len();
        let biggest = Resources(
            (0..kinds)
                .map(|k| {
                    sc.nodes
                        .iter()
                        .map(|n| n.capacity.get(k))
                        .max()
                        .unwrap_or(0)
                })
                .collect(),
        );
        let table = sc
            .types
            .iter()
            .map(|t| {
                let hi = t
                    .max_demand
                    .as_ref()
                    .map_or(biggest.clone(), |m| m.min_each(&biggest));
                let lo = t.min_demand.min_each(&hi);
                let mut rows: lookahead::Rows = allocations(&lo, &hi)
                    .into_iter()
                    .filter_map(|a| {
                        if t.need.fits_in(&a) {
                            t.speed
                                .isolated(&a, sc.slot_seconds)
                                .map(|x| (a, x.0 as f64))
                        } else {
                            None
                        }
                    })
                    .collect();
                lookahead::sort_rows(&mut rows, &biggest);
                rows
            })
            .collect();
        Self {
            table,
            sizes: std::sync::Arc::default(),
            started_only: false,
        }
    }

    /// Task `t` as a plan item with `left` of its work.
    fn item<'a>(&'a self, t: &'a tapfinger::Task, left: f64) -> Item<'a> {
        Item {
            task: t,
            rows: &self.table[usize::from(t.ty.0)],
            left,
        }
    }

    /// The node's running tasks, with their work left (in units of their type's).
    fn on_node<'a>(&'a self, view: &View<'a>) -> Vec<Item<'a>> {
        view.running()
            .map(|r| self.item(&r.task, (1.0 - r.progress) * self.size(r.task.id)))
            .collect()
    }

    /// Task `id`'s work over its type's.
    fn size(&self, id: TaskId) -> f64 {
        crate::workload::size_of(&self.sizes, id)
    }
}

impl Policy for Clairvoyant {
    fn name(&self) -> &str {
        CLAIRVOYANT
    }
    fn elastic(&self) -> bool {
        true
    }
    fn decide(&mut self, view: &View<'_>, _rng: &mut tapfinger::Rng) -> Decision {
        let free = &view.node().free;
        let mut items = self.on_node(view);
        let running = items.len();
        items.extend(
            view.feasible()
                .map(|t| {
                    self.item(
                        t,
                        if self.started_only {
                            1.0
                        } else {
                            self.size(t.id)
                        },
                    )
                })
                .filter(|it| it.fitting(&it.task.cap(free)).next().is_some()),
        );
        lookahead::decide(&items, running, free)
    }
    fn rebalance(
        &mut self,
        view: &View<'_>,
        _rng: &mut tapfinger::Rng,
    ) -> Vec<(TaskId, Resources)> {
        lookahead::rebalance(&self.on_node(view), &view.node().free)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::Simulator;

    /// Average JCT of `policy` over workload seeds 100–102 on `sim`.
    fn jct(sim: &Simulator, policy: &str) -> f64 {
        let kinds = sim.scenario().kind_names();
        (100..103)
            .map(|seed| {
                let e = crate::report::run_one_with(sim, policy, seed, None).unwrap();
                crate::metrics::summarize(&e, &kinds).avg_jct
            })
            .sum::<f64>()
            / 3.0
    }

    /// The rule's variants differ only by what they know of sizes: where every task has its
    /// type's work (`synthetic3`) they are one schedule; where sizes are heavy-tailed (`gen:8`)
    /// knowing them changes it. The reference, per workload the best of the rule and every
    /// baseline, is never worse than the rule alone or Tiresias.
    #[test]
    fn the_rules_variants_differ_only_by_what_they_know_of_sizes() {
        let plain = Simulator::new(Scenario::load("synthetic3").unwrap());
        let rule = jct(&plain, RULE);
        assert_eq!(rule, jct(&plain, RULE_STARTED));
        assert_eq!(rule, jct(&plain, RULE_UNSIZED));
        let tailed = Simulator::new(Scenario::load("gen:1").unwrap());
        let (all, started, none) = (
            jct(&tailed, RULE),
            jct(&tailed, RULE_STARTED),
            jct(&tailed, RULE_UNSIZED),
        );
        assert!(
            all != none && started != none && started != all,
            "{all} {started} {none}"
        );
        let best = jct(&tailed, CLAIRVOYANT);
        assert!(best <= all.min(jct(&tailed, "tiresias")) + 1e-9, "{best}");
        for name in [CLAIRVOYANT, RULE, RULE_STARTED, RULE_UNSIZED] {
            assert!(is_clairvoyant(name));
        }
        assert!(!is_clairvoyant("lookahead"));
    }
}
