//! `tapfinger-sim deploy-replay`: a scenario's workload run window by window as a deployment
//! runs it, the guard choosing each window's policy from the previous window's twin
//! ([`tapfinger_sim::deployment`]).

use anyhow::{Result, bail};

/// Arguments of `deploy-replay`.
#[derive(clap::Args)]
pub(crate) struct DeployArgs {
    /// Preset name, `gen:N`-style name or path to a scenario TOML file.
    #[arg(long, default_value = "hetero6")]
    scenario: String,
    /// Workload seeds (from --seed-base); each is a replay of its own.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// First workload seed (below 100: development seeds).
    #[arg(long, default_value_t = 100)]
    seed_base: u64,
    /// Windows the workload is cut into (equal task counts).
    #[arg(long, default_value_t = 6)]
    windows: usize,
    /// How much better on the twin another policy must be to replace the one in use.
    #[arg(long, default_value_t = tapfinger_sim::guard::MARGIN)]
    margin: f64,
    /// The policy of the first window (default: the learned one, as a deployment starts).
    #[arg(long, default_value = "tapfinger")]
    start: String,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

/// `deploy-replay`.
pub(crate) fn deploy_replay(a: DeployArgs) -> Result<()> {
    if a.seeds == 0 {
        bail!("--seeds must be at least 1");
    }
    if !(0.0..1.0).contains(&a.margin) {
        bail!("--margin must be in [0, 1), got {}", a.margin);
    }
    let sc = crate::cli_compare::load(&a.scenario)?.scenario().clone();
    let mut all = Vec::new();
    for seed in a.seed_base..a.seed_base.saturating_add(a.seeds) {
        let r = tapfinger_sim::deployment::replay(&sc, seed, a.windows, a.margin, &a.start)?;
        if !a.json {
            print!("{}", tapfinger_sim::deployment::table(&r));
        }
        all.push(r);
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&all)?);
    }
    Ok(())
}
