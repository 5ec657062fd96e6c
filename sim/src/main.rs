//! `tapfinger-sim` command line: list presets, run one episode, compare policies. Thin: it parses
//! arguments and calls the library; every error becomes a message and a non-zero exit.

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tapfinger_sim::report::{self, Comparison};
use tapfinger_sim::{Scenario, Simulator, catalog, metrics, plot, policies};

mod cli_forecast;
mod cli_place;
mod cli_plan;
mod cli_train;

#[derive(Parser)]
#[command(
    name = "tapfinger-sim",
    version,
    about = "Simulate and compare tapfinger scheduling policies"
)]
struct Cli {
    // The subcommand (a `//` comment: clap shows doc comments as help).
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args)]
struct Output {
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

#[derive(Subcommand)]
enum Cmd {
    /// List the built-in scenario presets.
    Scenarios,
    /// Print generated scenario N as TOML (the scenario `gen:N` wherever a scenario is named;
    /// `gen-wide:N` with --family wide, `gen-long:N` with --family long). Seeds from 10000 up are held out for evaluation: never
    /// train on them.
    Generate {
        /// Generator seed.
        #[arg(long)]
        seed: u64,
        /// The family: base (`gen:N`), wide (`gen-wide:N`: larger boxes, classes that use up to
        /// 16 times their minimum demand) or long (`gen-long:N`: the base family's boxes, tasks
        /// 3-10 times as many slots long).
        #[arg(long, value_enum, default_value_t)]
        family: tapfinger_sim::generate::Family,
    },
    /// Turn a published cluster trace into a scenario that replays it (docs/TRACES.md): prints
    /// the scenario TOML, or writes it to --out; says on stderr what was left out and why.
    Import {
        /// The trace file.
        file: PathBuf,
        /// alibaba-2020 (pai_task_table), alibaba-2023 (openb_pod_list), philly
        /// (cluster_job_log), helios (cluster_log.csv) or gavel (job trace TSV).
        #[arg(long)]
        format: String,
        /// Trace seconds per slot.
        #[arg(long, default_value_t = 60.0)]
        slot_seconds: f64,
        /// Divide arrival gaps by this (> 1 replays the arrivals faster: more load).
        #[arg(long, default_value_t = 1.0)]
        compress: f64,
        /// At most this many tasks (the earliest).
        #[arg(long, default_value_t = 2000)]
        limit: usize,
        /// Gavel: training steps per second (its trace records steps, not time).
        #[arg(long, default_value_t = 10.0)]
        steps_per_second: f64,
        /// A scenario (preset or file) whose nodes the trace is replayed on; its resources must
        /// include cpu and mem [default: 4 CPU boxes and 4 GPU boxes labelled with the trace's
        /// GPU models].
        #[arg(long)]
        cluster: Option<String>,
        /// Scenario name [default: the file's stem].
        #[arg(long)]
        name: Option<String>,
        /// Write the scenario here instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Run one episode of one policy.
    Run {
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
        /// Trained model (folder or model.bpk) for `--policy tapfinger`.
        #[arg(long, value_name = "PATH")]
        model: Option<PathBuf>,
        #[command(flatten)]
        variants: Variants,
        #[command(flatten)]
        out: Output,
    },
    /// Compare policies over several seeds (the same workloads for every policy).
    Compare {
        /// Preset name or path to a scenario TOML file.
        #[arg(long, default_value = "hetero6")]
        scenario: String,
        /// Comma-separated policies (names as for `run`, LABEL=MODEL_PATH for extra trained
        /// models, NAME+PLACER for a gang placer); default: tapfinger (as for `run`), every
        /// baseline and the clairvoyant reference, and on a scenario with gangs each of them
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
        /// Trained model (folder or model.bpk) for the policy `tapfinger`.
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
    },
    /// Judge one policy against every baseline on generated scenarios (gen:N): per scenario, its
    /// average JCT over the best non-clairvoyant baseline's. Seeds from 10000 up are held out.
    Suite {
        /// Generator seeds, A..B (B excluded), e.g. 10000..10100.
        #[arg(long, value_name = "A..B", value_parser = parse_range)]
        generator_seeds: std::ops::Range<u64>,
        /// The generated family: base (`gen:N`) or wide (`gen-wide:N`).
        #[arg(long, value_enum, default_value_t)]
        family: tapfinger_sim::generate::Family,
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
        /// Trained model (folder or model.bpk) for the candidate `tapfinger`.
        #[arg(long, value_name = "PATH")]
        model: Option<PathBuf>,
        /// OS threads (default: all cores); results do not depend on it.
        #[arg(long)]
        threads: Option<usize>,
        /// Every task carries its type's profiling runs as profile hints for the speed
        /// estimator (every policy's views), as a submitter's spec may.
        #[arg(long)]
        profile_hints: bool,
        /// Every task declares its work (its size) to the speed estimator, as a submitter's
        /// spec may.
        #[arg(long)]
        declare_work: bool,
        /// A run's first slot keeps this share (0 < W ≤ 1) of its progress in every generated
        /// scenario (they have none by default): start-ups, as agents measure them.
        #[arg(long, value_name = "W", value_parser = start_weight)]
        start_weight: Option<f64>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Plot training runs side by side: per iteration, the run's training JCT over the reference
    /// baseline's on the same workloads (mean of the last 10), from each run's curve.csv.
    Curves {
        /// A run as LABEL=DIR (a training output folder); repeat for several.
        #[arg(long = "run", required = true)]
        runs: Vec<String>,
        /// The SVG file to write.
        #[arg(long)]
        out: PathBuf,
    },
    /// Train the learned TapFinger policy with PPO; checkpoints, curve CSV and plot go to --out.
    Train(Box<cli_train::TrainArgs>),
    /// The least-cost layer-to-resource plan of a layer-chain job that meets its throughput
    /// target (HeterPS): stages, units, throughput and cost (docs/PLANNING.md).
    Plan(cli_plan::PlanArgs),
    /// Every planner on random layer chains, cost against the exact plan.
    PlanBench(cli_plan::PlanBenchArgs),
    /// The task-volume forecast (ARIMA + GRU) against ARIMA and the last value on seasonal and
    /// bursty arrival series: one-step mean absolute error on held-out intervals.
    ForecastBench(cli_forecast::ForecastBenchArgs),
    /// Locality-aware placement of parameter-server jobs (LP rounding) against the exact
    /// optimum, pack-first and spreading (docs/PLACEMENT.md).
    PlaceBench(cli_place::PlaceBenchArgs),
    /// Train the learned layer-to-resource planner (LSTM, REINFORCE) on random layer chains.
    TrainPlanner(cli_plan::TrainPlannerArgs),
}

/// `A..B` as a range of whole numbers.
fn parse_range(s: &str) -> Result<std::ops::Range<u64>, String> {
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

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// A progress bar that only appears once the work has taken more than a second.
struct Progress {
    /// The bar (hidden when stderr is not a terminal).
    bar: ProgressBar,
    /// When the work began, for the rate and the estimate.
    started: Instant,
    /// Whether the bar has drawn anything (to clear it at the end).
    shown: bool,
}

impl Progress {
    fn new(total: u64) -> Self {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
        let mut p = Self {
            bar,
            started: Instant::now(),
            shown: false,
        };
        p = p.unit("episodes");
        p
    }
    fn unit(self, unit: &str) -> Self {
        if let Ok(style) = ProgressStyle::with_template(&format!(
            "{{bar:40}} {{pos}}/{{len}} {unit} {{elapsed}} (eta {{eta}})"
        )) {
            self.bar.set_style(style);
        }
        self
    }
    fn tick(&mut self) {
        if !self.shown && self.started.elapsed() > Duration::from_secs(1) {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.shown = true;
        }
        self.bar.inc(1);
    }
    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

fn load(name: &str) -> Result<Simulator> {
    Ok(Simulator::new(Scenario::load(name)?))
}

/// The same scenario run otherwise than it says (`run` and `compare`): the runs to compare it
/// against.
#[derive(Debug, Clone, Copy, clap::Args)]
struct Variants {
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
    /// `start_weight` says: the time from a decision to a task's first progress, which agents
    /// measure as its start-up.
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
    if v.profile_hints {
        sim = sim.profile_hints();
    }
    if v.declare_work {
        sim = sim.declare_work();
    }
    if let Some(w) = v.start_weight {
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

fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Scenarios => {
            for (name, desc) in catalog::presets() {
                println!("{name:<15} {desc}");
            }
            println!(
                "{:<15} a generated scenario (tapfinger-sim generate --seed N)",
                "gen:N"
            );
        }
        Cmd::Generate { seed, family } => {
            print!("{}", tapfinger_sim::generate::draw_in(family, seed).toml);
        }
        Cmd::Import {
            file,
            format,
            slot_seconds,
            compress,
            limit,
            steps_per_second,
            cluster,
            name,
            out,
        } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let opts = tapfinger_sim::import::ImportOptions {
                format,
                slot_seconds,
                compress,
                limit,
                steps_per_second,
                cluster: cluster
                    .as_deref()
                    .map(load)
                    .transpose()?
                    .map(|s| s.scenario().clone()),
                name: name.unwrap_or_else(|| {
                    file.file_stem()
                        .map_or("trace".into(), |s| s.to_string_lossy().into_owned())
                }),
            };
            let r = tapfinger_sim::import::import(&text, &opts)
                .with_context(|| format!("{}", file.display()))?;
            eprintln!("imported {} tasks in {} task types", r.tasks, r.types);
            for (why, n) in &r.skipped {
                eprintln!("left out {n}: {why}");
            }
            match out {
                Some(p) => std::fs::write(&p, &r.toml)
                    .with_context(|| format!("cannot write {}", p.display()))?,
                None => print!("{}", r.toml),
            }
        }
        Cmd::Run {
            scenario,
            policy,
            seed,
            model,
            variants,
            out,
        } => {
            let sim = load_with(&scenario, variants)?;
            let policy = policy.unwrap_or_else(|| policies::TAPFINGER.to_string());
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
        }
        Cmd::Train(args) => cli_train::train(*args)?,
        Cmd::Plan(args) => cli_plan::plan(args)?,
        Cmd::PlanBench(args) => cli_plan::bench(args)?,
        Cmd::ForecastBench(args) => cli_forecast::bench(args)?,
        Cmd::PlaceBench(args) => cli_place::bench(args),
        Cmd::TrainPlanner(args) => cli_plan::train_planner(args)?,
        Cmd::Curves { runs, out } => {
            let mut series = Vec::new();
            for r in &runs {
                let (label, dir) = r
                    .split_once('=')
                    .with_context(|| format!("--run {r:?}: expected LABEL=DIR"))?;
                let curve = tapfinger_sim::train::read_curve(Path::new(dir))?;
                let pts = tapfinger_sim::train::ratio_curve(&curve);
                if pts.is_empty() {
                    bail!(
                        "--run {r:?}: its curve has no reference JCT (trained before it was kept)"
                    );
                }
                series.push((label.to_string(), pts));
            }
            tapfinger_sim::plot::line_chart(
                &out,
                &format!(
                    "training JCT over {}'s on the same workloads",
                    tapfinger_sim::train::REFERENCE
                ),
                "iteration",
                "ratio (mean of the last 10 iterations)",
                &series,
            )?;
            println!("wrote {}", out.display());
        }
        Cmd::Suite {
            generator_seeds,
            family,
            seeds,
            seed_base,
            candidate,
            model,
            threads,
            profile_hints,
            declare_work,
            start_weight,
            json,
        } => {
            if seeds == 0 {
                bail!("--seeds must be at least 1");
            }
            let cfg = tapfinger_sim::suite::SuiteConfig {
                generator_seeds,
                family,
                seeds,
                seed_base,
                candidate,
                model,
                threads: threads
                    .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
                profile_hints,
                declare_work,
                start_weight,
            };
            let n = cfg.generator_seeds.end - cfg.generator_seeds.start;
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
        }
        Cmd::Compare {
            scenario,
            policies: names,
            seeds,
            seed_base,
            model,
            variants,
            forecast,
            reserve,
            out,
        } => {
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
                    .chain(policies::all_policies())
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
        }
    }
    Ok(())
}
