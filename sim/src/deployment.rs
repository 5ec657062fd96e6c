//! The deployment replay: a scenario's workload run as a deployment would run it, window after
//! window, with the guard ([`crate::guard`]) choosing each window's policy from the twins of the
//! recent windows since the policy in use was adopted ([`crate::twin`]: only what the agents
//! observed), and every window also run under every deployable baseline on the true speeds, to
//! say how the deployment did against the best of them there.
//!
//! The workload (arrivals, sizes, reachable boxes) is the scenario's for the seed, cut into
//! windows of equal task counts; each window is an episode of its own tasks on the scenario's
//! boxes, starting with an empty cluster and the speed estimator as the window before left it
//! (a deployment's agents keep theirs): every policy's run of a window starts from that same
//! estimator, and what crosses from one window to the next is that, the guard's choice and the
//! version of the learned policy in use. The first window runs the learned policy (or the
//! policy named). With [`TuneEvery`], every so many windows the version in use is fine-tuned on
//! the workload of the windows since the last fine-tune, merged on one timeline
//! ([`tapfinger::twin::Workload::merge`]), and gated on its latest tasks' twin
//! ([`crate::tune::fine_tune`], as the coordinator fine-tunes on the workload its guard judged);
//! a version that passes is in use from the next window on, under the guard as any version is.

use crate::guard::{self, Decision};
use crate::metrics::summarize;
use crate::report::{self, CompareError};
use crate::trace::TraceTask;
use crate::tune::{Gate, TuneError, Tuning};
use crate::{Scenario, SimError, Simulator, policies, twin, workload};
use serde::Serialize;
use tapfinger::model::net::{Net, NetConfig};

/// Why a replay failed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A policy could not be built.
    #[error(transparent)]
    Policy(#[from] CompareError),
    /// An episode failed.
    #[error("window {window}, {policy}: {source}")]
    Episode {
        /// The window.
        window: usize,
        /// The policy.
        policy: String,
        /// Cause.
        source: SimError,
    },
    /// The twin of a window could not be written or loaded.
    #[error("window {window}: its twin: {reason}")]
    Twin {
        /// The window.
        window: usize,
        /// Cause.
        reason: String,
    },
    /// A fine-tune failed (not: was refused by its gate).
    #[error("window {window}: fine-tuning: {source}")]
    Tune {
        /// The window.
        window: usize,
        /// Cause.
        source: TuneError,
    },
    /// Fewer tasks than windows, or no window.
    #[error("{tasks} tasks cannot make {windows} windows")]
    Windows {
        /// Tasks.
        tasks: usize,
        /// Windows asked for.
        windows: usize,
    },
}

/// One window of the replay.
#[derive(Debug, Clone, Serialize)]
pub struct Window {
    /// Its index.
    pub window: usize,
    /// Its tasks.
    pub tasks: usize,
    /// The policy the guard had chosen for it.
    pub policy: String,
    /// That policy's average JCT on the true speeds.
    pub avg_jct: f64,
    /// The best deployable baseline there, and its average JCT.
    pub best_baseline: (String, f64),
    /// `avg_jct` over the best baseline's.
    pub ratio: f64,
    /// The learned policy's own ratio there (the version in use: what it would have given
    /// without the guard).
    pub learned_ratio: f64,
    /// The ratio there of the model the replay started with (the shipped one, or
    /// [`Settings::model`]; without the guard and without fine-tuning: what fine-tuning added
    /// is the gap to `learned_ratio`).
    pub shipped_ratio: f64,
    /// The version of the learned policy in use in the window (0: the model it started with; each
    /// fine-tune that passed its gate numbers the next).
    pub version: usize,
    /// The fine-tune run after the window, if one was due: its gate.
    pub tune: Option<Gate>,
    /// The best baseline's average JCT over the lower bound (room to win where well above 1).
    pub best_over_bound: f64,
    /// The pooled bound's average JCT ([`crate::bound`]: the cluster as one machine, shortest
    /// remaining first on true sizes), which counts the queue.
    pub pooled_bound: f64,
    /// Every policy's average JCT on the true speeds (the learned policy and `suite`'s
    /// baselines; one whose episode failed is left out).
    pub true_jcts: Vec<(String, f64)>,
    /// What the guard decided on this window's twin, for the next.
    pub next: Decision,
}

