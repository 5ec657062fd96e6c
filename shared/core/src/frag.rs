//! GPU fragmentation as the FGD study defines it (Weng et al., "Beware of Fragmentation:
//! Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC 2023, §3),
//! over the core's resource vectors: the measure a placement that packs GPU shares minimises.
//!
//! A box's idle GPU units are a *fragment for a task shape* where that shape cannot use them:
//! all of them if the shape cannot run on the box at all (it asks for no GPU, may not run there,
//! or asks more of another kind than the box has free, or more devices than have room), else
//! the units of the devices with less room than the shape asks of one device. A box's
//! fragmentation is the expectation over the workload's typical shapes ([`Mix::typical`]),
//! weighted by how often each arrives; FGD puts a task where this expectation grows least
//! ([`growth_score`]).
//!
//! GPU units follow the fraction rules of the specs ([`crate::spec::units_per_device`]): a device
//! is `per` grid units; a demand below `per` is a share of one device, a demand of `per` or more
//! is whole devices (demand / `per` of them), which only devices with nothing on them can give.

use std::collections::BTreeMap;

/// The share of arrivals the typical shapes cover (the study's 95 %).
pub const TYPICAL_COVER: f64 = 0.95;

/// How often each task shape (a key the caller chooses: the demand vector, with whatever
/// decides where the shape may run) has arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mix<K: Ord> {
    counts: BTreeMap<K, u64>,
}

