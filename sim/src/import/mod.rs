//! `tapfinger-sim import`: a published cluster trace turned into a scenario whose workload is
//! the trace's tasks ([`crate::trace`]), replayed on a cluster of the user's choosing.
//!
//! Each readable, finished job becomes one task that arrives when the job arrived (gaps divided
//! by the compression, in slots of `slot_seconds`) and runs with what it asked for: CPU cores
//! (at least one), GPUs (whole devices, or fractions of one where the GPU unit is smaller) and
//! memory in GiB. Tasks with the same demand, GPU model and (where the trace names one) model
//! class form one task type, whose speed table gives the median duration of its tasks at that
//! demand; each task's size is its own duration over that median. So a replay runs every task
//! for as long as it ran in the trace, and a policy chooses only where and when (the types'
//! `max_demand` is their demand). A job that names a GPU model may only run on boxes labelled
//! with it. Every entry of the trace is either imported or counted under the reason it was left
//! out, so the counts add up.

mod cluster;
mod formats;
pub mod gavel;
mod write;

use crate::speed::HORIZON_SLOTS;
pub use cluster::{CPU_BOX, ClusterChoice, GPU_BOX, Knobs};
pub use formats::FORMATS;
use std::collections::BTreeMap;

/// One job as read from a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Arrival (seconds, any origin).
    pub arrival_s: f64,
    /// How long it ran (seconds).
    pub duration_s: f64,
    /// CPU cores asked for.
    pub cpu: f64,
    /// Memory asked for (GiB).
    pub mem_gib: f64,
    /// GPUs asked for (a fraction: a share of one).
    pub gpu: f64,
    /// The GPU model it asked for.
    pub gpu_type: Option<String>,
    /// The model or job kind, where the trace names it.
    pub class: Option<String>,
    /// Its speed on other GPU models relative to the one its run time was measured on (Gavel
    /// with several `--gpu-model`s), by model; empty: the same everywhere.
    pub pace: BTreeMap<String, f64>,
    /// Who submitted it, where the trace says (its user column).
    pub user: Option<String>,
    /// The recurring job it is an instance of, where the trace says (a group tag, a job name
    /// that recurs).
    pub job: Option<String>,
}

/// Why a trace could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A row that cannot be read.
    #[error("line {line}, column {column}: {reason}")]
    Row {
        /// 1-based line.
        line: usize,
        /// Column name.
        column: String,
        /// What is wrong.
        reason: String,
    },
    /// A JSON entry that cannot be read (Philly).
    #[error("job {index}, field {field}: {reason}")]
    Entry {
        /// 1-based position in the list.
        index: usize,
        /// Field name.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// An unknown format name.
    #[error("unknown trace format {0:?}; known: alibaba-2020, alibaba-2023, philly, helios, gavel")]
    Format(String),
    /// Nothing usable.
    #[error("no job of the trace can be replayed on this cluster ({0})")]
    Empty(String),
    /// A bad option.
    #[error("{0}")]
    BadOption(String),
}

