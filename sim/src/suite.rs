//! The evaluation suite: one candidate policy against every deployable baseline on generated
//! scenarios or on a folder of scenario files (imported traces, say).
//!
//! Each scenario (`gen:N` for each generator seed in a range, or each file) is run with every
//! baseline a deployment could run ([`baselines::Baseline::JUDGED`], among them
//! `tiresias-share`, which re-shares as the shipped general model does), the clairvoyant
//! reference and the candidate, on the same workload seeds. Per scenario the candidate's
//! average JCT is divided by the best *non-clairvoyant* baseline's (the best of that scenario,
//! never a chosen one); a ratio ≤ 1 is a win. The same ratio per workload seed gives the spread
//! over workload draws. Held-out seeds (from [`crate::generate::HELD_OUT_FROM`]) are what a
//! learned policy is judged on.
//!
//! The JSON (`tapfinger-sim suite --json`) is a contract for scripts:
//! `{"scenarios": [{"scenario", "generator_seed", "nodes", "classes", "load", "results":
//! [{"policy", "avg_jct", "clairvoyant"}], "ratio", "ratio_by_seed", ...}], "summary": {"wins",
//! "scenarios", "mean_ratio_to_best_baseline", "mean_ratio_by_seed", ...}}`. Fields may be added;
//! these names stay (`generator_seed` and `load` are null for a scenario file).

use crate::metrics::summarize;
use crate::policies::{self, CLAIRVOYANT};
use crate::report::{self, CompareError};
use crate::{Scenario, ScenarioError, Simulator};
use serde::Serialize;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use tapfinger::baselines;

/// The scenarios a suite runs.
#[derive(Debug, Clone)]
pub enum Scenarios {
    /// Generated scenarios of one family, one per generator seed.
    Generated {
        /// The family (`gen:N`, `gen-wide:N` or `gen-long:N`).
        family: crate::generate::Family,
        /// Generator seeds.
        seeds: Range<u64>,
    },
    /// Scenario files (or any names [`Scenario::load`] takes).
    Named(Vec<String>),
}

impl Scenarios {
    /// Every scenario's name, in order.
    pub fn names(&self) -> Vec<String> {
        match self {
            Scenarios::Generated { family, seeds } => {
                seeds.clone().map(|s| family.scenario(s)).collect()
            }
            Scenarios::Named(v) => v.clone(),
        }
    }

    /// The `*.toml` files of `dir`, by name.
    pub fn folder(dir: &std::path::Path) -> std::io::Result<Self> {
        let mut v: Vec<String> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .map(|p| p.display().to_string())
            .collect();
        v.sort();
        Ok(Scenarios::Named(v))
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct SuiteConfig {
    /// The scenarios.
    pub scenarios: Scenarios,
    /// Workload seeds per scenario: `seed_base..seed_base + seeds`.
    pub seeds: u64,
    /// First workload seed.
    pub seed_base: u64,
    /// The policy judged (a name as for `compare`: `tapfinger`, a baseline, `clairvoyant`, or
    /// LABEL=MODEL_PATH).
    pub candidate: String,
    /// Model for the candidate `tapfinger`.
    pub model: Option<PathBuf>,
    /// OS threads (scenarios run in parallel; results do not depend on it).
    pub threads: usize,
    /// Tasks carry their type's profiling runs as profile hints
    /// ([`crate::Simulator::profile_hints`]).
    pub profile_hints: bool,
    /// Tasks declare their work ([`crate::Simulator::declare_work`]).
    pub declare_work: bool,
    /// A run's first slot keeps this share of its progress ([`crate::Simulator::start_weight`];
    /// `None`: the scenario's own).
    pub start_weight: Option<f64>,
}

/// Why the suite could not run.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// A generated scenario failed to load (a generator bug).
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// A policy failed to build or an episode failed.
    #[error("scenario {scenario}")]
    Compare {
        /// The scenario's name (`gen:42`, `gen-wide:42`, `gen-long:42`, or a file).
        scenario: String,
        /// Cause.
        source: CompareError,
    },
    /// Nothing to run.
    #[error("empty suite: give at least one scenario and one workload seed")]
    Empty,
}

/// One policy's mean over the workload seeds of one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteResult {
    /// Policy name.
    pub policy: String,
    /// Mean average JCT (slots).
    pub avg_jct: f64,
    /// Average JCT per workload seed.
    pub by_seed: Vec<f64>,
    /// The GPUs' use (the cores' where the cluster has no GPU) over the slots that ended with a
    /// task waiting, mean over the seeds where one did.
    pub busy_while_waiting: Option<f64>,
    /// True for the reference that reads the true speed model.
    pub clairvoyant: bool,
}

