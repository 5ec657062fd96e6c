//! `tapfinger-sim run`, `compare` and `suite`: episodes of policies on a scenario (or on
//! generated ones), printed as a table, CSV or JSON, with plots on request.

use crate::cli_progress::Progress;
use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use tapfinger_sim::report::{self, Comparison};
use tapfinger_sim::{Scenario, Simulator, metrics, plot, policies};

#[derive(clap::Args)]
/// How a comparison is printed.
pub(crate) struct Output {
    /// Print JSON instead of a table.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Print CSV instead of a table.
    #[arg(long)]
    csv: bool,
    /// Write SVG plots into this folder.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
}

/// Arguments of `run`.
#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// Preset name or path to a scenario TOML file.
    #[arg(long, default_value = "hetero6")]
    scenario: String,
    /// Policy name: `tapfinger` (the learned policy: --model, else the model shipped for a
    /// preset, else the shipped general model), `rlpto` (the shipped RLPTO model, with the
    /// arrival forecast it was trained with), a baseline, `clairvoyant`, or
    /// LABEL=MODEL_PATH [default: tapfinger]; on a scenario with gangs, `NAME+PLACER`
    /// places them with `locality`, `pack-first` or `spread` instead of the scenario's.
    #[arg(long)]
    policy: Option<String>,
    /// Seed of the workload and of the policies' randomness.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Trained model (folder or model.safetensors) for `--policy tapfinger`.
    #[arg(long, value_name = "PATH")]
    model: Option<PathBuf>,
    /// Also write the episode's workload as its agents observed it (the cluster's twin: what
    /// `tapfinger-agent workload export` writes) to this file; `import --format tapfinger`
    /// replays it.
    #[arg(long, value_name = "FILE")]
    twin: Option<PathBuf>,
    #[command(flatten)]
    variants: Variants,
    #[command(flatten)]
    out: Output,
}

/// Arguments of `compare`.
#[derive(clap::Args)]
pub(crate) struct CompareArgs {
    /// Preset name or path to a scenario TOML file.
    #[arg(long, default_value = "hetero6")]
    scenario: String,
    /// Comma-separated policies (names as for `run`, LABEL=MODEL_PATH for extra trained
    /// models, NAME+PLACER for a gang placer); default: tapfinger (as for `run`), every
    /// deployable baseline (the sixteen of `suite`) and the clairvoyant reference, and on a scenario with gangs each of them
    /// again with gangs placed `+pack-first` and `+spread` (locality-oblivious).
    #[arg(long, value_delimiter = ',')]
    policies: Vec<String>,
    /// Number of seeds.
    #[arg(long, default_value_t = 5)]
    seeds: u64,
    /// First seed (seeds below 100 are for development: the shipped models were chosen on
    /// some of them, so by default the comparison runs on seeds they never saw).
    #[arg(long, default_value_t = 100)]
    seed_base: u64,
    /// Trained model (folder or model.safetensors) for the policy `tapfinger`.
    #[arg(long, value_name = "PATH")]
    model: Option<PathBuf>,
    #[command(flatten)]
    variants: Variants,
    /// Forecast each episode's arrivals per interval of this many slots (RLPTO's ARIMA + GRU,
    /// as the agents run it) and report its error against the last value's.
    #[arg(long, value_name = "SLOTS")]
    forecast: Option<u64>,
    /// Keep capacity for the urgent (class 0) tasks the forecast says are coming: lower
    /// classes start only while the cluster keeps the urgent share of the next interval's
    /// forecast arrivals at their mean minimum demand (RLPTO's reservation).
    #[arg(long, requires = "forecast")]
    reserve: bool,
    #[command(flatten)]
    out: Output,
}

/// Arguments of `suite`.
#[derive(clap::Args)]
pub(crate) struct SuiteArgs {
    /// Generator seeds, A..B (B excluded), e.g. 30000..30100.
    #[arg(long, value_name = "A..B", value_parser = parse_range, required_unless_present = "scenarios")]
    generator_seeds: Option<std::ops::Range<u64>>,
    /// A folder of scenario files (e.g. imported traces), each one a scenario of the suite.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["generator_seeds", "family"])]
    scenarios: Option<PathBuf>,
    /// The generated family: base (`gen:N`), wide (`gen-wide:N`), long (`gen-long:N`), gavel
    /// (`gen-gavel:N`), recur (`gen-recur:N`) or blind (`gen-blind:N`).
    #[arg(long, value_enum)]
    family: Option<tapfinger_sim::generate::Family>,
    /// Workload seeds per scenario.
    #[arg(long, default_value_t = 2)]
    seeds: u64,
    /// First workload seed (seeds below 100 are for development).
    #[arg(long, default_value_t = 100)]
    seed_base: u64,
    /// The policy judged: tapfinger (the shipped general model, or --model), a baseline,
    /// clairvoyant, or LABEL=MODEL_PATH.
    #[arg(long, default_value = "tapfinger")]
    candidate: String,
    /// Trained model (folder or model.safetensors) for the candidate `tapfinger`.
    #[arg(long, value_name = "PATH")]
    model: Option<PathBuf>,
    /// OS threads (default: all cores); results do not depend on it.
    #[arg(long)]
    threads: Option<usize>,
    #[command(flatten)]
    estimates: Estimates,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// `A..B` as a range of whole numbers.
pub(crate) fn parse_range(s: &str) -> Result<std::ops::Range<u64>, String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("expected A..B (e.g. 10000..10100), got {s:?}"))?;
    let a: u64 = a.trim().parse().map_err(|e| format!("{a:?}: {e}"))?;
    let b: u64 = b.trim().parse().map_err(|e| format!("{b:?}: {e}"))?;
    if b <= a {
        return Err(format!("{s}: the range is empty (B must be above A)"));
    }
    Ok(a..b)
}

