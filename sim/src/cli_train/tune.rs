//! `tapfinger-sim tune --workload FILE`: fine-tune the learned policy on a cluster's own
//! observed workload (its twin), gated on the twin ([`tapfinger_sim::tune`]): for a user without
//! a coordinator. The training scenario is the twin of the earlier tasks (those arrivals on
//! those boxes at the estimator's speeds; each episode replays them, the policies' draws seeded
//! anew); the candidate is written to `--out` only if it passes the gate.

use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::time::Duration;
use tapfinger::twin::Workload;
use tapfinger_sim::tune::{Tuning, fine_tune, split, twin};

/// Arguments of `tune`.
#[derive(clap::Args)]
pub(crate) struct TuneArgs {
    /// The observed workload (`tapfinger-agent workload export`, `tapfinger-sim run --twin`).
    #[arg(long)]
    workload: PathBuf,
    /// The model to start from: `general` (the shipped general model) or a checkpoint folder.
    #[arg(long, default_value = "general")]
    from: PathBuf,
    /// Where the candidate goes if it passes the gate.
    #[arg(long, default_value = "out/tune")]
    out: PathBuf,
    /// The latest share of the tasks (by arrival) kept for the gate, never trained on.
    #[arg(long, default_value_t = 0.2)]
    holdout: f64,
    /// Training time budget, minutes.
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// At most this many training iterations (0: as many as the time allows).
    #[arg(long, default_value_t = 0)]
    iterations: u64,
    /// Learning rate.
    #[arg(long, default_value_t = 1e-4)]
    lr: f64,
    /// How much better than the model it started from (a fraction of its average JCT) the
    /// candidate must be on the gate window.
    #[arg(long, default_value_t = tapfinger_sim::tune::MIN_GAIN)]
    min_gain: f64,
    /// Seed of the training episodes.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// `tune`.
pub(crate) fn tune(a: TuneArgs) -> Result<()> {
    if !(a.minutes.is_finite() && a.minutes > 0.0) {
        bail!("--minutes must be a positive number");
    }
    let text =
        std::fs::read_to_string(&a.workload).with_context(|| a.workload.display().to_string())?;
    let w: Workload =
        serde_json::from_str(&text).with_context(|| a.workload.display().to_string())?;
    w.check()
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.workload.display()))?;
    let (train_w, gate_w) = split(&w, a.holdout)?;
    let held = gate_w.tasks.len();
    eprintln!(
        "{} tasks: {} to train on, the latest {held} for the gate",
        w.tasks.len(),
        train_w.tasks.len()
    );
    let dims = twin(&train_w, "twin-train")?.dims();
    let (start, start_cfg) = if a.from.as_os_str() == "general" && !a.from.exists() {
        tapfinger::model::checkpoint::GENERAL.load_net(&dims)?
    } else {
        let (net, cfg, _) = tapfinger::model::checkpoint::load_net_path(&a.from, &dims)?;
        (net, cfg)
    };
    let tuning = Tuning {
        holdout: a.holdout,
        iterations: a.iterations,
        budget: Some(Duration::from_secs_f64(a.minutes * 60.0)),
        lr: a.lr,
        epochs: None,
        minibatch: None,
        seed: a.seed,
        min_gain: a.min_gain,
    };
    let tuned = fine_tune(&w, (&start, &start_cfg), &tuning, &mut |i, jct| {
        eprintln!("iteration {i}: training average JCT {jct:.2}");
    })?;
    let (g, done, trainer) = (tuned.gate, tuned.iterations, tuned.trainer);
    println!("gate window ({held} tasks), average JCT on its twin:");
    for (name, j) in &g.baselines {
        println!("  {name:<18} {j:>10.2}");
    }
    println!("  {:<18} {:>10.2}", "model before", g.before);
    println!(
        "  {:<18} {:>10.2}  ({done} iterations)",
        "candidate", g.candidate
    );
    let (bname, bjct) = &g.best;
    if g.passed {
        trainer.save(&a.out)?;
        println!(
            "passed: {:.2} beats {bname} ({bjct:.2}) and the model before ({:.2}) by {}; written to {}",
            g.candidate,
            g.before,
            a.min_gain,
            a.out.display()
        );
        Ok(())
    } else {
        bail!(
            "refused by the gate: the candidate's {:.2} does not beat both {bname} ({bjct:.2}) and the model before ({:.2}) by {}; nothing written",
            g.candidate,
            g.before,
            a.min_gain
        )
    }
}
