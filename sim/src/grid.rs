//! The allocation grid: every allocation between two corners, thinned to evenly spaced levels
//! per kind when there would be too many to enumerate. Below the simulator's front and the
//! clairvoyant reference, which both walk it; it knows nothing of scenarios or episodes.

use tapfinger::Resources;

/// Largest allocation grid enumerated at once (lower bounds, the clairvoyant's table). A larger
/// grid is thinned to evenly spaced levels per kind (always including both ends), so a very fine
/// grid (memory in MiB, say) costs bounded time; the lower bound is then the best over those levels.
pub const MAX_GRID: usize = 200_000;

/// The allocations between `lo` and `hi` (inclusive) per kind: every one if there are at most
/// [`MAX_GRID`], else evenly spaced levels of each kind.
pub fn allocations(lo: &Resources, hi: &Resources) -> Vec<Resources> {
    let kinds = lo.len();
    let size: f64 = (0..kinds)
        .map(|k| f64::from(hi.get(k).saturating_sub(lo.get(k)) + 1))
        .product();
    let per_kind = if size <= MAX_GRID as f64 {
        u32::MAX
    } else {
        ((MAX_GRID as f64).powf(1.0 / kinds.max(1) as f64).floor() as u32).max(2)
    };
    let levels = |k: usize| -> Vec<u32> {
        let (a, b) = (lo.get(k), hi.get(k).max(lo.get(k)));
        let span = b - a;
        if span < per_kind {
            return (a..=b).collect();
        }
        let mut v: Vec<u32> = (0..per_kind)
            .map(|i| a + (u64::from(span) * u64::from(i) / u64::from(per_kind - 1)) as u32)
            .collect();
        v.dedup();
        v
    };
    let mut out = vec![Vec::new()];
    for k in 0..kinds {
        let lv = levels(k);
        out = out
            .into_iter()
            .flat_map(|p: Vec<u32>| lv.iter().map(move |v| [p.clone(), vec![*v]].concat()))
            .collect();
    }
    out.into_iter().map(Resources).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_grid_is_complete_when_small_and_thinned_when_huge() {
        let all = allocations(&Resources(vec![1, 2]), &Resources(vec![3, 3]));
        assert_eq!(all.len(), 6);
        assert!(all.contains(&Resources(vec![2, 3])));
        let lo = Resources(vec![1, 1, 1]);
        let hi = Resources(vec![100_000, 64, 1 << 20]);
        let thin = allocations(&lo, &hi);
        assert!(thin.len() <= MAX_GRID, "{}", thin.len());
        assert!(thin.contains(&lo) && thin.contains(&hi));
    }
}
