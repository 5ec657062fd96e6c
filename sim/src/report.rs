//! Comparisons of policies over seeds and their output as a table, JSON or CSV.
//!
//! The JSON of `compare --json` is a contract for scripts: one object
//! `{"scenario", "seeds", "results": [{"policy", "avg_jct", "median_jct", "p95_jct", "p99_jct",
//! "makespan", "lower_bound_jct", "utilization", ...}]}` with per-policy means over the seeds.
//! Fields may be added; these names stay.

use crate::env::{EpisodeResult, SimError, Simulator};
use crate::metrics::{Summary, mean_std, mean_summary, summarize};
use crate::policies::{self, CLAIRVOYANT};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;
use tapfinger::baselines::BaselineError;
use tapfinger::placement::gang::GangPlacer;

/// Errors of a comparison.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// Unknown policy or failed policy construction.
    #[error(transparent)]
    Policy(#[from] BaselineError),
    /// A policy name the simulator does not know.
    #[error(transparent)]
    Unknown(#[from] policies::UnknownPolicy),
    /// The learned policy could not be loaded.
    #[error(transparent)]
    Model(#[from] crate::policies::LearnedError),
    /// An episode failed.
    #[error("policy {policy}, seed {seed}: {source}")]
    Episode {
        /// Policy.
        policy: String,
        /// Seed.
        seed: u64,
        /// Cause.
        source: SimError,
    },
}

/// One policy's results over the seeds.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyResult {
    /// Policy name.
    pub policy: String,
    /// True for the reference that reads the true speed model.
    pub clairvoyant: bool,
    /// Per-field means over the seeds.
    #[serde(flatten)]
    pub mean: Summary,
    /// Standard deviation of the average JCT over the seeds.
    pub avg_jct_std: f64,
    /// The paper's average JCT for this policy on this preset, if published.
    pub published_avg_jct: Option<f64>,
    /// The episodes (not serialized).
    #[serde(skip)]
    pub episodes: Vec<EpisodeResult>,
}

/// A comparison of policies on one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Scenario name.
    pub scenario: String,
    /// Seeds used.
    pub seeds: Vec<u64>,
    /// One entry per policy, in the order asked.
    pub results: Vec<PolicyResult>,
}

/// Run one episode of `policy` on `seed`.
pub fn run_one(sim: &Simulator, policy: &str, seed: u64) -> Result<EpisodeResult, CompareError> {
    run_one_with(sim, policy, seed, None)
}

/// Policy instances by name. `tapfinger` is the learned policy from `model`, or the model shipped
/// for the scenario; `LABEL=PATH` is the learned policy with the model at PATH, reported as LABEL
/// (to compare several trained models, e.g. the ablations, in one table).
fn instances(
    sim: &Simulator,
    policy: &str,
    model: Option<&Path>,
) -> Result<Vec<Box<dyn tapfinger::Policy>>, CompareError> {
    instances_for(sim, policy, model, None)
}

/// Policy instances of `policy` (any name `run` takes: the learned policy from `model`, a
/// baseline, the clairvoyant reference, `LABEL=PATH`) for the episode of workload `seed`.
pub fn instances_for_seed(
    sim: &Simulator,
    policy: &str,
    model: Option<&Path>,
    seed: u64,
) -> Result<Vec<Box<dyn tapfinger::Policy>>, CompareError> {
    instances_for(sim, policy, model, Some(seed))
}

/// [`instances`] for the episode of workload `seed` (the clairvoyant reference knows its task
/// sizes).
fn instances_for(
    sim: &Simulator,
    policy: &str,
    model: Option<&Path>,
    seed: Option<u64>,
) -> Result<Vec<Box<dyn tapfinger::Policy>>, CompareError> {
    match policy.parse::<policies::PolicyName>()? {
        policies::PolicyName::Model { path, .. } => {
            return Ok(policies::learned(sim, Some(&path))?);
        }
        policies::PolicyName::Tapfinger => return Ok(policies::learned(sim, model)?),
        policies::PolicyName::Rlpto => return Ok(policies::rlpto(sim)?),
        policies::PolicyName::Baseline(_) | policies::PolicyName::Clairvoyant(_) => {}
    }
    Ok(match seed {
        Some(seed) => policies::build_for_seed(sim, policy, seed)?,
        None => policies::build(sim, policy)?,
    })
}

