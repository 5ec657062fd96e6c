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