pub(crate) fn load(name: &str) -> Result<Simulator> {
    Ok(Simulator::new(Scenario::load(name)?))
}

/// The same scenario run otherwise than it says (`run` and `compare`): the runs to compare it
/// against.
#[derive(Debug, Clone, Copy, clap::Args)]
pub(crate) struct Variants {
    /// Queues ignore priority classes (every task in class 0, by arrival), whatever the
    /// scenario's `[priorities]` say: the priority-blind run to compare against.
    #[arg(long)]
    priority_blind: bool,
    /// Converging tasks keep their units, whatever the scenario's `[shrink]` says (the
    /// plateau detector still judges): the run without shrinking to compare against.
    #[arg(long)]
    no_shrink: bool,
    /// Lower priority classes make room for a waiting task that fits nowhere (tasks
    /// checkpoint every 5 slots, or the scenario's `checkpoint_slots`; a preempted task
    /// resumes from its last checkpoint); `compare` adds the tasks preempted and the work lost.
    #[arg(long)]
    preempt: bool,
    /// Where GPUs are shared in fractions, claims state FGD's growth score of the claim on the
    /// box's devices as the Bayes prior instead of the box's headroom: boxes pack GPU shares
    /// (as an agent with `pack_shares`).
    #[arg(long)]
    pack_shares: bool,
    #[command(flatten)]
    estimates: Estimates,
}

/// What the speed estimator is told beyond the progress it observes, whatever the scenario
/// says (`run`, `compare` and `suite`).
#[derive(Debug, Clone, Copy, clap::Args)]
pub(crate) struct Estimates {
    /// Every task carries its type's profiling runs (those Optimus fits) as profile hints for
    /// the speed estimator, whatever the scenario's `profile_hints` says: every policy's views
    /// then show the estimates a submitter's profile would give before any progress.
    #[arg(long)]
    profile_hints: bool,
    /// Every task declares its work (its size, as a spec's `work` would) to the speed
    /// estimator, whatever the scenario's `declare_work` says: every policy's views then show
    /// each task's estimate at its own size.
    #[arg(long)]
    declare_work: bool,
    /// A run's first slot keeps this share (0 < W ≤ 1) of its progress, whatever the scenario's
    /// `start_weight` says (every generated scenario draws one): the time from a decision to a
    /// task's first progress, which agents measure as its start-up.
    #[arg(long, value_name = "W", value_parser = start_weight)]
    start_weight: Option<f64>,
}

/// `--start-weight`: a share of a slot's progress, in (0, 1].
fn start_weight(s: &str) -> std::result::Result<f64, String> {
    let w: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if w > 0.0 && w <= 1.0 {
        Ok(w)
    } else {
        Err(format!("must be in (0, 1], got {w}"))
    }
}

/// [`load`], run as `v` says.
fn load_with(name: &str, v: Variants) -> Result<Simulator> {
    let mut sim = load(name)?;
    if v.preempt {
        sim = sim.preempt(None);
    }
    if v.priority_blind {
        sim = sim.priorities(tapfinger::ledger::Priorities::BLIND);
    }
    if v.no_shrink {
        sim = sim.no_shrink();
    }
    if v.pack_shares {
        sim = sim.pack_shares();
    }
    if v.estimates.profile_hints {
        sim = sim.profile_hints();
    }
    if v.estimates.declare_work {
        sim = sim.declare_work();
    }
    if let Some(w) = v.estimates.start_weight {
        sim = sim.start_weight(w);
    }
    Ok(sim)
}

fn emit(c: &Comparison, out: &Output) -> Result<()> {
    if out.json {
        println!("{}", serde_json::to_string_pretty(c)?);
    } else if out.csv {
        print!("{}", report::csv(c));
    } else {
        print!("{}", report::table(c));
    }
    if let Some(dir) = &out.plot {
        let files = plot::write_plots(c, dir)?;
        eprintln!("wrote {} plot(s) to {}", files.len(), dir.display());
    }
    Ok(())
}