/// Build `policy` once (an unknown name or a model that does not load is an error), running
/// nothing.
pub fn check_policy(
    sim: &Simulator,
    policy: &str,
    model: Option<&Path>,
) -> Result<(), CompareError> {
    instances(sim, policy, model).map(|_| ())
}

/// The name a policy spec is reported under (`LABEL=PATH` → `LABEL`).
pub fn display_name(policy: &str) -> &str {
    policy.split_once('=').map_or(policy, |(label, _)| label)
}

/// A policy name and the gang placer it names after a `+` (`optimus+spread`: Optimus, with
/// gangs placed locality-obliviously), if any: a scenario with gangs is compared placer by
/// placer this way. A suffix that names no placer is part of the name.
pub fn split_placer(policy: &str) -> (&str, Option<GangPlacer>) {
    match policy.rsplit_once('+') {
        Some((name, p)) => match GangPlacer::from_name(p) {
            Some(placer) => (name, Some(placer)),
            None => (policy, None),
        },
        None => (policy, None),
    }
}

/// [`run_one`] with an optional learned-policy model.
pub fn run_one_with(
    sim: &Simulator,
    policy: &str,
    seed: u64,
    model: Option<&Path>,
) -> Result<EpisodeResult, CompareError> {
    let (policy, placer) = split_placer(policy);
    if policy == CLAIRVOYANT && placer.is_none() {
        return clairvoyant_episode(sim, seed);
    }
    let ps = instances_for(sim, policy, model, Some(seed))?;
    sim.run_placed(ps, seed, placer)
        .map_err(|source| CompareError::Episode {
            policy: policy.into(),
            seed,
            source,
        })
}

/// The clairvoyant reference's episode on workload `seed`: knowing the whole workload in
/// advance (every arrival, true speeds and sizes), it plays its own look-ahead rule
/// ([`crate::clairvoyant::Clairvoyant`]) and every baseline's schedule on that workload and keeps
/// the one with the least average JCT. That makes it sound by construction (never worse than the
/// best baseline) while its own rule is what improves on them. A reference, never deployable.
fn clairvoyant_episode(sim: &Simulator, seed: u64) -> Result<EpisodeResult, CompareError> {
    let kinds = sim.scenario().kind_names();
    let ps = instances_for(sim, CLAIRVOYANT, None, Some(seed))?;
    let mut best = sim.run(ps, seed).map_err(|source| CompareError::Episode {
        policy: CLAIRVOYANT.into(),
        seed,
        source,
    })?;
    let mut best_jct = summarize(&best, &kinds).avg_jct;
    for name in tapfinger::baselines::Baseline::RANKED
        .iter()
        .map(|b| b.name())
    {
        // A baseline that cannot run here (or does not finish) is no candidate.
        let Some(episode) = instances_for(sim, name, None, Some(seed))
            .ok()
            .and_then(|ps| sim.run(ps, seed).ok())
        else {
            continue;
        };
        let jct = summarize(&episode, &kinds).avg_jct;
        if jct < best_jct {
            (best, best_jct) = (episode, jct);
        }
    }
    best.policy = CLAIRVOYANT.to_string();
    Ok(best)
}

/// Run every policy on every seed; `tick` is called after each episode.
pub fn compare(
    sim: &Simulator,
    policy_names: &[String],
    seeds: &[u64],
    tick: &mut dyn FnMut(),
) -> Result<Comparison, CompareError> {
    compare_with(sim, policy_names, seeds, None, tick)
}