impl Window {
    /// The candidates whose figure on this window's twin is mostly a guess: more than
    /// [`guard::MAX_UNSUPPORTED`] of their slots there extrapolated (the guard counts such a
    /// window neither for nor against them once a later window judges).
    pub fn extrapolated(&self) -> Vec<(String, f64)> {
        self.next
            .unsupported
            .iter()
            .filter(|(_, share)| *share > guard::MAX_UNSUPPORTED)
            .cloned()
            .collect()
    }
}

/// Fine-tuning in a replay: after every `every` windows (but the last), `tuning` on the latest
/// window's workload.
#[derive(Debug, Clone)]
pub struct TuneEvery {
    /// Windows between fine-tunes (at least 1).
    pub every: usize,
    /// How each runs.
    pub tuning: Tuning,
}

/// How a replay runs: its windows, the guard's margin, the first window's policy, the learned
/// policy's model and fine-tuning.
#[derive(Debug, Clone, Copy)]
pub struct Settings<'a> {
    /// Windows of equal task counts.
    pub windows: usize,
    /// The guard's margin.
    pub margin: f64,
    /// The first window's policy (the learned policy, as a deployment starts; another name to
    /// see the guard leave a policy that does badly).
    pub start: &'a str,
    /// The learned policy's model: a checkpoint folder (`None`: the model shipped for the
    /// scenario, else the general model).
    pub model: Option<&'a std::path::Path>,
    /// Fine-tuning (`None`: never).
    pub tune: Option<&'a TuneEvery>,
}

/// The model a replay's learned policy starts from: the files' bytes, and the folder they came
/// from where they are not the shipped model's.
struct FirstModel {
    path: Option<std::path::PathBuf>,
    model: Vec<u8>,
    config: String,
}

impl FirstModel {
    /// The checkpoint at `path`, else the model shipped for `sc` (else the general model).
    fn of(sc: &Scenario, path: Option<&std::path::Path>) -> Result<Self, ReplayError> {
        match path {
            Some(p) => {
                let (model, config) =
                    tapfinger::model::checkpoint::read_path(p).map_err(|e| ReplayError::Twin {
                        window: 0,
                        reason: e.to_string(),
                    })?;
                Ok(Self {
                    path: Some(p.to_path_buf()),
                    model,
                    config,
                })
            }
            None => {
                let c = tapfinger::model::checkpoint::shipped(&sc.name)
                    .unwrap_or(&tapfinger::model::checkpoint::GENERAL);
                Ok(Self {
                    path: None,
                    model: c.model.to_vec(),
                    config: c.config.to_string(),
                })
            }
        }
    }

    /// Instances of policy `name` for `sim`, the learned one from this model.
    fn instances(
        &self,
        sim: &Simulator,
        name: &str,
        seed: u64,
    ) -> Result<Vec<Box<dyn tapfinger::Policy>>, CompareError> {
        let model = self.path.as_deref().filter(|_| name == policies::TAPFINGER);
        report::instances_for_seed(sim, name, model, seed)
    }
}

/// The version of the learned policy in use.
enum Version<'a> {
    /// The model the replay started with ([`Settings::model`]).
    First(&'a FirstModel),
    /// A version fine-tuned here (its number, the network, its settings).
    Tuned(usize, Box<Net>, NetConfig),
}

impl Version<'_> {
    fn number(&self) -> usize {
        match self {
            Version::First(_) => 0,
            Version::Tuned(n, _, _) => *n,
        }
    }

    fn learned(&self) -> guard::Learned<'_> {
        match self {
            Version::First(m) => guard::Learned::Checkpoint {
                model: &m.model,
                train_json: &m.config,
            },
            Version::Tuned(_, net, cfg) => guard::Learned::Net { net, cfg },
        }
    }

    /// Its network and settings for `sim`'s input sizes.
    fn net(&self, sim: &Simulator) -> Result<(Net, NetConfig), String> {
        match self {
            Version::First(m) => tapfinger::model::checkpoint::load_net_bytes(
                m.model.clone(),
                &m.config,
                "the replay's model",
                &sim.dims(),
            )
            .map(|(net, cfg, _)| (net, cfg))
            .map_err(|e| e.to_string()),
            Version::Tuned(_, net, cfg) => Ok(((**net).clone(), cfg.clone())),
        }
    }
}

/// A whole replay.
#[derive(Debug, Clone, Serialize)]
pub struct Replay {
    /// The scenario.
    pub scenario: String,
    /// The workload seed.
    pub seed: u64,
    /// The guard's margin.
    pub margin: f64,
    /// The windows, in order.
    pub windows: Vec<Window>,
}

