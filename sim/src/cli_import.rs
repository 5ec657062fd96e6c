//! `tapfinger-sim import`: a published cluster trace turned into a scenario that replays it.

use crate::cli_compare::load;
use anyhow::{Context, Result};
use std::path::PathBuf;
use tapfinger_sim::import::{ClusterChoice, ImportOptions, Knobs, gavel::Throughputs};

/// Arguments of `import`.
#[derive(clap::Args)]
pub(crate) struct ImportArgs {
    /// The trace file.
    file: PathBuf,
    /// alibaba-2020 (pai_task_table), alibaba-2020-sim (the 2020 trace's simulator input,
    /// pai_job_duration_estimate_100K.csv), alibaba-2023 (openb_pod_list_default), philly
    /// (cluster_job_log), helios (cluster_log.csv), gavel (a job trace) or tapfinger (a
    /// cluster's observed workload, `tapfinger-agent workload export`: its twin, replayed on
    /// its own boxes; the cluster options do not apply).
    #[arg(long)]
    format: String,
    /// Trace seconds per slot [default: 60, or the least multiple of 60 that keeps the longest
    /// task within the simulator's horizon of 100,000 slots].
    #[arg(long)]
    slot_seconds: Option<f64>,
    /// Divide arrival gaps by this (> 1 replays the arrivals faster: more load) [default: 1].
    #[arg(long, conflicts_with = "target_load")]
    compress: Option<f64>,
    /// Choose the compression that makes the offered load this: work offered per unit of the
    /// cluster over the arrivals' span (GPU-hours per GPU-hour, core-hours per core-hour, GiB-hours
    /// per GiB-hour) of the scarcest resource, or of `--load-kind`. Every kind's load is reported.
    #[arg(long)]
    target_load: Option<f64>,
    /// Which resource's load `--target-load` sets.
    #[arg(long, value_enum, default_value_t, requires = "target_load")]
    load_kind: tapfinger_sim::import::LoadKind,
    /// At most this many tasks (the earliest); the rest are counted as left out.
    #[arg(long, default_value_t = 2000)]
    limit: usize,
    /// Only jobs arriving at least this many seconds after the trace's first arrival.
    #[arg(long, value_name = "SECONDS")]
    from: Option<f64>,
    /// Only jobs arriving less than this many seconds after the trace's first arrival.
    #[arg(long, value_name = "SECONDS")]
    until: Option<f64>,
    /// Gavel: the GPU types of the cluster (k80, p100, v100; comma-separated for a mixed
    /// one, e.g. v100,p100,k80): the first one's measured throughputs give each job's run
    /// time and each task type runs on the others at their measured speed relative to it
    /// (`gpu_speed`); the built-in cluster's GPU boxes are of these types in turn.
    #[arg(long, default_value = "v100", value_delimiter = ',')]
    gpu_model: Vec<String>,
    /// Gavel: its simulation_throughputs.json [default: the figures shipped in the binary].
    #[arg(long, value_name = "FILE")]
    throughputs: Option<PathBuf>,
    /// A scenario (preset or file) whose nodes the trace is replayed on; its resources must
    /// include cpu and mem [default: the built-in cluster, sized to hold the largest job].
    #[arg(long, conflicts_with_all = ["nodes", "cpu_boxes", "gpu_boxes", "gpus_per_box"])]
    cluster: Option<String>,
    /// A node list in Alibaba 2023's layout (openb_node_list_gpu_node.csv) to replay on the
    /// trace's own cluster, each box labelled with its GPU model.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["cpu_boxes", "gpu_boxes", "gpus_per_box"])]
    nodes: Option<PathBuf>,
    /// The built-in cluster's CPU-only boxes.
    #[arg(long, default_value_t = 4)]
    cpu_boxes: u32,
    /// The built-in cluster's GPU boxes [default: 4, or one per GPU model the trace names].
    #[arg(long)]
    gpu_boxes: Option<u32>,
    /// GPUs per GPU box of the built-in cluster [default: 4, or the largest GPU job's].
    #[arg(long)]
    gpus_per_box: Option<u32>,
    /// GPUs per grid unit, e.g. 0.25: a job asking for a fraction of a GPU keeps it (Alibaba
    /// 2023's gpu_milli) [default: 1, whole devices, or the --cluster scenario's].
    #[arg(long)]
    gpu_step: Option<f64>,
    /// Gavel: every job declares its work (its steps, which the trace lists and a submitter
    /// states), so the speed estimator measures each job type per step rather than per job
    /// (`declare_work = true` in the scenario)
    #[arg(long)]
    declare_work: bool,
    /// Scenario name [default: the file's stem].
    #[arg(long)]
    name: Option<String>,
    /// Write the scenario here instead of stdout.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// `import --format tapfinger`: the twin of an observed workload.
fn import_twin(a: &ImportArgs, text: &str) -> Result<()> {
    let w: tapfinger::twin::Workload = serde_json::from_str(text).with_context(|| {
        format!(
            "{}: not a workload file (`tapfinger-agent workload export` writes one)",
            a.file.display()
        )
    })?;
    let name = a.name.clone().unwrap_or_else(|| "twin".into());
    let toml = tapfinger_sim::twin::scenario_toml(&w, &name)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.file.display()))?;
    // What it writes must load: a scenario the simulator refuses is no twin.
    tapfinger_sim::Scenario::from_toml(&toml, &name, None)
        .with_context(|| format!("{}: the twin does not load", a.file.display()))?;
    eprintln!(
        "read a workload of {} tasks on {} boxes in {} classes (slots {}..{}, {} s each)",
        w.tasks.len(),
        w.nodes.len(),
        w.classes.len(),
        w.from_slot,
        w.to_slot,
        w.slot_seconds
    );
    match &a.out {
        Some(p) => {
            std::fs::write(p, &toml).with_context(|| format!("cannot write {}", p.display()))
        }
        None => {
            print!("{toml}");
            Ok(())
        }
    }
}