/// How to import.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// One of [`FORMATS`].
    pub format: String,
    /// Trace seconds per slot (`None`: 60, or the least round value that keeps every task
    /// within the simulator's horizon).
    pub slot_seconds: Option<f64>,
    /// Arrival gaps are divided by this (> 1: a denser replay, more load); `None`: 1, or what
    /// `target_load` needs.
    pub compress: Option<f64>,
    /// Choose the compression that makes the offered load of `load_kind` this ([`Load`]).
    pub target_load: Option<f64>,
    /// Which resource's load `target_load` sets (default: the scarcest).
    pub load_kind: LoadKind,
    /// At most this many tasks (the earliest).
    pub limit: usize,
    /// Only jobs arriving at or after this many seconds from the trace's first arrival.
    pub from_s: Option<f64>,
    /// Only jobs arriving before this many seconds from the trace's first arrival.
    pub until_s: Option<f64>,
    /// Gavel: the GPU types of the replay's GPU boxes (in turn); the first one's measured
    /// throughputs give run times, and each task type runs on the others at their measured
    /// speed relative to it.
    pub gpu_models: Vec<String>,
    /// Gavel: the measured throughputs (`None`: the shipped table).
    pub throughputs: Option<gavel::Throughputs>,
    /// The boxes the replay runs on.
    pub cluster: ClusterChoice,
    /// GPUs per grid unit (`None`: the `--cluster` scenario's, else 1: whole devices). Below 1,
    /// a job asking for a fraction of a GPU keeps it.
    pub gpu_step: Option<f64>,
    /// Gavel: every job declares its work (its steps, which the trace lists and its submitter
    /// states), so the speed estimator measures each job type per step
    /// ([`crate::scenario::ScenarioFile::declare_work`]). No other format says a job's work
    /// before it runs (their sizes are its recorded duration), so it is Gavel's only.
    pub declare_work: bool,
    /// Name of the scenario written.
    pub name: String,
}

impl ImportOptions {
    /// Options with the defaults for `format`, named `name`.
    pub fn new(format: &str, name: &str) -> Self {
        Self {
            format: format.into(),
            slot_seconds: None,
            compress: None,
            target_load: None,
            load_kind: LoadKind::Scarcest,
            limit: 2000,
            from_s: None,
            until_s: None,
            gpu_models: vec!["v100".into()],
            throughputs: None,
            cluster: ClusterChoice::BuiltIn(Knobs::default()),
            gpu_step: None,
            declare_work: false,
            name: name.into(),
        }
    }
}

/// Offered work per available unit over the replay's arrival span: the sum over tasks of
/// demand × run time, over the cluster's units × the time from the first arrival to the last
/// (after compression). Near or above 1 a queue builds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Load {
    /// GPU-hours offered per GPU-hour available (`None`: no GPU in the cluster).
    pub gpu: Option<f64>,
    /// Core-hours offered per core-hour available.
    pub cpu: f64,
    /// GiB-hours offered per GiB-hour available (`None`: no memory in the cluster).
    pub mem: Option<f64>,
}

impl Load {
    /// Every kind's load, by name.
    pub fn kinds(&self) -> Vec<(&'static str, f64)> {
        let mut v = Vec::new();
        if let Some(g) = self.gpu {
            v.push(("gpu", g));
        }
        v.push(("cpu", self.cpu));
        if let Some(m) = self.mem {
            v.push(("mem", m));
        }
        v
    }

    /// The kind with the highest load (the scarcest resource) and its load; the first of equals
    /// in the order gpu, cpu, mem.
    pub fn scarcest(&self) -> (&'static str, f64) {
        self.kinds()
            .into_iter()
            .fold(("cpu", f64::MIN), |b, k| if k.1 > b.1 { k } else { b })
    }

    /// The load of `kind`; `None` where the cluster has none of it.
    pub fn of(&self, kind: LoadKind) -> Option<(&'static str, f64)> {
        match kind {
            LoadKind::Scarcest => Some(self.scarcest()),
            LoadKind::Gpu => self.gpu.map(|g| ("gpu", g)),
            LoadKind::Cpu => Some(("cpu", self.cpu)),
            LoadKind::Mem => self.mem.map(|m| ("mem", m)),
        }
    }

    fn scaled(self, by: f64) -> Self {
        Self {
            gpu: self.gpu.map(|g| g * by),
            cpu: self.cpu * by,
            mem: self.mem.map(|m| m * by),
        }
    }
}

/// The resource whose offered load `--target-load` sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LoadKind {
    /// The kind with the highest load: no resource is offered more than the target.
    #[default]
    Scarcest,
    /// GPUs.
    Gpu,
    /// CPU cores.
    Cpu,
    /// Memory.
    Mem,
}