impl Replay {
    /// The largest and the mean ratio over the windows after the first (once the guard has
    /// seen one), and the learned policy's own mean there.
    pub fn after_first(&self) -> (f64, f64, f64) {
        let later: Vec<&Window> = self.windows.iter().skip(1).collect();
        let n = later.len().max(1) as f64;
        (
            later.iter().map(|w| w.ratio).fold(0.0, f64::max),
            later.iter().map(|w| w.ratio).sum::<f64>() / n,
            later.iter().map(|w| w.learned_ratio).sum::<f64>() / n,
        )
    }
}

/// The candidates the guard judges: the learned policy and every deployable baseline.
fn candidates() -> Vec<&'static str> {
    std::iter::once(policies::TAPFINGER)
        .chain(
            tapfinger::baselines::Baseline::JUDGED
                .iter()
                .map(|b| b.name()),
        )
        .collect()
}

/// A window run on the true speeds under every candidate.
struct Ran {
    /// Each candidate's average JCT (a candidate whose episode failed is left out).
    jcts: Vec<(String, f64)>,
    /// The lower bound's.
    bound: f64,
    /// The pooled bound's.
    pooled: f64,
    /// The shipped model's (the learned policy's, until a fine-tune passes).
    shipped: f64,
}

/// Every candidate's average JCT on `sim` for `seed` (the learned policy as `version`), the
/// lower bound's, and the shipped model's.
fn run_all(
    sim: &Simulator,
    seed: u64,
    warm: Option<&tapfinger::estimate::Estimator>,
    first: &FirstModel,
    version: &Version<'_>,
) -> Result<Ran, ReplayError> {
    let kinds = sim.scenario().kind_names();
    let mut out = Vec::new();
    let (mut bound, mut pooled) = (0.0, 0.0);
    let run = |ps: Vec<Box<dyn tapfinger::Policy>>| {
        sim.run_warm(ps, seed, &mut crate::episode::NoObserver, warm)
            .ok()
            .map(|r| summarize(&r, &kinds))
    };
    let mut shipped = f64::INFINITY;
    for name in candidates() {
        let ps = first.instances(sim, name, seed)?;
        if let Some(s) = run(ps) {
            bound = s.lower_bound_jct;
            pooled = s.pooled_bound_jct;
            if name == policies::TAPFINGER {
                shipped = s.avg_jct;
                if let Version::Tuned(_, net, cfg) = version {
                    // The version in use is the learned candidate; the shipped model is kept
                    // apart, to say what fine-tuning added.
                    let j =
                        run(policies::from_net(sim, net, cfg)).map_or(f64::INFINITY, |s| s.avg_jct);
                    out.push((name.to_string(), j));
                    continue;
                }
            }
            out.push((name.to_string(), s.avg_jct));
        }
    }
    Ok(Ran {
        jcts: out,
        bound,
        pooled,
        shipped,
    })
}

/// Replay `sc`'s workload of `seed` in `windows` windows with the guard's `margin`, the first
/// window under `start` (the learned policy, as a deployment starts; another name to see the
/// guard leave a policy that does badly), fine-tuning as `tune` says (`None`: never).
pub fn replay(
    sc: &Scenario,
    seed: u64,
    windows: usize,
    margin: f64,
    start: &str,
    tune: Option<&TuneEvery>,
) -> Result<Replay, ReplayError> {
    let settings = Settings {
        windows,
        margin,
        start,
        model: None,
        tune,
    };
    replay_observed(sc, seed, &settings, &mut |_| {})
}

