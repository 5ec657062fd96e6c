//! `tapfinger-sim train`: its arguments and the training loop around [`Trainer`] (a new run, a
//! resumed one, or a fine-tune `--from` a model; a curriculum over generated scenarios); and
//! `tapfinger-sim tune` ([`tune`]): a fine-tune on an observed workload, gated on it.

use crate::cli_compare::load;
use anyhow::{Context, Result, bail};
use indicatif::ProgressBar;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tapfinger::model::net::{NetConfig, VARIANTS};
use tapfinger_sim::train::Trainer;
use tapfinger_sim::{Scenario, Simulator, policies};

mod args;
mod setup;
mod tune;
pub(crate) use args::TrainArgs;
use setup::{FLOOR_SLOPE, development_judges, new_run, set_two_point};
use tapfinger::model::sharing::Sharing;
pub(crate) use tune::{TuneArgs, tune};
mod convert;
pub(crate) use convert::{ConvertArgs, convert};

/// Run `train`: set up the trainer (new, resumed or fine-tuned), then iterate until the time or
/// the iteration budget is spent, keeping the best judged checkpoint when asked.
pub(crate) fn train(a: TrainArgs) -> Result<()> {
    if !(a.run.minutes.is_finite() && a.run.minutes > 0.0) {
        bail!("--minutes must be a positive number");
    }
    // A resumed run writes where it was resumed from unless told otherwise: two runs resumed
    // from different folders must not overwrite one shared default.
    let out = a.run.out.clone().unwrap_or_else(|| {
        a.run
            .resume
            .clone()
            .unwrap_or_else(|| PathBuf::from("out/train"))
    });
    let sim = load_for(&a, &a.run.scenario)?;
    let mut trainer = match (&a.run.resume, &a.run.from) {
        (Some(dir), _) => Trainer::resume(sim, dir)?,
        (None, Some(model)) => fine_tune(&a, sim, model)?,
        (None, None) => {
            let cfg = new_config(&a, &sim)?;
            Trainer::new(sim, cfg)
        }
    };
    override_settings(&a, &mut trainer)?;
    let curriculum = curriculum(&a)?;
    let mut selection = Selection::new(&a, &curriculum, out)?;
    selection.start(&trainer)?;
    iterate(&a, &mut trainer, &curriculum, &mut selection)
}

/// A scenario as this run loads every one (training, curriculum, development judges): with the
/// profile hints and declared work it asks for.
fn load_for(a: &TrainArgs, name: &str) -> Result<Simulator> {
    let mut sim = load(name)?;
    // By name or by the name inside a saved file: a held-out scenario is never trained on.
    for n in [name, sim.scenario().name.as_str()] {
        if let Some((_, seed)) = tapfinger_sim::generate::held_out(n) {
            bail!(
                "{n}: generator seed {seed} is held out for evaluation (training uses seeds below {})",
                tapfinger_sim::generate::HELD_OUT_FROM
            );
        }
    }
    if a.run.profile_hints {
        sim = sim.profile_hints();
    }
    if a.run.declare_work {
        sim = sim.declare_work();
    }
    Ok(sim)
}