/// [`compare`] with an optional learned-policy model (for the policy `tapfinger`).
pub fn compare_with(
    sim: &Simulator,
    policy_names: &[String],
    seeds: &[u64],
    model: Option<&Path>,
    tick: &mut dyn FnMut(),
) -> Result<Comparison, CompareError> {
    let sc = sim.scenario();
    let kinds: Vec<String> = sc.kind_names();
    // Fail fast on an unknown name before running anything.
    for p in policy_names {
        instances(sim, split_placer(p).0, model)?;
    }
    let mut results = Vec::new();
    for p in policy_names {
        let mut episodes = Vec::new();
        for &seed in seeds {
            episodes.push(run_one_with(sim, p, seed, model)?);
            tick();
        }
        let sums: Vec<Summary> = episodes.iter().map(|e| summarize(e, &kinds)).collect();
        let (_, std) = mean_std(&sums.iter().map(|s| s.avg_jct).collect::<Vec<_>>());
        results.push(PolicyResult {
            policy: display_name(p).to_string(),
            clairvoyant: crate::clairvoyant::is_clairvoyant(p),
            mean: mean_summary(&sums),
            avg_jct_std: std,
            published_avg_jct: sc.published.get(p.as_str()).copied(),
            episodes,
        });
    }
    Ok(Comparison {
        scenario: sc.name.clone(),
        seeds: seeds.to_vec(),
        results,
    })
}

/// Human-readable table.
pub fn table(c: &Comparison) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "scenario {} — {} seed(s): {:?} — JCT in slots, mean over seeds (± std of the average)",
        c.scenario,
        c.seeds.len(),
        c.seeds
    );
    let cols = Columns::of(c);
    cols.header(&mut s);
    for r in &c.results {
        cols.row(&mut s, r);
        s.push('\n');
    }
    notes(&mut s, c, cols.preempting);
    s
}

/// The best deployable baseline the table holds and each learned policy's average JCT over
/// it (a ratio ≤ 1 is a win), and the deployable baselines the table left out, so that a ranking
/// never looks better than it is for a baseline that was not run.
fn best_baseline_note(s: &mut String, c: &Comparison) {
    // `NAME+PLACER` is NAME with gangs placed otherwise.
    let base = |r: &PolicyResult| r.policy.split('+').next().unwrap_or_default().to_string();
    let baseline = |r: &&PolicyResult| {
        !r.clairvoyant && base(r).parse::<tapfinger::baselines::Baseline>().is_ok()
    };
    let Some(best) = c
        .results
        .iter()
        .filter(baseline)
        .min_by(|a, b| a.mean.avg_jct.total_cmp(&b.mean.avg_jct))
    else {
        return;
    };
    let learned: Vec<String> = c
        .results
        .iter()
        .filter(|r| !r.clairvoyant && !baseline(r))
        .map(|r| {
            format!(
                "{} {:.3}",
                r.policy,
                r.mean.avg_jct / best.mean.avg_jct.max(f64::MIN_POSITIVE)
            )
        })
        .collect();
    let _ = write!(s, "best deployable baseline: {}", best.policy);
    if !learned.is_empty() {
        let _ = write!(s, "; average JCT over it: {}", learned.join(", "));
    }
    let missing: Vec<&str> = tapfinger::baselines::Baseline::JUDGED
        .iter()
        .map(|b| b.name())
        .filter(|n| !c.results.iter().any(|r| base(r) == *n))
        .collect();
    if !missing.is_empty() {
        let _ = write!(s, " (not run here: {})", missing.join(", "));
    }
    s.push('\n');
}

/// The table's columns: the fixed ones, then those the comparison has data for.
struct Columns {
    /// Resource kinds (a utilization column each).
    kinds: Vec<String>,
    /// Width of the policy column: the longest name (e.g. `first-fit-max+pack-first`).
    w: usize,
    /// Gangs ran: their average JCT.
    gangs: bool,
    /// Priority classes, where the workload has more than one: one column each.
    classes: std::collections::BTreeSet<u8>,
    /// Tasks have learning curves: accuracy and converged.
    curves: bool,
    /// Tasks were preempted: how many and the work lost.
    preempting: bool,
}

impl Columns {
    fn of(c: &Comparison) -> Self {
        Self {
            kinds: c
                .results
                .first()
                .map(|r| r.mean.utilization.keys().cloned().collect())
                .unwrap_or_default(),
            w: c.results
                .iter()
                .map(|r| r.policy.len() + 1)
                .max()
                .unwrap_or(0)
                .max(15),
            gangs: c.results.iter().any(|r| r.mean.gang_avg_jct.is_some()),
            classes: c
                .results
                .iter()
                .flat_map(|r| r.mean.class_avg_jct.keys().copied())
                .collect(),
            curves: c.results.iter().any(|r| r.mean.accuracy.is_some()),
            preempting: c.results.iter().any(|r| r.mean.preempted > 0.0),
        }
    }