/// `run`: one episode of one policy.
pub(crate) fn run(a: RunArgs) -> Result<()> {
    let RunArgs {
        scenario,
        policy,
        seed,
        model,
        twin,
        variants,
        out,
    } = a;
    let sim = load_with(&scenario, variants)?;
    let policy = policy.unwrap_or_else(|| policies::TAPFINGER.to_string());
    if let Some(path) = &twin {
        let ps = report::instances_for_seed(&sim, &policy, model.as_deref(), seed)?;
        let (_, w) = tapfinger_sim::twin::observe(&sim, ps, seed)?;
        std::fs::write(path, serde_json::to_string(&w)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!(
            "wrote the episode's observed workload ({} tasks) to {}",
            w.tasks.len(),
            path.display()
        );
    }
    let mut progress = Progress::new(1);
    let c = report::compare_with(&sim, &[policy], &[seed], model.as_deref(), &mut || {
        progress.tick()
    })?;
    progress.finish();
    if out.csv {
        // One episode: the per-task records are the useful CSV.
        let Some(e) = c.results.first().and_then(|r| r.episodes.first()) else {
            bail!("no episode ran")
        };
        print!("{}", report::tasks_csv(e));
        if let Some(dir) = &out.plot {
            plot::write_plots(&c, dir)?;
        }
        return Ok(());
    }
    if out.json {
        let r = c.results.first().context("no result")?;
        let e = r.episodes.first().context("no episode")?;
        let kinds: Vec<String> = sim.scenario().kind_names();
        let v = serde_json::json!({
            "scenario": c.scenario,
            "policy": r.policy,
            "clairvoyant": r.clairvoyant,
            "seed": seed,
            "summary": metrics::summarize(e, &kinds),
            "tasks": e.tasks,
            "slots": e.slots,
            "estimates": e.estimates,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        if let Some(dir) = &out.plot {
            plot::write_plots(&c, dir)?;
        }
        return Ok(());
    }
    emit(&c, &out)?;
    Ok(())
}

/// `compare`: policies over seeds, the same workloads for each.
pub(crate) fn compare(a: CompareArgs) -> Result<()> {
    let CompareArgs {
        scenario,
        policies: names,
        seeds,
        seed_base,
        model,
        variants,
        forecast,
        reserve,
        out,
    } = a;
    if seeds == 0 {
        bail!("--seeds must be at least 1");
    }
    if forecast == Some(0) {
        bail!("--forecast: the interval must be at least 1 slot");
    }
    let mut sim = load_with(&scenario, variants)?;
    if let Some(n) = forecast {
        sim = sim.forecast(n);
    }
    if reserve {
        sim = sim.reserve();
    }
    let names: Vec<String> = if names.is_empty() {
        let plain: Vec<String> = std::iter::once(policies::TAPFINGER)
            .chain(policies::every_policy())
            .map(|s| s.to_string())
            .collect();
        let placers: &[&str] = if sim.scenario().gangs.is_some() {
            &["", "+pack-first", "+spread"]
        } else {
            &[""]
        };
        let all: Vec<String> = placers
            .iter()
            .flat_map(|s| plain.iter().map(move |p| format!("{p}{s}")))
            .collect();
        all
    } else {
        names
    };
    let seed_list: Vec<u64> = (seed_base..seed_base.saturating_add(seeds)).collect();
    let mut progress = Progress::new(seeds * names.len() as u64);
    let c = report::compare_with(&sim, &names, &seed_list, model.as_deref(), &mut || {
        progress.tick()
    })?;
    progress.finish();
    emit(&c, &out)?;
    Ok(())
}

/// `suite`: one policy against every baseline on generated scenarios.
pub(crate) fn suite(a: SuiteArgs) -> Result<()> {
    let SuiteArgs {
        generator_seeds,
        scenarios,
        family,
        seeds,
        seed_base,
        candidate,
        model,
        threads,
        estimates,
        json,
    } = a;
    if seeds == 0 {
        bail!("--seeds must be at least 1");
    }
    use tapfinger_sim::suite::Scenarios;
    let scenarios = match (scenarios, generator_seeds) {
        (Some(dir), _) => {
            let s = Scenarios::folder(&dir)
                .with_context(|| format!("cannot read the folder {}", dir.display()))?;
            if s.names().is_empty() {
                bail!("{}: no *.toml scenario files", dir.display());
            }
            s
        }
        (None, Some(seeds)) => Scenarios::Generated {
            family: family.unwrap_or_default(),
            seeds,
        },
        (None, None) => bail!("give --generator-seeds or --scenarios"),
    };
    let cfg = tapfinger_sim::suite::SuiteConfig {
        scenarios,
        seeds,
        seed_base,
        candidate,
        model,
        threads: threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        profile_hints: estimates.profile_hints,
        declare_work: estimates.declare_work,
        start_weight: estimates.start_weight,
    };
    let n = cfg.scenarios.names().len() as u64;
    let progress = std::sync::Mutex::new(Progress::new(n).unit("scenarios"));
    let s = tapfinger_sim::suite::run(&cfg, &|| {
        if let Ok(mut p) = progress.lock() {
            p.tick();
        }
    })?;
    if let Ok(p) = progress.lock() {
        p.finish();
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print!("{}", tapfinger_sim::suite::table(&s));
    }
    Ok(())
}
