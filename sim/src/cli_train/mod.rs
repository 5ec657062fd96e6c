//! `tapfinger-sim train`: its arguments and the training loop around [`Trainer`] (a new run, a
//! resumed one, or a fine-tune `--from` a model; a curriculum over generated scenarios).

use crate::cli_compare::{load, parse_range};
use anyhow::{Context, Result, bail};
use indicatif::ProgressBar;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tapfinger::model::net::{NetConfig, VARIANTS};
use tapfinger_sim::train::Trainer;
use tapfinger_sim::{Scenario, Simulator, policies};

mod setup;
use setup::{FLOOR_SLOPE, development_judges, new_run, set_sharing, set_two_point};

/// Arguments of `train`.
#[derive(clap::Args)]
pub(crate) struct TrainArgs {
    /// Preset name or path to a scenario TOML file.
    #[arg(long, default_value = "hetero6")]
    pub(crate) scenario: String,
    /// Stop after this many minutes of wall time.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) minutes: f64,
    /// Stop after this many iterations (whichever comes first).
    #[arg(long)]
    pub(crate) iterations: Option<u64>,
    /// Output folder (checkpoint, train.json, curve.csv, curve.svg) [default: the folder
    /// resumed with --resume (a resumed run continues where it was), else out/train].
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Continue from a checkpoint folder.
    #[arg(long, value_name = "DIR")]
    pub(crate) resume: Option<PathBuf>,
    /// Fine-tune: start a new run from this model's weights (a checkpoint folder, a
    /// model.bpk, or `general`: the shipped general model, which fits any scenario), with a
    /// fresh optimizer.
    #[arg(long, value_name = "MODEL", conflicts_with = "resume")]
    pub(crate) from: Option<PathBuf>,
    /// Seed (new runs only).
    #[arg(long, default_value_t = 0, conflicts_with = "resume")]
    pub(crate) seed: u64,
    /// Episodes per iteration [default: 8; a resumed run keeps its own unless given].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) envs: Option<u64>,
    /// Policy variant: tapfinger, or the ablations nohan, nopointer, vanilla, nomask (no
    /// work-conserving mask), crowd2 (the crowding mask: a busy elastic node may not start a
    /// task that would run there at under half its speed alone), or exclusive (the
    /// exclusive-first mask: a younger task may not overtake a fitting older one of its class
    /// that no other box could run) (new runs only; a trained model gets the exclusive-first
    /// mask by `"exclusive_first": true` in its train.json and --resume, docs/MODELS.md).
    #[arg(long, default_value = "tapfinger", conflicts_with = "resume")]
    pub(crate) variant: String,
    /// Train a general model (feature schema 2: CPU, GPU and memory, the online speed
    /// estimates, no task types), which loads on every cluster (new runs only).
    #[arg(long, conflicts_with = "resume")]
    pub(crate) general: bool,
    /// With --general: feature schema 5, the general features and each pending task's fit to
    /// the boxes beside the tasks running there (its estimated job time at what it would get
    /// on the deciding node sharing it with them, the least such time over the boxes it fits
    /// now, and the time its start would add to the deciding node's running tasks); needs an
    /// elastic --sharing (new runs only).
    #[arg(long, requires = "general", conflicts_with = "resume")]
    pub(crate) contention: bool,
    /// Train an RLPTO model (new runs only): general features plus each task's priority
    /// class, whether it is converging, and the forecast arrivals of the next intervals
    /// (feature schema 3), trained on RLPTO's cluster reward (the scenario's `[reward]`
    /// weights) instead of the time in system.
    #[arg(long, conflicts_with_all = ["general", "resume"])]
    pub(crate) rlpto: bool,
    /// The RLPTO model's forecast interval in slots: its views carry the forecast arrivals of
    /// the next intervals of this many slots, in training and wherever it runs (new runs only).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..), conflicts_with = "resume")]
    pub(crate) forecast_interval: u64,
    /// How a node shares among its running tasks: elastic (start at the minimum demand,
    /// re-share the spare units every slot), elastic-floors (the allocation head chooses each
    /// task's floor, the least it holds for its run; the spare units are re-shared every slot
    /// on top of the floors), elastic-gain (elastic, but each spare CPU and GPU unit goes to the
    /// task whose estimated job time it cuts by the largest fraction, on the online speed
    /// estimator, instead of least attained service first), elastic-gain-finish (elastic-gain,
    /// and first the fewest units that let a running task finish within the slot, by the
    /// estimator), elastic-gain-floors (both: floors
    /// from the allocation head, the spare units on top of them by estimated gain),
    /// elastic-gain-finish-floors (elastic-gain-finish on top of floors from the allocation
    /// head; with --from a model trained without floors, its allocation heads start near each
    /// task's minimum demand, `Net::floors_near_minimum`),
    /// elastic-hold-gpus (elastic, but GPUs stay at the minimum demand:
    /// for clusters whose tasks cannot resume on new devices), fixed (the allocation head
    /// chooses once per task), or auto: for a new run elastic for a general model and fixed for
    /// a per-preset one; with --from, the model's own (new runs only).
    #[arg(long, default_value = "auto", value_parser = ["auto", "elastic", "elastic-gain", "elastic-gain-finish", "elastic-floors", "elastic-gain-floors", "elastic-gain-finish-floors", "elastic-hold-gpus", "fixed"], conflicts_with = "resume")]
    pub(crate) sharing: String,
    /// Each decision attends to at most this many nodes (0: the whole cluster) [default: 8
    /// for a general model, 0 per preset; with --from, the model's own unless given] (new runs
    /// only).
    #[arg(long, conflicts_with = "resume")]
    pub(crate) focus: Option<usize>,
    /// With a --sharing that has floors: each floor is one of two points per kind, the task's
    /// minimum demand or the most the node could give it now, and the larger's logit is
    /// shifted by this offset (e.g. -2: about one claim in eight per kind explores the large
    /// floor at the start). With --from a model trained without floors, its allocation heads
    /// start even between the two points, so the start decides as that model did
    /// (`NetConfig::two_point`) (new runs only).
    #[arg(long, allow_negative_numbers = true, conflicts_with = "resume")]
    pub(crate) two_point: Option<f32>,
    /// A curriculum: each iteration on the next generated scenario gen:N for N in A..B
    /// (training seeds: below 10000) with at most --max-nodes nodes; needs a general model.
    /// --scenario is the first one's stand-in (name it gen:A).
    #[arg(long, value_name = "A..B", value_parser = parse_range)]
    pub(crate) generator_seeds: Option<std::ops::Range<u64>>,
    /// Largest cluster of the curriculum (train small, test big).
    #[arg(long, default_value_t = 12)]
    pub(crate) max_nodes: usize,
    /// The generated families of the curriculum and of --select's development scenarios,
    /// comma-separated: base (`gen:N`), wide (`gen-wide:N`), long (`gen-long:N`); with several,
    /// the curriculum takes each seed in each family in turn and the development scenarios
    /// alternate.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "base",
        requires = "generator_seeds"
    )]
    pub(crate) families: Vec<tapfinger_sim::generate::Family>,
    /// PPO without the input-dependent baseline (advantages from the critic by GAE
    /// instead): its ablation. Applies to resumed runs too.
    #[arg(long)]
    pub(crate) no_input_baseline: bool,
    /// Adam learning rate [default: 3e-4; a resumed run keeps its own unless given].
    #[arg(long)]
    pub(crate) lr: Option<f64>,
    /// Imitation (DAgger) iterations before PPO (new runs only).
    #[arg(long, default_value_t = 0, conflicts_with = "resume")]
    pub(crate) imitate: u64,
    /// Teacher policy for imitation (new runs only): a policy that shares as the student
    /// does (elastic or not; for an elastic student also first-fit-elastic), or auto (of the
    /// ranked baselines that share so, the one with the least average JCT on development
    /// workloads of the scenario).
    #[arg(long, default_value = "auto", conflicts_with = "resume")]
    pub(crate) teacher: String,
    /// OS threads running episodes (default: all cores); results do not depend on it.
    #[arg(long)]
    pub(crate) threads: Option<usize>,
    /// Greedy validation episodes after each iteration (0: none) [default: 4; a resumed run
    /// keeps its own unless given].
    #[arg(long)]
    pub(crate) eval_episodes: Option<usize>,
    /// Keep the best weights, not the last: the start and every --select-every iterations are
    /// judged greedily on this many validation workloads (seeds from 2^41, never those of
    /// training or of `compare`), and the output folder holds the best so far (the last state
    /// goes to OUT/last) [default: 16 with --from, else 0 (off)]. With --generator-seeds (a
    /// general model, whose training scenario changes every iteration): on this many
    /// development scenarios gen:9000.. instead, one validation workload each, scored by the
    /// average JCT over elastic Tiresias's there, averaged.
    #[arg(long)]
    pub(crate) select: Option<usize>,
    /// With --generator-seeds and --select N: validation workloads per development scenario
    /// in each judgement (more cost time and rank checkpoints more surely).
    #[arg(long, default_value_t = 1, requires = "generator_seeds", value_parser = clap::value_parser!(u64).range(1..=64))]
    pub(crate) select_workloads: u64,
    /// Every task of every scenario this run loads (training, curriculum, development
    /// judges) carries its type's profiling runs as profile hints for the speed estimator.
    /// A setting of this run, not of the model: evaluate it with `--profile-hints` too.
    #[arg(long)]
    pub(crate) profile_hints: bool,
    /// Every task of every scenario this run loads declares its work (its size) to the speed
    /// estimator. A setting of this run, not of the model: evaluate it with `--declare-work`.
    #[arg(long)]
    pub(crate) declare_work: bool,
    /// Iterations between two judgements of --select.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) select_every: u64,
    /// With --select: also keep every judged checkpoint, in OUT/judged/ITERATION (weights,
    /// train.json, curve), to judge them again on more workloads than the selection's
    /// (`suite --model OUT/judged/N`). A checkpoint judged worse than the best so far on the
    /// selection's workloads can be the better one on others (docs/DECISIONS.md).
    #[arg(long)]
    pub(crate) keep_judged: bool,
}