    /// The kind whose use while tasks wait the table shows: `gpu` where the cluster has it.
    fn busy_kind(&self) -> &str {
        self.kinds
            .iter()
            .find(|k| *k == "gpu")
            .or_else(|| self.kinds.first())
            .map_or("gpu", String::as_str)
    }

    fn header(&self, s: &mut String) {
        let w = self.w;
        let _ = write!(
            s,
            "{:<w$} {:>14} {:>9} {:>7} {:>7} {:>7} {:>8} {:>8} {:>9}",
            "policy", "avg JCT", "paper", "median", "p95", "p99", "JCT/LB", "makespan", "conflicts"
        );
        for k in &self.kinds {
            let _ = write!(s, " {:>7}", format!("util {k}"));
        }
        let _ = write!(s, " {:>9}", format!("{} queued", self.busy_kind()));
        if self.gangs {
            let _ = write!(s, " {:>9}", "gang JCT");
        }
        for k in &self.classes {
            let _ = write!(s, " {:>9}", format!("class {k}"));
        }
        // RLPTO's cluster reward beside JCT; the accuracy columns where tasks have learning
        // curves.
        let _ = write!(s, " {:>8}", "reward");
        if self.curves {
            let _ = write!(s, " {:>8} {:>9}", "accuracy", "converged");
        }
        if self.preempting {
            let _ = write!(s, " {:>9} {:>9}", "preempted", "work lost");
        }
        s.push('\n');
    }

    fn row(&self, s: &mut String, r: &PolicyResult) {
        let w = self.w;
        let m = &r.mean;
        let paper = r
            .published_avg_jct
            .map_or("-".to_string(), |v| format!("{v:.2}"));
        let name = if r.clairvoyant {
            format!("{}*", r.policy)
        } else {
            r.policy.clone()
        };
        let _ = write!(
            s,
            "{:<w$} {:>14} {:>9} {:>7.2} {:>7.2} {:>7.2} {:>8.2} {:>8.1} {:>9.2}",
            name,
            format!("{:.2} ± {:.2}", m.avg_jct, r.avg_jct_std),
            paper,
            m.median_jct,
            m.p95_jct,
            m.p99_jct,
            m.jct_over_lower_bound,
            m.makespan,
            m.conflicts_per_slot
        );
        for k in &self.kinds {
            let _ = write!(
                s,
                " {:>7.1}%",
                100.0 * m.utilization.get(k).copied().unwrap_or(0.0)
            );
        }
        // The scarce kind's use while tasks wait: what a policy leaves idle under a queue.
        let busy = m
            .utilization_while_waiting
            .as_ref()
            .and_then(|u| u.get(self.busy_kind()));
        let _ = write!(
            s,
            " {:>9}",
            busy.map_or("-".into(), |v| format!("{:.1}%", 100.0 * v))
        );
        if self.gangs {
            let _ = write!(
                s,
                " {:>9}",
                m.gang_avg_jct.map_or("-".into(), |v| format!("{v:.2}"))
            );
        }
        for k in &self.classes {
            let v = m.class_avg_jct.get(k);
            let _ = write!(s, " {:>9}", v.map_or("-".into(), |v| format!("{v:.2}")));
        }
        let _ = write!(s, " {:>8.2}", m.cluster_reward);
        if self.curves {
            let _ = write!(
                s,
                " {:>8} {:>9.1}",
                m.accuracy.map_or("-".into(), |v| format!("{v:.4}")),
                m.converged
            );
        }
        if self.preempting {
            let _ = write!(s, " {:>9.1} {:>9.2}", m.preempted, m.work_lost);
        }
    }
}

