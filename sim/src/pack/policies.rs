//! The placement policies of the FGD study's benchmark, written from their definitions in the
//! paper (Weng et al., USENIX ATC 2023, §2.3 and §5.1) and the scores of its simulator, so that
//! the curves can be compared with the published ones. Each scores every box a pod fits on a
//! whole scale of 0 to 100 (the Kubernetes scheduler's), the highest wins, and ties go to the
//! first box in the cluster's tie order ([`Cluster::with_tie_order`]: the study's scheduler
//! picks the smallest node name, and its simulator prefixes the names with a random
//! permutation per run; coarse whole scores tie often, so this first-fit order is part of each
//! policy's result). Then the policy picks devices on the chosen box.
//!
//! - **Random**: a box drawn uniformly among those the pod fits, a device at random.
//! - **DotProd**: the box whose free (CPU, GPU) vector has the smallest dot product with the
//!   pod's demand, both divided by the largest box (128 cores, 8 GPUs).
//! - **Clustering**: pods of one GPU shape class (a share, or n whole devices) together: a box
//!   holding only that class, then boxes holding it among others, then empty boxes, then the
//!   rest; within a tier, fuller boxes first.
//! - **Packing**: shares onto partly used devices first, then onto partly used boxes, then
//!   onto empty boxes.
//! - **BestFit**: the box with the least weighted free CPU and GPU after placement.
//! - **FGD**: the box and device whose fragment ([`super::frag`]) grows least.
//!
//! All but Random and FGD put a share on the device with least room that fits it; whole-device
//! pods take the first free devices.

use super::frag::Measure;
use super::state::{Affinity, Cluster, Host, MILLI};
use super::trace::PodSpec;
use rand::RngExt as _;

/// The largest box's CPU thousandths, by which DotProd and BestFit divide.
const MAX_CPU: f64 = 128_000.0;
/// The largest box's GPU thousandths.
const MAX_GPU: f64 = 8_000.0;
/// The scheduler's top score.
const TOP: i64 = 100;

/// A placement policy of the benchmark.
pub trait Placer {
    /// Its name in tables and plots.
    fn name(&self) -> String;
    /// The box and devices for `pod`, or `None` where it fits nowhere.
    fn place(
        &mut self,
        c: &Cluster,
        pod: &PodSpec,
        rng: &mut tapfinger::Rng,
    ) -> Option<(usize, Vec<usize>)>;
    /// Told once `pod` is placed on box `h` (placers that keep state of their own).
    fn placed(&mut self, _h: usize, _pod: &PodSpec, _devices: &[usize]) {}
}

/// The highest-scoring box of `boxes` (given in the cluster's tie order); ties go to the first,
/// as in the study's scheduler, which breaks them by the smallest node name (names its
/// simulator prefixed with a random permutation).
fn select(boxes: &[usize], mut score: impl FnMut(usize) -> i64) -> Option<usize> {
    let mut best: Option<(usize, i64)> = None;
    for &h in boxes {
        let s = score(h);
        if best.is_none_or(|(_, b)| s > b) {
            best = Some((h, s));
        }
    }
    best.map(|(h, _)| h)
}

/// One of the study's policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Study {
    /// Random.
    Random,
    /// DotProd.
    DotProd,
    /// Clustering (GpuClustering).
    Clustering,
    /// Packing (GpuPacking).
    Packing,
    /// BestFit.
    BestFit,
}

impl Study {
    /// Every policy but FGD, in the study's order.
    pub const ALL: [Study; 5] = [
        Self::Random,
        Self::DotProd,
        Self::Clustering,
        Self::Packing,
        Self::BestFit,
    ];