/// What an import made.
#[derive(Debug)]
pub struct Imported {
    /// The scenario TOML.
    pub toml: String,
    /// Entries of the trace read (rows or jobs; Alibaba 2020: instances).
    pub entries: usize,
    /// Tasks written.
    pub tasks: usize,
    /// Task types (demand classes).
    pub types: usize,
    /// Entries left out, by reason; `tasks` + these = `entries`.
    pub skipped: Vec<(String, usize)>,
    /// Seconds per slot used.
    pub slot_seconds: f64,
    /// Whether the slot length was chosen to keep the longest task within the horizon.
    pub slot_chosen: bool,
    /// The compression used.
    pub compress: f64,
    /// The offered load at that compression (`None`: all tasks arrive at once).
    pub load: Option<Load>,
}

/// Read `text` in `opts.format` and write the scenario.
pub fn import(text: &str, opts: &ImportOptions) -> Result<Imported, ImportError> {
    check_options(opts)?;
    let mut read = match opts.format.as_str() {
        "alibaba-2020" => formats::alibaba_2020(text)?,
        "alibaba-2020-sim" => formats::alibaba_2020_sim(text)?,
        "alibaba-2023" => formats::alibaba_2023(text)?,
        "philly" => formats::philly(text)?,
        "helios" => formats::helios(text)?,
        "gavel" => {
            let shipped;
            let table = match &opts.throughputs {
                Some(t) => t,
                None => {
                    shipped = gavel::Throughputs::shipped();
                    &shipped
                }
            };
            gavel::read(text, &opts.gpu_models, table)?
        }
        other => return Err(ImportError::Format(other.into())),
    };
    read.jobs
        .sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
    let gpu_step = gpu_step(opts)?;
    let t0 = read.jobs.first().map_or(0.0, |j| j.arrival_s);
    let windowed = window(std::mem::take(&mut read.jobs), t0, opts, &mut read);
    // Gavel's run times are the chosen GPU types': the built-in GPU boxes are of them, in turn.
    let choice = match &opts.cluster {
        ClusterChoice::BuiltIn(k) if opts.format == "gavel" && k.models.is_empty() => {
            ClusterChoice::BuiltIn(Knobs {
                models: opts.gpu_models.clone(),
                ..k.clone()
            })
        }
        other => other.clone(),
    };
    let boxes = cluster::hosts(&choice, gpu_step, &windowed)?;
    let fits = |j: &Job| {
        let d = demand_of(j, gpu_step);
        boxes.iter().any(|b| {
            (0..3).all(|k| d[k] <= b.capacity[k])
                && j.gpu_type.as_ref().is_none_or(|g| {
                    j.gpu == 0.0 || g.split('|').any(|m| b.labels.iter().any(|l| l == m))
                })
        })
    };
    let mut kept = Vec::new();
    for j in windowed {
        if !fits(&j) {
            read.skip("fits no box of the cluster (demand or GPU model)");
        } else if kept.len() >= opts.limit {
            read.skip(&format!("beyond --limit {}", opts.limit));
        } else {
            kept.push(j);
        }
    }
    if kept.is_empty() {
        let why: Vec<String> = read
            .skipped
            .iter()
            .map(|(w, n)| format!("{n} {w}"))
            .collect();
        return Err(ImportError::Empty(why.join("; ")));
    }
    let slot_seconds = slot_length(&kept, opts.slot_seconds)?;
    let at_one = load(&kept, &boxes, gpu_step, 1.0);
    let compress = match (opts.compress, opts.target_load) {
        (Some(c), _) => c,
        (None, Some(target)) => {
            let at_one = at_one.ok_or_else(|| {
                ImportError::BadOption(
                    "--target-load: every task arrives at once, so no compression changes the load"
                        .into(),
                )
            })?;
            let (_, base) = at_one.of(opts.load_kind).ok_or_else(|| {
                ImportError::BadOption(format!(
                    "--load-kind {:?}: the cluster has none of it",
                    opts.load_kind
                ))
            })?;
            if base <= 0.0 {
                return Err(ImportError::BadOption(
                    "--target-load: the tasks offer none of that resource".into(),
                ));
            }
            target / base
        }
        (None, None) => 1.0,
    };
    let out = write::Written::new(opts, &boxes, gpu_step, &kept, slot_seconds, compress);
    Ok(Imported {
        toml: out.toml,
        entries: read.entries,
        tasks: kept.len(),
        types: out.types,
        skipped: read.skipped,
        slot_seconds,
        slot_chosen: opts.slot_seconds.is_none() && slot_seconds != DEFAULT_SLOT_SECONDS,
        compress,
        load: at_one.map(|l| l.scaled(compress)),
    })
}

