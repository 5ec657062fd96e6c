//! `tapfinger-sim train`'s set-up: a new run's configuration, the network settings that
//! `--sharing` and `--two-point` choose, and the development scenarios that judge a general
//! model's checkpoints (`--select` with `--generator-seeds`).

use anyhow::{Context, Result, bail};
use tapfinger::model::net::NetConfig;
use tapfinger_sim::train::TrainConfig;
use tapfinger_sim::{Simulator, policies};

/// The configuration of a new training run (from scratch or `--from` a model) with network
/// `net`; an imitation teacher the learned policy cannot copy is refused.
pub(super) fn new_run(
    sim: &Simulator,
    net: NetConfig,
    seed: u64,
    envs: Option<u64>,
    lr: Option<f64>,
    imitate: u64,
    teacher: String,
) -> Result<TrainConfig> {
    if imitate > 0
        && let Err(why) = policies::check_teacher(sim, &teacher, &net)
    {
        bail!("teacher {teacher:?}: {why}");
    }
    let mut cfg = TrainConfig::new(net.dims.clone(), seed);
    cfg.net = net;
    if let Some(n) = envs {
        cfg.envs = usize::try_from(n).context("--envs")?;
    }
    if let Some(lr) = lr {
        cfg.lr = lr;
    }
    cfg.imitate = imitate;
    cfg.teacher = teacher;
    Ok(cfg)
}

/// `--two-point` into a network's settings: only where its sharing has floors.
pub(super) fn set_two_point(net: &mut NetConfig, two_point: Option<f32>) -> Result<()> {
    if let Some(off) = two_point {
        if !(net.floors && net.elastic) {
            bail!(
                "--two-point chooses floors: it needs a --sharing with floors (e.g. elastic-gain-finish-floors)"
            );
        }
        if !off.is_finite() {
            bail!("--two-point must be a finite number, not {off}");
        }
        net.two_point = Some(off);
    }
    Ok(())
}

/// How fast the warm-started allocation heads' odds fall per unit above a task's minimum
/// demand (`Net::floors_near_minimum`): the greedy floor is the minimum, and a sampled one
/// more than two units above it rare (slopes 0.4 and 1.0 measured, 2026-11-27).
pub(super) const FLOOR_SLOPE: f32 = 1.0;

/// First generator seed of the development scenarios that judge a general model's checkpoints
/// (`--select` with `--generator-seeds`): below the held-out seeds, and never trained on.
const DEVELOPMENT_FROM: u64 = 9_000;

/// The first `n` development scenarios (generator seeds from [`DEVELOPMENT_FROM`], the
/// `families` in turn) and elastic Tiresias's average JCT on each one's first `workloads`
/// validation workloads: what a general model's checkpoints are judged against.
pub(super) fn development_judges(
    curriculum: &[String],
    families: &[tapfinger_sim::generate::Family],
    n: usize,
    workloads: u64,
    load: &dyn Fn(&str) -> Result<Simulator>,
) -> Result<Vec<tapfinger_sim::train::DevJudge>> {
    let seeds = DEVELOPMENT_FROM..DEVELOPMENT_FROM + n as u64;
    if seeds.end > tapfinger_sim::generate::HELD_OUT_FROM {
        bail!(
            "--select {n}: at most {} development scenarios",
            tapfinger_sim::generate::HELD_OUT_FROM - DEVELOPMENT_FROM
        );
    }
    let names: Vec<String> = seeds
        .clone()
        .map(|s| families[(s - DEVELOPMENT_FROM) as usize % families.len().max(1)].scenario(s))
        .collect();
    if curriculum
        .iter()
        .filter_map(|c| tapfinger_sim::generate::parse(c))
        .any(|(_, s)| seeds.contains(&s))
    {
        // Name them as the judges are named, in each family trained on.
        let named: Vec<String> = families
            .iter()
            .map(|f| format!("{}{}..{}", f.prefix(), seeds.start, seeds.end))
            .collect();
        bail!(
            "--generator-seeds overlaps the development scenarios {} that --select judges on",
            if named.is_empty() {
                format!("gen:{}..{}", seeds.start, seeds.end)
            } else {
                named.join(" and ")
            }
        );
    }
    names
        .iter()
        .map(|name| {
            let sim = load(name)?;
            let kinds = sim.scenario().kind_names();
            let references = (0..workloads)
                .map(|j| {
                    let r = sim.run(
                        policies::build(&sim, tapfinger_sim::train::REFERENCE)?,
                        tapfinger_sim::train::VALIDATION_SEEDS + j,
                    )?;
                    Ok(tapfinger_sim::metrics::summarize(&r, &kinds).avg_jct)
                })
                .collect::<Result<Vec<f64>>>()?;
            Ok(tapfinger_sim::train::DevJudge { sim, references })
        })
        .collect()
}
