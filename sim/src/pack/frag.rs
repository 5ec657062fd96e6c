//! GPU fragmentation as the FGD study defines it (Weng et al., "Beware of Fragmentation:
//! Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC 2023, §3):
//! a box's idle GPU thousandths are a fragment *for a pod shape* where that shape cannot use
//! them — all of them if the shape cannot run on the box at all (too little CPU, too few devices
//! with room, a GPU model it does not accept, or no GPU asked for), else those on devices with
//! less room than the shape asks of one device. A box's fragmentation is the expectation over
//! the workload's typical shapes, weighted by how often each arrives; FGD places a pod where
//! this expectation grows least.
//!
//! The typical shapes are the most frequent (CPU, GPU share, GPU count, models) shapes of the
//! pod list that make up 95 % of its pods, CPU pods included, as the study configures them.

use super::state::{Cluster, Host};
use super::trace::PodSpec;
use std::collections::BTreeMap;

/// Share of the pods the typical shapes cover.
pub const TYPICAL_COVER: f64 = 0.95;

/// One pod shape: what the measure needs of a pod.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shape {
    /// CPU thousandths.
    pub cpu: u64,
    /// Thousandths of each device (0: a CPU pod).
    pub gpu_milli: u32,
    /// Devices.
    pub num_gpu: u32,
    /// GPU models accepted (empty: any).
    pub gpu_spec: Vec<String>,
}

impl Shape {
    /// The shape of `pod`.
    pub fn of(pod: &PodSpec) -> Self {
        Self {
            cpu: pod.cpu_milli,
            gpu_milli: pod.gpu_milli,
            num_gpu: pod.num_gpu,
            gpu_spec: pod.gpu_spec.clone(),
        }
    }
}

/// The typical shapes of a workload with their frequencies (summing to 1), and for each shape
/// the boxes whose model it accepts.
#[derive(Debug, Clone)]
pub struct Measure {
    shapes: Vec<(Shape, f64)>,
    /// `access[s][h]`: shape `s` may run on box `h`'s model.
    access: Vec<Vec<bool>>,
}

impl Measure {
    /// The typical shapes of `pods` (most frequent first, until they cover
    /// [`TYPICAL_COVER`] of the pods; equal counts in shape order), for the boxes of `cluster`.
    pub fn new(pods: &[PodSpec], cluster: &Cluster) -> Self {
        let mut counts: BTreeMap<Shape, usize> = BTreeMap::new();
        for p in pods {
            *counts.entry(Shape::of(p)).or_default() += 1;
        }
        let mut by_count: Vec<(Shape, usize)> = counts.into_iter().collect();
        by_count.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let total = pods.len().max(1) as f64;
        let mut kept = Vec::new();
        let mut covered = 0usize;
        for (s, c) in by_count {
            if covered as f64 >= TYPICAL_COVER * total {
                break;
            }
            covered += c;
            kept.push((s, c));
        }
        let shapes: Vec<(Shape, f64)> = kept
            .into_iter()
            .map(|(s, c)| (s, c as f64 / covered.max(1) as f64))
            .collect();
        let access = shapes
            .iter()
            .map(|(s, _)| {
                cluster
                    .hosts
                    .iter()
                    .map(|h| {
                        s.gpu_spec.is_empty()
                            || h.model
                                .as_ref()
                                .is_some_and(|m| s.gpu_spec.iter().any(|x| x == m))
                    })
                    .collect()
            })
            .collect();
        Self { shapes, access }
    }

    /// The typical shapes and their frequencies.
    pub fn shapes(&self) -> &[(Shape, f64)] {
        &self.shapes
    }

    /// The expected fragment, in thousandths of a device, of box `h` were it left with
    /// `cpu_left` and `gpu_left`.
    pub fn fragment(&self, h: usize, cpu_left: u64, gpu_left: &[u32]) -> f64 {
        let total: u64 = gpu_left.iter().map(|g| u64::from(*g)).sum();
        if total == 0 {
            return 0.0;
        }
        let total = total as f64;
        let mut frag = 0.0;
        for (i, (s, p)) in self.shapes.iter().enumerate() {
            frag += p * if s.num_gpu == 0 || !self.access[i][h] || cpu_left < s.cpu {
                total
            } else {
                let (mut room, mut small) = (0u32, 0u64);
                for g in gpu_left {
                    if *g >= s.gpu_milli {
                        room += 1;
                    } else {
                        small += u64::from(*g);
                    }
                }
                if room >= s.num_gpu {
                    small as f64
                } else {
                    total
                }
            };
        }
        frag
    }

    /// [`Self::fragment`] of a box as it stands.
    pub fn host_fragment(&self, h: usize, host: &Host) -> f64 {
        self.fragment(h, host.cpu_left, &host.gpu_left)
    }

    /// The cluster's fragment and idle thousandths: their ratio is the study's fragmentation
    /// ratio.
    pub fn cluster(&self, cluster: &Cluster) -> (f64, u64) {
        let frag = (0..cluster.hosts.len())
            .map(|h| self.host_fragment(h, &cluster.hosts[h]))
            .sum();
        let idle = cluster.hosts.iter().map(Host::gpu_left_total).sum();
        (frag, idle)
    }
}

#[cfg(test)]
mod tests {
    use super::super::state::tests::{node, pod};
    use super::*;

    #[test]
    fn typical_shapes_cover_95_percent_most_frequent_first() {
        let mut pods: Vec<PodSpec> = (0..60).map(|_| pod(1000, 1, 500)).collect();
        pods.extend((0..38).map(|_| pod(2000, 1, 1000)));
        pods.extend((0..2).map(|_| pod(4000, 0, 0)));
        let c = Cluster::new(&[node(8000, 2, "T4")]);
        let m = Measure::new(&pods, &c);
        // 60 + 38 = 98 ≥ 95: the CPU shape is left out, the rest renormalised.
        assert_eq!(m.shapes().len(), 2);
        assert!((m.shapes()[0].1 - 60.0 / 98.0).abs() < 1e-12);
    }

    #[test]
    fn fragment_follows_the_definition() {
        let c = Cluster::new(&[node(8000, 2, "T4")]);
        let pods = vec![pod(1000, 1, 500), pod(1000, 1, 1000)];
        let m = Measure::new(&pods, &c);
        // Both devices free: every shape fits, no device is too small: no fragment.
        assert_eq!(m.fragment(0, 8000, &[1000, 1000]), 0.0);
        // 300 left on one device: a fragment for both shapes (too small for 0.5 and 1.0).
        assert_eq!(m.fragment(0, 8000, &[300, 1000]), 300.0);
        // 600 left: usable by the 0.5 shape, a fragment for the whole-device shape (half).
        assert_eq!(m.fragment(0, 8000, &[600, 1000]), 300.0);
        // No CPU left: every idle thousandth is a fragment.
        assert_eq!(m.fragment(0, 500, &[600, 1000]), 1600.0);
        // A shape tied to another model cannot use the box at all.
        let mut v = pod(1000, 1, 500);
        v.gpu_spec = vec!["V100M32".into()];
        let m = Measure::new(&[v], &c);
        assert_eq!(m.fragment(0, 8000, &[1000, 1000]), 2000.0);
    }
}
