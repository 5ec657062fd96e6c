//! The packing benchmark: how well placement policies pack GPU shares onto a real cluster, run
//! as the FGD study runs it on Alibaba's GPU cluster trace 2023 (docs/PACKING.md). Placement
//! only: pods arrive one at a time and never leave, so the figures are the share of GPUs left
//! unallocated as the workload grows and how much of the idle GPU capacity is fragmented.
//!
//! - [`trace`]: the node and pod lists, every layout of the trace.
//! - [`state`]: boxes and devices, what fits where.
//! - [`frag`]: the study's fragmentation measure and typical pod shapes.
//! - [`policies`]: the study's six policies.
//! - [`product`]: the product's own placement (the protocol's box choice and the device pool).
//! - [`run`]: one seeded run and its curve; [`bench()`] runs every policy over seeds.

pub mod frag;
pub mod policies;
pub mod product;
pub mod run;
pub mod state;
pub mod trace;

use frag::Measure;
use policies::{Fgd, Placer, Study};
use run::Curve;
use state::Cluster;
use trace::{NodeSpec, PodSpec};

/// Errors reading the benchmark's inputs.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// A file without rows.
    #[error("{file}: no rows")]
    Empty {
        /// The file.
        file: String,
    },
    /// A column the layout needs is missing.
    #[error("{file}: the header has no column {missing:?} (it has {found})")]
    Header {
        /// The file.
        file: String,
        /// The column.
        missing: String,
        /// The header read.
        found: String,
    },
    /// A row that cannot be read.
    #[error("{file}, line {line}: {reason}")]
    Row {
        /// The file.
        file: String,
        /// Line number (1-based).
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A policy name the benchmark does not know.
    #[error("unknown policy {0:?} (known: {known})", known = POLICIES.join(", "))]
    Policy(String),
}

/// The policies, by the names the benchmark takes.
pub const POLICIES: [&str; 10] = [
    "random",
    "dotprod",
    "clustering",
    "packing",
    "bestfit",
    "fgd",
    "tapfinger",
    "tapfinger-fullest",
    "tapfinger-pack",
    "tapfinger-pack-seen",
];

/// A fresh placer for `name` on `cluster`, with the typical shapes of `measure` (FGD) or the
/// pod list `pods` seen before (`tapfinger-pack-seen`).
pub fn placer(
    name: &str,
    cluster: &Cluster,
    measure: &Measure,
    pods: &[PodSpec],
) -> Result<Box<dyn Placer + Send>, PackError> {
    Ok(match name {
        "random" => Box::new(Study::Random),
        "dotprod" => Box::new(Study::DotProd),
        "clustering" => Box::new(Study::Clustering),
        "packing" => Box::new(Study::Packing),
        "bestfit" => Box::new(Study::BestFit),
        "fgd" => Box::new(Fgd::new(measure.clone(), cluster.hosts.len())),
        "tapfinger" => Box::new(product::Protocol::new(cluster)),
        "tapfinger-fullest" => Box::new(product::Protocol::fullest_first(cluster)),
        "tapfinger-pack" => Box::new(product::Protocol::packing(cluster)),
        "tapfinger-pack-seen" => Box::new(product::Protocol::packing_seen(cluster, pods)),
        other => return Err(PackError::Policy(other.into())),
    })
}

/// Every policy's curves over `seeds` on one pod list: `curves[p][s]`.
///
/// The typical shapes come from the pod list as read (before copies), as in the study. Seeds
/// run on up to `threads` threads; the result does not depend on how many.
pub fn bench(
    nodes: &[NodeSpec],
    pods: &[PodSpec],
    policies: &[String],
    seeds: &[u64],
    target: f64,
    threads: usize,
) -> Result<Vec<Vec<Curve>>, PackError> {
    let cluster = Cluster::new(nodes);
    let measure = Measure::new(pods, &cluster);
    for p in policies {
        placer(p, &cluster, &measure, &[])?;
    }
    let jobs: Vec<(usize, usize)> = (0..policies.len())
        .flat_map(|p| (0..seeds.len()).map(move |s| (p, s)))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&(p, s)) = jobs.get(i) else { break };
                    let order = run::arrivals(pods, cluster.gpu_capacity, target, seeds[s]);
                    let fresh = run::cluster(nodes, seeds[s]);
                    let mut placer =
                        placer(&policies[p], &fresh, &measure, pods).expect("checked above");
                    let curve = run::run(fresh, &order, &measure, placer.as_mut(), seeds[s]);
                    done.lock()
                        .expect("no panics while held")
                        .push((p, s, curve));
                }
            });
        }
    });
    let mut curves: Vec<Vec<Option<Curve>>> = vec![vec![None; seeds.len()]; policies.len()];
    for (p, s, c) in done.into_inner().expect("threads joined") {
        curves[p][s] = Some(c);
    }
    Ok(curves
        .into_iter()
        .map(|v| v.into_iter().map(|c| c.expect("every run done")).collect())
        .collect())
}