impl<K: Ord> Default for Mix<K> {
    fn default() -> Self {
        Self {
            counts: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Clone> Mix<K> {
    /// Count one arrival of `shape`.
    pub fn observe(&mut self, shape: K) {
        *self.counts.entry(shape).or_default() += 1;
    }

    /// Arrivals counted.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// The typical shapes: the most frequent first (equal counts in key order) until they cover
    /// `cover` of the arrivals, each with its frequency among them (the frequencies sum to 1).
    /// Empty before any arrival.
    pub fn typical(&self, cover: f64) -> Vec<(K, f64)> {
        self.typical_at_most(cover, usize::MAX)
    }

    /// [`Self::typical`], keeping at most `most` shapes (the frequencies are then among those).
    pub fn typical_at_most(&self, cover: f64, most: usize) -> Vec<(K, f64)> {
        let total = self.total();
        let mut by_count: Vec<(&K, u64)> = self.counts.iter().map(|(k, c)| (k, *c)).collect();
        by_count.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let mut kept = Vec::new();
        let mut covered = 0u64;
        for (k, c) in by_count {
            if covered as f64 >= cover * total as f64 || kept.len() >= most {
                break;
            }
            covered += c;
            kept.push((k.clone(), c));
        }
        kept.into_iter()
            .map(|(k, c)| (k, c as f64 / covered as f64))
            .collect()
    }
}

/// A box's GPU devices as the measure needs them: the grid units left on each device, the
/// units of one device, and the GPU kind's index in resource vectors.
#[derive(Debug, Clone, Copy)]
pub struct Devices<'a> {
    /// Units left on each device.
    pub left: &'a [u32],
    /// Units of one device.
    pub per: u32,
    /// The GPU kind's index.
    pub kind: usize,
}

impl Devices<'_> {
    /// Idle units over all devices.
    pub fn idle(&self) -> u64 {
        self.left.iter().map(|u| u64::from(*u)).sum()
    }
}

/// The fragment of one box for one shape, in GPU units: what of the box's idle units the shape
/// cannot use. `free` is the box's free units of every kind (its GPU entry is not read: the
/// devices say it), `demand` the shape's, `runs_here` whether the shape may run on the box.
pub fn shape_fragment(free: &[u32], devices: &Devices<'_>, demand: &[u32], runs_here: bool) -> u64 {
    let idle = devices.idle();
    let need = demand.get(devices.kind).copied().unwrap_or(0);
    let short = free
        .iter()
        .zip(demand)
        .enumerate()
        .any(|(k, (f, d))| k != devices.kind && f < d);
    if need == 0 || !runs_here || short {
        return idle;
    }
    // A share needs one device with `need` left; whole devices need devices with nothing on.
    let (per_device, count) = if need < devices.per {
        (need, 1)
    } else {
        (devices.per, need / devices.per)
    };
    let (mut room, mut small) = (0u32, 0u64);
    for u in devices.left {
        if *u >= per_device {
            room += 1;
        } else {
            small += u64::from(*u);
        }
    }
    if room >= count { small } else { idle }
}

/// A box's expected fragment over `shapes`: (demand, frequency, whether it may run on the box).
pub fn fragment<'s>(
    free: &[u32],
    devices: &Devices<'_>,
    shapes: impl IntoIterator<Item = (&'s [u32], f64, bool)>,
) -> f64 {
    if devices.idle() == 0 {
        return 0.0;
    }
    shapes
        .into_iter()
        .map(|(d, p, here)| p * shape_fragment(free, devices, d, here) as f64)
        .sum()
}

/// FGD's score of a placement that takes a box's fragment from `before` to `after` (GPU units,
/// `per` of them a device): the growth in devices through a sigmoid onto a whole scale of 0 to
/// 100, a placement that removes fragments above 50. The whole scale is part of the method: two
/// placements whose growths differ by little score alike, and the study's scheduler gives the
/// tie to the box with the smallest name (names its simulator draws in a random order per run).
pub fn growth_score(before: f64, after: f64, per: u32) -> u32 {
    let x = (before - after) / f64::from(per.max(1));
    (100.0 / (1.0 + (-x).exp())) as u32
}

/// Units left on each device once `units` more are placed as the device pool places them
/// ([`crate::gpu_pool::GpuPool::place`]): a share on the fullest device already shared that it
/// fits (the pool's rule on a tie; its own finer choice by fragment needs the mix of shapes it
/// has placed, which only the box's driver holds), else the first free device; whole devices
/// on the first free devices. None where the devices cannot hold it.
pub fn place_on(left: &[u32], per: u32, units: u32) -> Option<Vec<u32>> {
    let mut out = left.to_vec();
    if units == 0 {
        return Some(out);
    }
    if units < per {
        let shared = (0..left.len())
            .filter(|i| left[*i] < per && left[*i] >= units)
            .min_by_key(|i| (left[*i], *i));
        let i = shared.or_else(|| (0..left.len()).find(|i| left[*i] == per))?;
        out[i] -= units;
        return Some(out);
    }
    let mut n = units / per;
    for u in out.iter_mut() {
        if n > 0 && *u == per {
            *u = 0;
            n -= 1;
        }
    }
    (n == 0).then_some(out)
}

/// The prior a box states for a claim where devices are shared in fractions: FGD's growth
/// score ([`growth_score`], whole 0–100) of putting `alloc` on the box. Exact ties go, as every
/// tie of the protocol does, to the lowest agent id: the study's own rule (the first box in its
/// tie order), which packs where a finer rule spreads. `free` is the box's units of every kind,
/// `shapes` the workload's typical shapes (demand, frequency, whether it may run on the box).
/// None where the box's devices cannot hold `alloc` (a start there would be refused).
pub fn packing_prior(
    free: &[u32],
    devices: &Devices<'_>,
    alloc: &[u32],
    shapes: &[(&[u32], f64, bool)],
) -> Option<f64> {
    let units = alloc.get(devices.kind).copied().unwrap_or(0);
    let left = place_on(devices.left, devices.per, units)?;
    let after: Vec<u32> = free
        .iter()
        .enumerate()
        .map(|(k, f)| f.saturating_sub(alloc.get(k).copied().unwrap_or(0)))
        .collect();
    let placed = Devices {
        left: &left,
        ..*devices
    };
    let before = fragment(free, devices, shapes.iter().copied());
    let grown = fragment(&after, &placed, shapes.iter().copied());
    Some(f64::from(growth_score(before, grown, devices.per)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A box of CPU × GPU × memory with devices of 4 units (quarters).
    fn devices(left: &[u32]) -> Devices<'_> {
        Devices {
            left,
            per: 4,
            kind: 1,
        }
    }

    #[test]
    fn the_typical_shapes_cover_95_percent_most_frequent_first() {
        let mut m = Mix::default();
        for _ in 0..60 {
            m.observe(vec![1, 2, 0]);
        }
        for _ in 0..38 {
            m.observe(vec![2, 4, 0]);
        }
        for _ in 0..2 {
            m.observe(vec![4, 0, 0]);
        }
        let t = m.typical(TYPICAL_COVER);
        // 60 + 38 = 98 ≥ 95 of 100: the CPU shape is left out and the rest renormalised.
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].0, vec![1, 2, 0]);
        assert!((t[0].1 - 60.0 / 98.0).abs() < 1e-12);
        assert!(Mix::<Vec<u32>>::default().typical(TYPICAL_COVER).is_empty());
    }

