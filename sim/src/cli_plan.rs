//! `tapfinger-sim plan` (the least-cost plan of one layer-chain job, HeterPS-style) and
//! `tapfinger-sim plan-bench` (every planner on random chains, against the exact optimum).

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use tapfinger::plan::{Job, Plan, PlanError, Prices, Problem, exact, random, simple};

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
    /// First generator seed (seeds below 100 are for training the learned planner).
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

/// One planner's record over a set of chains.
#[derive(Default)]
struct Tally {
    plans: usize,
    refused: usize,
    ratios: Vec<f64>,
}

/// `plan-bench`: every planner on random chains, unlimited and limited units, against exact.
pub(crate) fn bench(a: PlanBenchArgs) -> Result<()> {
    println!(
        "plan-bench: {} random chains per setting, generator seeds {}..{}; cost relative to the exact plan",
        a.chains,
        a.first_seed,
        a.first_seed + a.chains
    );
    println!(
        "{:<10} {:<10} {:>7} {:>8} {:>10} {:>10}",
        "units", "planner", "plans", "refused", "mean ×", "worst ×"
    );
    for limited in [false, true] {
        let mut tallies: Vec<Tally> = PLANNERS.iter().map(|_| Tally::default()).collect();
        for seed in a.first_seed..a.first_seed + a.chains {
            let (job, prices) = random::chain(seed, limited);
            let p = Problem::new(job, prices)?;
            let best = exact::plan(&p).ok().map(|b| b.cost);
            for (t, name) in tallies.iter_mut().zip(PLANNERS) {
                match run_planner(name, &p)? {
                    Ok(plan) => {
                        t.plans += 1;
                        if let Some(b) = best {
                            t.ratios.push(plan.cost / b);
                        }
                    }
                    Err(_) => t.refused += 1,
                }
            }
        }
        for (t, name) in tallies.iter().zip(PLANNERS) {
            let mean = t.ratios.iter().sum::<f64>() / t.ratios.len().max(1) as f64;
            let worst = t.ratios.iter().copied().fold(0.0, f64::max);
            println!(
                "{:<10} {:<10} {:>7} {:>8} {:>10.3} {:>10.3}",
                if limited { "limited" } else { "unlimited" },
                name,
                t.plans,
                t.refused,
                mean,
                worst
            );
        }
    }
    Ok(())
}
