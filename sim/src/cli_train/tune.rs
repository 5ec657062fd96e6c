//! `tapfinger-sim tune --workload FILE`: fine-tune the learned policy on a cluster's own
//! observed workload (its twin), gated on the twin ([`tapfinger_sim::tune`]): for a user without
//! a coordinator. The training scenario is the twin of the earlier tasks (those arrivals on
//! those boxes at the estimator's speeds; each episode replays them, the policies' draws seeded
//! anew); the candidate is written to `--out` only if it passes the gate.

use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tapfinger::twin::Workload;
use tapfinger_sim::policies;
use tapfinger_sim::train::Trainer;
use tapfinger_sim::tune::{gate, split, twin};

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
    let train_sim = twin(&train_w, "twin-train")?;
    let gate_sim = twin(&gate_w, "twin-gate")?;
    eprintln!(
        "{} tasks: {} to train on, the latest {held} for the gate",
        w.tasks.len(),
        train_w.tasks.len()
    );
    let (start, start_cfg) = if a.from.as_os_str() == "general" && !a.from.exists() {
        tapfinger::model::checkpoint::GENERAL.load(&train_sim.dims())?
    } else {
        let (net, cfg, _) = tapfinger::model::checkpoint::load_path(&a.from, &train_sim.dims())?;
        (net, cfg)
    };
    let cfg = super::setup::new_run(
        &train_sim,
        start_cfg.clone(),
        a.seed,
        None,
        Some(a.lr),
        0,
        policies::AUTO_TEACHER.into(),
    )?;
    let mut trainer = Trainer::with_net(train_sim, cfg, start.clone())?;
    let t0 = Instant::now();
    let budget = Duration::from_secs_f64(a.minutes * 60.0);
    let mut done = 0u64;
    while t0.elapsed() < budget && (a.iterations == 0 || done < a.iterations) {
        let p = trainer.iterate()?;
        done += 1;
        eprintln!("iteration {done}: training average JCT {:.2}", p.avg_jct);
    }
    let candidate = trainer.inference_net();
    let g = gate(
        &gate_sim,
        (&candidate, &trainer.cfg.net),
        (&start, &start_cfg),
        a.min_gain,
    )?;
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
