//! `tapfinger-sim import`: a published cluster trace turned into a scenario whose workload is
//! the trace's tasks ([`crate::trace`]), replayed on a cluster of the user's choosing.
//!
//! Each readable, finished job becomes one task that arrives when the job arrived (gaps divided
//! by `compress`, in slots of `slot_seconds`) and runs with what it asked for: CPU cores (at
//! least one), GPUs as whole devices (a fraction asks for one) and memory in GiB. Tasks with the
//! same demand, GPU model and (where the trace names one) model class form one task type, whose
//! speed table gives the median duration of its tasks at that demand; each task's size is its
//! own duration over that median. So a replay runs every task for as long as it ran in the
//! trace, and a policy chooses only where and when (the types' `max_demand` is their demand). A
//! job that names a GPU model may only run on boxes labelled with it. Jobs that fit no box of
//! the cluster are left out and counted, never silently dropped.

mod formats;

pub use formats::FORMATS;
use std::collections::BTreeMap;
use std::fmt::Write as _;

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
    /// Trace seconds per slot.
    pub slot_seconds: f64,
    /// Arrival gaps are divided by this (> 1: a denser replay, more load).
    pub compress: f64,
    /// At most this many tasks (the earliest).
    pub limit: usize,
    /// Gavel only: training steps per second.
    pub steps_per_second: f64,
    /// The scenario whose resources (cpu, gpu, mem) and nodes the replay runs on; `None`: the
    /// built-in edge cluster ([`DEFAULT_BOXES`]).
    pub cluster: Option<crate::Scenario>,
    /// Name of the scenario written.
    pub name: String,
}

/// The cluster a trace is replayed on unless another is given: `DEFAULT_BOXES` CPU boxes of
/// `CPU_BOX` and as many GPU boxes of `GPU_BOX` (cores, GPUs, GiB), the GPU boxes labelled with
/// the trace's GPU models, most frequent first.
pub const DEFAULT_BOXES: usize = 4;
/// A default CPU box: cores, GPUs, GiB.
pub const CPU_BOX: [u32; 3] = [32, 0, 128];
/// A default GPU box: cores, GPUs, GiB.
pub const GPU_BOX: [u32; 3] = [32, 4, 256];

/// What an import made.
#[derive(Debug)]
pub struct Imported {
    /// The scenario TOML.
    pub toml: String,
    /// Tasks written.
    pub tasks: usize,
    /// Task types (demand classes).
    pub types: usize,
    /// Rows or jobs left out, by reason.
    pub skipped: Vec<(String, usize)>,
}

/// A box of the replay cluster.
struct Host {
    /// Its name in the scenario.
    name: String,
    /// CPU, GPU and memory units.
    capacity: [u32; 3],
    /// Labels the trace's constraints match (e.g. the GPU model).
    labels: Vec<String>,
}

