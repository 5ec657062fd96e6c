//! The decision pass agrees with burn's forward pass of the same network.

use super::super::super::batch::{Dims, GraphBatch, batch};
use super::super::super::tests::random_view;
use super::super::{AllocQuery, Net, NetConfig};
use super::Embeddings;
use burn::tensor::Device;
use tapfinger_core::NodeId;
use tapfinger_core::view::ClusterView;

fn floats<const D: usize>(t: burn::tensor::Tensor<D>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

fn close(what: &str, a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-4 * (1.0 + x.abs().max(y.abs())),
            "{what}[{i}]: burn {x} vs decision pass {y}"
        );
    }
}

/// Every output of both passes on `b`: each node type's embeddings, the pointer under some
/// blocked slots and a blocked pass, and each kind's allocation logits.
fn agree(net: &Net, cfg: &NetConfig, b: &GraphBatch, window: usize, kinds: usize) {
    let device = Device::flex();
    let fast = net.infer(cfg).expect("weights");
    let enc = net.encode(b, &device);
    let mine: Embeddings = fast.encode(b);
    for t in 0..4 {
        close(&format!("type {t}"), &floats(enc.h[t].clone()), &mine.h[t]);
    }
    let g = b.graphs;
    let blocked: Vec<bool> = (0..g * window).map(|i| i % 3 == 1).collect();
    let pass: Vec<bool> = (0..g).map(|i| i % 2 == 0).collect();
    // The decision's pruned encoding reads the same where the heads read.
    let pruned = fast.encode_decision(b);
    for pass in [&pass[..], &[]] {
        let burn = floats(net.pointer_logits(&enc, b, &blocked, pass, &device));
        close(
            "pointer",
            &burn,
            &fast.pointer_logits(&mine, b, &blocked, pass),
        );
        close(
            "pruned pointer",
            &burn,
            &fast.pointer_logits(&pruned, b, &blocked, pass),
        );
    }
    let slot: Vec<usize> = (0..g).map(|i| i % window).collect();
    let prev: Vec<f32> = (0..g * kinds).map(|i| (i % 5) as f32).collect();
    let (lo, hi): (Vec<u32>, Vec<u32>) = (0..g).map(|i| (i as u32 % 3, 4 + i as u32)).unzip();
    for k in 0..kinds {
        let mut plain = Vec::new();
        for two_point in [None, Some(-2.0)] {
            let q = AllocQuery {
                slot: &slot,
                kind: k,
                prev: &prev,
                lo: &lo,
                hi: &hi,
                two_point,
            };
            let burn = floats(net.alloc_logits(&enc, b, &q, &device));
            close(
                &format!("allocation {k}, {two_point:?}"),
                &burn,
                &fast.alloc_logits(&mine, b, &q),
            );
            close(
                &format!("pruned allocation {k}, {two_point:?}"),
                &burn,
                &fast.alloc_logits(&pruned, b, &q),
            );
            if two_point.is_none() {
                plain = burn;
                continue;
            }
            // Two points: only the ends are legal, the larger shifted by the offset.
            let width = burn.len() / g;
            for i in 0..g {
                for u in 0..width {
                    let (x, y) = (burn[i * width + u], plain[i * width + u]);
                    let u = u as u32;
                    if u == hi[i] && hi[i] > lo[i] {
                        assert!((x - (y - 2.0)).abs() < 1e-4, "graph {i} hi: {x} vs {y}");
                    } else if u == lo[i] {
                        assert_eq!(x, y, "graph {i} lo");
                    } else {
                        assert!(x < -1e8, "graph {i}, unit {u} between the points: {x}");
                    }
                }
            }
        }
    }
}

#[test]
fn the_decision_pass_computes_what_burn_computes() {
    let dims = Dims::per_preset(2, 2, 10);
    let views: Vec<ClusterView> = (0..6).map(random_view).collect();
    let device = Device::flex();
    let mut checked = 0;
    // Every named variant: with and without graph attention, each selection rule and mask.
    for (seed, variant) in super::super::VARIANTS.iter().enumerate() {
        device.seed(seed as u64 + 11);
        let cfg = NetConfig::variant(dims.clone(), variant).unwrap();
        let net = Net::new(&cfg, &device);
        // Alone, and all six in one block-diagonal batch.
        for v in &views {
            for n in &v.nodes {
                agree(&net, &cfg, &batch(&[(v, n.id)], &dims), 10, 2);
                checked += 1;
            }
        }
        let items: Vec<(&ClusterView, NodeId)> = views.iter().map(|v| (v, NodeId(0))).collect();
        agree(&net, &cfg, &batch(&items, &dims), 10, 2);
    }
    assert!(checked > 50, "{checked} graphs");
}

/// A network whose floors are newly learned starts near the minimum demand: in both passes,
/// every kind's allocation logits fall by the slope per unit from the lowest allowed unit (so
/// the greedy floor is the minimum and sampled floors are geometric above it), masked outside
/// the allowed range, whatever the view.
#[test]
fn warm_started_floor_heads_favour_the_minimum_by_the_slope() {
    let dims = Dims::per_preset(2, 2, 10);
    let device = Device::flex();
    device.seed(5);
    let cfg = NetConfig::new(dims.clone());
    let net = Net::new(&cfg, &device).floors_near_minimum(0.5);
    let fast = net.infer(&cfg).expect("weights");
    for seed in 0..3 {
        let v = random_view(seed);
        let b = batch(&[(&v, NodeId(0))], &dims);
        let enc = net.encode(&b, &device);
        let (lo, hi) = ([2u32], [6u32]);
        for k in 0..2 {
            let q = AllocQuery {
                slot: &[seed as usize],
                kind: k,
                prev: &[1.0, 3.0],
                lo: &lo,
                hi: &hi,
                two_point: None,
            };
            let fast_logits = fast.alloc_logits(&fast.encode(&b), &b, &q);
            for logits in [floats(net.alloc_logits(&enc, &b, &q, &device)), fast_logits] {
                for u in 2..6 {
                    let step = logits[u] - logits[u + 1];
                    assert!((step - 0.5).abs() < 1e-5, "kind {k}, unit {u}: step {step}");
                }
                let best = (0..logits.len())
                    .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
                    .unwrap();
                assert_eq!(best, 2, "kind {k}: the greedy floor is the minimum");
                assert!(logits[1] < logits[6] - 10.0 && logits[7] < logits[6] - 10.0);
            }
        }
    }
}
