//! ARIMA(p, d, q) on a series of per-interval counts, fitted by the Hannan–Rissanen two-step
//! regression: a long autoregression gives estimates of the shocks, then the series (differenced
//! `d` times) is regressed on its own lags and the lagged shocks. Both steps are least squares,
//! solved by `nalgebra`'s SVD (no maintained pure-Rust ARIMA exists; this is the textbook
//! estimator for ARMA orders picked from a grid, and it needs no iterative optimiser that could
//! fail to converge). The order is the grid's least AIC, every order judged on the same
//! intervals, so that differenced and undifferenced models compare.

use super::ForecastError;
use nalgebra::{DMatrix, DVector};

/// Most AR, differencing and MA orders the grid tries.
pub const GRID: (usize, usize, usize) = (4, 1, 2);

/// A fitted ARIMA model.
#[derive(Debug, Clone, PartialEq)]
pub struct Arima {
    /// AR order.
    pub p: usize,
    /// Differencing order.
    pub d: usize,
    /// MA order.
    pub q: usize,
    /// Constant of the differenced series.
    pub c: f64,
    /// AR coefficients, lag 1 first.
    pub phi: Vec<f64>,
    /// MA coefficients, lag 1 first.
    pub theta: Vec<f64>,
    /// Mean squared one-step error on the judged intervals.
    pub sigma2: f64,
    /// Akaike's information criterion on those intervals.
    pub aic: f64,
}

/// `x` differenced `d` times.
fn diff(x: &[f64], d: usize) -> Vec<f64> {
    let mut y = x.to_vec();
    for _ in 0..d {
        y = y.windows(2).map(|w| w[1] - w[0]).collect();
    }
    y
}

/// Least squares `rows · β ≈ y`; `None` if the solve fails.
fn ols(rows: &[Vec<f64>], y: &[f64]) -> Option<Vec<f64>> {
    let k = rows.first()?.len();
    if rows.len() < k || k == 0 {
        return None;
    }
    let a = DMatrix::from_fn(rows.len(), k, |i, j| rows[i][j]);
    let b = DVector::from_column_slice(y);
    let beta = a.svd(true, true).solve(&b, 1e-9).ok()?;
    beta.iter()
        .all(|v| v.is_finite())
        .then(|| beta.iter().copied().collect())
}

impl Arima {
    /// Fit ARIMA(`p`, `d`, `q`) on `x`, judged (σ², AIC) on the intervals from `from` on.
    pub fn fit(
        x: &[f64],
        p: usize,
        d: usize,
        q: usize,
        from: usize,
    ) -> Result<Self, ForecastError> {
        let need = Self::min_len(p, d, q);
        if x.len() < need {
            return Err(ForecastError::TooShort {
                have: x.len(),
                need,
            });
        }
        let y = diff(x, d);
        // Step 1: the shocks, from a long autoregression (none needed without an MA part).
        let m = if q == 0 {
            0
        } else {
            (p + q + 2).max((y.len() / 8).min(12))
        };
        let mut e = vec![0.0; y.len()];
        if m > 0 {
            let rows: Vec<Vec<f64>> = (m..y.len())
                .map(|t| {
                    std::iter::once(1.0)
                        .chain((1..=m).map(|l| y[t - l]))
                        .collect()
                })
                .collect();
            let beta = ols(&rows, &y[m..]).ok_or(ForecastError::Singular)?;
            for t in m..y.len() {
                let fit: f64 = rows[t - m].iter().zip(&beta).map(|(a, b)| a * b).sum();
                e[t] = y[t] - fit;
            }
        }
        // Step 2: the series on its lags and the lagged shocks.
        let start = m + q.max(p);
        let rows: Vec<Vec<f64>> = (start..y.len())
            .map(|t| {
                std::iter::once(1.0)
                    .chain((1..=p).map(|l| y[t - l]))
                    .chain((1..=q).map(|l| e[t - l]))
                    .collect()
            })
            .collect();
        let beta = ols(&rows, &y[start..]).ok_or(ForecastError::Singular)?;
        let mut model = Arima {
            p,
            d,
            q,
            c: beta[0],
            phi: beta[1..=p].to_vec(),
            theta: beta[p + 1..].to_vec(),
            sigma2: 0.0,
            aic: 0.0,
        };
        // An explosive AR or MA part forecasts nonsense: refuse it (the grid has others).
        let sum = |v: &[f64]| v.iter().map(|c| c.abs()).sum::<f64>();
        if sum(&model.phi) >= 1.5 || sum(&model.theta) >= 1.5 {
            return Err(ForecastError::Unstable);
        }
        let errors = model.one_step_errors(x);
        let judged = &errors[from.min(errors.len())..];
        if judged.is_empty() {
            return Err(ForecastError::TooShort {
                have: x.len(),
                need: from + 1,
            });
        }
        let n = judged.len() as f64;
        model.sigma2 = (judged.iter().map(|e| e * e).sum::<f64>() / n).max(1e-12);
        model.aic = n * model.sigma2.ln() + 2.0 * (p + q + 1) as f64;
        Ok(model)
    }