/// Run `train`: set up the trainer (new, resumed or fine-tuned), then iterate until the time or
/// the iteration budget is spent, keeping the best judged checkpoint when asked.
pub(crate) fn train(a: TrainArgs) -> Result<()> {
    if !(a.minutes.is_finite() && a.minutes > 0.0) {
        bail!("--minutes must be a positive number");
    }
    // A resumed run writes where it was resumed from unless told otherwise: two runs resumed
    // from different folders must not overwrite one shared default.
    let out = a.out.clone().unwrap_or_else(|| {
        a.resume
            .clone()
            .unwrap_or_else(|| PathBuf::from("out/train"))
    });
    let sim = load_for(&a, &a.scenario)?;
    let mut trainer = match (&a.resume, &a.from) {
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
    if a.profile_hints {
        sim = sim.profile_hints();
    }
    if a.declare_work {
        sim = sim.declare_work();
    }
    Ok(sim)
}

/// `--from MODEL`: a new run from a model's weights (its allocation heads started near the
/// minimum demand when floors are new to it).
fn fine_tune(a: &TrainArgs, sim: Simulator, model: &std::path::Path) -> Result<Trainer> {
    let (net, mut net_cfg, trained_on) = if model.as_os_str() == "general" && !model.exists() {
        let g = &tapfinger::model::checkpoint::GENERAL;
        let (net, cfg) = g.load(&sim.dims())?;
        (
            net,
            cfg,
            "generated scenarios (the shipped general model)".to_string(),
        )
    } else {
        tapfinger::model::checkpoint::load_path(model, &sim.dims())?
    };
    if let Some(k) = a.focus {
        net_cfg.focus = k;
    }
    let had_floors = net_cfg.floors;
    if a.sharing != "auto" {
        set_sharing(&mut net_cfg, &a.sharing, a.general);
    }
    set_two_point(&mut net_cfg, a.two_point)?;
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
        a.seed,
        a.envs,
        a.lr,
        a.imitate,
        a.teacher.clone(),
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
    let dims = if a.rlpto {
        Dims::rlpto(window)
    } else if a.contention {
        Dims::general_contended(window)
    } else if a.general {
        Dims::general(window)
    } else {
        sim.dims()
    };
    let variant = &a.variant;
    let mut net = NetConfig::variant(dims, variant).with_context(|| {
        format!(
            "unknown variant {variant:?}; known: {}",
            VARIANTS.join(", ")
        )
    })?;
    let general = a.general || a.rlpto;
    set_sharing(&mut net, &a.sharing, general);
    set_two_point(&mut net, a.two_point)?;
    if a.contention && !net.elastic {
        bail!(
            "--contention reads a node's free units as those beyond the running tasks' floors, which an elastic share splits: it needs an elastic --sharing, not {}",
            a.sharing
        );
    }
    net.focus = a.focus.unwrap_or(if general { 8 } else { 0 });
    if a.rlpto {
        net.forecast_interval_slots = a.forecast_interval;
    }
    new_run(sim, net, a.seed, a.envs, a.lr, a.imitate, a.teacher.clone())
}

/// The settings a resumed run may change (its batch, validation, baseline, learning rate, and
/// the threads); every other setting of a new run is refused with --resume (clap), so none is
/// silently ignored.
fn override_settings(a: &TrainArgs, trainer: &mut Trainer) -> Result<()> {
    if let Some(t) = a.threads {
        trainer.threads = t.max(1);
    }
    if let Some(n) = a.envs {
        trainer.cfg.envs = usize::try_from(n).context("--envs")?;
    }
    if let Some(n) = a.eval_episodes {
        trainer.cfg.eval_episodes = n;
    }
    if a.no_input_baseline {
        trainer.cfg.input_baseline = false;
    }
    if let Some(lr) = a.lr {
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
    let Some(r) = &a.generator_seeds else {
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
    let max_nodes = a.max_nodes;
    let seeds: Vec<String> = r
        .clone()
        .flat_map(|s| a.families.iter().map(move |f| f.scenario(s)))
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
        let select = a.select.unwrap_or(if a.from.is_some() { 16 } else { 0 });
        if a.keep_judged && select == 0 {
            bail!(
                "--keep-judged keeps the checkpoints --select judges: give --select N (a fine-tune --from a model has 16 by default)"
            );
        }
        let judges = if curriculum.is_empty() || select == 0 {
            Vec::new()
        } else {
            let load = |name: &str| load_for(a, name);
            development_judges(curriculum, &a.families, select, a.select_workloads, &load)?
        };
        let last_dir = if select > 0 {
            out.join("last")
        } else {
            out.clone()
        };
        Ok(Self {
            select,
            select_workloads: a.select_workloads,
            judges,
            best: None,
            out,
            last_dir,
            keep_judged: a.keep_judged,
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
    let auto_teacher = a.teacher == policies::AUTO_TEACHER;
    let started = Instant::now();
    let budget = Duration::from_secs_f64(a.minutes * 60.0);
    let bar = ProgressBar::new_spinner();
    bar.enable_steady_tick(Duration::from_millis(200));
    let mut done = 0u64;
    while started.elapsed() < budget && a.iterations.is_none_or(|n| done < n) {
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
        let ending = started.elapsed() >= budget || a.iterations.is_some_and(|n| done >= n);
        if done.is_multiple_of(a.select_every) || ending {
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