/// Read `text` in `opts.format` and write the scenario.
pub fn import(text: &str, opts: &ImportOptions) -> Result<Imported, ImportError> {
    if !(opts.slot_seconds > 0.0 && opts.compress > 0.0 && opts.steps_per_second > 0.0) {
        return Err(ImportError::BadOption(
            "--slot-seconds, --compress and --steps-per-second must be > 0".into(),
        ));
    }
    let (mut jobs, mut skipped) = match opts.format.as_str() {
        "alibaba-2020" => formats::alibaba_2020(text)?,
        "alibaba-2023" => formats::alibaba_2023(text)?,
        "philly" => formats::philly(text)?,
        "helios" => formats::helios(text)?,
        "gavel" => formats::gavel(text, opts.steps_per_second)?,
        other => return Err(ImportError::Format(other.into())),
    };
    jobs.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
    let boxes = cluster(opts, &jobs)?;
    let fits = |j: &Job, b: &Host| {
        let d = demand_of(j);
        (0..3).all(|k| d[k] <= b.capacity[k])
            && j.gpu_type.as_ref().is_none_or(|g| {
                j.gpu == 0.0 || g.split('|').any(|m| b.labels.iter().any(|l| l == m))
            })
    };
    let mut kept = Vec::new();
    for j in jobs {
        if kept.len() >= opts.limit {
            break;
        }
        if boxes.iter().any(|b| fits(&j, b)) {
            kept.push(j);
        } else {
            let why = "fits no box of the cluster (demand or GPU model)".to_string();
            match skipped.iter_mut().find(|(w, _)| *w == why) {
                Some((_, n)) => *n += 1,
                None => skipped.push((why, 1)),
            }
        }
    }
    if kept.is_empty() {
        let why: Vec<String> = skipped.iter().map(|(w, n)| format!("{n} {w}")).collect();
        return Err(ImportError::Empty(why.join("; ")));
    }
    // Classes: demand, GPU model (where GPUs are asked for) and model name.
    type Key = ([u32; 3], Option<String>, Option<String>);
    let key = |j: &Job| -> Key {
        (
            demand_of(j),
            j.gpu_type.clone().filter(|_| j.gpu > 0.0),
            j.class.clone(),
        )
    };
    let mut classes: BTreeMap<Key, Vec<f64>> = BTreeMap::new();
    for j in &kept {
        classes.entry(key(j)).or_default().push(j.duration_s);
    }
    let median: BTreeMap<Key, f64> = classes
        .into_iter()
        .map(|(k, mut d)| {
            d.sort_by(f64::total_cmp);
            (k, d[d.len() / 2])
        })
        .collect();
    let names: BTreeMap<Key, String> = median
        .keys()
        .enumerate()
        .map(|(i, k)| (k.clone(), format!("c{i}")))
        .collect();
    Ok(Imported {
        toml: write(opts, &boxes, &kept, &median, &names, key),
        tasks: kept.len(),
        types: median.len(),
        skipped,
    })
}

/// The boxes: the given scenario's, or the default cluster labelled with the trace's GPU models.
fn cluster(opts: &ImportOptions, jobs: &[Job]) -> Result<Vec<Host>, ImportError> {
    if let Some(sc) = &opts.cluster {
        let names = sc.kind_names();
        let idx = |k: &str| names.iter().position(|n| n == k);
        let (Some(cpu), Some(mem)) = (idx("cpu"), idx("mem")) else {
            return Err(ImportError::BadOption(format!(
                "--cluster {}: its resources must include cpu and mem (and may include gpu); it has {}",
                sc.name,
                names.join(", ")
            )));
        };
        let gpu = idx("gpu");
        return Ok(sc
            .nodes
            .iter()
            .map(|n| Host {
                name: n.name.clone(),
                capacity: [
                    n.capacity.get(cpu),
                    gpu.map_or(0, |g| n.capacity.get(g)),
                    n.capacity.get(mem),
                ],
                labels: n.labels.clone(),
            })
            .collect());
    }
    let mut models: BTreeMap<&str, usize> = BTreeMap::new();
    for j in jobs.iter().filter(|j| j.gpu > 0.0) {
        // `a|b`: either model will do (Alibaba 2023); each counts.
        for m in j.gpu_type.iter().flat_map(|g| g.split('|')) {
            *models.entry(m).or_default() += 1;
        }
    }
    let mut by_count: Vec<(&str, usize)> = models.into_iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let mut boxes: Vec<Host> = (0..DEFAULT_BOXES)
        .map(|i| Host {
            name: format!("cpu-{i}"),
            capacity: CPU_BOX,
            labels: Vec::new(),
        })
        .collect();
    for i in 0..DEFAULT_BOXES {
        boxes.push(Host {
            name: format!("gpu-{i}"),
            capacity: GPU_BOX,
            labels: by_count
                .get(i % by_count.len().max(1))
                .map(|(m, _)| vec![m.to_string()])
                .unwrap_or_default(),
        });
    }
    Ok(boxes)
}

fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn write<K: Ord>(
    opts: &ImportOptions,
    boxes: &[Host],
    jobs: &[Job],
    median: &BTreeMap<K, f64>,
    names: &BTreeMap<K, String>,
    key: impl Fn(&Job) -> K,
) -> String {
    let t0 = jobs.first().map_or(0.0, |j| j.arrival_s);
    let slot = |j: &Job| ((j.arrival_s - t0) / opts.compress / opts.slot_seconds).floor() as u64;
    let span = jobs.last().map_or(1, |j| slot(j).max(1));
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# Imported by `tapfinger-sim import --format {}`: {} tasks.",
        opts.format,
        jobs.len()
    );
    let _ = writeln!(t, "name = {}", quote(&opts.name));
    let _ = writeln!(
        t,
        "description = {}",
        quote(&format!(
            "{} trace, {} tasks, slot {} s, arrivals compressed {}x",
            opts.format,
            jobs.len(),
            opts.slot_seconds,
            opts.compress
        ))
    );
    // The mean arrival rate (informational: a trace's arrivals are replayed as recorded).
    let _ = writeln!(
        t,
        "lambda = {}",
        (jobs.len() as f64 / span as f64).max(1e-6)
    );
    let _ = writeln!(t, "tasks = {}", jobs.len());
    let _ = writeln!(t, "slot_seconds = {}", opts.slot_seconds);
    let _ = writeln!(t, "max_slots = {}", 100_000u64.max(span * 100));
    let _ = writeln!(
        t,
        "resources = [\n  {{ name = \"cpu\", unit = \"cores\" }},\n  {{ name = \"gpu\", unit = \"GPUs\" }},\n  {{ name = \"mem\", unit = \"GiB\" }},\n]"
    );
    for b in boxes {
        let labels: Vec<String> = b.labels.iter().map(|l| quote(l)).collect();
        let _ = writeln!(
            t,
            "\n[[nodes]]\nname = {}\ncapacity = [{}, {}, {}]\nlabels = [{}]",
            quote(&b.name),
            b.capacity[0],
            b.capacity[1],
            b.capacity[2],
            labels.join(", ")
        );
    }
    let mut count: BTreeMap<&String, usize> = BTreeMap::new();
    for j in jobs {
        *count.entry(&names[&key(j)]).or_default() += 1;
    }
    for (k, name) in names {
        let j = jobs
            .iter()
            .find(|j| &key(j) == k)
            .map(demand_of)
            .unwrap_or([1, 0, 0]);
        let _ = writeln!(
            t,
            "\n[[task_types]]\nname = {}\nweight = {}\nmin_demand = [{}, {}, {}]\nmax_demand = [{}, {}, {}]\nspeed = {{ model = \"table\", rows = \"type,cpu,gpu,mem,seconds\\n{},{},{},{},{:.1}\\n\" }}",
            quote(name),
            count.get(name).copied().unwrap_or(1),
            j[0],
            j[1],
            j[2],
            j[0],
            j[1],
            j[2],
            name,
            j[0],
            j[1],
            j[2],
            median[k]
        );
    }
    let _ = writeln!(t, "\n[trace]\nrows = \"\"\"\narrival,type,size,require");
    for j in jobs {
        let k = key(j);
        let require = j.gpu_type.as_deref().filter(|_| j.gpu > 0.0).unwrap_or("");
        let _ = writeln!(
            t,
            "{},{},{:.4},{}",
            slot(j),
            names[&k],
            j.duration_s / median[&k],
            require
        );
    }
    let _ = writeln!(t, "\"\"\"");
    t
}

/// A job's demand in grid units: cores (at least one), whole GPUs, GiB.
fn demand_of(j: &Job) -> [u32; 3] {
    [
        (j.cpu.ceil() as u32).max(1),
        j.gpu.ceil() as u32,
        j.mem_gib.ceil() as u32,
    ]
}