    #[test]
    fn a_shape_fragments_what_it_cannot_use() {
        let free = [8, 0, 64];
        // A half-device share on a box with 1 and 4 units left: the 1 is a fragment for it.
        assert_eq!(
            shape_fragment(&free, &devices(&[1, 4]), &[1, 2, 8], true),
            1
        );
        // A whole device: the partly used device is a fragment for it, the free one is not.
        assert_eq!(
            shape_fragment(&free, &devices(&[1, 4]), &[1, 4, 8], true),
            1
        );
        // Two whole devices: only one is free, so the shape cannot run: all is a fragment.
        assert_eq!(
            shape_fragment(&free, &devices(&[1, 4]), &[1, 8, 8], true),
            5
        );
        // Too little CPU, a CPU-only shape, or a box it may not run on: all of it.
        assert_eq!(
            shape_fragment(&free, &devices(&[1, 4]), &[9, 2, 8], true),
            5
        );
        assert_eq!(
            shape_fragment(&free, &devices(&[1, 4]), &[1, 0, 8], true),
            5
        );
        assert_eq!(
            shape_fragment(&free, &devices(&[1, 4]), &[1, 2, 8], false),
            5
        );
        // Too little memory counts like too little CPU.
        assert_eq!(
            shape_fragment(&free, &devices(&[1, 4]), &[1, 2, 65], true),
            5
        );
        // The expectation over shapes, and none where nothing is idle.
        let shapes = [(&[1u32, 2, 8][..], 0.5, true), (&[1, 4, 8][..], 0.5, true)];
        assert_eq!(fragment(&free, &devices(&[1, 4]), shapes), 1.0);
        assert_eq!(fragment(&free, &devices(&[0, 0]), shapes), 0.0);
    }

    #[test]
    fn growth_scores_rank_removing_fragments_first() {
        assert_eq!(growth_score(100.0, 100.0, 1000), 50);
        assert!(growth_score(400.0, 0.0, 1000) > 50);
        assert!(growth_score(0.0, 400.0, 1000) < 50);
        // Growths within a few hundredths of a device score alike.
        assert_eq!(growth_score(0.0, 10.0, 1000), growth_score(0.0, 30.0, 1000));
    }

    #[test]
    fn devices_are_placed_as_the_pool_places_them() {
        // A quarter: the fullest shared device it fits, else the first free one.
        assert_eq!(place_on(&[4, 2, 1], 4, 1), Some(vec![4, 2, 0]));
        assert_eq!(place_on(&[4, 2, 1], 4, 2), Some(vec![4, 0, 1]));
        assert_eq!(place_on(&[0, 4, 1], 4, 3), Some(vec![0, 1, 1]));
        // Whole devices: the first free ones; none where too few are free.
        assert_eq!(place_on(&[2, 4, 4], 4, 8), Some(vec![2, 0, 0]));
        assert_eq!(place_on(&[2, 4], 4, 8), None);
        assert_eq!(place_on(&[3, 3], 4, 4), None);
        assert_eq!(place_on(&[3], 4, 0), Some(vec![3]));
    }

    #[test]
    fn the_prior_prefers_the_box_a_claim_leaves_least_fragmented() {
        let free = [8, 0, 64];
        // Half-device shares only: a box with half a device left takes one and keeps nothing
        // idle that the shape cannot use; a free box would be left with a half, usable too.
        let shapes = [(&[1u32, 2, 8][..], 1.0, true)];
        let half = [1, 2, 8];
        let filled = packing_prior(&free, &devices(&[2]), &half, &shapes).unwrap();
        let fresh = packing_prior(&free, &devices(&[4]), &half, &shapes).unwrap();
        assert_eq!(filled, fresh);
        // With whole-device shapes too, the half left on a fresh device is a fragment for them.
        let shapes = [(&[1u32, 2, 8][..], 0.5, true), (&[1, 4, 8][..], 0.5, true)];
        let filled = packing_prior(&free, &devices(&[2, 4]), &half, &shapes).unwrap();
        let fresh = packing_prior(&free, &devices(&[4, 4]), &half, &shapes).unwrap();
        assert!(filled > fresh, "{filled} vs {fresh}");
        // Devices that cannot hold it: no prior.
        assert_eq!(
            packing_prior(&free, &devices(&[1, 1]), &half, &shapes),
            None
        );
    }

    #[test]
    fn at_most_keeps_the_most_frequent_shapes() {
        let mut m = Mix::default();
        for (shape, n) in [(1u32, 5), (2, 3), (3, 2)] {
            for _ in 0..n {
                m.observe(shape);
            }
        }
        assert_eq!(
            m.typical_at_most(1.0, 2),
            vec![(1, 5.0 / 8.0), (2, 3.0 / 8.0)]
        );
        assert_eq!(m.typical(1.0).len(), 3);
    }

    proptest! {
        /// A fragment is never more than the idle units, and a box whose devices are all free
        /// and which has room for every shape fragments nothing for GPU shapes.
        #[test]
        fn fragments_stay_within_the_idle_units(
            left in proptest::collection::vec(0u32..=4, 1..8),
            cpu in 0u32..16,
            need in 0u32..12,
            shape_cpu in 0u32..16,
            here in any::<bool>(),
        ) {
            let d = devices(&left);
            let f = shape_fragment(&[cpu, 0, 0], &d, &[shape_cpu, need, 0], here);
            prop_assert!(f <= d.idle());
            let all_free = vec![4; left.len()];
            let free = devices(&all_free);
            if need > 0 && need <= 4 && here && shape_cpu <= cpu {
                prop_assert_eq!(shape_fragment(&[cpu, 0, 0], &free, &[shape_cpu, need, 0], true), 0);
            }
        }
    }
}
