//! Task-volume forecasting (RLPTO): how many tasks will arrive in the next intervals, from the
//! per-interval arrival counts seen so far.
//!
//! The forecast is ARIMA ([`arima`]) plus a small GRU trained on ARIMA's one-step errors
//! ([`gru`]): ARIMA takes the linear structure (level, trend, short memory), the GRU what is left
//! that a recent run of errors predicts (a seasonal shape no low-order ARIMA follows, a burst's
//! onset). The GRU's correction is weighted by a factor in [0, 1] chosen on the last fifth of the
//! history, which its training never sees: where the errors hold nothing to learn the weight is
//! 0 and the forecast is ARIMA's. [`last_value`] is the baseline both must beat. Sans-IO and
//! deterministic: the same history and seed give the same forecast in the simulator and an agent.

pub mod arima;
pub mod gru;
pub mod outlook;

pub use arima::Arima;

/// Why a forecast could not be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ForecastError {
    /// Too few intervals of history.
    #[error(
        "{have} intervals of history; at least {need} are needed (until then the forecast is the last value, or 0 with none)"
    )]
    TooShort {
        /// Intervals given.
        have: usize,
        /// Intervals needed.
        need: usize,
    },
    /// A least-squares step found no solution (a constant or degenerate series).
    #[error("the regression is singular (the series is constant or degenerate)")]
    Singular,
    /// The fitted model would explode (no order of the grid fits a stable one).
    #[error("the fitted model is not stable")]
    Unstable,
}

/// The last-value forecast: the next interval as the last one (0 with no history).
pub fn last_value(x: &[f64]) -> f64 {
    x.last().copied().unwrap_or(0.0)
}

/// A fitted ARIMA + GRU forecaster.
#[derive(Debug)]
pub struct Forecaster {
    /// The ARIMA part.
    pub arima: Arima,
    /// The GRU on ARIMA's errors.
    pub gru: gru::ResidualGru,
    /// Weight of the GRU's correction, in [0, 1] (chosen on held-back history).
    pub weight: f64,
}

impl Forecaster {
    /// Fit on `x`: ARIMA by AIC on all of it, the GRU on the errors of its first four fifths,
    /// its weight on the last fifth; `seed` fixes the GRU's initial weights.
    pub fn fit(x: &[f64], cfg: &gru::GruFit, seed: u64) -> Result<Self, ForecastError> {
        let arima = Arima::select(x)?;
        let errors = arima.one_step_errors(x);
        let cut = x.len() * 4 / 5;
        let first = arima.p.max(arima.q) + arima.d;
        let first = first.min(cut);
        let mut net = gru::ResidualGru::train(&errors[first..cut], &x[first..cut], cfg, seed);
        // The weight: least absolute error on the held-back fifth, on a grid of five; a
        // correction must earn its place by 2 % over none, or the forecast stays ARIMA's.
        let held = net.predict_all(&errors, x, cut);
        let mae = |w: f64| -> f64 {
            (cut..errors.len())
                .map(|t| (errors[t] - w * held[t - cut]).abs())
                .sum()
        };
        let best = [0.25, 0.5, 0.75, 1.0]
            .into_iter()
            .min_by(|a, b| mae(*a).total_cmp(&mae(*b)))
            .unwrap_or(0.0);
        let weight = if mae(best) < 0.98 * mae(0.0) {
            best
        } else {
            0.0
        };
        // Then trained on every interval, as the forecasts will be made after all of them.
        if weight > 0.0 {
            net = gru::ResidualGru::train(&errors[first..], &x[first..], cfg, seed);
        }
        Ok(Self {
            arima,
            gru: net,
            weight,
        })
    }

    /// One-step forecasts of `x[t]` from `x[..t]`, for every `t` from `from` on (rolling: each
    /// uses the history up to its interval, with the fitted models).
    pub fn one_step(&self, x: &[f64], from: usize) -> Vec<f64> {
        let errors = self.arima.one_step_errors(x);
        let correction = if self.weight > 0.0 {
            self.gru.predict_all(&errors, x, from)
        } else {
            vec![0.0; x.len().saturating_sub(from)]
        };
        (from..x.len())
            .map(|t| x[t] - errors[t] + self.weight * correction[t - from])
            .collect()
    }

    /// Forecasts of the next `h` intervals after `x`, each at least 0 (a count).
    pub fn forecast(&self, x: &[f64], h: usize) -> Vec<f64> {
        let mut f = self.arima.forecast(x, h);
        if self.weight > 0.0 {
            let errors = self.arima.one_step_errors(x);
            let next = self.gru.predict_all(&errors, x, errors.len());
            if let (Some(first), Some(c)) = (f.first_mut(), next.first()) {
                *first += self.weight * c;
            }
        }
        f.iter().map(|v| v.max(0.0)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A daily shape (period 12) with a little deterministic wobble.
    fn seasonal(n: usize) -> Vec<f64> {
        (0..n)
            .map(|t| {
                let h = (t % 12) as f64;
                let peak = (-((h - 4.0) / 1.2).powi(2)).exp();
                4.0 + 10.0 * peak + ((t * 7919) % 5) as f64 * 0.4
            })
            .collect()
    }

    #[test]
    fn the_forecast_beats_the_last_value_on_a_seasonal_series_and_is_never_negative() {
        let x = seasonal(240);
        let cfg = gru::GruFit {
            epochs: 40,
            ..Default::default()
        };
        let f = Forecaster::fit(&x[..180], &cfg, 3).unwrap();
        assert!((0.0..=1.0).contains(&f.weight));
        let one = f.one_step(&x, 180);
        assert_eq!(one.len(), 60);
        let mae = |p: &[f64]| {
            x[180..]
                .iter()
                .zip(p)
                .map(|(a, b)| (a - b).abs())
                .sum::<f64>()
        };
        let naive: Vec<f64> = (180..240).map(|t| last_value(&x[..t])).collect();
        assert!(mae(&one) < mae(&naive), "{} vs {}", mae(&one), mae(&naive));
        let h = f.forecast(&x, 12);
        assert_eq!(h.len(), 12);
        assert!(h.iter().all(|v| v.is_finite() && *v >= 0.0), "{h:?}");
    }

    #[test]
    fn no_history_is_an_error_and_the_last_value_of_nothing_is_zero() {
        let e = Forecaster::fit(&[], &gru::GruFit::default(), 1).unwrap_err();
        assert!(matches!(e, ForecastError::TooShort { have: 0, .. }), "{e}");
        assert!(e.to_string().contains("needed"), "{e}");
        assert_eq!(last_value(&[]), 0.0);
        // A constant series: the least-squares solve takes the least-norm fit, so the forecast
        // is the constant (no panic, no NaN).
        let f = Forecaster::fit(&[3.0; 100], &gru::GruFit::default(), 1).unwrap();
        let h = f.forecast(&[3.0; 100], 3);
        assert!(h.iter().all(|v| (v - 3.0).abs() < 1e-6), "{h:?}");
    }
}
