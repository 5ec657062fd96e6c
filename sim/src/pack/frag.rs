//! The FGD study's fragmentation measure on the benchmark's cluster: the core's measure
//! ([`tapfinger::frag`]) with the study's typical shapes — the most frequent (CPU, GPU share,
//! GPU count, models) shapes that make up 95 % of the pod list, CPU pods included — and, for
//! each shape, the boxes whose GPU model it accepts. As in the study, shapes carry no memory.

use super::state::{Cluster, Host, MILLI};
use super::trace::PodSpec;
use tapfinger::frag::{Devices, Mix, TYPICAL_COVER, fragment};

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

    /// The shape as the core's demand vector: CPU thousandths, GPU units (a device is
    /// [`MILLI`]), no memory.
    fn demand(&self) -> [u32; 3] {
        let cpu = u32::try_from(self.cpu).unwrap_or(u32::MAX);
        [cpu, self.num_gpu.saturating_mul(self.gpu_milli), 0]
    }
}

/// The typical shapes of a workload with their frequencies (summing to 1), and for each shape
/// the boxes whose model it accepts.
#[derive(Debug, Clone)]
pub struct Measure {
    shapes: Vec<(Shape, f64)>,
    demands: Vec<[u32; 3]>,
    /// `access[s][h]`: shape `s` may run on box `h`'s model.
    access: Vec<Vec<bool>>,
}

impl Measure {
    /// The typical shapes of `pods` ([`Mix::typical`]), for the boxes of `cluster`.
    pub fn new(pods: &[PodSpec], cluster: &Cluster) -> Self {
        let mut mix = Mix::default();
        for p in pods {
            mix.observe(Shape::of(p));
        }
        let shapes = mix.typical(TYPICAL_COVER);
        let demands = shapes.iter().map(|(s, _)| s.demand()).collect();
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
        Self {
            shapes,
            demands,
            access,
        }
    }

    /// The typical shapes and their frequencies.
    pub fn shapes(&self) -> &[(Shape, f64)] {
        &self.shapes
    }

    /// The expected fragment, in thousandths of a device, of box `h` were it left with
    /// `cpu_left` and `gpu_left`.
    pub fn fragment(&self, h: usize, cpu_left: u64, gpu_left: &[u32]) -> f64 {
        let free = [u32::try_from(cpu_left).unwrap_or(u32::MAX), 0, 0];
        let devices = Devices {
            left: gpu_left,
            per: MILLI,
            kind: 1,
        };
        let shapes = (0..self.shapes.len())
            .map(|s| (&self.demands[s][..], self.shapes[s].1, self.access[s][h]));
        fragment(&free, &devices, shapes)
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