/// `--from MODEL`: a new run from a model's weights (its allocation heads started near the
/// minimum demand when floors are new to it).
fn fine_tune(a: &TrainArgs, sim: Simulator, model: &std::path::Path) -> Result<Trainer> {
    use tapfinger::model::checkpoint as ck;
    let shipped = model.as_os_str() == "general" && !model.exists();
    let (net, mut net_cfg, trained_on) = if a.model.sizes {
        // Widened to schema 8: zero weights for the size features (`widen_to_sized`).
        let (label, (bytes, json)) = if shipped {
            let g = &ck::GENERAL;
            (
                "shipped general model".to_string(),
                (g.model.to_vec(), g.config.to_string()),
            )
        } else {
            (model.display().to_string(), ck::read_path(model)?)
        };
        let (bytes, json) = ck::widen_to_sized(&bytes, &json, &label)?;
        let (net, cfg, on) = ck::load_net_bytes(bytes, &json, &label, &sim.dims())?;
        (net, cfg, format!("{on}, widened to the size features"))
    } else if shipped {
        let (net, cfg) = ck::GENERAL.load_net(&sim.dims())?;
        (
            net,
            cfg,
            "generated scenarios (the shipped general model)".to_string(),
        )
    } else {
        ck::load_net_path(model, &sim.dims())?
    };
    if let Some(k) = a.model.focus {
        net_cfg.focus = k;
    }
    let had_floors = net_cfg.floors;
    if let Some(s) = a.model.sharing.0 {
        s.apply(&mut net_cfg);
    }
    set_two_point(&mut net_cfg, a.model.two_point)?;
    // A model trained without floors never trained its allocation heads: they start near the
    // minimum demand (two points: even, the offset decides) instead of at random over the grid.
    let net = if net_cfg.floors && !had_floors {
        let slope = if net_cfg.two_point.is_some() {
            0.0
        } else {
            FLOOR_SLOPE
        };
        net.floors_near_minimum(slope)
    } else {
        net
    };
    let cfg = new_run(
        &sim,
        net_cfg,
        a.run.seed,
        a.run.envs,
        a.optim.lr,
        a.optim.imitate,
        a.optim.teacher.clone(),
    )?;
    eprintln!(
        "fine-tuning {} (trained on {trained_on}) on {}",
        model.display(),
        sim.scenario().name
    );
    Ok(Trainer::with_net(sim, cfg, net)?)
}

/// A new run's configuration: the feature schema its flags name, the variant, the sharing.
fn new_config(a: &TrainArgs, sim: &Simulator) -> Result<tapfinger_sim::train::TrainConfig> {
    use tapfinger::model::batch::Dims;
    let window = sim.scenario().window;
    let dims = if a.model.rlpto {
        Dims::rlpto(window)
    } else if a.model.sizes {
        Dims::sized(window)
    } else if a.model.general {
        Dims::general(window)
    } else {
        sim.dims()
    };
    let variant = &a.model.variant;
    let mut net = NetConfig::variant(dims, variant).with_context(|| {
        format!(
            "unknown variant {variant:?}; known: {}",
            VARIANTS.join(", ")
        )
    })?;
    let general = a.model.general || a.model.sizes || a.model.rlpto;
    // `auto`: elastic for a general model, fixed for a per-preset one.
    let auto = if general {
        Sharing::Elastic
    } else {
        Sharing::Fixed
    };
    a.model.sharing.0.unwrap_or(auto).apply(&mut net);
    set_two_point(&mut net, a.model.two_point)?;
    if (a.model.general || a.model.sizes) && !net.elastic {
        bail!(
            "--general reads a node's free units as those beyond the running tasks' floors, which an elastic share splits: it needs an elastic --sharing, not {}",
            Sharing::of(&net).map_or("this one", Sharing::name)
        );
    }
    net.focus = a.model.focus.unwrap_or(if general { 8 } else { 0 });
    if a.model.rlpto {
        net.forecast_interval_slots = a.model.forecast_interval;
    }
    new_run(
        sim,
        net,
        a.run.seed,
        a.run.envs,
        a.optim.lr,
        a.optim.imitate,
        a.optim.teacher.clone(),
    )
}

/// The settings a resumed run may change (its batch, validation, baseline, learning rate, and
/// the threads); every other setting of a new run is refused with --resume (clap), so none is
/// silently ignored.
fn override_settings(a: &TrainArgs, trainer: &mut Trainer) -> Result<()> {
    if let Some(t) = a.run.threads {
        trainer.threads = t.max(1);
    }
    if let Some(n) = a.run.envs {
        trainer.cfg.envs = usize::try_from(n).context("--envs")?;
    }
    if let Some(n) = a.run.eval_episodes {
        trainer.cfg.eval_episodes = n;
    }
    if a.optim.no_input_baseline {
        trainer.cfg.input_baseline = false;
    }
    if let Some(lr) = a.optim.lr {
        if !(lr.is_finite() && lr > 0.0) {
            bail!("--lr must be a positive number");
        }
        trainer.cfg.lr = lr;
    }
    Ok(())
}

