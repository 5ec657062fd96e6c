//! How the simulator's cost grows with the cluster: one Tiresias episode on `hetero6` scaled up
//! (its six servers repeated, 64 tasks per node, arrivals scaled with the node count), per node
//! count, timed once each (an episode is seconds long, so one run measures it well enough; run
//! the command again to see the spread). Prints the wall time, the time per task and its ratio
//! to the smallest cluster's, and the episode's average JCT.
//!
//! `cargo bench -p tapfinger-sim --bench scale -- [--nodes 6,24,48,96] [--policy tiresias]
//! [--model DIR]` (1000 nodes: `--nodes 1002`; `--model` runs the learned policy `tapfinger`
//! from that checkpoint, e.g. a general model whose decisions attend to a bounded set of nodes;
//! its agents share one batched forward pass per step, `policies::learned_with`). Also prints
//! the decision steps and the contested tasks per slot.

use std::time::Instant;
use tapfinger_sim::{Scenario, Simulator, metrics, policies};

/// `hetero6` with its servers repeated `copies` times and 64 tasks per node.
fn scaled(copies: usize) -> Scenario {
    let mut sc = Scenario::load("hetero6")
        .expect("preset")
        .repeated(copies, 64);
    sc.max_slots = sc.max_slots.max(100_000);
    sc
}

fn main() {
    let mut nodes = vec![6usize, 24, 48, 96];
    let mut policy = "tiresias".to_string();
    let mut model: Option<std::path::PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--nodes" => {
                nodes = args
                    .next()
                    .expect("--nodes N,N,...")
                    .split(',')
                    .map(|x| x.parse().expect("a node count"))
                    .collect()
            }
            "--policy" => policy = args.next().expect("--policy NAME"),
            "--model" => model = Some(std::path::PathBuf::from(args.next().expect("--model DIR"))),
            _ => {} // cargo bench passes --bench
        }
    }
    if let Some(m) = &model {
        policy = format!("tapfinger ({})", m.display());
    }
    println!("policy {policy}; hetero6 servers repeated; 64 tasks per node");
    println!(
        "{:>6} {:>8} {:>10} {:>14} {:>10} {:>9} {:>11} {:>15}",
        "nodes",
        "tasks",
        "seconds",
        "ms per task",
        "vs first",
        "avg JCT",
        "steps/slot",
        "conflicts/slot"
    );
    let mut first = None;
    for n in nodes {
        let sim = Simulator::new(scaled(n.div_ceil(6)));
        let ps = match &model {
            // One batched forward pass per step (a model with a bounded focus; the decisions
            // are those of one pass per agent but for ties rounded otherwise).
            Some(m) => policies::learned_with(&sim, Some(m), true).expect("model"),
            None => policies::build(&sim, &policy).expect("policy"),
        };
        let t = Instant::now();
        let r = sim.run(ps, 0).expect("episode");
        let secs = t.elapsed().as_secs_f64();
        let per_task = secs * 1e3 / r.tasks.len() as f64;
        let base = *first.get_or_insert(per_task);
        let kinds = sim.scenario().kind_names();
        let slots = r.slots.len().max(1) as f64;
        let steps = r.slots.iter().map(|s| f64::from(s.steps)).sum::<f64>() / slots;
        let conflicts = r.slots.iter().map(|s| f64::from(s.conflicts)).sum::<f64>() / slots;
        println!(
            "{:>6} {:>8} {:>10.2} {:>14.3} {:>9.1}x {:>9.2} {:>11.1} {:>15.1}",
            sim.scenario().nodes.len(),
            r.tasks.len(),
            secs,
            per_task,
            per_task / base,
            metrics::summarize(&r, &kinds).avg_jct,
            steps,
            conflicts
        );
    }
}