    fn score(self, h: &Host, pod: &PodSpec) -> i64 {
        match self {
            Self::Random => 0,
            Self::DotProd => {
                let dot = (h.cpu_left as f64 / MAX_CPU) * (pod.cpu_milli as f64 / MAX_CPU)
                    + (h.gpu_left_total() as f64 / MAX_GPU)
                        * (pod.total_gpu_milli() as f64 / MAX_GPU);
                // The larger the dot product, the lower the score.
                (TOP as f64 * (1.0 - dot / 2.0)) as i64
            }
            Self::Clustering => clustering(h, pod),
            Self::Packing => packing(h, pod),
            Self::BestFit => {
                let left = (h.cpu_left - pod.cpu_milli) as f64 / MAX_CPU * 0.5
                    + (h.gpu_left_total() - pod.total_gpu_milli()) as f64 / MAX_GPU * 0.5;
                ((1.0 - left) * TOP as f64) as i64
            }
        }
    }
}

/// Clustering's score: tiers of 25 by the shape classes on the box, fuller boxes higher within.
fn clustering(h: &Host, pod: &PodSpec) -> i64 {
    let Some(class) = Affinity::of(pod) else {
        return 0;
    };
    let quarter = TOP / 4;
    let fuller = quarter * (MAX_GPU as i64 - h.gpu_left_total() as i64) / MAX_GPU as i64;
    let has = h.affinity.iter().any(|(a, k)| *a == class && *k > 0);
    let tier = match (has, h.affinity.len()) {
        (true, 1) => 3,
        (true, _) => 2,
        (false, 0) => 1,
        (false, _) => 0,
    };
    fuller + tier * quarter
}

/// Packing's score: a box with every device free lowest (fewer devices higher), then a box
/// where the pod would take free devices, then one where it fits on partly used devices (the
/// less room left on them, the higher).
fn packing(h: &Host, pod: &PodSpec) -> i64 {
    if pod.num_gpu == 0 {
        return 0;
    }
    let free = h.free_devices() as i64;
    if free == h.gpu_left.len() as i64 {
        return (TOP / 3 - free).max(free);
    }
    let mut order: Vec<usize> = (0..h.gpu_left.len()).collect();
    order.sort_by_key(|i| h.gpu_left[*i]);
    let used: Vec<usize> = order
        .into_iter()
        .filter(|i| h.gpu_left[*i] >= pod.gpu_milli)
        .take(pod.num_gpu as usize)
        .collect();
    let free_used = used.iter().filter(|i| h.gpu_left[**i] == MILLI).count() as i64;
    if free_used > 0 {
        return (TOP / 2 - free_used).max(TOP / 3);
    }
    let room: i64 = used
        .iter()
        .map(|i| i64::from(h.gpu_left[*i]) * 100 / i64::from(MILLI))
        .sum();
    (TOP - room / 10).max(TOP / 2)
}

impl Placer for Study {
    fn name(&self) -> String {
        format!("{self:?}")
    }

    fn place(
        &mut self,
        c: &Cluster,
        pod: &PodSpec,
        rng: &mut tapfinger::Rng,
    ) -> Option<(usize, Vec<usize>)> {
        let fit = c.feasible(pod);
        let h = if *self == Self::Random {
            *fit.get(rng.random_range(0..fit.len().max(1)))?
        } else {
            select(&fit, |h| self.score(&c.hosts[h], pod))?
        };
        let host = &c.hosts[h];
        let devices = if *self == Self::Random {
            host.random_devices(pod, rng)
        } else {
            host.best_devices(pod)
        }?;
        Some((h, devices))
    }
}

/// FGD: the box and device that add the least expected fragment.
#[derive(Debug, Clone)]
pub struct Fgd {
    measure: Measure,
    /// Each box's fragment as it stands, computed when first needed after a change.
    now: Vec<Option<f64>>,
}

impl Fgd {
    /// FGD against the typical shapes of `measure`.
    pub fn new(measure: Measure, boxes: usize) -> Self {
        Self {
            measure,
            now: vec![None; boxes],
        }
    }