/// `--generator-seeds`: the curriculum's scenarios, each family's in turn, at most
/// `--max-nodes` nodes; empty without the flag.
fn curriculum(a: &TrainArgs) -> Result<Vec<String>> {
    let Some(r) = &a.curriculum.generator_seeds else {
        return Ok(Vec::new());
    };
    if r.end > tapfinger_sim::generate::HELD_OUT_FROM {
        bail!(
            "--generator-seeds {}..{}: seeds from {} up are held out for evaluation",
            r.start,
            r.end,
            tapfinger_sim::generate::HELD_OUT_FROM
        );
    }
    let max_nodes = a.curriculum.max_nodes;
    let seeds: Vec<String> = r
        .clone()
        .flat_map(|s| a.curriculum.families.iter().map(move |f| f.scenario(s)))
        .filter(|name| Scenario::load(name).is_ok_and(|sc| sc.nodes.len() <= max_nodes))
        .collect();
    if seeds.is_empty() {
        bail!("no generated scenario in that range has at most {max_nodes} nodes");
    }
    Ok(seeds)
}

/// `--select`: the judge of checkpoints and the best one so far, kept in the output folder
/// (the last state then goes to OUT/last).
struct Selection {
    /// Validation workloads (or development scenarios) per judgement; 0: off.
    select: usize,
    /// Workloads per development scenario.
    select_workloads: u64,
    /// The development scenarios' judges (empty: the run's own validation workloads).
    judges: Vec<tapfinger_sim::train::DevJudge>,
    /// The best judged score and its iteration.
    best: Option<(f64, u64)>,
    /// Where the best goes (the output folder).
    out: PathBuf,
    /// Where the last state goes.
    last_dir: PathBuf,
    /// Keep every judged checkpoint too.
    keep_judged: bool,
}

impl Selection {
    fn new(a: &TrainArgs, curriculum: &[String], out: PathBuf) -> Result<Self> {
        // A fine-tune is judged against its start: without this, ten minutes of PPO on a
        // user's scenario may end worse than the general model it began from
        // (docs/DECISIONS.md, "Fine-tuning on one's own cluster").
        let select = a
            .selection
            .select
            .unwrap_or(if a.run.from.is_some() { 16 } else { 0 });
        if a.selection.keep_judged && select == 0 {
            bail!(
                "--keep-judged keeps the checkpoints --select judges: give --select N (a fine-tune --from a model has 16 by default)"
            );
        }
        let judges = if curriculum.is_empty() || select == 0 {
            Vec::new()
        } else {
            let load = |name: &str| load_for(a, name);
            development_judges(
                curriculum,
                &a.curriculum.families,
                select,
                a.selection.select_workloads,
                &load,
            )?
        };
        let last_dir = if select > 0 {
            out.join("last")
        } else {
            out.clone()
        };
        Ok(Self {
            select,
            select_workloads: a.selection.select_workloads,
            judges,
            best: None,
            out,
            last_dir,
            keep_judged: a.selection.keep_judged,
        })
    }

    /// The trainer's current weights, judged greedily.
    fn judge(&self, trainer: &Trainer) -> Result<f64> {
        let net = trainer.inference_net();
        Ok(if self.judges.is_empty() {
            trainer.evaluate_net(&net, self.select)?
        } else {
            trainer.judge_on(&net, &self.judges)?
        })
    }

    /// Judge and keep the start (a fine-tune must not end worse than it began).
    fn start(&mut self, trainer: &Trainer) -> Result<()> {
        if self.select == 0 {
            return Ok(());
        }
        let jct = self.judge(trainer)?;
        trainer.save(&self.out)?;
        eprintln!(
            "selection: the start scores {jct:.3} (greedy, {} {})",
            self.select,
            if self.judges.is_empty() {
                "validation workloads".to_string()
            } else {
                format!(
                    "development scenarios, {} workload(s) each, over Tiresias",
                    self.select_workloads
                )
            }
        );
        self.best = Some((jct, trainer.iteration));
        Ok(())
    }

