//! One run of the benchmark as the study makes it: the pod list sorted by name and shuffled
//! with the run's seed, then random copies of its pods appended until the GPU requests reach
//! the target share of the cluster's GPUs (130 %), the boxes' tie order drawn from the same
//! seed ([`Cluster::with_tie_order`]), then every pod placed in that order, one at a time, none
//! ever leaving; a pod that fits nowhere stays out and the run goes on. At each
//! whole percent of arrived GPU requests it records the share of GPUs unallocated and the
//! fragmentation ratio.

use super::frag::Measure;
use super::policies::Placer;
use super::state::Cluster;
use super::trace::{NodeSpec, PodSpec};
use rand::seq::SliceRandom as _;
use rand::{RngExt as _, SeedableRng as _};

/// The pods of one run in arrival order: the list shuffled, then copies up to `target` times
/// the cluster's GPU thousandths (`gpu_capacity`).
pub fn arrivals(pods: &[PodSpec], gpu_capacity: u64, target: f64, seed: u64) -> Vec<PodSpec> {
    let mut rng = tapfinger::Rng::seed_from_u64(seed);
    let mut order: Vec<PodSpec> = pods.to_vec();
    order.sort_by(|a, b| a.name.cmp(&b.name));
    order.shuffle(&mut rng);
    let limit = target * gpu_capacity as f64;
    let mut asked: u64 = order.iter().map(PodSpec::total_gpu_milli).sum();
    if pods.is_empty() || pods.iter().all(|p| p.num_gpu == 0) {
        return order;
    }
    loop {
        let p = &pods[rng.random_range(0..pods.len())];
        if (asked + p.total_gpu_milli()) as f64 > limit {
            break;
        }
        asked += p.total_gpu_milli();
        order.push(p.clone());
    }
    order
}

/// What one run recorded, indexed by arrived percent (0 ..= the target's).
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    /// Unallocated GPUs, % of the cluster's, when the arrived requests first reached each
    /// percent.
    pub unallocated: Vec<f64>,
    /// Fragmentation ratio, % of the idle GPUs, at the same moments.
    pub frag_ratio: Vec<f64>,
    /// Pods that fitted nowhere.
    pub failed: usize,
    /// Pods placed.
    pub placed: usize,
}

impl Curve {
    /// The unallocated share at `percent` arrived (the last recorded if the run stopped short).
    pub fn unallocated_at(&self, percent: usize) -> f64 {
        self.unallocated[percent.min(self.unallocated.len() - 1)]
    }

    /// The fragmentation ratio at `percent` arrived.
    pub fn frag_ratio_at(&self, percent: usize) -> f64 {
        self.frag_ratio[percent.min(self.frag_ratio.len() - 1)]
    }
}

/// The fresh cluster of `nodes` for the run of `seed`: nothing placed, ties in the run's order.
pub fn cluster(nodes: &[NodeSpec], seed: u64) -> Cluster {
    Cluster::new(nodes).with_tie_order(seed)
}

/// Place `pods` (already in arrival order) on `c` (fresh, [`cluster`]) with `placer`;
/// `measure` gives the fragmentation ratio, `seed` the placer's random draws.
pub fn run(
    mut c: Cluster,
    pods: &[PodSpec],
    measure: &Measure,
    placer: &mut dyn Placer,
    seed: u64,
) -> Curve {
    let mut rng = tapfinger::Rng::seed_from_u64(seed ^ 0x5EED_F6D0);
    let cap = c.gpu_capacity.max(1) as f64;
    let mut curve = Curve {
        unallocated: Vec::new(),
        frag_ratio: Vec::new(),
        failed: 0,
        placed: 0,
    };
    let record = |c: &Cluster, curve: &mut Curve| {
        let (frag, idle) = measure.cluster(c);
        curve
            .unallocated
            .push(100.0 - 100.0 * c.gpu_allocated() as f64 / cap);
        curve.frag_ratio.push(if idle == 0 {
            0.0
        } else {
            100.0 * frag / idle as f64
        });
    };
    record(&c, &mut curve);
    let mut arrived: u64 = 0;
    for pod in pods {
        arrived += pod.total_gpu_milli();
        match placer.place(&c, pod, &mut rng) {
            Some((h, devices)) => {
                c.hosts[h].take(pod, &devices);
                placer.placed(h, pod, &devices);
                curve.placed += 1;
            }
            None => curve.failed += 1,
        }
        while (curve.unallocated.len() as f64) <= 100.0 * arrived as f64 / cap {
            record(&c, &mut curve);
        }
    }
    curve
}

/// The median and the quartiles (the study's 50 % band) of `xs`.
pub fn spread(xs: &[f64]) -> (f64, f64, f64) {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let q = |p: f64| {
        if v.is_empty() {
            return f64::NAN;
        }
        // Linear interpolation between order statistics (numpy's default).
        let pos = p * (v.len() - 1) as f64;
        let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
        v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
    };
    (q(0.5), q(0.25), q(0.75))
}

#[cfg(test)]
mod tests {
    use super::super::policies::Study;
    use super::super::state::tests::{node, pod};
    use super::*;

    #[test]
    fn arrivals_keep_every_pod_and_stop_at_the_target() {
        let pods: Vec<PodSpec> = (0..10)
            .map(|i| {
                let mut p = pod(1000, 1, 500);
                p.name = format!("p{i}");
                p
            })
            .collect();
        // 10 × 0.5 = 5 devices of 10: copies until 13 devices at most.
        let a = arrivals(&pods, 10_000, 1.3, 42);
        assert_eq!(a.len(), 26);
        for p in &pods {
            assert!(a[..10].contains(p));
        }
        assert_eq!(a, arrivals(&pods, 10_000, 1.3, 42));
        assert_ne!(a[..10], arrivals(&pods, 10_000, 1.3, 43)[..10]);
    }

    #[test]
    fn a_run_records_every_percent_and_matches_the_ideal_where_nothing_fragments() {
        // Whole-device pods on whole devices: nothing fragments, so the unallocated share is
        // exactly 100 − arrived until the cluster is full, then 0.
        let nodes = [node(64_000, 4, "T4"), node(64_000, 4, "T4")];
        let pods: Vec<PodSpec> = (0..12).map(|_| pod(1000, 1, 1000)).collect();
        let m = Measure::new(&pods, &Cluster::new(&nodes));
        let c = run(cluster(&nodes, 1), &pods, &m, &mut Study::BestFit, 1);
        assert_eq!(c.unallocated.len(), 151);
        assert_eq!(c.unallocated_at(50), 50.0);
        assert_eq!(c.unallocated_at(100), 0.0);
        assert_eq!((c.placed, c.failed), (8, 4));
    }

    #[test]
    fn spread_is_the_median_and_quartiles() {
        assert_eq!(spread(&[3.0, 1.0, 2.0, 4.0, 5.0]), (3.0, 2.0, 4.0));
        assert_eq!(spread(&[1.0, 2.0]).0, 1.5);
    }
}
