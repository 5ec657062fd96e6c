//! GPU models as the estimator keys them: a box's accelerator model (NVML's device name on an
//! agent, a node's `gpu_model` in a scenario) changes how fast a class's tasks run there, so
//! the estimator learns each class per GPU model it ran on, and says what it can of a model
//! none of the class's tasks ran on from how the models compare on the classes that ran on
//! both. Only keys and that comparison live here; the fits are the classes'.

use super::class::Class;
use crate::task::TaskTypeId;
use std::collections::BTreeMap;

/// A GPU model's key: a hash of its name, so that every agent derives the same key from the
/// same name whatever order it heard the boxes in (a table of first-seen indices would differ
/// between agents, and their estimates must agree exactly). [`GpuModel::NONE`]: no model (a box
/// without a GPU, or one that does not say).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct GpuModel(pub u32);

/// The placement label that names a box's GPU model (an agent sets it from NVML's device name
/// unless its configuration gives one).
pub const GPU_MODEL_LABEL: &str = "gpu_model";

impl GpuModel {
    /// No GPU model.
    pub const NONE: Self = Self(0);

    /// The key of a model named `name` (trimmed, any case: `Tesla V100`, `tesla v100 ` are one
    /// model); an empty name is [`GpuModel::NONE`].
    pub fn of(name: &str) -> Self {
        let name = name.trim();
        if name.is_empty() {
            return Self::NONE;
        }
        // FNV-1a, 32 bits: stable across builds and platforms, unlike std's hasher.
        let mut h: u32 = 0x811c_9dc5;
        for b in name.bytes().map(|b| b.to_ascii_lowercase()) {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
        Self(h.max(1))
    }

    /// The key of the model a box's placement labels name ([`GPU_MODEL_LABEL`]).
    pub fn of_labels(labels: &BTreeMap<String, String>) -> Self {
        labels
            .get(GPU_MODEL_LABEL)
            .map_or(Self::NONE, |n| Self::of(n))
    }
}

/// Every class's entries, keyed by (class, GPU model).
pub(super) type Entries = BTreeMap<(TaskTypeId, GpuModel), Class>;

/// The entries of class `ty`, in model order.
pub(super) fn of_class(
    entries: &Entries,
    ty: TaskTypeId,
) -> impl Iterator<Item = (GpuModel, &Class)> + '_ {
    entries
        .range((ty, GpuModel(0))..=(ty, GpuModel(u32::MAX)))
        .map(|((_, m), c)| (*m, c))
}

/// The entry that speaks for class `ty` on `model`, and the factor its times are scaled by:
/// the class's own fit on `model` (factor 1) where it has one; else its fit on the model it
/// was seen most on (ties: the least key), times how much slower `model` runs than that one
/// ([`pace`]). `None`: no fit of the class on any model.
pub(super) fn speaking(
    entries: &Entries,
    ty: TaskTypeId,
    model: GpuModel,
) -> Option<(&Class, f64)> {
    if let Some(c) = entries.get(&(ty, model)).filter(|c| c.fitted()) {
        return Some((c, 1.0));
    }
    let (other, c) = of_class(entries, ty)
        .filter(|(_, c)| c.fitted())
        .max_by(|(m1, c1), (m2, c2)| c1.weight().cmp(&c2.weight()).then(m2.cmp(m1)))?;
    Some((c, pace(entries, model, other)))
}

