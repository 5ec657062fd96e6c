//! The forecast as a running scheduler uses it: the expected arrivals of the next intervals
//! from the arrival series a ledger keeps ([`tapfinger_core::ledger::Ledger::arrival_counts`]), with the
//! documented fallback where no model can be fitted yet.
//!
//! - **Enough history** (at least [`MIN_INTERVALS`] intervals): ARIMA + GRU ([`Forecaster`]).
//! - **Too little, or a series no model fits** (constant, degenerate, unstable): the last
//!   interval's count for every interval ahead (0 with no history), and `model` says why.
//!
//! Never an error and never a panic: an empty history is a forecast of 0, said so.

use super::{Forecaster, gru::GruFit, last_value};
use serde::{Deserialize, Serialize};

/// Intervals of history before a model is fitted (a fit on fewer is mostly noise).
pub const MIN_INTERVALS: usize = 40;

/// Expected arrivals ahead, and how they were made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outlook {
    /// Slots per interval.
    pub interval_slots: u64,
    /// Intervals of history it was made from.
    pub history: usize,
    /// Expected arrivals in each of the next intervals, nearest first (each ≥ 0).
    pub next: Vec<f64>,
    /// How: `arima(p,d,q)`, `arima(p,d,q)+gru(w)`, or `last value (why)`.
    pub model: String,
}

/// The outlook `horizon` intervals ahead of `history` (counts per interval of `interval_slots`
/// slots, oldest first); `seed` fixes the GRU's initial weights. Fitting trains the GRU: seconds
/// on a long history, so an agent makes it off its event loop.
pub fn outlook(history: &[f64], interval_slots: u64, horizon: usize, seed: u64) -> Outlook {
    let fallback = |why: String| Outlook {
        interval_slots,
        history: history.len(),
        next: vec![last_value(history).max(0.0); horizon],
        model: format!("last value ({why})"),
    };
    if history.len() < MIN_INTERVALS {
        return fallback(format!(
            "{} of the {MIN_INTERVALS} intervals a model needs",
            history.len()
        ));
    }
    match Forecaster::fit(history, &GruFit::default(), seed) {
        Ok(f) => {
            let a = &f.arima;
            let model = if f.weight > 0.0 {
                format!("arima({},{},{})+gru({:.2})", a.p, a.d, a.q, f.weight)
            } else {
                format!("arima({},{},{})", a.p, a.d, a.q)
            };
            Outlook {
                interval_slots,
                history: history.len(),
                next: f.forecast(history, horizon),
                model,
            }
        }
        Err(e) => fallback(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_short_or_constant_history_falls_back_to_the_last_value_and_says_why() {
        let o = outlook(&[], 12, 3, 1);
        assert_eq!(o.next, vec![0.0; 3]);
        assert!(
            o.model.starts_with("last value (0 of the 40"),
            "{}",
            o.model
        );
        let o = outlook(&[2.0, 5.0], 12, 2, 1);
        assert_eq!(o.next, vec![5.0, 5.0]);
        let flat = vec![3.0; 60];
        let o = outlook(&flat, 12, 2, 1);
        assert!(o.next.iter().all(|x| x.is_finite() && *x >= 0.0), "{o:?}");
        assert_eq!(o.history, 60);
    }

    #[test]
    fn a_seasonal_history_gets_a_model_and_a_forecast_that_follows_it() {
        // Period 8: 1 1 1 1 6 6 6 6, repeated.
        let x: Vec<f64> = (0..96).map(|t| if t % 8 < 4 { 1.0 } else { 6.0 }).collect();
        let o = outlook(&x, 12, 4, 7);
        assert!(o.model.starts_with("arima("), "{}", o.model);
        assert_eq!(o.next.len(), 4);
        assert!(o.next.iter().all(|v| v.is_finite() && *v >= 0.0));
    }
}
