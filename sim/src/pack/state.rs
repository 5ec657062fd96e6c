//! The cluster as the packing benchmark sees it: each box's CPU and memory left and each of its
//! devices' thousandths left, which pods fit where (the study's filters: CPU, memory, the GPU
//! models a pod accepts, and devices with room), and the two ways of picking devices on a box
//! that the study's policies use.

use super::trace::{NodeSpec, PodSpec};
use rand::RngExt as _;

/// Thousandths of one device.
pub const MILLI: u32 = 1000;

/// The GPU shape class the study's Clustering policy groups pods by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Affinity {
    /// A share of one device.
    Share,
    /// This many whole devices.
    Whole(u32),
}

impl Affinity {
    /// The class of `pod`; `None` for a CPU pod.
    pub fn of(pod: &PodSpec) -> Option<Self> {
        match pod.num_gpu {
            0 => None,
            _ if pod.is_share() => Some(Self::Share),
            n => Some(Self::Whole(n)),
        }
    }
}

/// One box and what is left of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    /// CPU thousandths left.
    pub cpu_left: u64,
    /// Memory MiB left.
    pub mem_left: u64,
    /// Thousandths left on each device.
    pub gpu_left: Vec<u32>,
    /// The devices' model.
    pub model: Option<String>,
    /// GPU pods placed here, by shape class.
    pub affinity: Vec<(Affinity, u32)>,
}

impl Host {
    /// A box with nothing placed.
    pub fn new(n: &NodeSpec) -> Self {
        Self {
            cpu_left: n.cpu_milli,
            mem_left: n.memory_mib,
            gpu_left: vec![MILLI; n.gpus as usize],
            model: n.model.clone(),
            affinity: Vec::new(),
        }
    }

    /// Thousandths left on all devices.
    pub fn gpu_left_total(&self) -> u64 {
        self.gpu_left.iter().map(|g| u64::from(*g)).sum()
    }

    /// Devices nothing holds.
    pub fn free_devices(&self) -> usize {
        self.gpu_left.iter().filter(|g| **g == MILLI).count()
    }

    /// Whether the pod may run on this box's GPU model (a pod without `gpu_spec` runs on any
    /// box; one with it only on a box of a model it names).
    pub fn accessible(&self, pod: &PodSpec) -> bool {
        pod.gpu_spec.is_empty()
            || self
                .model
                .as_ref()
                .is_some_and(|m| pod.gpu_spec.iter().any(|s| s == m))
    }

    /// Whether `pod` fits now: CPU, memory, model, and `num_gpu` devices each with
    /// `gpu_milli` left.
    pub fn fits(&self, pod: &PodSpec) -> bool {
        self.cpu_left >= pod.cpu_milli
            && self.mem_left >= pod.memory_mib
            && (pod.num_gpu == 0
                || (self.accessible(pod)
                    && self
                        .gpu_left
                        .iter()
                        .filter(|g| **g >= pod.gpu_milli)
                        .count()
                        >= pod.num_gpu as usize))
    }

    /// Place `pod` on the `devices` given (empty for a CPU pod).
    ///
    /// # Panics
    /// Where the pod does not fit those devices: a placer's bug.
    pub fn take(&mut self, pod: &PodSpec, devices: &[usize]) {
        assert!(self.fits(pod), "placed a pod where it does not fit");
        assert_eq!(
            devices.len(),
            pod.num_gpu as usize,
            "wrong number of devices"
        );
        self.cpu_left -= pod.cpu_milli;
        self.mem_left -= pod.memory_mib;
        for d in devices {
            assert!(self.gpu_left[*d] >= pod.gpu_milli, "device {d} has no room");
            self.gpu_left[*d] -= pod.gpu_milli;
        }
        if let Some(a) = Affinity::of(pod) {
            match self.affinity.iter_mut().find(|(x, _)| *x == a) {
                Some((_, k)) => *k += 1,
                None => self.affinity.push((a, 1)),
            }
        }
    }

    /// The devices for `pod` on this box that fit it best: for a share, the device with the
    /// least room that fits (the first of equals); for whole devices, the first free ones.
    /// `None` where the pod does not fit.
    pub fn best_devices(&self, pod: &PodSpec) -> Option<Vec<usize>> {
        if !self.fits(pod) {
            return None;
        }
        if !pod.is_share() {
            return Some(self.first_free(pod.num_gpu as usize));
        }
        let mut best: Option<usize> = None;
        for (i, g) in self.gpu_left.iter().enumerate() {
            if *g >= pod.gpu_milli && best.is_none_or(|b| *g < self.gpu_left[b]) {
                best = Some(i);
            }
        }
        best.map(|b| vec![b])
    }

    /// The devices for `pod`, a share on a device drawn uniformly among those that fit (whole
    /// devices: the first free ones).
    pub fn random_devices(&self, pod: &PodSpec, rng: &mut tapfinger::Rng) -> Option<Vec<usize>> {
        if !self.fits(pod) {
            return None;
        }
        if !pod.is_share() {
            return Some(self.first_free(pod.num_gpu as usize));
        }
        let fit: Vec<usize> = (0..self.gpu_left.len())
            .filter(|i| self.gpu_left[*i] >= pod.gpu_milli)
            .collect();
        Some(vec![fit[rng.random_range(0..fit.len())]])
    }

