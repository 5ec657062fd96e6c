//! `tapfinger-sim pack-bench`: the FGD study's fragmentation benchmark on Alibaba's GPU cluster
//! trace 2023, every study policy and the product's placement side by side (docs/PACKING.md).

use anyhow::{Context, Result};
use std::path::PathBuf;
use std::time::Instant;
use tapfinger_sim::pack::{self, run::spread, state::Cluster, trace};

/// The arrived percentages the tables report.
const REPORTED: [usize; 8] = [80, 90, 95, 100, 105, 110, 120, 130];

/// The study's published unallocated GPUs at 100 % arrived (median of its 10 seeds), per pod
/// list: Random, DotProd, Clustering, Packing, BestFit, FGD (its simulator's expected results,
/// `experiments/analysis/expected_results/`).
const PUBLISHED: [(&str, [f64; 6]); 7] = [
    (
        "openb_pod_list_default",
        [13.75, 9.44, 8.42, 8.19, 7.09, 4.77],
    ),
    (
        "openb_pod_list_gpushare40",
        [15.04, 10.66, 10.18, 10.19, 8.53, 6.05],
    ),
    (
        "openb_pod_list_gpushare100",
        [21.07, 17.93, 17.70, 17.78, 15.40, 13.36],
    ),
    (
        "openb_pod_list_gpuspec10",
        [13.69, 9.75, 8.06, 7.77, 6.88, 5.30],
    ),
    (
        "openb_pod_list_gpuspec33",
        [16.19, 20.17, 18.96, 17.67, 19.59, 12.12],
    ),
    (
        "openb_pod_list_multigpu50",
        [18.61, 5.25, 4.36, 3.93, 4.42, 2.91],
    ),
    (
        "openb_pod_list_cpu250",
        [20.06, 16.22, 12.48, 11.92, 8.70, 6.80],
    ),
];

/// Arguments of `pack-bench`.
#[derive(clap::Args)]
pub(crate) struct PackBenchArgs {
    /// The node list (`openb_node_list_gpu_node.csv`).
    #[arg(long)]
    nodes: PathBuf,
    /// Pod lists (`openb_pod_list_*.csv`, any of them; repeat for several).
    #[arg(long, required = true)]
    pods: Vec<PathBuf>,
    /// Policies, comma-separated (random, dotprod, clustering, packing, bestfit, fgd;
    /// tapfinger: the product's placement; tapfinger-pack: with boxes that pack GPU shares, an
    /// agent's `pack_shares`; tapfinger-pack-seen: the same on a cluster whose ledger has seen
    /// the pod list before, as FGD is given it; tapfinger-fullest: shares on the fullest
    /// device, the ablation of the pool's fragmentation-aware choice).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "random,dotprod,clustering,packing,bestfit,fgd,tapfinger"
    )]
    policies: Vec<String>,
    /// Runs per policy.
    #[arg(long, default_value_t = 10)]
    seeds: u64,
    /// The first run's seed (the study's are 42 to 51).
    #[arg(long, default_value_t = 42)]
    first_seed: u64,
    /// GPU requests as a share of the cluster's GPUs that arrive in all (the study: 1.3).
    #[arg(long, default_value_t = 1.3)]
    target: f64,
    /// Threads (default: the machine's cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Write each pod list's curves here: `<list>.svg` (median unallocated share against
    /// arrived workload) and `<list>.csv` (every policy's median, quartiles and fragmentation
    /// ratio at each percent).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// `pack-bench`.