/// One scenario's results.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteScenario {
    /// Its name (`gen:42`, or the file).
    pub scenario: String,
    /// Generator seed (`gen:N`; `None` for a file).
    pub generator_seed: Option<u64>,
    /// Nodes.
    pub nodes: usize,
    /// Task classes.
    pub classes: usize,
    /// Offered load the scenario was drawn with (`None` for a file).
    pub load: Option<f64>,
    /// Every policy, the candidate first.
    pub results: Vec<SuiteResult>,
    /// The best non-clairvoyant baseline here (the candidate excluded).
    pub best_baseline: String,
    /// Candidate avg JCT / best baseline's.
    pub ratio: f64,
    /// The same per workload seed (the best baseline's JCT on that seed's workload).
    pub ratio_by_seed: Vec<f64>,
    /// Mean over the workload seeds of the tasks' average lower bound (each task alone on the
    /// best box at its best allocation from its arrival): no schedule does better.
    pub lower_bound_jct: f64,
    /// `lower_bound_jct` / the best baseline's avg JCT: the smallest ratio any policy could
    /// reach on this scenario (a loose floor: the bound ignores every other task).
    pub bound_ratio: f64,
    /// Mean over the workload seeds of the pooled bound ([`crate::bound`]: the cluster as one
    /// machine, preemptive shortest-remaining-first on true sizes; it counts the queue).
    pub pooled_bound_jct: f64,
    /// `pooled_bound_jct` / the best baseline's avg JCT: a tighter floor where tasks queue.
    pub pooled_ratio: f64,
}

/// The summary over all scenarios.
#[derive(Debug, Clone, Serialize)]
pub struct SuiteSummary {
    /// The policy judged.
    pub candidate: String,
    /// The generated family (`base`: `gen:N`; `wide`: `gen-wide:N`; `long`: `gen-long:N`;
    /// `None`: scenario files).
    pub family: Option<crate::generate::Family>,
    /// Scenarios where the candidate's ratio is ≤ 1.
    pub wins: usize,
    /// Scenarios run.
    pub scenarios: usize,
    /// Mean of the per-scenario ratios.
    pub mean_ratio_to_best_baseline: f64,
    /// Per workload seed, the mean over scenarios of that seed's ratio: the spread of the mean
    /// over workload draws.
    pub mean_ratio_by_seed: Vec<f64>,
    /// Largest per-scenario ratio (the worst case).
    pub worst_ratio: f64,
    /// Mean of the per-scenario `bound_ratio`s: the mean ratio a schedule reaching every task's
    /// lower bound would have, so a floor no policy can go below.
    pub mean_bound_ratio: f64,
    /// Mean of the per-scenario `pooled_ratio`s: the same floor where the queue counts.
    pub mean_pooled_ratio: f64,
    /// Workload seeds per scenario.
    pub seeds: Vec<u64>,
    /// The first slots' share of progress, where `--start-weight` set one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_weight: Option<f64>,
}

/// The whole suite.
#[derive(Debug, Clone, Serialize)]
pub struct Suite {
    /// Per scenario, by generator seed.
    pub scenarios: Vec<SuiteScenario>,
    /// Over all of them.
    pub summary: SuiteSummary,
}

/// The policies run beside the candidate: every deployable baseline and the clairvoyant
/// reference.
fn others(candidate: &str) -> Vec<String> {
    let mut v: Vec<String> = baselines::Baseline::JUDGED
        .iter()
        .map(|b| b.name().to_string())
        .collect();
    v.push(CLAIRVOYANT.into());
    v.retain(|p| p != candidate);
    v
}