/// The lines under the table that say what its columns mean.
fn notes(s: &mut String, c: &Comparison, preempting: bool) {
    best_baseline_note(s, c);
    if let Some(r) = c.results.first() {
        let _ = writeln!(
            s,
            "lower bound (best isolated runtime, mean over tasks): {:.2} slots",
            r.mean.lower_bound_jct
        );
        let _ = writeln!(
            s,
            "pooled bound (the cluster as one machine, shortest remaining first on true sizes): \
             {:.2} slots",
            r.mean.pooled_bound_jct
        );
    }
    if let Some(r) = c
        .results
        .iter()
        .find(|r| r.mean.gained_after_plateau.is_some())
    {
        let _ = writeln!(
            s,
            "converged: tasks the plateau detector found converging (mean per episode); they gained {:.4} accuracy after it on average ({})",
            r.mean.gained_after_plateau.unwrap_or(0.0),
            r.policy
        );
    }
    let _ = writeln!(
        s,
        "reward: cluster reward per task, accuracy·w_acc − JCT·w_time − node-slots held·w_res"
    );
    let by_size: Vec<String> = c
        .results
        .iter()
        .filter_map(|r| {
            let (large, small) = r.mean.units_by_size?;
            Some(format!("{} {large:.3} vs {small:.3}", r.policy))
        })
        .collect();
    if !by_size.is_empty() {
        let _ = writeln!(
            s,
            "by data size: node-slots held per slot run, largest quarter of the tasks vs smallest: {}",
            by_size.join("; ")
        );
    }
    if let Some((f, last, fitted)) = c.results.first().and_then(|r| r.mean.forecast_mae) {
        let _ = writeln!(
            s,
            "forecast of arrivals per interval (the same workloads for every policy): mean absolute error {f:.3}, last value {last:.3}; {fitted:.1} intervals per episode forecast by a model, the rest by the fallback"
        );
    }
    if preempting {
        let _ = writeln!(
            s,
            "preempted: tasks stopped for a higher class per episode; work lost: their progress since their last checkpoint, in whole runs"
        );
    }
    if c.results.iter().any(|r| r.clairvoyant) {
        let _ = writeln!(
            s,
            "* clairvoyant: reads the true speed model — a reference, not a deployable policy"
        );
    }
    if c.results.iter().any(|r| r.published_avg_jct.is_some()) {
        let _ = writeln!(
            s,
            "paper: average JCT published for TapFinger's setting (arXiv 2302.00571); our re-implementations differ in details"
        );
    }
}

/// CSV, one row per policy.
pub fn csv(c: &Comparison) -> String {
    let kinds: Vec<String> = c
        .results
        .first()
        .map(|r| r.mean.utilization.keys().cloned().collect())
        .unwrap_or_default();
    let mut s = String::from(
        "scenario,policy,clairvoyant,seeds,avg_jct,avg_jct_std,published_avg_jct,median_jct,p95_jct,p99_jct,lower_bound_jct,jct_over_lower_bound,makespan,conflicts_per_slot,decisions_per_slot,steps_per_slot,failures,pooled_bound_jct",
    );
    for k in &kinds {
        let _ = write!(s, ",util_{k}");
    }
    s.push('\n');
    for r in &c.results {
        let m = &r.mean;
        let _ = write!(
            s,
            "{},{},{},{},{:.4},{:.4},{},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4}",
            c.scenario,
            r.policy,
            r.clairvoyant,
            c.seeds.len(),
            m.avg_jct,
            r.avg_jct_std,
            r.published_avg_jct
                .map_or(String::new(), |v| format!("{v}")),
            m.median_jct,
            m.p95_jct,
            m.p99_jct,
            m.lower_bound_jct,
            m.jct_over_lower_bound,
            m.makespan,
            m.conflicts_per_slot,
            m.decisions_per_slot,
            m.steps_per_slot,
            m.failures,
            m.pooled_bound_jct
        );
        for k in &kinds {
            let _ = write!(s, ",{:.4}", m.utilization.get(k).copied().unwrap_or(0.0));
        }
        s.push('\n');
    }
    s
}

/// Per-task CSV of one episode.
pub fn tasks_csv(e: &EpisodeResult) -> String {
    let mut s = String::from("id,type,arrival,start,finish,node,jct,lower_bound,failures\n");
    for t in &e.tasks {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{}",
            t.id, t.ty, t.arrival, t.start, t.finish, t.node, t.jct, t.lower_bound, t.failures
        );
    }
    s
}
