//! Random layer chains and price lists, for the planners' tests, the learned planner's training
//! (generator seeds below 100) and its evaluation (seeds from 100 up, never trained on).
//!
//! Two layer families, as HeterPS describes training jobs: IO-heavy layers (large sparse inputs,
//! embeddings), about as fast on a CPU as on a GPU, and compute-heavy layers (dense, convolution)
//! that a GPU runs 8–20× faster. Three types: a CPU core, a small GPU and a large one, at prices
//! in the ratio of public cloud list prices; the link is 10 Gbit/s. The target is drawn per
//! chain; some targets are out of reach, which the planners must say.

use super::{Job, Kind, Layer, Prices, ResourceType};
use rand::RngExt;
use std::collections::BTreeMap;

/// A random chain of 3–12 layers and its price list; `limited`: a few units of each type (so
/// the limits bind), otherwise unlimited.
pub fn chain(seed: u64, limited: bool) -> (Job, Prices) {
    let mut rng = crate::seeded_rng(seed ^ 0x9e37_79b9_7f4a_7c15);
    let types = [
        ("cpu", Kind::Cpu, 0.05, 0.02, 32),
        ("t4", Kind::Gpu, 0.35, 0.04, 4),
        ("v100", Kind::Gpu, 2.48, 0.06, 2),
    ];
    let n = rng.random_range(3..=12usize);
    let layers = (0..n)
        .map(|l| {
            let io_heavy = rng.random_bool(0.35);
            let cpu = if io_heavy {
                rng.random_range(0.002..0.012)
            } else {
                rng.random_range(0.02..0.2)
            };
            let t4 = if io_heavy {
                cpu * rng.random_range(0.8..2.0)
            } else {
                cpu / rng.random_range(8.0..20.0)
            };
            let v100 = t4 / rng.random_range(1.5..4.0);
            let mut time = BTreeMap::new();
            time.insert("cpu".to_string(), cpu);
            // An op without a GPU kernel now and then.
            if !io_heavy || rng.random_bool(0.8) {
                time.insert("t4".to_string(), t4);
                time.insert("v100".to_string(), v100);
            }
            Layer {
                name: format!("{}{l}", if io_heavy { "io" } else { "dense" }),
                time,
                out_bytes: rng.random_range(0.05e6..6e6),
            }
        })
        .collect();
    let job = Job {
        name: format!("chain-{seed}"),
        batches: 1e5,
        throughput: rng.random_range(10.0..150.0),
        layers,
    };
    let prices = Prices {
        link_bandwidth: 1.25e9,
        resources: types
            .iter()
            .map(|&(name, kind, price, scaling, units)| ResourceType {
                name: name.to_string(),
                kind,
                price,
                units: limited.then_some(units),
                scaling,
            })
            .collect(),
    };
    (job, prices)
}

/// A chain from a wider family than [`chain`], for training a planner that must read price lists
/// and targets it has not seen: 2–16 layers; 2–4 types drawn from two CPU kinds and four GPU
/// kinds at list prices scaled by 0.7–1.4 and scaling overheads of 0–0.1; each type unlimited
/// or limited to 1–64 units (GPUs 1–8); a target of 5–800 batches/s and a link of 1–100 Gbit/s
/// (both log-uniform). Many draws have no plan at all.
pub fn varied(seed: u64) -> (Job, Prices) {
    let mut rng = crate::seeded_rng(seed ^ 0x7a71_ed00);
    // (name, kind, price, speed against the base GPU for dense layers, against a core for IO)
    let pool = [
        ("cpu", Kind::Cpu, 0.05, 0.0, 1.0),
        ("arm", Kind::Cpu, 0.03, 0.0, 1.4),
        ("t4", Kind::Gpu, 0.35, 1.0, 1.2),
        ("a10", Kind::Gpu, 1.0, 2.2, 1.0),
        ("v100", Kind::Gpu, 2.48, 2.8, 0.8),
        ("a100", Kind::Gpu, 3.7, 5.0, 0.7),
    ];
    let mut picked: Vec<usize> = vec![rng.random_range(0..2usize)];
    let more = rng.random_range(1..=3usize);
    while picked.len() < 1 + more {
        let i = rng.random_range(0..pool.len());
        if !picked.contains(&i) {
            picked.push(i);
        }
    }
    let n = rng.random_range(2..=16usize);
    let layers = (0..n)
        .map(|l| {
            let io_heavy = rng.random_bool(0.35);
            let cpu = if io_heavy {
                rng.random_range(0.001..0.02)
            } else {
                rng.random_range(0.01..0.3)
            };
            let gpu_gain = rng.random_range(6.0..25.0);
            let mut time = BTreeMap::new();
            for &i in &picked {
                let (name, kind, _, fast, io) = pool[i];
                let t = match (kind, io_heavy) {
                    (Kind::Cpu, _) => cpu / io,
                    (Kind::Gpu, true) => cpu * rng.random_range(0.7..2.0) / io,
                    (Kind::Gpu, false) => cpu / gpu_gain / fast,
                };
                if kind == Kind::Cpu || !io_heavy || rng.random_bool(0.8) {
                    time.insert(name.to_string(), t);
                }
            }
            if time.is_empty() {
                let (name, _, _, _, io) = pool[picked[0]];
                time.insert(name.to_string(), cpu / io);
            }
            Layer {
                name: format!("{}{l}", if io_heavy { "io" } else { "dense" }),
                time,
                out_bytes: rng.random_range(0.02e6..10e6),
            }
        })
        .collect();
    let job = Job {
        name: format!("varied-{seed}"),
        batches: 1e5,
        throughput: (rng.random_range(5f64.ln()..800f64.ln())).exp(),
        layers,
    };
    let prices = Prices {
        link_bandwidth: (rng.random_range(1.25e8f64.ln()..1.25e10f64.ln())).exp(),
        resources: picked
            .iter()
            .map(|&i| {
                let (name, kind, price, _, _) = pool[i];
                let cap = if kind == Kind::Gpu { 8 } else { 64 };
                ResourceType {
                    name: name.to_string(),
                    kind,
                    price: price * rng.random_range(0.7..1.4),
                    units: rng.random_bool(0.6).then(|| rng.random_range(1..=cap)),
                    scaling: rng.random_range(0.0..0.1),
                }
            })
            .collect(),
    };
    (job, prices)
}
