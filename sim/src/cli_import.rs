//! `tapfinger-sim import`: a published cluster trace turned into a scenario that replays it.

use crate::cli_compare::load;
use anyhow::{Context, Result};
use std::path::PathBuf;

/// Arguments of `import`.
#[derive(clap::Args)]
pub(crate) struct ImportArgs {
    /// The trace file.
    file: PathBuf,
    /// alibaba-2020 (pai_task_table), alibaba-2023 (openb_pod_list), philly
    /// (cluster_job_log), helios (cluster_log.csv) or gavel (job trace TSV).
    #[arg(long)]
    format: String,
    /// Trace seconds per slot.
    #[arg(long, default_value_t = 60.0)]
    slot_seconds: f64,
    /// Divide arrival gaps by this (> 1 replays the arrivals faster: more load).
    #[arg(long, default_value_t = 1.0)]
    compress: f64,
    /// At most this many tasks (the earliest).
    #[arg(long, default_value_t = 2000)]
    limit: usize,
    /// Gavel: training steps per second (its trace records steps, not time).
    #[arg(long, default_value_t = 10.0)]
    steps_per_second: f64,
    /// A scenario (preset or file) whose nodes the trace is replayed on; its resources must
    /// include cpu and mem [default: 4 CPU boxes and 4 GPU boxes labelled with the trace's
    /// GPU models].
    #[arg(long)]
    cluster: Option<String>,
    /// Scenario name [default: the file's stem].
    #[arg(long)]
    name: Option<String>,
    /// Write the scenario here instead of stdout.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// `import`.
pub(crate) fn import(a: ImportArgs) -> Result<()> {
    let ImportArgs {
        file,
        format,
        slot_seconds,
        compress,
        limit,
        steps_per_second,
        cluster,
        name,
        out,
    } = a;
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("cannot read {}", file.display()))?;
    let opts = tapfinger_sim::import::ImportOptions {
        format,
        slot_seconds,
        compress,
        limit,
        steps_per_second,
        cluster: cluster
            .as_deref()
            .map(load)
            .transpose()?
            .map(|s| s.scenario().clone()),
        name: name.unwrap_or_else(|| {
            file.file_stem()
                .map_or("trace".into(), |s| s.to_string_lossy().into_owned())
        }),
    };
    let r = tapfinger_sim::import::import(&text, &opts)
        .with_context(|| format!("{}", file.display()))?;
    eprintln!("imported {} tasks in {} task types", r.tasks, r.types);
    for (why, n) in &r.skipped {
        eprintln!("left out {n}: {why}");
    }
    match out {
        Some(p) => {
            std::fs::write(&p, &r.toml).with_context(|| format!("cannot write {}", p.display()))?
        }
        None => print!("{}", r.toml),
    }
    Ok(())
}
