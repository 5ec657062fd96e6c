//! The costs real boxes and real task mixes have, drawn for every scenario of the base, wide
//! and long families from a stream of their own (so the cluster, the classes and the arrivals
//! drawn before stay as they were):
//!
//! - a re-share costs 0–50 % of the slot it happens in (`switch_weight` 0.5–1): a published
//!   test-bed measured half a slot for a re-share (a checkpoint and a restart at the new size);
//! - a start costs 0–70 % of a run's first slot (`start_weight` 0.3–1): the agent on an H200
//!   lost 0.69 of a 1-second slot to a PyTorch job's start-up, the same test-bed 14 s of a
//!   minute-long slot;
//! - in half the scenarios, classes that cannot be resized (`min_demand = max_demand`), each
//!   class so with a chance of 30–100 %: every class of an imported trace is so, a data-parallel
//!   job of a fixed size is;
//! - in one scenario of seven, 7–60 classes (log-uniform) instead of 1–6: a trace's first few
//!   hundred jobs have 47–118 task types;
//! - in one scenario of six, an offered load of 1.0–1.5 instead of 0.3–0.95: more work arrives
//!   than the cluster can serve, and the queue deepens for the whole episode, as in a busy
//!   trace's peak.
//!
//! The Gavel family draws its own (start-ups only; no class of it can be resized).

use super::{Box_, Class, Family, draw_classes_from};
use rand::RngExt as _;
use std::fmt::Write as _;

/// A scenario's costs as drawn.
#[derive(Debug)]
pub(super) struct Costs {
    /// Progress multiplier of a slot whose allocation changed.
    pub(super) switch_weight: f64,
    /// Progress multiplier of a run's first slot.
    pub(super) start_weight: f64,
    /// The chance that a class cannot be resized (0 in half the scenarios).
    pub(super) fixed: f64,
    /// How many classes the scenario has in all, if more than the main stream drew.
    pub(super) classes: Option<usize>,
    /// The offered load, if it overloads the cluster.
    pub(super) overload: Option<f64>,
    /// The stream the rest is drawn from (which classes are fixed, the extra classes).
    rng: tapfinger::Rng,
}

impl Costs {
    /// The costs of scenario `seed` (the same for every family that draws them).
    pub(super) fn draw(seed: u64) -> Self {
        let mut rng = tapfinger::seeded_rng(seed ^ 0x636F_7374_732D_7265);
        let switch_weight = rng.random_range(0.5..=1.0);
        let start_weight = rng.random_range(0.3..=1.0);
        let fixed = if rng.random_bool(0.5) {
            rng.random_range(0.3..=1.0)
        } else {
            0.0
        };
        let classes = rng
            .random_bool(1.0 / 7.0)
            .then(|| rng.random_range(7f64.ln()..=60f64.ln()).exp().round() as usize);
        let overload = rng
            .random_bool(1.0 / 6.0)
            .then(|| rng.random_range(1.0..=1.5));
        Self {
            switch_weight,
            start_weight,
            fixed,
            classes,
            overload,
            rng,
        }
    }

    /// Add the classes beyond the main stream's and make the fixed ones unresizable.
    pub(super) fn apply(&mut self, classes: &mut Vec<Class>, boxes: &[Box_], family: Family) {
        if let Some(n) = self.classes
            && n > classes.len()
        {
            let more = draw_classes_from(&mut self.rng, boxes, family, classes.len()..n);
            classes.extend(more);
        }
        for c in classes.iter_mut() {
            if self.fixed > 0.0 && self.rng.random_bool(self.fixed) {
                c.max = c.min;
            }
        }
    }

    /// The offered load: the main stream's unless this scenario overloads its cluster.
    pub(super) fn load(&self, drawn: f64) -> f64 {
        self.overload.unwrap_or(drawn)
    }

    /// The scenario's `switch_weight` and `start_weight` lines.
    pub(super) fn write(&self, t: &mut String) {
        let _ = writeln!(
            t,
            "switch_weight = {:.3}\nstart_weight = {:.3}",
            self.switch_weight, self.start_weight
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    #[test]
    fn every_family_but_gavel_draws_the_costs_over_their_ranges() {
        let (mut switch, mut start) = (Vec::new(), Vec::new());
        let (mut fixed, mut classes, mut many, mut overloaded) = (0, 0, 0, 0);
        for seed in 0..300u64 {
            for family in [Family::Base, Family::Wide, Family::Long] {
                let name = family.scenario(seed);
                let sc = Scenario::load(&name).unwrap_or_else(|e| panic!("{name}: {e}"));
                let costs = Costs::draw(seed);
                assert!(
                    (sc.switch_weight - costs.switch_weight).abs() < 1e-3,
                    "{name}"
                );
                assert!(
                    (sc.start_weight - costs.start_weight).abs() < 1e-3,
                    "{name}"
                );
                assert!((1..=60).contains(&sc.types.len()), "{name}");
                if family == Family::Base {
                    switch.push(sc.switch_weight);
                    start.push(sc.start_weight);
                    many += usize::from(sc.types.len() > 6);
                    overloaded += usize::from(costs.overload.is_some());
                    for t in &sc.types {
                        classes += 1;
                        fixed += usize::from(t.max_demand.as_ref() == Some(&t.min_demand));
                    }
                }
            }
        }
        let within = |xs: &[f64], lo: f64, hi: f64| {
            xs.iter().all(|x| (lo..=hi).contains(x))
                && xs.iter().any(|x| *x < lo + 0.1)
                && xs.iter().any(|x| *x > hi - 0.1)
        };
        assert!(within(&switch, 0.5, 1.0), "re-share costs {switch:?}");
        assert!(within(&start, 0.3, 1.0), "start-up costs {start:?}");
        // About a third of the classes fixed (half the scenarios, 30-100 % of their classes),
        // about one scenario in seven with many classes, one in six overloaded.
        assert!(
            fixed * 5 > classes && fixed * 2 < classes,
            "{fixed} of {classes} fixed"
        );
        assert!((25..70).contains(&many), "{many} of 300 with 7-60 classes");
        assert!(
            (30..80).contains(&overloaded),
            "{overloaded} of 300 overloaded"
        );
        // The Gavel family keeps its own costs.
        let g = Scenario::load("gen-gavel:3").unwrap();
        assert!((g.switch_weight - 1.0).abs() < 1e-9);
    }

    #[test]
    fn an_overloaded_scenario_is_drawn_at_its_load_and_says_it() {
        let seed = (0..100u64)
            .find(|s| Costs::draw(*s).overload.is_some())
            .expect("an overloaded scenario among the first hundred");
        let drawn = super::super::draw(seed);
        assert!(drawn.load >= 1.0, "{}", drawn.load);
        assert!(
            drawn
                .toml
                .contains(&format!("offered load {:.2}", drawn.load)),
            "the description says the load"
        );
    }
}