/// [`replay`] with every setting ([`Settings`]: a model of one's own too), telling `done` of
/// each window as it is measured (a command line's progress).
pub fn replay_observed(
    sc: &Scenario,
    seed: u64,
    settings: &Settings<'_>,
    done: &mut dyn FnMut(&Window),
) -> Result<Replay, ReplayError> {
    let Settings {
        windows,
        margin,
        start,
        model,
        tune,
    } = *settings;
    let parts = split(sc, seed, windows)?;
    let count = parts.len();
    // The learned policy the windows run is the model given (else the one shipped for the
    // scenario, else the general model), until a fine-tune passes its gate; the guard judges
    // the version in use.
    let first = FirstModel::of(sc, model)?;
    let mut version = Version::First(&first);
    let mut current = start.to_string();
    let mut out = Vec::new();
    // What the agents' speed estimator learned in the windows so far: a deployment's agents
    // keep theirs, so every policy starts a window from it.
    let mut warm: Option<tapfinger::estimate::Estimator> = None;
    // And what they learned of their tasks' sizes: every window starts from the history of
    // the windows before it (the first from none), as the agents' size book lives on.
    let mut book: Option<tapfinger::sizes::SizeBook> = None;
    // The twins judged since the policy in use was adopted: the guard judges on the latest
    // `guard::RECENT` of them, each on its own, as the coordinator judges the recent workload
    // its agents observed since the choice in force.
    let mut since: Vec<guard::Judged> = Vec::new();
    // The windows since the last fine-tune, each with the slot it began at: the next fine-tune
    // learns from all of them (one window of 30-60 tasks moves a policy too little).
    let mut unlearned: Vec<(u64, tapfinger::twin::Workload)> = Vec::new();
    for (k, (began, part)) in parts.into_iter().enumerate() {
        let sim = match book.take() {
            Some(b) => Simulator::new(part).with_sizes(b),
            None => Simulator::new(part),
        };
        let tasks = sim.scenario().tasks as usize;
        let Ran {
            jcts,
            bound,
            pooled,
            shipped,
        } = run_all(&sim, seed, warm.as_ref(), &first, &version)?;
        let of = |n: &str| jcts.iter().find(|(m, _)| m == n).map(|(_, j)| *j);
        let best = jcts
            .iter()
            .filter(|(n, _)| n != policies::TAPFINGER)
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .cloned()
            .unwrap_or_default();
        let ran = of(&current).unwrap_or(f64::INFINITY);
        // The window's twin, from the policy that ran it (the same episode: deterministic),
        // judged as the coordinator judges its agents' workload.
        let ps = match &version {
            Version::Tuned(_, net, cfg) if current == policies::TAPFINGER => {
                policies::from_net(&sim, net, cfg)
            }
            _ => first.instances(&sim, &current, seed)?,
        };
        let (_, w, learned_so_far, sizes_so_far) =
            twin::observe_learned(&sim, ps, seed, warm.as_ref()).map_err(|source| {
                ReplayError::Episode {
                    window: k,
                    policy: current.clone(),
                    source,
                }
            })?;
        warm = Some(learned_so_far);
        book = Some(sizes_so_far);
        if tune.is_some() {
            unlearned.push((began, w.clone()));
        }
        since.push(
            guard::table(&w, version.learned(), seed).map_err(|e| ReplayError::Twin {
                window: k,
                reason: e.to_string(),
            })?,
        );
        let next = guard::judge(&current, &since, margin);
        if next.switched {
            since.clear();
        }
        let in_use = version.number();
        let mut gate = None;
        if let Some(t) = tune.filter(|t| t.every > 0 && (k + 1) % t.every == 0 && k + 1 < count) {
            let fail = |reason: String| ReplayError::Twin { window: k, reason };
            let learn =
                tapfinger::twin::Workload::merge(&std::mem::take(&mut unlearned)).map_err(fail)?;
            let dims_sim = crate::tune::twin(&learn, "twin").map_err(|e| fail(e.to_string()))?;
            let (net, cfg) = version.net(&dims_sim).map_err(fail)?;
            let tuned = crate::tune::fine_tune(&learn, (&net, &cfg), &t.tuning, &mut |_, _| {})
                .map_err(|source| ReplayError::Tune { window: k, source })?;
            if tuned.gate.passed {
                version = Version::Tuned(
                    in_use + 1,
                    Box::new(tuned.candidate),
                    tuned.trainer.cfg.net.clone(),
                );
                // A new version: what the windows before judged of the learned policy was
                // another's.
                since.clear();
            }
            gate = Some(tuned.gate);
        }
        let per = |j: f64| j / best.1.max(f64::MIN_POSITIVE);
        out.push(Window {
            window: k,
            tasks,
            policy: current.clone(),
            avg_jct: ran,
            ratio: per(ran),
            learned_ratio: per(of(policies::TAPFINGER).unwrap_or(f64::INFINITY)),
            shipped_ratio: per(shipped),
            version: in_use,
            tune: gate,
            best_over_bound: best.1 / bound.max(f64::MIN_POSITIVE),
            pooled_bound: pooled,
            best_baseline: best,
            true_jcts: jcts.clone(),
            next: next.clone(),
        });
        if let Some(w) = out.last() {
            done(w);
        }
        current = next.policy;
    }
    Ok(Replay {
        scenario: sc.name.clone(),
        seed,
        margin,
        windows: out,
    })
}

