//! `tapfinger-sim plan` (the least-cost plan of one layer-chain job, HeterPS-style) and
//! `tapfinger-sim plan-bench` (every planner on random chains, against the exact optimum).
//! The learned planner (HeterPS's LSTM) was removed: with the same local search an untrained
//! network did as well (docs/DECISIONS.md).

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use tapfinger::plan::{Job, Plan, PlanError, Prices, Problem, exact, improve, random, simple};

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
    /// exact, greedy, cpu-only or gpu-only.
    #[arg(long, default_value = "exact")]
    planner: String,
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
    /// First generator seed.
    #[arg(long, default_value_t = 100)]
    first_seed: u64,
}

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("{}", path.display()))
}

/// Every planner by name.
fn run_planner(name: &str, p: &Problem) -> Result<Result<Plan, PlanError>> {
    Ok(match name {
        "exact" => exact::plan(p),
        "greedy" => simple::greedy(p),
        "cpu-only" => simple::cpu_only(p),
        "gpu-only" => simple::gpu_only(p),
        "learned" => bail!(
            "the learned planner was removed (2026-11-29; docs/DECISIONS.md): use exact, the default"
        ),
        other => bail!("unknown planner {other:?}: exact, greedy, cpu-only or gpu-only"),
    })
}

const PLANNERS: [&str; 4] = ["exact", "greedy", "cpu-only", "gpu-only"];

/// `plan`: print the plan, its throughput and cost, and what the other planners would cost.
pub(crate) fn plan(a: PlanArgs) -> Result<()> {
    let job: Job = read(&a.job)?;
    let prices: Prices = read(&a.prices)?;
    let p = Problem::new(job, prices)?;
    let plan = run_planner(&a.planner, &p)??;
    let others: Vec<(&str, Result<Plan, PlanError>)> = PLANNERS
        .iter()
        .filter(|&&n| n != a.planner)
        .map(|&n| Ok((n, run_planner(n, &p)?)))
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
    // What the local search adds to the greedy plan.
    let extra: [(&str, &PlanFn); 1] = [("greedy + search", &|p| {
        simple::greedy(p).map(|g| improve::improve(p, g))
    })];
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
                t.add(run_planner(name, &p)?, best);
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