    /// Judge the current weights and keep them if they beat the best so far.
    fn judge_now(&mut self, trainer: &Trainer, bar: &ProgressBar) -> Result<()> {
        let Some((best_jct, _)) = self.best else {
            return Ok(());
        };
        let jct = self.judge(trainer)?;
        let better = jct < best_jct;
        bar.suspend(|| {
            eprintln!(
                "selection: iteration {} scores {jct:.3} (best {best_jct:.3}){}",
                trainer.iteration,
                if better { ": kept" } else { "" }
            )
        });
        if better {
            trainer.save(&self.out)?;
            self.best = Some((jct, trainer.iteration));
        }
        if self.keep_judged {
            trainer.save(&self.out.join("judged").join(trainer.iteration.to_string()))?;
        }
        Ok(())
    }
}

/// The training loop: an iteration at a time (on the curriculum's next scenario), a log line
/// each, the last state saved every 5, judged every `--select-every`.
fn iterate(
    a: &TrainArgs,
    trainer: &mut Trainer,
    curriculum: &[String],
    selection: &mut Selection,
) -> Result<()> {
    let auto_teacher = a.optim.teacher == policies::AUTO_TEACHER;
    let started = Instant::now();
    let budget = Duration::from_secs_f64(a.run.minutes * 60.0);
    let bar = ProgressBar::new_spinner();
    bar.enable_steady_tick(Duration::from_millis(200));
    let mut done = 0u64;
    while started.elapsed() < budget && a.run.iterations.is_none_or(|n| done < n) {
        if !curriculum.is_empty() {
            let name = &curriculum[(trainer.iteration as usize) % curriculum.len()];
            trainer.set_simulator(load_for(a, name)?, auto_teacher)?;
        }
        let p = trainer.iterate()?;
        done += 1;
        bar.set_message(format!(
            "iteration {} ({}) — avg JCT {:.2} slots (training), {:.2} (greedy, validation) — {:.0}s",
            p.iteration,
            p.phase,
            p.avg_jct,
            p.eval_jct,
            started.elapsed().as_secs_f64()
        ));
        // The teacher is named while imitating: with `auto` it changes with the scenario.
        let phase = if p.phase == "imitate" {
            format!("imitate ({})", trainer.cfg.teacher)
        } else {
            p.phase.clone()
        };
        // A log line per iteration, also when stderr is not a terminal (no bar drawn).
        bar.suspend(|| eprintln!(
            "iteration {} {} avg_jct {:.3} eval_jct {:.3} return {:.1} decisions {} loss {:.4} value_loss {:.3} entropy {:.3} t {:.0}s",
            p.iteration,
            phase,
            p.avg_jct,
            p.eval_jct,
            p.episode_return,
            p.decisions,
            p.policy_loss,
            p.value_loss,
            p.entropy,
            started.elapsed().as_secs_f64()
        ));
        if done.is_multiple_of(5) {
            trainer.save(&selection.last_dir)?;
        }
        let ending = started.elapsed() >= budget || a.run.iterations.is_some_and(|n| done >= n);
        if done.is_multiple_of(a.selection.select_every) || ending {
            selection.judge_now(trainer, &bar)?;
        }
    }
    trainer.save(&selection.last_dir)?;
    bar.finish_and_clear();
    if let Some((jct, at)) = selection.best {
        println!(
            "selected iteration {at} (validation avg JCT {jct:.3}) into {}; the last state is in {}",
            selection.out.display(),
            selection.last_dir.display()
        );
    }
    let last = trainer.curve.last().map_or(f64::NAN, |p| p.avg_jct);
    println!(
        "trained {done} iteration(s) ({} in all) in {:.0}s; last avg JCT {last:.2} slots; checkpoint in {}",
        trainer.iteration,
        started.elapsed().as_secs_f64(),
        selection.last_dir.display()
    );
    Ok(())
}