/// Seconds per slot unless a task needs longer ones.
pub const DEFAULT_SLOT_SECONDS: f64 = 60.0;

fn check_options(opts: &ImportOptions) -> Result<(), ImportError> {
    let positive = |v: Option<f64>| v.is_none_or(|x| x.is_finite() && x > 0.0);
    if !(positive(opts.slot_seconds) && positive(opts.compress) && positive(opts.target_load)) {
        return Err(ImportError::BadOption(
            "--slot-seconds, --compress and --target-load must be > 0".into(),
        ));
    }
    if opts.compress.is_some() && opts.target_load.is_some() {
        return Err(ImportError::BadOption(
            "--compress and --target-load both set the compression: give one".into(),
        ));
    }
    if let (Some(f), Some(u)) = (opts.from_s, opts.until_s)
        && f >= u
    {
        return Err(ImportError::BadOption(format!(
            "--from {f} is not before --until {u}"
        )));
    }
    if opts.limit == 0 {
        return Err(ImportError::BadOption("--limit must be ≥ 1".into()));
    }
    if opts.declare_work && opts.format != "gavel" {
        return Err(ImportError::BadOption(format!(
            "--declare-work: only Gavel's traces say a job's work (its steps) before it runs; \
             {}'s sizes are recorded durations, which no submitter knows",
            opts.format
        )));
    }
    Ok(())
}

/// GPUs per grid unit: the option, else the `--cluster` scenario's, else 1.
fn gpu_step(opts: &ImportOptions) -> Result<f64, ImportError> {
    let scenario = match &opts.cluster {
        ClusterChoice::Scenario(sc) => sc
            .space
            .kinds()
            .iter()
            .find(|k| k.name == "gpu")
            .map(|k| k.step),
        _ => None,
    };
    match (opts.gpu_step, scenario) {
        (Some(s), Some(c)) if (s - c).abs() > 1e-12 => Err(ImportError::BadOption(format!(
            "--gpu-step {s}: the --cluster scenario's GPU unit is {c}"
        ))),
        (Some(s), _) if !(s > 0.0 && s <= 1.0 && (1.0 / s - (1.0 / s).round()).abs() < 1e-9) => {
            Err(ImportError::BadOption(format!(
                "--gpu-step {s}: a GPU must be a whole number of units (e.g. 1, 0.5, 0.25, 0.1)"
            )))
        }
        (Some(s), _) => Ok(s),
        (None, c) => Ok(c.unwrap_or(1.0)),
    }
}

/// The jobs inside `--from/--until` (seconds from the trace's first arrival `t0`); the others
/// are counted as left out.
fn window(jobs: Vec<Job>, t0: f64, opts: &ImportOptions, read: &mut formats::Read) -> Vec<Job> {
    let mut inside = Vec::with_capacity(jobs.len());
    for j in jobs {
        let t = j.arrival_s - t0;
        if opts.from_s.is_some_and(|f| t < f) || opts.until_s.is_some_and(|u| t >= u) {
            read.skip("arrives outside --from/--until");
        } else {
            inside.push(j);
        }
    }
    inside
}

