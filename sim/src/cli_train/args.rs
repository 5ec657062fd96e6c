//! `tapfinger-sim train`'s arguments, grouped by concern: the run, the model a new run trains,
//! how it learns, the curriculum, and the selection of checkpoints.

use crate::cli_compare::parse_range;
use std::path::PathBuf;
use tapfinger::model::sharing::Sharing;

/// `--sharing`: a rule ([`Sharing`]), or `auto` (`None`: elastic for a general model, fixed
/// for a per-preset one; with --from, the model's own).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SharingChoice(pub(crate) Option<Sharing>);

fn parse_sharing(s: &str) -> Result<SharingChoice, String> {
    if s == "auto" {
        return Ok(SharingChoice(None));
    }
    s.parse()
        .map(|r| SharingChoice(Some(r)))
        .map_err(|e| format!("{e}, auto"))
}

/// Arguments of `train`, by concern.
#[derive(clap::Args)]
pub(crate) struct TrainArgs {
    /// The run: its scenario, budget, output, start and the episodes it plays.
    #[command(flatten)]
    pub(crate) run: TrainRun,
    /// The model a new run trains: its features, variant and sharing.
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    /// How it learns: the learning rate, imitation first, the baseline.
    #[command(flatten)]
    pub(crate) optim: OptimArgs,
    /// A curriculum over generated scenarios.
    #[command(flatten)]
    pub(crate) curriculum: CurriculumArgs,
    /// Keeping the best judged checkpoint instead of the last.
    #[command(flatten)]
    pub(crate) selection: SelectArgs,
}

/// `train`: the run: its scenario, budget, output, start and the episodes it plays.
#[derive(clap::Args)]
pub(crate) struct TrainRun {
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
    /// model.safetensors, or `general`: the shipped general model, which fits any scenario), with a
    /// fresh optimizer.
    #[arg(long, value_name = "MODEL", conflicts_with = "resume")]
    pub(crate) from: Option<PathBuf>,
    /// Seed (new runs only).
    #[arg(long, default_value_t = 0, conflicts_with = "resume")]
    pub(crate) seed: u64,
    /// Episodes per iteration [default: 8; a resumed run keeps its own unless given].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) envs: Option<u64>,
    /// OS threads running episodes (default: all cores); results do not depend on it.
    #[arg(long)]
    pub(crate) threads: Option<usize>,
    /// Greedy validation episodes after each iteration (0: none) [default: 4; a resumed run
    /// keeps its own unless given].
    #[arg(long)]
    pub(crate) eval_episodes: Option<usize>,
    /// Every task of every scenario this run loads (training, curriculum, development
    /// judges) carries its type's profiling runs as profile hints for the speed estimator.
    /// A setting of this run, not of the model: evaluate it with `--profile-hints` too.
    #[arg(long)]
    pub(crate) profile_hints: bool,
    /// Every task of every scenario this run loads declares its work (its size) to the speed
    /// estimator. A setting of this run, not of the model: evaluate it with `--declare-work`.
    #[arg(long)]
    pub(crate) declare_work: bool,
}

/// `train`: the model a new run trains: its features, variant and sharing.
#[derive(clap::Args)]
#[command(next_help_heading = "The model")]
pub(crate) struct ModelArgs {
    /// Policy variant: tapfinger, or the ablations nohan, nopointer, vanilla, nomask (no
    /// work-conserving mask), exclusive (the
    /// exclusive-first mask: a younger task may not overtake a fitting older one of its class
    /// that no other box could run) or waitfaster (the wait-for-faster mask: a task may not
    /// start on a box where another GPU model would finish it 1.5 times sooner even after
    /// waiting for room there) (new runs only; a trained model gets either mask by
    /// `"exclusive_first": true` or `"wait_faster": true` in its train.json and --resume,
    /// docs/MODELS.md).
    #[arg(long, default_value = "tapfinger", conflicts_with = "resume")]
    pub(crate) variant: String,
    /// Train a general model (feature schema 5: CPU, GPU and memory, the online speed
    /// estimates, no task types, and each pending task's fit to the boxes beside the tasks
    /// running there), which loads on every cluster; needs an elastic --sharing (new runs
    /// only).
    #[arg(long, conflicts_with = "resume")]
    pub(crate) general: bool,
    /// Train a general model with sizes (feature schema 8: schema 5's features and what the
    /// cluster knows of each task's size: its expected remaining work from the declared work,
    /// the size history of its recurring job, submitter or class, or its progress; the spread
    /// of that estimate; how specific the knowledge is). A new run implies --general; with
    /// --from a general model (schema 5), its weights are widened with zero weights for the new
    /// features, so the run starts deciding exactly as that model does.
    #[arg(long, conflicts_with_all = ["rlpto", "resume"])]
    pub(crate) sizes: bool,
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
    #[arg(long, default_value = "auto", value_parser = parse_sharing, conflicts_with = "resume")]
    pub(crate) sharing: SharingChoice,
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
}

/// `train`: how it learns: the learning rate, imitation first, the baseline.
#[derive(clap::Args)]
#[command(next_help_heading = "Learning")]
pub(crate) struct OptimArgs {
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
    /// PPO without the input-dependent baseline (advantages from the critic by GAE
    /// instead): its ablation. Applies to resumed runs too.
    #[arg(long)]
    pub(crate) no_input_baseline: bool,
}

/// `train`: a curriculum over generated scenarios.
#[derive(clap::Args)]
#[command(next_help_heading = "Curriculum")]
pub(crate) struct CurriculumArgs {
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
}

/// `train`: keeping the best judged checkpoint instead of the last.
#[derive(clap::Args)]
#[command(next_help_heading = "Selection")]
pub(crate) struct SelectArgs {
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
