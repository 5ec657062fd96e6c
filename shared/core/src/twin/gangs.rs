//! A gang's work as the twin infers it, from its runs and its stated shape — no speed model.
//!
//! A gang placed as members `M` does `rate(M)` worker iterations a second at the compute time
//! per iteration its shape states ([`GangShape::rate`]: each worker over the link to its host).
//! A run of `d` slots that moved its progress from `p₀` to `p₁` says the gang's work is
//! `rate(M) · d · slot_seconds ÷ (p₁ − p₀)` iterations at that pace; over several runs, the
//! iterations they did over the progress they made. The stated compute time stands in for the
//! true one (which only the job knows): at the placement that ran, the twin's gang takes the
//! slots the cluster's took; at another, the time the locality model gives at the stated pace.

use super::{TaskRecord, Workload};
use crate::placement::gang::{GangShape, Links};

/// Least progress a gang's runs must cover for its work to be measured (as for a single task).
const MIN_PROGRESS: f64 = 0.05;

/// A gang none of whose kind was measured does this many slots of work at its most workers on
/// one box (the `[gangs]` section's own default range is of this order).
pub const GANG_WORK_SLOTS: f64 = 10.0;

/// Iterations a second of the gang's most workers all on one box, at its stated compute time.
fn local_rate(shape: &GangShape, links: Links) -> f64 {
    f64::from(shape.workers.1)
        / (shape.compute_seconds + 2.0 * shape.gradient_bytes / links.internal)
}

/// Gang `t`'s work in worker iterations, if its runs measure it.
fn measured(t: &TaskRecord, shape: &GangShape, links: Links, slot_seconds: f64) -> Option<f64> {
    let (mut iterations, mut progress) = (0.0, 0.0);
    for r in t.runs.iter().filter(|r| !r.members.is_empty()) {
        let slots = r.to.saturating_sub(r.from) as f64;
        iterations += shape.rate(&r.members, links, shape.compute_seconds) * slots * slot_seconds;
        progress += (r.progress_to - r.progress_from).max(0.0);
    }
    (progress >= MIN_PROGRESS && iterations > 0.0).then(|| iterations / progress)
}

/// Each task's work in worker iterations (by task order): `None` for a single task; for a gang
/// what its runs measure, else the median measured gang's work in slots at its most workers on
/// one box (else [`GANG_WORK_SLOTS`]) at this gang's pace there. Every gang gets one where the
/// workload states its links; none where it does not.
pub fn gang_works(w: &Workload) -> Vec<Option<f64>> {
    let Some(links) = w.links else {
        return vec![None; w.tasks.len()];
    };
    let ss = w.slot_seconds;
    let measured: Vec<Option<f64>> = w
        .tasks
        .iter()
        .map(|t| measured(t, t.gang.as_deref()?, links, ss))
        .collect();
    let mut slots: Vec<f64> = w
        .tasks
        .iter()
        .zip(&measured)
        .filter_map(|(t, m)| Some((*m)? / (local_rate(t.gang.as_deref()?, links) * ss)))
        .filter(|s| s.is_finite() && *s > 0.0)
        .collect();
    slots.sort_by(f64::total_cmp);
    let typical = slots
        .get(slots.len() / 2)
        .copied()
        .unwrap_or(GANG_WORK_SLOTS);
    w.tasks
        .iter()
        .zip(measured)
        .map(|(t, m)| {
            let shape = t.gang.as_deref()?;
            Some(m.unwrap_or_else(|| (typical * local_rate(shape, links) * ss).max(1.0)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Resources;
    use crate::task::NodeId;
    use crate::twin::{FORMAT, RunRecord};

    fn shape() -> GangShape {
        GangShape {
            workers: (1, 2),
            ps: 1,
            worker_demand: Resources(vec![1]),
            ps_demand: Resources(vec![1]),
            compute_seconds: 0.5,
            gradient_bytes: 1e8,
            restarts: 0,
            stages: Vec::new(),
        }
    }

    fn gang(id: u64, runs: Vec<(Vec<u32>, u64, u64, f64, f64)>) -> TaskRecord {
        let runs = runs
            .into_iter()
            .map(|(boxes, from, to, p0, p1)| {
                let members: Vec<(NodeId, Resources)> = boxes
                    .into_iter()
                    .map(|b| (NodeId(b), Resources(vec![1])))
                    .collect();
                RunRecord {
                    node: members[0].0,
                    alloc: members[0].1.clone(),
                    from,
                    to,
                    progress_from: p0,
                    progress_to: p1,
                    start: true,
                    est_slots: 0.0,
                    members,
                }
            })
            .collect();
        let mut t = crate::twin::sizes::tests::task(id, runs, None);
        t.gang = Some(Box::new(shape()));
        t
    }

    /// A gang's work is the iterations its placement did over the progress it made: the twin's
    /// gang placed the same way takes the cluster's slots. One that barely ran takes the
    /// median measured gang's work in slots, at its own pace.
    #[test]
    fn a_gangs_work_is_what_its_placement_did_over_the_progress_it_made() {
        let links = Links {
            internal: 1e9,
            external: 1e8,
        };
        // PS and a worker on box 0, a worker on box 1: 1/(0.5+0.2) + 1/(0.5+2) iterations/s.
        let rate = 1.0 / 0.7 + 1.0 / 2.5;
        let w = Workload {
            sizes: None,
            format: FORMAT.into(),
            slot_seconds: 10.0,
            from_slot: 0,
            to_slot: 100,
            kinds: vec![],
            nodes: vec![],
            classes: vec![],
            tasks: vec![
                gang(0, vec![(vec![0, 0, 1], 0, 4, 0.0, 0.5)]),
                gang(1, vec![(vec![0, 0, 1], 0, 1, 0.0, 0.01)]),
            ],
            links: Some(links),
        };
        let got = gang_works(&w);
        let work = rate * 4.0 * 10.0 / 0.5;
        assert!((got[0].unwrap() - work).abs() < 1e-9, "{got:?}");
        // The median measured gang: `work` iterations at its 2 workers on one box.
        let local = 2.0 / 0.7;
        let slots = work / (local * 10.0);
        assert!((got[1].unwrap() - slots * local * 10.0).abs() < 1e-9);
        // Without links nothing is inferred.
        let plain = Workload { links: None, ..w };
        assert_eq!(gang_works(&plain), vec![None, None]);
    }
}