fn read(path: &PathBuf) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// `import`.
pub(crate) fn import(a: ImportArgs) -> Result<()> {
    let text = read(&a.file)?;
    if a.format == "tapfinger" {
        return import_twin(&a, &text);
    }
    let name = a.name.clone().unwrap_or_else(|| {
        a.file
            .file_stem()
            .map_or("trace".into(), |s| s.to_string_lossy().into_owned())
    });
    let mut opts = ImportOptions::new(&a.format, &name);
    opts.slot_seconds = a.slot_seconds;
    opts.compress = a.compress;
    opts.target_load = a.target_load;
    opts.load_kind = a.load_kind;
    opts.limit = a.limit;
    opts.from_s = a.from;
    opts.until_s = a.until;
    opts.gpu_models = a.gpu_model.clone();
    opts.gpu_step = a.gpu_step;
    opts.declare_work = a.declare_work;
    opts.throughputs = match &a.throughputs {
        Some(p) => {
            Some(Throughputs::from_json(&read(p)?).with_context(|| p.display().to_string())?)
        }
        None => None,
    };
    opts.cluster = if let Some(c) = &a.cluster {
        ClusterChoice::Scenario(Box::new(load(c)?.scenario().clone()))
    } else if let Some(n) = &a.nodes {
        ClusterChoice::NodeList(read(n)?)
    } else {
        ClusterChoice::BuiltIn(Knobs {
            cpu_boxes: a.cpu_boxes,
            gpu_boxes: a.gpu_boxes,
            gpus_per_box: a.gpus_per_box,
            models: Vec::new(),
        })
    };
    let r = tapfinger_sim::import::import(&text, &opts)
        .with_context(|| format!("{}", a.file.display()))?;
    eprintln!(
        "read {} entries: imported {} tasks in {} task types",
        r.entries, r.tasks, r.types
    );
    for (why, n) in &r.skipped {
        eprintln!("left out {n}: {why}");
    }
    let chosen = if r.slot_chosen {
        " (chosen so that the longest task fits the simulator's horizon)"
    } else {
        ""
    };
    eprintln!(
        "slots of {} s{chosen}; arrivals compressed {:.4}x",
        r.slot_seconds, r.compress
    );
    match r.load {
        Some(l) => {
            let kinds: Vec<String> = l
                .kinds()
                .iter()
                .map(|(k, v)| format!("{k} {v:.3}"))
                .collect();
            eprintln!(
                "offered load: {} (work offered per unit of the cluster over the arrivals' span; scarcest: {})",
                kinds.join(", "),
                l.scarcest().0
            );
        }
        None => eprintln!("offered load: every task arrives at once"),
    }
    match &a.out {
        Some(p) => {
            std::fs::write(p, &r.toml).with_context(|| format!("cannot write {}", p.display()))?
        }
        None => print!("{}", r.toml),
    }
    Ok(())
}