/// The slot length: the one asked for if every task fits the horizon with it, else an error
/// naming one that does; by default 60 s, or the least multiple of 60 s that fits.
fn slot_length(jobs: &[Job], asked: Option<f64>) -> Result<f64, ImportError> {
    let longest = jobs.iter().map(|j| j.duration_s).fold(0.0, f64::max);
    let least = longest / HORIZON_SLOTS as f64;
    let needed = (least / 60.0).ceil().max(1.0) * 60.0;
    match asked {
        Some(s) if s < least => Err(ImportError::BadOption(format!(
            "--slot-seconds {s}: the longest task runs {longest} s, {:.0} slots, beyond the \
             simulator's horizon of {HORIZON_SLOTS} slots per task; --slot-seconds {needed} (or \
             anything ≥ {least:.3}) replays it",
            longest / s
        ))),
        Some(s) => Ok(s),
        None => Ok(needed.max(DEFAULT_SLOT_SECONDS)),
    }
}

/// Offered load at compression `compress` ([`Load`]); `None` when every task arrives at once.
fn load(jobs: &[Job], boxes: &[cluster::Host], gpu_step: f64, compress: f64) -> Option<Load> {
    let span = (jobs.last()?.arrival_s - jobs.first()?.arrival_s) / compress;
    if span <= 0.0 {
        return None;
    }
    let total = |k: usize| -> f64 {
        boxes
            .iter()
            .map(|b| f64::from(b.capacity[k]) * f64::from(b.count))
            .sum()
    };
    let offered = |k: usize| -> f64 {
        jobs.iter()
            .map(|j| f64::from(demand_of(j, gpu_step)[k]) * j.duration_s)
            .sum()
    };
    let of = |k: usize| {
        let t = total(k);
        (t > 0.0).then(|| offered(k) / (t * span))
    };
    Some(Load {
        gpu: of(1),
        cpu: of(0).unwrap_or(f64::INFINITY),
        mem: of(2),
    })
}

/// A job's demand in grid units: cores (at least one), GPU units of `gpu_step` (a fraction of
/// one GPU kept where the unit allows, else a whole device), GiB.
fn demand_of(j: &Job, gpu_step: f64) -> [u32; 3] {
    let gpu = if j.gpu <= 0.0 {
        0
    } else if j.gpu < 1.0 {
        ((j.gpu / gpu_step - 1e-9).ceil() as u32).max(1)
    } else {
        (j.gpu.ceil() / gpu_step).round() as u32
    };
    [(j.cpu.ceil() as u32).max(1), gpu, j.mem_gib.ceil() as u32]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(gpu: f64, duration_s: f64) -> Job {
        Job {
            arrival_s: 0.0,
            duration_s,
            cpu: 0.5,
            mem_gib: 1.2,
            gpu,
            gpu_type: None,
            class: None,
            pace: Default::default(),
            user: None,
            job: None,
        }
    }

    #[test]
    fn fractions_of_a_gpu_are_kept_where_the_unit_allows() {
        assert_eq!(demand_of(&job(0.46, 1.0), 1.0), [1, 1, 2]);
        assert_eq!(demand_of(&job(0.46, 1.0), 0.25), [1, 2, 2]);
        assert_eq!(demand_of(&job(0.5, 1.0), 0.25), [1, 2, 2]);
        assert_eq!(demand_of(&job(0.05, 1.0), 0.1), [1, 1, 2]);
        assert_eq!(demand_of(&job(2.0, 1.0), 0.25), [1, 8, 2]);
        assert_eq!(demand_of(&job(0.0, 1.0), 0.25), [1, 0, 2]);
    }

    #[test]
    fn the_slot_length_keeps_the_longest_task_within_the_horizon() {
        let h = HORIZON_SLOTS as f64;
        let jobs = [job(1.0, 100.0), job(1.0, 90.0 * h)];
        assert_eq!(slot_length(&jobs, None).unwrap(), 120.0);
        assert_eq!(slot_length(&jobs[..1], None).unwrap(), 60.0);
        assert_eq!(slot_length(&jobs, Some(90.0)).unwrap(), 90.0);
        let e = slot_length(&jobs, Some(60.0)).unwrap_err().to_string();
        assert!(e.contains("--slot-seconds 120"), "{e}");
    }
}
