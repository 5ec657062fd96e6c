//! Per-interval arrival-count series for judging task-volume forecasts
//! ([`tapfinger::forecast`]): a seasonal one (a daily shape with a morning and an afternoon
//! peak, Poisson counts around it) and a bursty one (quiet and busy spells of random lengths, a
//! two-state Markov chain, Poisson counts at each state's rate). Seeded; seeds below 100 are for
//! development.

use crate::workload::poisson;
use rand::RngExt;

/// Which series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// A 24-interval daily shape with noise.
    Seasonal,
    /// Quiet and busy spells.
    Bursty,
}

impl Family {
    /// Both, in table order.
    pub const ALL: [Family; 2] = [Family::Seasonal, Family::Bursty];

    /// Name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Family::Seasonal => "seasonal",
            Family::Bursty => "bursty",
        }
    }
}

/// `n` intervals of `family`'s counts from `seed`.
pub fn series(family: Family, n: usize, seed: u64) -> Vec<f64> {
    let mut rng = tapfinger::seeded_rng(seed ^ 0xa771_7a15);
    match family {
        Family::Seasonal => (0..n)
            .map(|t| {
                let h = (t % 24) as f64;
                let bump = |c: f64, w: f64| (-((h - c) / w).powi(2)).exp();
                let rate = 3.0 + 12.0 * bump(9.0, 1.5) + 7.0 * bump(15.0, 2.5);
                f64::from(poisson(rate, &mut rng))
            })
            .collect(),
        Family::Bursty => {
            let mut busy = false;
            (0..n)
                .map(|_| {
                    let flip = if busy { 0.2 } else { 0.08 };
                    if rng.random::<f64>() < flip {
                        busy = !busy;
                    }
                    let rate = if busy { 15.0 } else { 3.0 };
                    f64::from(poisson(rate, &mut rng))
                })
                .collect()
        }
    }
}