/// Run one scenario.
fn one(cfg: &SuiteConfig, name: &str, seeds: &[u64]) -> Result<SuiteScenario, SuiteError> {
    let sc = Scenario::load(name)?;
    let (nodes, classes) = (sc.nodes.len(), sc.types.len());
    let mut sim = Simulator::new(sc);
    if cfg.profile_hints {
        sim = sim.profile_hints();
    }
    if cfg.declare_work {
        sim = sim.declare_work();
    }
    if let Some(w) = cfg.start_weight {
        sim = sim.start_weight(w);
    }
    let kinds = sim.scenario().kind_names();
    // The GPUs where the cluster has any, else the cores (or the first kind).
    let gpus: u64 = sim.scenario().space.index_of("gpu").map_or(0, |g| {
        sim.scenario()
            .nodes
            .iter()
            .map(|n| u64::from(n.capacity.get(g)))
            .sum()
    });
    let busy_kind = if gpus > 0 {
        "gpu"
    } else {
        kinds
            .iter()
            .find(|k| *k == "cpu")
            .or(kinds.first())
            .map_or("cpu", String::as_str)
    };
    let names: Vec<String> = std::iter::once(cfg.candidate.clone())
        .chain(others(&cfg.candidate))
        .collect();
    let mut results = Vec::new();
    let (mut bound, mut pooled) = (0.0, 0.0);
    for (i, p) in names.iter().enumerate() {
        let mut sum = 0.0;
        let mut by_seed = Vec::with_capacity(seeds.len());
        let mut busy = Vec::new();
        for &seed in seeds {
            let e =
                report::run_one_with(&sim, p, seed, cfg.model.as_deref()).map_err(|source| {
                    SuiteError::Compare {
                        scenario: name.to_string(),
                        source,
                    }
                })?;
            let m = summarize(&e, &kinds);
            sum += m.avg_jct;
            by_seed.push(m.avg_jct);
            if let Some(u) = m
                .utilization_while_waiting
                .as_ref()
                .and_then(|u| u.get(busy_kind))
            {
                busy.push(*u);
            }
            if i == 0 {
                // Every policy runs the same workloads, so the candidate's bound is everyone's.
                bound += m.lower_bound_jct / seeds.len() as f64;
                pooled += m.pooled_bound_jct / seeds.len() as f64;
            }
        }
        results.push(SuiteResult {
            policy: report::display_name(p).to_string(),
            avg_jct: sum / seeds.len() as f64,
            by_seed,
            busy_while_waiting: (!busy.is_empty())
                .then(|| busy.iter().sum::<f64>() / busy.len() as f64),
            clairvoyant: crate::clairvoyant::is_clairvoyant(p),
        });
    }
    let best = results[1..]
        .iter()
        .filter(|r| !r.clairvoyant)
        .min_by(|a, b| a.avg_jct.total_cmp(&b.avg_jct))
        .cloned();
    let (best_baseline, ratio, bound_ratio, pooled_ratio, ratio_by_seed) = match best {
        Some(b) => (
            b.policy,
            results[0].avg_jct / b.avg_jct,
            bound / b.avg_jct,
            pooled / b.avg_jct,
            results[0]
                .by_seed
                .iter()
                .zip(&b.by_seed)
                .map(|(c, b)| c / b)
                .collect(),
        ),
        None => (String::new(), f64::NAN, f64::NAN, f64::NAN, Vec::new()),
    };
    let generated = match &cfg.scenarios {
        Scenarios::Generated { family, .. } => crate::generate::split_seed(name)
            .map(|seed| (seed, crate::generate::draw_in(*family, seed).load)),
        Scenarios::Named(_) => None,
    };
    Ok(SuiteScenario {
        scenario: name.to_string(),
        generator_seed: generated.map(|g| g.0),
        nodes,
        classes,
        load: generated.map(|g| g.1),
        results,
        best_baseline,
        ratio,
        ratio_by_seed,
        lower_bound_jct: bound,
        bound_ratio,
        pooled_bound_jct: pooled,
        pooled_ratio,
    })
}

/// Run the suite; `tick` is called after each scenario (from any thread).
pub fn run(cfg: &SuiteConfig, tick: &(dyn Fn() + Sync)) -> Result<Suite, SuiteError> {
    let gens: Vec<String> = cfg.scenarios.names();
    let seeds: Vec<u64> = (cfg.seed_base..cfg.seed_base.saturating_add(cfg.seeds)).collect();
    if gens.is_empty() || seeds.is_empty() {
        return Err(SuiteError::Empty);
    }
    // Fail fast on a candidate that cannot be built (an unknown name, a model that does not
    // load) before hours of baselines.
    check_candidate(cfg, &gens[0])?;
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<Result<SuiteScenario, SuiteError>>>> =
        Mutex::new((0..gens.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..cfg.threads.max(1).min(gens.len()) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(g) = gens.get(i) else { break };
                    let r = one(cfg, g, &seeds);
                    let failed = r.is_err();
                    if let Ok(mut o) = out.lock() {
                        o[i] = Some(r);
                    }
                    tick();
                    if failed {
                        // Stop handing out work: the first error is the answer.
                        next.store(gens.len(), Ordering::Relaxed);
                        break;
                    }
                }
            });
        }
    });
    let mut scenarios = Vec::new();
    for r in out.into_inner().unwrap_or_default().into_iter().flatten() {
        scenarios.push(r?);
    }
    let ratios: Vec<f64> = scenarios.iter().map(|s| s.ratio).collect();
    let mean_ratio_by_seed = (0..seeds.len())
        .map(|k| {
            scenarios
                .iter()
                .filter_map(|s| s.ratio_by_seed.get(k))
                .sum::<f64>()
                / scenarios.len().max(1) as f64
        })
        .collect();
    let summary = SuiteSummary {
        candidate: report::display_name(&cfg.candidate).to_string(),
        family: match &cfg.scenarios {
            Scenarios::Generated { family, .. } => Some(*family),
            Scenarios::Named(_) => None,
        },
        wins: ratios.iter().filter(|r| **r <= 1.0).count(),
        scenarios: scenarios.len(),
        mean_ratio_to_best_baseline: ratios.iter().sum::<f64>() / ratios.len().max(1) as f64,
        mean_ratio_by_seed,
        worst_ratio: ratios.iter().copied().fold(f64::NAN, f64::max),
        mean_bound_ratio: scenarios.iter().map(|s| s.bound_ratio).sum::<f64>()
            / scenarios.len().max(1) as f64,
        mean_pooled_ratio: scenarios.iter().map(|s| s.pooled_ratio).sum::<f64>()
            / scenarios.len().max(1) as f64,
        seeds,
        start_weight: cfg.start_weight,
    };
    Ok(Suite { scenarios, summary })
}

