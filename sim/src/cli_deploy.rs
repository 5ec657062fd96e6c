//! `tapfinger-sim deploy-replay`: a scenario's workload run window by window as a deployment
//! runs it, the guard choosing each window's policy from the previous window's twin
//! ([`tapfinger_sim::deployment`]); and `tapfinger-sim guard`: one observed workload judged as
//! the coordinator's guard judges it ([`tapfinger_sim::guard::on_workload`]).

use anyhow::{Result, bail};

/// Arguments of `deploy-replay`.
#[cfg(feature = "train")]
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
    /// The learned policy's model: a checkpoint folder or its model.safetensors (default: the
    /// model shipped for the scenario, else the general model).
    #[arg(long)]
    model: Option<std::path::PathBuf>,
    /// Fine-tune the version of the learned policy in use after every so many windows, on the
    /// workload of the windows since the last fine-tune, as the coordinator does on what its
    /// agents observed (0: never).
    #[arg(long, default_value_t = 0)]
    tune_every: usize,
    /// Training iterations of each fine-tune.
    #[arg(long, default_value_t = 20)]
    tune_iterations: u64,
    /// The latest share of the tasks each fine-tune learns from that it keeps for its gate.
    #[arg(long, default_value_t = 0.2)]
    tune_holdout: f64,
    /// Learning rate of each fine-tune.
    #[arg(long, default_value_t = 1e-4)]
    tune_lr: f64,
    /// How much better than the version in use (a fraction of its average JCT) a fine-tuned
    /// candidate must be on its gate window, beside beating every deployable baseline there.
    #[arg(long, default_value_t = tapfinger_sim::tune::MIN_GAIN)]
    tune_min_gain: f64,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

/// `deploy-replay`.
#[cfg(feature = "train")]
pub(crate) fn deploy_replay(a: DeployArgs) -> Result<()> {
    if a.seeds == 0 {
        bail!("--seeds must be at least 1");
    }
    if !(0.0..1.0).contains(&a.margin) {
        bail!("--margin must be in [0, 1), got {}", a.margin);
    }
    if a.tune_every > 0 && a.tune_iterations == 0 {
        bail!("--tune-every needs --tune-iterations above 0");
    }
    if !(a.tune_lr.is_finite() && a.tune_lr > 0.0) {
        bail!("--tune-lr must be a positive number, got {}", a.tune_lr);
    }
    let sc = crate::cli_compare::load(&a.scenario)?.scenario().clone();
    let tune = (a.tune_every > 0).then_some(tapfinger_sim::deployment::TuneEvery {
        every: a.tune_every,
        tuning: tapfinger_sim::tune::Tuning {
            holdout: a.tune_holdout,
            iterations: a.tune_iterations,
            budget: None,
            lr: a.tune_lr,
            epochs: None,
            minibatch: None,
            seed: 0,
            min_gain: a.tune_min_gain,
        },
    });
    let mut all = Vec::new();
    let mut bar = crate::cli_progress::Progress::new(a.seeds.saturating_mul(a.windows as u64))
        .unit("windows");
    for seed in a.seed_base..a.seed_base.saturating_add(a.seeds) {
        let settings = tapfinger_sim::deployment::Settings {
            windows: a.windows,
            margin: a.margin,
            start: &a.start,
            model: a.model.as_deref(),
            tune: tune.as_ref(),
        };
        let r = tapfinger_sim::deployment::replay_observed(&sc, seed, &settings, &mut |w| {
            bar.tick();
            let guesses = w.extrapolated();
            if !guesses.is_empty() {
                let list: Vec<String> = guesses
                    .iter()
                    .map(|(n, s)| format!("{n} {:.0} %", s * 100.0))
                    .collect();
                bar.note(&format!(
                        "seed {seed}, window {}: the twin is mostly extrapolated for {} of their slots (speeds the window never measured): those figures are guesses",
                        w.window,
                        list.join(", ")
                    ));
            }
        })?;
        if !a.json {
            print!("{}", tapfinger_sim::deployment::table(&r));
        }
        all.push(r);
    }
    bar.finish();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&all)?);
    }
    Ok(())
}

/// Arguments of `guard`.
#[derive(clap::Args)]
pub(crate) struct GuardArgs {
    /// An observed workload (`tapfinger-agent workload export`, `tapfinger-sim run --twin`).
    #[arg(long)]
    workload: std::path::PathBuf,
    /// The policy the cluster ran it under.
    #[arg(long, default_value = "tapfinger")]
    current: String,
    /// A checkpoint directory for the learned policy (default: the shipped general model).
    #[arg(long)]
    model: Option<std::path::PathBuf>,
    /// How much better on the twin another policy must be to replace the one in use.
    #[arg(long, default_value_t = tapfinger_sim::guard::MARGIN)]
    margin: f64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// `guard`: the coordinator's judgement of one workload, for a cluster without one (or to see
/// why it switched): the twin replayed under the learned policy and every deployable baseline,
/// and which policy the guard would have the cluster run next.
pub(crate) fn guard(a: GuardArgs) -> Result<()> {
    if !(0.0..1.0).contains(&a.margin) {
        bail!("--margin must be in [0, 1), got {}", a.margin);
    }
    let text = std::fs::read_to_string(&a.workload)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.workload.display()))?;
    let w: tapfinger::twin::Workload = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.workload.display()))?;
    w.check()
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.workload.display()))?;
    let files = match &a.model {
        Some(dir) => Some(
            tapfinger::model::checkpoint::read_files(dir)
                .map_err(|e| anyhow::anyhow!("--model: {e}"))?,
        ),
        None => None,
    };
    let learned = match &files {
        Some((model, json)) => tapfinger_sim::guard::Learned::Checkpoint {
            model,
            train_json: json,
        },
        None => tapfinger_sim::guard::Learned::Shipped,
    };
    let t0 = std::time::Instant::now();
    let d = tapfinger_sim::guard::on_workload(&w, &a.current, learned, a.margin, 0)?;
    let seconds = t0.elapsed().as_secs_f64();
    if a.json {
        let mut v = serde_json::to_value(&d)?;
        v["seconds"] = serde_json::json!(seconds);
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{} tasks ({} finished); measured under {}: average JCT {:.2} slots",
        w.tasks.len(),
        w.jcts().len(),
        a.current,
        d.measured
    );
    println!(
        "{:<18} {:>12} {:>13} {:>8}",
        "policy", "twin avg JCT", "extrapolated", "gain"
    );
    let of = |v: &[(String, f64)], name: &str| v.iter().find(|(n, _)| n == name).map(|(_, x)| *x);
    for (name, j) in &d.twin_jcts {
        let off = of(&d.unsupported, name).map_or("-".into(), |u| format!("{:.0} %", u * 100.0));
        let gain = of(&d.gains, name).map_or("-".into(), |g| format!("{:+.1} %", g * 100.0));
        println!("{name:<18} {j:>12.2} {off:>13} {gain:>8}");
    }
    println!(
        "next: {}{} (margin {}; judged in {seconds:.2} s)",
        d.policy,
        if d.switched { " (switch)" } else { " (stays)" },
        a.margin
    );
    Ok(())
}