/// How much longer a task takes on model `a` than on model `b`: over the classes fitted on
/// both, the geometric mean of the ratio of their times at the class's minimum demand; 1 where
/// no class ran on both, or either is [`GpuModel::NONE`] (nothing to compare).
pub(super) fn pace(entries: &Entries, a: GpuModel, b: GpuModel) -> f64 {
    if a == b || a == GpuModel::NONE || b == GpuModel::NONE {
        return 1.0;
    }
    let (mut sum, mut n) = (0.0, 0u32);
    for ((ty, m), ca) in entries {
        if *m != a || !ca.fitted() {
            continue;
        }
        if let Some(cb) = entries.get(&(*ty, b)).filter(|c| c.fitted()) {
            let ratio = ca.slots(&ca.min, &ca.min) / cb.slots(&ca.min, &ca.min);
            if ratio.is_finite() && ratio > 0.0 {
                sum += ratio.ln();
                n += 1;
            }
        }
    }
    if n == 0 {
        1.0
    } else {
        (sum / f64::from(n)).exp()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::{Estimator, KindMap};
    use crate::resources::Resources;
    use crate::task::Task;

    /// Feeds `est` slots of task `id` of class `ty` (minimum `min`) at `alloc` on `model`,
    /// each slot doing `1 / slots` of the work of a task that takes `slots` alone there.
    fn run(
        est: &mut Estimator,
        id: u64,
        ty: u16,
        min: [u32; 3],
        model: GpuModel,
        alloc: [u32; 3],
        slots: f64,
    ) {
        let t = Task::new(id, min).of_type(ty);
        for _ in 0..3 {
            est.observe_on(&t, model, &Resources(alloc.to_vec()), 1.0 / slots, 1.0);
        }
        est.forget(t.id);
    }

    #[test]
    fn a_model_s_key_ignores_case_and_spaces_and_an_empty_name_is_none() {
        assert_eq!(GpuModel::of("Tesla V100"), GpuModel::of(" tesla v100 "));
        assert_ne!(GpuModel::of("v100"), GpuModel::of("k80"));
        assert_eq!(GpuModel::of("  "), GpuModel::NONE);
        let mut labels = BTreeMap::new();
        assert_eq!(GpuModel::of_labels(&labels), GpuModel::NONE);
        labels.insert(GPU_MODEL_LABEL.to_string(), "K80".to_string());
        assert_eq!(GpuModel::of_labels(&labels), GpuModel::of("k80"));
    }

    #[test]
    fn a_class_is_learned_per_gpu_model_and_an_unseen_model_scales_by_the_others() {
        let mut est = Estimator::new(KindMap::from_names(&["cpu", "gpu", "mem"]));
        let (v100, k80) = (GpuModel::of("v100"), GpuModel::of("k80"));
        let gpu = [1, 1, 0];
        // Class 0 ran on both models, three times slower on the K80, at two allocations.
        for (i, (m, f)) in [(v100, 1.0), (k80, 3.0)].into_iter().enumerate() {
            let i = i as u64 * 10;
            run(&mut est, i + 1, 0, gpu, m, [1, 1, 0], 10.0 * f);
            run(&mut est, i + 2, 0, gpu, m, [1, 2, 0], 6.0 * f);
        }
        // Class 1 ran on V100s only; class 2 asks for no GPU and ran on a K80 box.
        run(&mut est, 31, 1, gpu, v100, [1, 1, 0], 20.0);
        run(&mut est, 32, 2, [1, 0, 0], k80, [1, 0, 0], 5.0);
        let at = |ty: u16, min: [u32; 3], m: GpuModel, a: [u32; 3]| {
            est.slots_on(&Task::new(99, min).of_type(ty), m, &Resources(a.to_vec()))
        };
        let close = |x: f64, y: f64| (x - y).abs() < 1e-6 * y;
        assert!(close(at(0, gpu, v100, [1, 1, 0]), 10.0));
        assert!(close(at(0, gpu, k80, [1, 1, 0]), 30.0));
        assert!(close(at(0, gpu, k80, [1, 2, 0]), 18.0));
        // Never on a K80: its V100 time, three times over, as class 0 compares the models.
        assert!(close(at(1, gpu, v100, [1, 1, 0]), 20.0));
        assert!(
            close(at(1, gpu, k80, [1, 1, 0]), 60.0),
            "{}",
            at(1, gpu, k80, [1, 1, 0])
        );
        // A box that names no model: the fit the class was seen most on, unscaled.
        assert!(close(at(1, gpu, GpuModel::NONE, [1, 1, 0]), 20.0));
        // A CPU task's samples speak on every model.
        assert!(close(at(2, [1, 0, 0], v100, [1, 0, 0]), 5.0));
        assert_eq!(est.samples(crate::task::TaskTypeId(0)), 12);
        let rows = est.summary();
        assert_eq!(rows.iter().filter(|r| r.class.0 == 0).count(), 2);
        assert!(
            rows.iter()
                .any(|r| r.class.0 == 2 && r.gpu_model == GpuModel::NONE)
        );
    }

    #[test]
    fn a_task_moved_to_another_model_pairs_nothing_across_them() {
        let mut est = Estimator::new(KindMap::from_names(&["cpu", "gpu", "mem"]));
        let (v100, k80) = (GpuModel::of("v100"), GpuModel::of("k80"));
        let t = Task::new(1, [1, 1, 0]);
        // Ten slots per task at 1 GPU on a V100, then restarted at 2 GPUs on a K80 where it
        // takes 30: a pair across the models would say 2 GPUs make it three times slower.
        est.observe_on(&t, v100, &Resources(vec![1, 1, 0]), 0.1, 1.0);
        est.observe_on(&t, k80, &Resources(vec![1, 2, 0]), 1.0 / 30.0, 1.0);
        est.observe_on(&t, k80, &Resources(vec![1, 2, 0]), 1.0 / 30.0, 1.0);
        let v = est.slots_on(&t, v100, &Resources(vec![1, 2, 0]));
        assert!(
            v <= 10.0 + 1e-9,
            "2 GPUs on the V100 estimated at {v} slots"
        );
    }
}
