//! `tapfinger-sim plan` (the least-cost plan of one layer-chain job, HeterPS-style) and
//! `tapfinger-sim plan-bench` (every planner on random chains, against the exact optimum).

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use tapfinger::plan::{Job, Plan, PlanError, Prices, Problem, exact, random, simple};
use tapfinger_sim::planner::{self, Learned, PlannerConfig, PlannerNet};

/// Arguments of `plan`.
#[derive(clap::Args)]
pub(crate) struct PlanArgs {
    /// The job: a chain of layers with their time per batch on each resource type (TOML,
    /// docs/PLANNING.md).
    #[arg(long)]
    job: PathBuf,
    /// The resource types: kind, price per unit-hour, units on offer, scaling (TOML).
    #[arg(long)]
    prices: PathBuf,
    /// exact, learned, greedy, cpu-only or gpu-only.
    #[arg(long, default_value = "exact")]
    planner: String,
    /// The learned planner's folder (model.bpk, train.json) [default: the shipped one].
    #[arg(long, value_name = "DIR")]
    planner_model: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Arguments of `plan-bench`.
#[derive(clap::Args)]
pub(crate) struct PlanBenchArgs {
    /// Random chains per setting (unlimited units, limited units).
    #[arg(long, default_value_t = 200)]
    chains: u64,
    /// First generator seed (seeds below 100 are for development; the learned planner trains
    /// on seeds from 1,000,000 up).
    #[arg(long, default_value_t = 100)]
    first_seed: u64,
    /// The learned planner's folder [default: the shipped one].
    #[arg(long, value_name = "DIR")]
    planner_model: Option<PathBuf>,
}

/// Arguments of `train-planner`.
#[derive(clap::Args)]
pub(crate) struct TrainPlannerArgs {
    /// Stop after this many minutes.
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// Stop after this many iterations (whichever comes first).
    #[arg(long)]
    iterations: Option<u64>,
    /// Output folder (model.bpk, train.json, curve.csv).
    #[arg(long, default_value = "out/planner")]
    out: PathBuf,
    /// Seed of the weights and the draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// `train-planner`: REINFORCE on random chains; the curve's development ratio every 25
/// iterations; the model is saved then and at the end.
pub(crate) fn train_planner(a: TrainPlannerArgs) -> Result<()> {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let cfg = planner::train::TrainConfig {
        seed: a.seed,
        ..Default::default()
    };
    let mut t = planner::train::Trainer::new(cfg);
    let started = std::time::Instant::now();
    let limit = std::time::Duration::from_secs_f64(a.minutes * 60.0);
    while started.elapsed() < limit && a.iterations.is_none_or(|n| t.iteration < n) {
        let mut point = t.step();
        if t.iteration.is_multiple_of(25) {
            point.dev_ratio = planner::train::dev_ratio(&t.inference_net());
            eprintln!(
                "iteration {}: draws' mean cost {:.3}× their best, {:.1}% missed; greedy on development chains {:.4}× exact ({:.0} s)",
                point.iteration,
                point.spread,
                100.0 * point.missed,
                point.dev_ratio,
                started.elapsed().as_secs_f64()
            );
            t.curve.push(point);
            t.save(&a.out, &command)?;
        }
    }
    t.save(&a.out, &command)?;
    eprintln!("saved {} after {} iterations", a.out.display(), t.iteration);
    Ok(())
}

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("{}", path.display()))
}

/// Every planner by name (`learned`: the shipped learned planner).
fn run_planner(name: &str, p: &Problem, learned: &Learned) -> Result<Result<Plan, PlanError>> {
    Ok(match name {
        "exact" => exact::plan(p),
        "learned" => learned.plan(p),
        "greedy" => simple::greedy(p),
        "cpu-only" => simple::cpu_only(p),
        "gpu-only" => simple::gpu_only(p),
        other => bail!("unknown planner {other:?}: exact, learned, greedy, cpu-only or gpu-only"),
    })
}

const PLANNERS: [&str; 5] = ["exact", "learned", "greedy", "cpu-only", "gpu-only"];

/// The learned planner from `dir`, or the shipped one.
fn load_learned(dir: Option<&Path>) -> Result<Learned> {
    Ok(match dir {
        None => Learned::shipped()?,
        Some(d) => {
            let model = std::fs::read(d.join("model.bpk"))
                .with_context(|| format!("cannot read {}", d.join("model.bpk").display()))?;
            let json = std::fs::read_to_string(d.join("train.json"))
                .with_context(|| format!("cannot read {}", d.join("train.json").display()))?;
            Learned::from_bytes(model, &json, &d.display().to_string())?
        }
    })
}