    /// The score of one outcome ([`tapfinger::frag::growth_score`]).
    fn score(before: f64, after: f64) -> i64 {
        i64::from(tapfinger::frag::growth_score(before, after, MILLI))
    }

    /// The best score of `pod` on box `h` and the devices that give it.
    fn best_on(&mut self, c: &Cluster, h: usize, pod: &PodSpec) -> (i64, Vec<usize>) {
        let host = &c.hosts[h];
        let before = *self.now[h].get_or_insert_with(|| self.measure.host_fragment(h, host));
        let cpu = host.cpu_left - pod.cpu_milli;
        let mut left = host.gpu_left.clone();
        if !pod.is_share() {
            let devices = host.first_free(pod.num_gpu as usize);
            for d in &devices {
                left[*d] -= pod.gpu_milli;
            }
            return (
                Self::score(before, self.measure.fragment(h, cpu, &left)),
                devices,
            );
        }
        let mut best: Option<(i64, usize)> = None;
        for d in 0..left.len() {
            let g = host.gpu_left[d];
            // Devices with equal room give equal fragments: the first of them stands for all.
            if g < pod.gpu_milli || host.gpu_left[..d].contains(&g) {
                continue;
            }
            left[d] = g - pod.gpu_milli;
            let s = Self::score(before, self.measure.fragment(h, cpu, &left));
            left[d] = g;
            if best.is_none_or(|(b, _)| s > b) {
                best = Some((s, d));
            }
        }
        let (s, d) = best.expect("a box the pod fits has a device with room");
        (s, vec![d])
    }
}

impl Placer for Fgd {
    fn name(&self) -> String {
        "FGD".into()
    }

    fn place(
        &mut self,
        c: &Cluster,
        pod: &PodSpec,
        _rng: &mut tapfinger::Rng,
    ) -> Option<(usize, Vec<usize>)> {
        let fit = c.feasible(pod);
        let mut devices = vec![Vec::new(); c.hosts.len()];
        let h = select(&fit, |h| {
            let (s, d) = self.best_on(c, h, pod);
            devices[h] = d;
            s
        })?;
        Some((h, std::mem::take(&mut devices[h])))
    }

    fn placed(&mut self, h: usize, _pod: &PodSpec, _devices: &[usize]) {
        self.now[h] = None;
    }
}

#[cfg(test)]
mod tests {
    use super::super::state::tests::{node, pod};
    use super::*;
    use rand::SeedableRng as _;

    fn rng() -> tapfinger::Rng {
        tapfinger::Rng::seed_from_u64(7)
    }

    /// Place `pods` in order on `nodes` with `p`; the boxes chosen.
    fn run(
        p: &mut dyn Placer,
        nodes: &[super::super::trace::NodeSpec],
        pods: &[PodSpec],
    ) -> (Cluster, Vec<usize>) {
        let mut c = Cluster::new(nodes);
        let mut r = rng();
        let mut chosen = Vec::new();
        for q in pods {
            let (h, d) = p.place(&c, q, &mut r).expect("fits");
            c.hosts[h].take(q, &d);
            p.placed(h, q, &d);
            chosen.push(h);
        }
        (c, chosen)
    }

    #[test]
    fn bestfit_and_packing_fill_the_partly_used_box() {
        // Box 0 already holds a half share; a second half share belongs beside it (the optimum
        // leaves box 1's devices whole for whole-device pods).
        let nodes = [node(32_000, 2, "T4"), node(32_000, 2, "T4")];
        let pods = [pod(1000, 1, 500), pod(1000, 1, 500)];
        for mut p in [Study::BestFit, Study::Packing] {
            let (c, chosen) = run(&mut p, &nodes, &pods);
            assert_eq!(chosen[0], chosen[1], "{p:?}");
            assert_eq!(
                c.hosts[chosen[0]].free_devices(),
                1,
                "{p:?} shares one device"
            );
        }
    }

