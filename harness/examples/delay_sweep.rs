//! Liveness and safety when delays straddle the peer timeout: node cores in the in-memory
//! harness (slots of 200 ms, heartbeats every 50 ms, peer timeout 300 ms) whose inbound delays
//! are fixed, each drawn from 0..=max ms, are given 200 tasks of 1.5 s at one core; each run
//! stops when all finished or after 30 s of simulated time. Prints, per setting and seed,
//! finished/overlaps/finished-twice, and the totals; exits with 1 if two copies of a task ever
//! ran at once or a task finished twice.
//!
//! `cargo run --release -p tapfinger-harness --example delay_sweep`

use tapfinger_harness::Cluster;

/// Settings swept: (nodes, largest inbound delay in ms).
const SETTINGS: [(usize, u64); 6] = [
    (8, 200),
    (16, 200),
    (16, 250),
    (32, 150),
    (32, 200),
    (32, 250),
];
const TASKS: u64 = 200;

fn main() {
    let (mut finished, mut overlaps, mut twice, mut runs) = (0, 0, 0, 0);
    for (n, max) in SETTINGS {
        let mut line = format!("{n} nodes, delays 0..={max} ms:");
        for seed in 1..=4u64 {
            let mut c = Cluster::new(n, "min");
            c.work_ms = 1500;
            let mut s = seed * 7919;
            for d in c.inbound_delay.iter_mut() {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                *d = (s >> 33) % (max + 1);
            }
            for _ in 0..60 {
                c.step();
            }
            for id in 0..TASKS {
                c.submit((id % n as u64) as usize, id);
                if id % 4 == 0 {
                    c.step();
                }
            }
            let until = c.now + 30_000;
            while c.now < until && (c.finished.len() as u64) < TASKS {
                c.step();
            }
            let t = c.finished.values().filter(|v| **v > 1).count();
            line += &format!(" {}/{}/{}", c.finished.len(), c.overlaps.len(), t);
            finished += c.finished.len();
            overlaps += c.overlaps.len();
            twice += t;
            runs += 1;
        }
        println!("{line}");
    }
    println!(
        "total: {finished} of {} tasks finished, {overlaps} overlaps, {twice} finished twice",
        runs * TASKS
    );
    if overlaps + twice > 0 {
        std::process::exit(1);
    }
}