/// `sc`'s workload of `seed` as `windows` scenarios of consecutive tasks, each replaying its
/// tasks (arrivals from its first, true sizes, each task's reachable boxes by a label of each
/// box) on `sc`'s boxes with `sc`'s speeds.
/// Each with the slot of its first arrival in the whole workload.
fn split(sc: &Scenario, seed: u64, windows: usize) -> Result<Vec<(u64, Scenario)>, ReplayError> {
    let tasks = workload::generate(sc, seed);
    let sizes = workload::sizes(sc, seed, tasks.len());
    let who = workload::identities(sc, seed, tasks.len());
    if windows == 0 || tasks.len() < windows {
        return Err(ReplayError::Windows {
            tasks: tasks.len(),
            windows,
        });
    }
    let mut base = sc.clone();
    for n in &mut base.nodes {
        n.labels.push(format!("box={}", n.name));
    }
    let per = tasks.len().div_ceil(windows);
    let row = |t: &tapfinger::Task| sc.trace.as_ref().and_then(|tr| tr.get(t.id.0 as usize));
    Ok(tasks
        .chunks(per)
        .map(|chunk| {
            let a0 = chunk.first().map_or(0, |t| t.arrival);
            let trace: Vec<TraceTask> = chunk
                .iter()
                .map(|t| TraceTask {
                    arrival: t.arrival - a0,
                    ty: usize::from(t.ty.0),
                    size: workload::size_of(&sizes, t.id),
                    require: t
                        .reachable
                        .iter()
                        .filter_map(|n| base.nodes.get(n.0 as usize))
                        .map(|n| format!("box={}", n.name))
                        .collect(),
                    min: Some(t.min_demand.clone()),
                    max: t.max_demand.clone(),
                    priority: Some(t.priority),
                    // A trace's own gang stays one (drawn gangs are drawn again per window),
                    // and its tasks keep who submitted them.
                    gang: row(t).and_then(|r| r.gang.clone()),
                    submitter: row(t)
                        .and_then(|r| r.submitter.clone())
                        .or_else(|| who.get(t.id.0 as usize)?.as_ref()?.submitter.clone()),
                    job: row(t)
                        .and_then(|r| r.job.clone())
                        .or_else(|| who.get(t.id.0 as usize)?.as_ref()?.job.clone()),
                })
                .collect();
            let mut s = base.clone();
            s.tasks = trace.len() as u32;
            s.trace = Some(trace);
            (a0, s)
        })
        .collect())
}

/// The replay as a table.
pub fn table(r: &Replay) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "deployment replay of {} (seed {}), {} windows, guard margin {}",
        r.scenario,
        r.seed,
        r.windows.len(),
        r.margin
    );
    let _ = writeln!(
        s,
        "{:>6} {:>5}  {:<18} {:>2} {:>10}  {:<18} {:>10} {:>6} {:>8} {:>8} {:>8}  next",
        "window",
        "tasks",
        "ran",
        "v",
        "avg JCT",
        "best baseline",
        "its JCT",
        "ratio",
        "learned",
        "shipped",
        "best/LB"
    );
    for w in &r.windows {
        let tune = w.tune.as_ref().map_or(String::new(), |g| {
            format!(
                "; fine-tune {} ({:.2} vs {:.2} before, {} {:.2})",
                if g.passed { "published" } else { "refused" },
                g.candidate,
                g.before,
                g.best.0,
                g.best.1
            )
        });
        let _ = writeln!(
            s,
            "{:>6} {:>5}  {:<18} {:>2} {:>10.2}  {:<18} {:>10.2} {:>6.3} {:>8.3} {:>8.3} {:>8.2}  {}{}{tune}",
            w.window,
            w.tasks,
            w.policy,
            w.version,
            w.avg_jct,
            w.best_baseline.0,
            w.best_baseline.1,
            w.ratio,
            w.learned_ratio,
            w.shipped_ratio,
            w.best_over_bound,
            w.next.policy,
            if w.next.switched { " (switch)" } else { "" }
        );
    }
    let (worst, mean, learned) = r.after_first();
    let _ = writeln!(
        s,
        "after the first window: worst ratio {worst:.3}, mean {mean:.3} (the learned policy alone: mean {learned:.3})"
    );
    s
}
