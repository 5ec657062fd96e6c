//! `tapfinger-sim place-bench`: the locality-aware placement of parameter-server jobs (LP
//! rounding) against the exact optimum on small instances, and against pack-first and
//! locality-oblivious spreading on online workloads with edge and rack links.

use std::time::Instant;
use tapfinger::placement::lp::Rounding;
use tapfinger::placement::simple::{Exact, PackFirst, Spread};
use tapfinger::placement::{Free, Placer, random, run_online};

/// Arguments of `place-bench`.
#[derive(clap::Args)]
pub(crate) struct PlaceBenchArgs {
    /// Small instances compared with the exact optimum.
    #[arg(long, default_value_t = 200)]
    instances: u64,
    /// Online workloads per link speed.
    #[arg(long, default_value_t = 10)]
    workloads: u64,
    /// Boxes in an online workload.
    #[arg(long, default_value_t = 6)]
    boxes: usize,
    /// Jobs in an online workload.
    #[arg(long, default_value_t = 30)]
    jobs: usize,
    /// First generator seed (seeds below 100 are for development).
    #[arg(long, default_value_t = 100)]
    first_seed: u64,
}

/// `place-bench`.
pub(crate) fn bench(a: PlaceBenchArgs) {
    let placers: [&dyn Placer; 3] = [&Rounding::default(), &PackFirst, &Spread];
    println!(
        "small instances (2-3 boxes, 1-3 jobs, seeds {}..{}): total training time / exact optimum",
        a.first_seed,
        a.first_seed + a.instances
    );
    println!(
        "{:<12} {:>8} {:>8} {:>10}",
        "placer", "mean ×", "worst ×", "seconds"
    );
    for p in placers {
        let started = Instant::now();
        let (mut sum, mut worst) = (0.0, 0.0f64);
        for seed in a.first_seed..a.first_seed + a.instances {
            let (c, free, jobs) = random::small(seed);
            let opt = run_online(&c, free.clone(), &jobs, &Exact, seed).total();
            let r = run_online(&c, free, &jobs, p, seed).total() / opt;
            sum += r;
            worst = worst.max(r);
        }
        println!(
            "{:<12} {:>8.3} {:>8.3} {:>10.2}",
            p.name(),
            sum / a.instances as f64,
            worst,
            started.elapsed().as_secs_f64()
        );
    }
    println!(
        "\nonline workloads ({} boxes of 16 cores, {} jobs, seeds {}..{}): mean training time, slots of 60 s",
        a.boxes,
        a.jobs,
        a.first_seed,
        a.first_seed + a.workloads
    );
    println!(
        "{:<22} {:>12} {:>12} {:>12}",
        "links", "lp-rounding", "pack-first", "spread"
    );
    for (name, bw) in [
        ("edge (1 Gbit/s)", random::EDGE),
        ("rack (10 Gbit/s)", random::RACK),
    ] {
        let mut means = [0.0; 3];
        for seed in a.first_seed..a.first_seed + a.workloads {
            let (c, jobs) = random::workload(seed, a.boxes, a.jobs, bw);
            for (m, p) in means.iter_mut().zip(placers) {
                *m += run_online(&c, Free::new(&c), &jobs, p, seed).mean() / a.workloads as f64;
            }
        }
        println!(
            "{:<22} {:>12.3} {:>12.3} {:>12.3}",
            name, means[0], means[1], means[2]
        );
    }
}