    /// Fewest intervals a fit of this order needs.
    pub fn min_len(p: usize, d: usize, q: usize) -> usize {
        d + 2 * (p + q + 2) + 8
    }

    /// The least-AIC model of the grid ([`GRID`]), every order judged on the same intervals.
    pub fn select(x: &[f64]) -> Result<Self, ForecastError> {
        let (pm, dm, qm) = GRID;
        let from = Self::min_len(pm, dm, qm).min(x.len() / 2);
        let mut best: Option<Arima> = None;
        let mut last = ForecastError::TooShort {
            have: x.len(),
            need: Self::min_len(0, 0, 0),
        };
        for d in 0..=dm {
            for p in 0..=pm {
                for q in 0..=qm {
                    match Self::fit(x, p, d, q, from) {
                        Ok(m) if best.as_ref().is_none_or(|b| m.aic < b.aic) => best = Some(m),
                        Ok(_) => {}
                        Err(e) => last = e,
                    }
                }
            }
        }
        best.ok_or(last)
    }

    /// Each interval's one-step error: `x[t]` less this model's forecast of it from `x[..t]`
    /// (0 where the model has too little history).
    pub fn one_step_errors(&self, x: &[f64]) -> Vec<f64> {
        let y = diff(x, self.d);
        let mut e = vec![0.0; y.len()];
        let lag = self.p.max(self.q);
        for t in lag..y.len() {
            e[t] = y[t] - self.next_diff(&y[..t], &e[..t]);
        }
        // In the original series' indices (the first `d` intervals have no difference).
        let mut out = vec![0.0; self.d];
        out.extend(e);
        out
    }

    /// The forecast of the differenced series' next value from its history and shocks.
    fn next_diff(&self, y: &[f64], e: &[f64]) -> f64 {
        let n = y.len();
        let ar: f64 = (1..=self.p)
            .filter(|l| *l <= n)
            .map(|l| self.phi[l - 1] * y[n - l])
            .sum();
        let ma: f64 = (1..=self.q)
            .filter(|l| *l <= n)
            .map(|l| self.theta[l - 1] * e[n - l])
            .sum();
        self.c + ar + ma
    }

    /// Forecasts of the next `h` intervals after `x` (future shocks 0), on the original scale.
    pub fn forecast(&self, x: &[f64], h: usize) -> Vec<f64> {
        let mut y = diff(x, self.d);
        let errors = self.one_step_errors(x);
        let mut e: Vec<f64> = errors[self.d..].to_vec();
        let mut out = Vec::with_capacity(h);
        // The last value of each differencing level, to integrate the forecasts back.
        let mut levels: Vec<f64> = (0..self.d)
            .map(|k| *diff(x, k).last().unwrap_or(&0.0))
            .collect();
        for _ in 0..h {
            let next = self.next_diff(&y, &e);
            y.push(next);
            e.push(0.0);
            let mut v = next;
            for level in levels.iter_mut().rev() {
                v += *level;
                *level = v;
            }
            out.push(v);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngExt;

    fn ar1(phi: f64, n: usize, seed: u64) -> Vec<f64> {
        let mut rng = tapfinger_core::seeded_rng(seed);
        let mut x = vec![0.0];
        for _ in 1..n {
            let noise: f64 = rng.random::<f64>() - 0.5;
            x.push(5.0 + phi * (x[x.len() - 1] - 5.0) + noise);
        }
        x
    }

    #[test]
    fn an_ar1_is_recovered_and_its_forecast_decays_to_the_mean() {
        let x = ar1(0.7, 600, 3);
        let m = Arima::fit(&x, 1, 0, 0, 20).unwrap();
        assert!((m.phi[0] - 0.7).abs() < 0.08, "{m:?}");
        let mean = m.c / (1.0 - m.phi[0]);
        assert!((mean - 5.0).abs() < 0.2, "{mean}");
        let f = m.forecast(&x, 40);
        assert!((f[39] - mean).abs() < 0.05, "{:?}", &f[35..]);
    }

    #[test]
    fn a_trend_is_differenced_and_followed() {
        let x: Vec<f64> = (0..200).map(|t| 2.0 * t as f64 + (t % 3) as f64).collect();
        let m = Arima::select(&x).unwrap();
        let f = m.forecast(&x, 3);
        for (i, v) in f.iter().enumerate() {
            let want = 2.0 * (200 + i) as f64 + ((200 + i) % 3) as f64;
            assert!((v - want).abs() < 2.5, "step {i}: {v} vs {want} ({m:?})");
        }
    }

    #[test]
    fn too_short_a_history_is_an_error_that_says_how_much_is_needed() {
        let e = Arima::select(&[1.0, 2.0, 3.0]).unwrap_err();
        assert!(matches!(e, ForecastError::TooShort { have: 3, .. }), "{e}");
        assert!(Arima::select(&[]).is_err());
    }
}