pub(crate) fn bench(a: PackBenchArgs) -> Result<()> {
    anyhow::ensure!(a.seeds > 0, "--seeds must be at least 1");
    anyhow::ensure!(
        a.target > 0.0 && a.target <= 5.0,
        "--target is a share of the cluster's GPUs, in (0, 5]"
    );
    let read = |p: &PathBuf| {
        std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))
    };
    let nodes = trace::read_nodes(&a.nodes.display().to_string(), &read(&a.nodes)?)?;
    let cluster = Cluster::new(&nodes);
    anyhow::ensure!(
        cluster.gpu_capacity > 0,
        "{}: the node list has no GPUs",
        a.nodes.display()
    );
    let seeds: Vec<u64> = (a.first_seed..a.first_seed + a.seeds).collect();
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    for path in &a.pods {
        let pods = trace::read_pods(&path.display().to_string(), &read(path)?)?;
        let list = path
            .file_stem()
            .map_or_else(|| "pods".into(), |s| s.to_string_lossy().into_owned());
        let asked: u64 = pods.iter().map(|p| p.total_gpu_milli()).sum();
        println!(
            "{list}: {} pods asking {:.1} % of {} GPUs on {} boxes; copies up to {:.0} %; seeds {}..={}",
            pods.len(),
            100.0 * asked as f64 / cluster.gpu_capacity as f64,
            cluster.gpu_capacity / 1000,
            nodes.len(),
            100.0 * a.target,
            seeds[0],
            seeds[seeds.len() - 1],
        );
        let t0 = Instant::now();
        let curves = pack::bench(&nodes, &pods, &a.policies, &seeds, a.target, threads)?;
        print_table(&list, &a.policies, &curves);
        println!("({:.1} s)\n", t0.elapsed().as_secs_f64());
        if let Some(dir) = &a.out {
            write_curves(dir, &list, &a.policies, &curves, a.target)?;
        }
    }
    Ok(())
}

/// The study's published figure for `policy` on `list` at 100 % arrived.
fn published(list: &str, policy: &str) -> Option<f64> {
    // The study's six, in the order of the published rows.
    let i = pack::POLICIES[..6].iter().position(|p| *p == policy)?;
    PUBLISHED
        .iter()
        .find(|(l, _)| *l == list)
        .map(|(_, v)| v[i])
}

fn print_table(list: &str, policies: &[String], curves: &[Vec<pack::run::Curve>]) {
    println!(
        "unallocated GPUs, % of the cluster's, at each arrived %: median [25 %, 75 %] of the seeds"
    );
    // Every column at least one space apart, whatever the names and spreads.
    let w = policies.iter().map(String::len).max().unwrap_or(6).max(6) + 1;
    print!("{:<w$}", "policy");
    for r in REPORTED {
        print!("{:>21}", format!("{r} %"));
    }
    println!("{:>11}{:>10}{:>12}", "study@100", "frag@90", "unplaced");
    for (p, runs) in policies.iter().zip(curves) {
        print!("{p:<w$}");
        for r in REPORTED {
            let xs: Vec<f64> = runs.iter().map(|c| c.unallocated_at(r)).collect();
            let (m, lo, hi) = spread(&xs);
            print!("{:>21}", format!("{m:.2} [{lo:.2}, {hi:.2}]"));
        }
        let study = published(list, p).map_or("-".into(), |v| format!("{v:.2}"));
        let frag: Vec<f64> = runs.iter().map(|c| c.frag_ratio_at(90)).collect();
        let failed: Vec<f64> = runs.iter().map(|c| c.failed as f64).collect();
        println!(
            "{study:>11}{:>10}{:>12}",
            format!("{:.1}", spread(&frag).0),
            format!("{:.0}", spread(&failed).0)
        );
    }
}

fn write_curves(
    dir: &std::path::Path,
    list: &str,
    policies: &[String],
    curves: &[Vec<pack::run::Curve>],
    target: f64,
) -> Result<()> {
    let last = (100.0 * target).floor() as usize;
    let mut csv = String::from(
        "policy,arrived_pct,unallocated_median,unallocated_q25,unallocated_q75,frag_ratio_median\n",
    );
    let mut series = Vec::new();
    for (p, runs) in policies.iter().zip(curves) {
        let mut pts = Vec::new();
        for r in 0..=last {
            let xs: Vec<f64> = runs.iter().map(|c| c.unallocated_at(r)).collect();
            let fr: Vec<f64> = runs.iter().map(|c| c.frag_ratio_at(r)).collect();
            let (m, lo, hi) = spread(&xs);
            csv += &format!("{p},{r},{m:.3},{lo:.3},{hi:.3},{:.3}\n", spread(&fr).0);
            if r >= 50 {
                pts.push((r as f64, m));
            }
        }
        series.push((p.clone(), pts));
    }
    let ideal = (50..=last)
        .map(|r| (r as f64, (100.0 - r as f64).max(0.0)))
        .collect();
    series.push(("ideal".into(), ideal));
    std::fs::write(dir.join(format!("{list}.csv")), csv)?;
    tapfinger_sim::plot::line_chart(
        &dir.join(format!("{list}.svg")),
        &format!("{list}: unallocated GPUs (median of the seeds)"),
        "arrived GPU requests, % of the cluster's",
        "unallocated GPUs, %",
        &series,
    )?;
    Ok(())
}