/// `plan`: print the plan, its throughput and cost, and what the other planners would cost.
pub(crate) fn plan(a: PlanArgs) -> Result<()> {
    let job: Job = read(&a.job)?;
    let prices: Prices = read(&a.prices)?;
    let p = Problem::new(job, prices)?;
    let learned = load_learned(a.planner_model.as_deref())?;
    let plan = run_planner(&a.planner, &p, &learned)??;
    let others: Vec<(&str, Result<Plan, PlanError>)> = PLANNERS
        .iter()
        .filter(|&&n| n != a.planner)
        .map(|&n| Ok((n, run_planner(n, &p, &learned)?)))
        .collect::<Result<_>>()?;
    if a.json {
        let alt: serde_json::Map<String, serde_json::Value> = others
            .iter()
            .map(|(n, r)| {
                let v = match r {
                    Ok(o) => serde_json::json!({ "cost": o.cost, "throughput": o.throughput }),
                    Err(e) => serde_json::json!({ "refused": e.to_string() }),
                };
                (n.to_string(), v)
            })
            .collect();
        let mut v = serde_json::to_value(&plan)?;
        v["alternatives"] = serde_json::Value::Object(alt);
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let j = &p.job;
    println!(
        "job {:?}: {} layers, target {} batches/s, {} batches",
        j.name,
        j.layers.len(),
        j.throughput,
        j.batches
    );
    println!(
        "{} plan: throughput {:.2} batches/s, {:.4} per hour for {:.3} h, cost {:.4}",
        plan.planner, plan.throughput, plan.cost_per_hour, plan.hours, plan.cost
    );
    println!(
        "{:<6} {:<32} {:<10} {:>6} {:>12}",
        "stage", "layers", "resource", "units", "batches/s"
    );
    for (i, s) in plan.stages.iter().enumerate() {
        let names: Vec<&str> = j.layers[s.first..=s.last]
            .iter()
            .map(|l| l.name.as_str())
            .collect();
        let mut layers = format!("{}-{} {}", s.first + 1, s.last + 1, names.join(","));
        if layers.len() > 32 {
            layers.truncate(29);
            layers.push_str("...");
        }
        println!(
            "{:<6} {:<32} {:<10} {:>6} {:>12.2}",
            i + 1,
            layers,
            s.resource,
            s.units,
            s.throughput
        );
    }
    for (n, r) in &others {
        match r {
            Ok(o) => println!(
                "  {n:<9} cost {:.4} ({:.2}× this plan)",
                o.cost,
                o.cost / plan.cost
            ),
            Err(e) => println!("  {n:<9} {e}"),
        }
    }
    Ok(())
}

/// A planner as the bench calls it.
type PlanFn<'a> = dyn Fn(&Problem) -> Result<Plan, PlanError> + 'a;

/// One planner's record over a set of chains.
#[derive(Default)]
struct Tally {
    /// Chains planned.
    plans: usize,
    /// Chains a planner found no plan for.
    refused: usize,
    /// Each plan's price over the exact planner's.
    ratios: Vec<f64>,
}

impl Tally {
    /// Count one chain's outcome, against the exact plan's cost `best` where there is one.
    fn add(&mut self, plan: Result<Plan, PlanError>, best: Option<f64>) {
        match plan {
            Ok(plan) => {
                self.plans += 1;
                if let Some(b) = best {
                    self.ratios.push(plan.cost / b);
                }
            }
            Err(_) => self.refused += 1,
        }
    }
}

/// `plan-bench`: every planner on random chains, unlimited and limited units, against exact.
pub(crate) fn bench(a: PlanBenchArgs) -> Result<()> {
    println!(
        "plan-bench: {} random chains per setting (unlimited, limited: the bench's family; varied: a wider one), generator seeds {}..{}; cost relative to the exact plan",
        a.chains,
        a.first_seed,
        a.first_seed + a.chains
    );
    println!(
        "{:<10} {:<22} {:>7} {:>8} {:>10} {:>10} {:>8}",
        "units", "planner", "plans", "refused", "mean ×", "worst ×", "≤ 1.05×"
    );
    let learned = load_learned(a.planner_model.as_deref())?;
    // What learning added: the same network, decoding and draws with untrained weights.
    let device = burn::tensor::Device::flex();
    device.seed(0);
    let fresh_net = PlannerNet::new(&PlannerConfig::default(), &device);
    let untrained = Learned::new(fresh_net.clone(), 0);
    // What the local search adds: the network's draws alone, and the search from greedy plans.
    let untrained_ns = Learned::new(fresh_net, 0).with_search(false);
    let learned_ns = load_learned(a.planner_model.as_deref())?.with_search(false);
    let extra: [(&str, &PlanFn); 4] = [
        ("untrained", &|p| untrained.plan(p)),
        ("untrained, no search", &|p| untrained_ns.plan(p)),
        ("learned, no search", &|p| learned_ns.plan(p)),
        ("greedy + search", &|p| {
            simple::greedy(p).map(|g| tapfinger::plan::improve::improve(p, g))
        }),
    ];
    for setting in ["unlimited", "limited", "varied"] {
        let mut tallies: Vec<Tally> = PLANNERS.iter().map(|_| Tally::default()).collect();
        let mut others: Vec<Tally> = extra.iter().map(|_| Tally::default()).collect();
        for seed in a.first_seed..a.first_seed + a.chains {
            let (job, prices) = match setting {
                "unlimited" => random::chain(seed, false),
                "limited" => random::chain(seed, true),
                _ => random::varied(seed),
            };
            let p = Problem::new(job, prices)?;
            let best = exact::plan(&p).ok().map(|b| b.cost);
            for (t, name) in tallies.iter_mut().zip(PLANNERS) {
                t.add(run_planner(name, &p, &learned)?, best);
            }
            for (t, (_, planner)) in others.iter_mut().zip(&extra) {
                t.add(planner(&p), best);
            }
        }
        for (t, name) in tallies
            .iter()
            .zip(PLANNERS)
            .chain(others.iter().zip(extra.iter().map(|e| e.0)))
        {
            let within = t.ratios.iter().filter(|&&r| r <= 1.05).count();
            let mean = t.ratios.iter().sum::<f64>() / t.ratios.len().max(1) as f64;
            let worst = t.ratios.iter().copied().fold(0.0, f64::max);
            println!(
                "{:<10} {:<22} {:>7} {:>8} {:>10.3} {:>10.3} {:>8}",
                setting, name, t.plans, t.refused, mean, worst, within
            );
        }
    }
    Ok(())
}
