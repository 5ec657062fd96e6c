//! Liveness and safety when delays straddle the peer timeout: node cores in the in-memory
//! harness (slots of 200 ms, heartbeats every 50 ms, peer timeout 300 ms) with inbound delays
//!
//! - **fixed**: each node's drawn once from 0..=max ms; 200 tasks, up to 30 s;
//! - **changing**: every 500 ms, a third of the nodes late by 0..=max ms, the rest on time;
//!   300 tasks, up to 40 s.
//!
//! Tasks take 1.5 s at one core; a run stops when all finished or at its time limit. Prints,
//! per setting, finished/overlaps/finished-twice for seeds 1 to 4, and the totals; exits with 1
//! if two copies of a task ever ran at once or a task finished twice.
//!
//! `cargo run --release -p tapfinger-harness --example delay_sweep`

use tapfinger_harness::{Cluster, lcg};

/// Fixed-delay settings swept: (nodes, largest inbound delay in ms).
const FIXED: [(usize, u64); 6] = [
    (8, 200),
    (16, 200),
    (16, 250),
    (32, 150),
    (32, 200),
    (32, 250),
];
/// Changing-delay settings swept.
const CHANGING: [(usize, u64); 3] = [(16, 400), (32, 250), (32, 400)];

/// One run: `n` warmed-up nodes given `tasks` tasks round-robin, then stepped until all
/// finished or `limit_ms` passed, `delays` setting the inbound delays every 500 ms (step 0
/// included). Returns (finished, overlaps, finished twice).
fn run(n: usize, tasks: u64, limit_ms: u64, mut delays: impl FnMut(&mut [u64])) -> [usize; 3] {
    let mut c = Cluster::new(n, "min");
    c.work_ms = 1500;
    delays(&mut c.inbound_delay);
    c.warm_and_load(tasks);
    let (start, mut steps) = (c.now, 0u64);
    while c.now < start + limit_ms && (c.finished.len() as u64) < tasks {
        if steps % 50 == 49 {
            delays(&mut c.inbound_delay);
        }
        c.step();
        steps += 1;
    }
    let twice = c.finished.values().filter(|v| **v > 1).count();
    [c.finished.len(), c.overlaps.len(), twice]
}

fn main() {
    let mut total = [0usize; 3];
    let mut tasks_in_all = 0;
    let mut report = |name: String, tasks: u64, results: Vec<[usize; 3]>| {
        let cells: Vec<String> = results
            .iter()
            .map(|r| format!("{}/{}/{}", r[0], r[1], r[2]))
            .collect();
        println!("{name}: {}", cells.join(" "));
        for r in results {
            for k in 0..3 {
                total[k] += r[k];
            }
            tasks_in_all += tasks;
        }
    };
    for (n, max) in FIXED {
        let results = (1..=4u64)
            .map(|seed| {
                let mut drawn = false;
                let mut rnd = lcg(seed * 7919);
                run(n, 200, 30_000, |d| {
                    if !std::mem::replace(&mut drawn, true) {
                        d.iter_mut().for_each(|x| *x = rnd() % (max + 1));
                    }
                })
            })
            .collect();
        report(
            format!("{n} nodes, fixed delays 0..={max} ms"),
            200,
            results,
        );
    }
    for (n, max) in CHANGING {
        let results = (1..=4u64)
            .map(|seed| {
                let mut rnd = lcg(seed * 104_729);
                run(n, 300, 40_000, |d| {
                    for x in d.iter_mut() {
                        *x = if rnd().is_multiple_of(3) {
                            rnd() % (max + 1)
                        } else {
                            0
                        };
                    }
                })
            })
            .collect();
        report(
            format!("{n} nodes, changing delays 0..={max} ms"),
            300,
            results,
        );
    }
    println!(
        "total: {} of {tasks_in_all} tasks finished, {} overlaps, {} finished twice",
        total[0], total[1], total[2]
    );
    if total[1] + total[2] > 0 {
        std::process::exit(1);
    }
}