    #[test]
    fn clustering_keeps_shape_classes_apart() {
        let nodes = [node(64_000, 4, "T4"), node(64_000, 4, "T4")];
        // A share lands somewhere; a whole-device pod goes to the other (empty) box, the next
        // share joins the first.
        let pods = [pod(1000, 1, 300), pod(1000, 1, 1000), pod(1000, 1, 300)];
        let (_, chosen) = run(&mut Study::Clustering, &nodes, &pods);
        assert_ne!(chosen[0], chosen[1]);
        assert_eq!(chosen[0], chosen[2]);
    }

    #[test]
    fn packing_scores_the_three_tiers() {
        let host = |left: &[u32]| Host {
            cpu_left: 1000,
            mem_left: 1 << 20,
            gpu_left: left.to_vec(),
            model: None,
            affinity: Vec::new(),
        };
        // Fits on partly used devices only: 100 − (20 + 50) / 10.
        assert_eq!(
            packing(&host(&[200, 1000, 1000, 500]), &pod(100, 2, 200)),
            93
        );
        // Needs two free devices of a partly used box: 50 − 2.
        assert_eq!(
            packing(&host(&[200, 1000, 1000, 500]), &pod(100, 2, 1000)),
            48
        );
        // An empty box: 33 − its free devices, at least as many as it has.
        assert_eq!(packing(&host(&[1000; 4]), &pod(100, 2, 1000)), 29);
        assert_eq!(packing(&host(&[1000; 8]), &pod(100, 2, 1000)), 25);
        assert_eq!(packing(&host(&[1000; 8]), &pod(100, 0, 0)), 0);
    }

    #[test]
    fn dotprod_prefers_the_box_with_less_free() {
        let nodes = [node(64_000, 8, "G2"), node(16_000, 2, "T4")];
        let (_, chosen) = run(&mut Study::DotProd, &nodes, &[pod(4000, 1, 1000)]);
        assert_eq!(chosen, vec![1]);
    }

    #[test]
    fn fgd_uses_the_leftover_a_typical_shape_cannot_use() {
        // The workload is mostly 0.6 shares. One box has a device with 0.4 left (a fragment for
        // 0.6); a 0.4 pod belongs exactly there, which removes the fragment.
        let nodes = [node(32_000, 2, "T4"), node(32_000, 2, "T4")];
        let typical: Vec<PodSpec> = (0..10).map(|_| pod(1000, 1, 600)).collect();
        let mut c = Cluster::new(&nodes);
        c.hosts[1].take(&pod(1000, 1, 600), &[0]);
        let mut f = Fgd::new(Measure::new(&typical, &c), 2);
        let (h, d) = f.place(&c, &pod(1000, 1, 400), &mut rng()).unwrap();
        assert_eq!((h, d), (1, vec![0]));
        // BestFit would choose the same box but Random need not; FGD is deterministic here.
    }

    #[test]
    fn random_spreads_and_every_policy_refuses_what_fits_nowhere() {
        let nodes = [node(8000, 1, "T4")];
        let mut c = Cluster::new(&nodes);
        c.hosts[0].take(&pod(0, 1, 1000), &[0]);
        let mut r = rng();
        for mut p in Study::ALL {
            assert!(p.place(&c, &pod(0, 1, 100), &mut r).is_none(), "{p:?}");
        }
        let typical = [pod(0, 1, 100)];
        let mut f = Fgd::new(Measure::new(&typical, &c), 1);
        assert!(f.place(&c, &pod(0, 1, 100), &mut r).is_none());
        // Random draws among the boxes that fit: over many draws both of two boxes.
        let c = Cluster::new(&[node(8000, 1, "T4"), node(8000, 1, "T4")]);
        let hits: std::collections::BTreeSet<usize> = (0..50)
            .map(|_| Study::Random.place(&c, &pod(0, 1, 100), &mut r).unwrap().0)
            .collect();
        assert_eq!(hits.len(), 2);
    }
}