/// Build the candidate's policies on the first scenario, so a bad name or model fails at once.
fn check_candidate(cfg: &SuiteConfig, name: &str) -> Result<(), SuiteError> {
    let sc = Scenario::load(name)?;
    let sim = Simulator::new(sc);
    report::check_policy(&sim, &cfg.candidate, cfg.model.as_deref()).map_err(|source| {
        SuiteError::Compare {
            scenario: name.to_string(),
            source,
        }
    })
}

/// A table: one line per scenario, then the summary.
pub fn table(s: &Suite) -> String {
    use std::fmt::Write as _;
    let mut t = String::new();
    let first = s
        .summary
        .family
        .map_or("scenario", |f| f.prefix().trim_end_matches(':'));
    let _ = writeln!(
        t,
        "{:>16} {:>5} {:>7} {:>5} {:>10} {:>14} {:>10} {:>6} {:>13} {:>6} {:>6} {:>13}",
        first,
        "nodes",
        "classes",
        "load",
        "candidate",
        "best baseline",
        "its JCT",
        "ratio",
        "per draw",
        "floor",
        "pooled",
        "busy queued"
    );
    for sc in &s.scenarios {
        let best = sc
            .results
            .iter()
            .find(|r| r.policy == sc.best_baseline)
            .map_or(f64::NAN, |r| r.avg_jct);
        let name = match sc.generator_seed {
            Some(g) => g.to_string(),
            None => std::path::Path::new(&sc.scenario)
                .file_stem()
                .map_or(sc.scenario.clone(), |f| f.to_string_lossy().into_owned()),
        };
        let (lo, hi) = range(&sc.ratio_by_seed);
        let busy = |p: &str| {
            sc.results
                .iter()
                .find(|r| r.policy == p)
                .and_then(|r| r.busy_while_waiting)
                .map_or("-".into(), |b| format!("{:.0}%", 100.0 * b))
        };
        let _ = writeln!(
            t,
            "{:>16} {:>5} {:>7} {:>5} {:>10.2} {:>14} {:>10.2} {:>6.3} {:>13} {:>6.3} {:>6.3} {:>13}",
            name,
            sc.nodes,
            sc.classes,
            sc.load.map_or("-".into(), |l| format!("{l:.2}")),
            sc.results[0].avg_jct,
            sc.best_baseline,
            best,
            sc.ratio,
            format!("{lo:.3}-{hi:.3}"),
            sc.bound_ratio,
            sc.pooled_ratio,
            format!(
                "{} vs {}",
                busy(&sc.results[0].policy),
                busy(&sc.best_baseline)
            )
        );
    }
    let m = &s.summary;
    let (lo, hi) = range(&m.mean_ratio_by_seed);
    let _ = writeln!(
        t,
        "{}: {} wins of {} scenarios (ratio <= 1 to the best baseline); mean ratio {:.3} ({:.3}-{:.3} over the {} workload draws), worst {:.3}; floor (every task at its lower bound) {:.3}, pooled floor (the cluster as one machine, shortest remaining first) {:.3}; workload seeds {:?}",
        m.candidate,
        m.wins,
        m.scenarios,
        m.mean_ratio_to_best_baseline,
        lo,
        hi,
        m.seeds.len(),
        m.worst_ratio,
        m.mean_bound_ratio,
        m.mean_pooled_ratio,
        m.seeds
    );
    t
}

/// The least and the largest of `v` (NaN, NaN when empty).
fn range(v: &[f64]) -> (f64, f64) {
    (
        v.iter().copied().fold(f64::NAN, f64::min),
        v.iter().copied().fold(f64::NAN, f64::max),
    )
}

/// Whether `candidate` names the learned policy (it needs a model).
pub fn is_learned(candidate: &str) -> bool {
    candidate == policies::TAPFINGER || candidate.contains('=')
}
