//! `tapfinger-sim start-estimates`: how far the start estimates users see are from when tasks
//! started ([`tapfinger_sim::start_estimates`]), per scenario.

use anyhow::Result;

/// Arguments of `start-estimates`.
#[derive(Debug, clap::Args)]
pub(crate) struct StartEstimatesArgs {
    /// Comma-separated presets, generated scenarios (`gen:N`, ...) or scenario files.
    #[arg(long, value_delimiter = ',', default_value = "hetero6")]
    scenarios: Vec<String>,
    /// The policy that runs them (a baseline's name, or `tapfinger`).
    #[arg(long, default_value = "tiresias-share")]
    policy: String,
    /// Workloads per scenario.
    #[arg(long, default_value_t = 5)]
    seeds: u64,
    /// First workload seed.
    #[arg(long, default_value_t = 100)]
    seed_base: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub(crate) fn start_estimates(a: StartEstimatesArgs) -> Result<()> {
    let seeds: Vec<u64> = (a.seed_base..a.seed_base + a.seeds).collect();
    let mut rows = Vec::new();
    for name in &a.scenarios {
        let sim = crate::cli_compare::load(name)?;
        let e = tapfinger_sim::start_estimates::measure(&sim, &a.policy, &seeds)?;
        rows.push((name.clone(), e));
    }
    if a.json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|(n, e)| serde_json::json!({"scenario": n, "error": e}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "| scenario | policy | tasks (estimated) | median abs. error (slots) | p90 | median wait | within max(1 slot, ¼ wait) | at or after the start |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (n, e) in rows {
        println!(
            "| `{n}` | `{}` | {} ({}) | {:.1} | {:.1} | {:.1} | {:.0} % | {:.0} % |",
            e.policy,
            e.tasks,
            e.estimated,
            e.median_abs,
            e.p90_abs,
            e.median_wait,
            100.0 * e.close,
            100.0 * e.late
        );
    }
    Ok(())
}