    /// The first `n` free devices (whole-device pods take free devices only).
    pub fn first_free(&self, n: usize) -> Vec<usize> {
        (0..self.gpu_left.len())
            .filter(|i| self.gpu_left[*i] == MILLI)
            .take(n)
            .collect()
    }
}

/// Every box of the benchmark's cluster.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// The boxes, in the node list's order.
    pub hosts: Vec<Host>,
    /// Thousandths of a device in the whole cluster.
    pub gpu_capacity: u64,
    /// The boxes in tie order: where policies score boxes equal, the earliest here wins.
    pub order: Vec<usize>,
}

impl Cluster {
    /// The cluster of a node list, nothing placed, ties in the list's order.
    pub fn new(nodes: &[NodeSpec]) -> Self {
        let hosts: Vec<Host> = nodes.iter().map(Host::new).collect();
        let gpu_capacity = hosts.iter().map(Host::gpu_left_total).sum();
        let order = (0..hosts.len()).collect();
        Self {
            hosts,
            gpu_capacity,
            order,
        }
    }

    /// The same cluster with its tie order drawn by `seed`.
    ///
    /// Why: the study's simulator breaks ties by the smallest node name, but before a run it
    /// prefixes every node's name with its place in a random permutation (`%04d-`, drawn from
    /// the run's seed), so ties go to a random order fixed for the run, not to the node list's
    /// order. Whole scores tie often (every CPU pod scores 0 under Packing and Clustering), so
    /// which order matters: the list's order fills the trace's first boxes, all of one model,
    /// first.
    #[must_use]
    pub fn with_tie_order(mut self, seed: u64) -> Self {
        use rand::SeedableRng as _;
        use rand::seq::SliceRandom as _;
        let mut rng = tapfinger::Rng::seed_from_u64(seed ^ 0x0DE5_0DE5);
        self.order.shuffle(&mut rng);
        self
    }

    /// Each box's place in the tie order.
    pub fn ranks(&self) -> Vec<usize> {
        let mut rank = vec![0; self.order.len()];
        for (r, h) in self.order.iter().enumerate() {
            rank[*h] = r;
        }
        rank
    }

    /// The boxes `pod` fits now, in tie order.
    pub fn feasible(&self, pod: &PodSpec) -> Vec<usize> {
        self.order
            .iter()
            .copied()
            .filter(|i| self.hosts[*i].fits(pod))
            .collect()
    }

    /// Thousandths of a device held by pods.
    pub fn gpu_allocated(&self) -> u64 {
        self.gpu_capacity - self.hosts.iter().map(Host::gpu_left_total).sum::<u64>()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(crate) fn pod(cpu: u64, num_gpu: u32, gpu_milli: u32) -> PodSpec {
        PodSpec {
            name: format!("p-{cpu}-{num_gpu}-{gpu_milli}"),
            cpu_milli: cpu,
            memory_mib: 0,
            num_gpu,
            gpu_milli,
            gpu_spec: Vec::new(),
        }
    }

    pub(crate) fn node(cpu: u64, gpus: u32, model: &str) -> NodeSpec {
        NodeSpec {
            name: format!("n-{cpu}-{gpus}-{model}"),
            cpu_milli: cpu,
            memory_mib: 1 << 20,
            gpus,
            model: Some(model.into()),
        }
    }

    #[test]
    fn fits_honours_cpu_memory_model_and_devices() {
        let mut h = Host::new(&node(8000, 2, "T4"));
        assert!(h.fits(&pod(8000, 2, 1000)));
        assert!(!h.fits(&pod(8001, 0, 0)));
        let mut big = pod(1, 0, 0);
        big.memory_mib = (1 << 20) + 1;
        assert!(!h.fits(&big));
        let mut v100 = pod(1, 1, 500);
        v100.gpu_spec = vec!["V100M16".into()];
        assert!(!h.fits(&v100));
        v100.gpu_spec.push("T4".into());
        assert!(h.fits(&v100));
        h.take(&pod(0, 1, 600), &[0]);
        // One device has 400 left: two whole devices no longer fit, a 0.4 share does.
        assert!(!h.fits(&pod(0, 2, 1000)));
        assert_eq!(h.best_devices(&pod(0, 1, 400)), Some(vec![0]));
        assert_eq!(h.best_devices(&pod(0, 1, 500)), Some(vec![1]));
        assert_eq!(h.best_devices(&pod(0, 1, 1000)), Some(vec![1]));
        assert_eq!(h.affinity, vec![(Affinity::Share, 1)]);
    }

    #[test]
    fn the_tie_order_is_a_permutation_drawn_from_the_seed() {
        let nodes: Vec<_> = (0..50).map(|_| node(8000, 1, "T4")).collect();
        let c = Cluster::new(&nodes);
        assert_eq!(c.order, (0..50).collect::<Vec<_>>());
        let a = Cluster::new(&nodes).with_tie_order(42);
        let mut sorted = a.order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, c.order, "a permutation");
        assert_ne!(a.order, c.order);
        assert_eq!(a.order, Cluster::new(&nodes).with_tie_order(42).order);
        assert_ne!(a.order, Cluster::new(&nodes).with_tie_order(43).order);
        let rank = a.ranks();
        for (r, h) in a.order.iter().enumerate() {
            assert_eq!(rank[*h], r);
        }
        // Boxes that fit come in tie order.
        assert_eq!(a.feasible(&pod(1000, 1, 500)), a.order);
    }
}
