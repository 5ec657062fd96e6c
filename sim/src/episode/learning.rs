//! The episode's side of RLPTO's accuracy-aware parts ([`crate::learning`]): each running task's
//! accuracy reports and the plateau detector over them (which mark tasks converging; the slot
//! step shrinks them, [`tapfinger::slot::end_of_slot`]), and the resources each task held (for
//! the cluster reward).

use super::Episode;
use tapfinger::{Resources, TaskId};

/// What the episode keeps of a task's learning beside the ledger.
#[derive(Debug, Clone, Default)]
pub(super) struct Learning {
    /// Its last reports (accuracy), oldest first, as many as the detector judges.
    reports: std::collections::VecDeque<f64>,
    /// Its accuracy (without noise) when the detector first found it converging.
    pub(super) at_plateau: Option<f64>,
    /// Node-slots of resources it held ([`crate::learning`]).
    pub(super) resource_time: f64,
}

impl Episode<'_> {
    /// Node-slots of one slot at `alloc`: each kind's units over a node's mean capacity of it,
    /// averaged over the kinds the cluster has.
    pub(super) fn node_slots(&self, alloc: &Resources) -> f64 {
        let n = self.ids.len().max(1) as f64;
        let kinds: Vec<(usize, f64)> = self
            .total_capacity
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0.0)
            .map(|(k, c)| (k, c / n))
            .collect();
        if kinds.is_empty() {
            return 0.0;
        }
        kinds
            .iter()
            .map(|(k, mean)| f64::from(alloc.get(*k)) / mean)
            .sum::<f64>()
            / kinds.len() as f64
    }

    /// Task `id` ran the slot at `alloc` and reached `progress`: count its resources, and (its
    /// type has a curve) take its report and judge it. Returns the judgement (`None`: not
    /// judged: no curve, or shrinking off).
    pub(super) fn learn(
        &mut self,
        id: TaskId,
        alloc: &Resources,
        progress: f64,
        slot: u64,
    ) -> Option<bool> {
        let held = self.node_slots(alloc);
        let ty = self.ledger[&id].task.ty.0;
        let curve = self.sc.types[usize::from(ty)].curve;
        let shrink = self.sc.shrink;
        let seed = self.curve_seed;
        let m = self.ledger.meta_mut(id)?;
        m.learning.resource_time += held;
        let curve = curve?;
        // Seeded by task and slot alone: the same draw with or without the detector.
        let report = curve.report(progress, seed, id.0, slot);
        let Some(shrink) = shrink else {
            self.ledger.note_accuracy(id, report);
            return None;
        };
        let m = self.ledger.meta_mut(id)?;
        let l = &mut m.learning;
        l.reports.push_back(report);
        while l.reports.len() > shrink.plateau.window + 1 {
            l.reports.pop_front();
        }
        let reports: Vec<f64> = l.reports.iter().copied().collect();
        let converging = shrink.plateau.reached(&reports, false);
        if converging && l.at_plateau.is_none() {
            l.at_plateau = Some(curve.accuracy(progress));
        }
        self.ledger.set_converging(id, converging);
        self.ledger.note_accuracy(id, report);
        Some(converging)
    }

    /// A finished task's final accuracy (its type's curve at the end), if it has a curve.
    pub(super) fn final_accuracy(&self, ty: u16) -> Option<f64> {
        self.sc.types[usize::from(ty)]
            .curve
            .map(|c| c.accuracy(1.0))
    }
}
