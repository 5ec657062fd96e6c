//! `tapfinger-sim forecast-bench`: the task-volume forecast (ARIMA + GRU, RLPTO) against ARIMA
//! alone and the last value, on seasonal and bursty arrival series ([`tapfinger_sim::arrivals`]):
//! each model is fitted on the first three quarters of a series and judged on one-step forecasts
//! of the last quarter (each from the history up to its interval), by mean absolute error.

use anyhow::Result;
use tapfinger::forecast::{Arima, Forecaster, gru::GruFit, last_value};
use tapfinger_sim::arrivals::{Family, series};

/// Arguments of `forecast-bench`.
#[derive(clap::Args)]
pub(crate) struct ForecastBenchArgs {
    /// Series per family.
    #[arg(long, default_value_t = 10)]
    series: u64,
    /// First seed (seeds below 100 are for development).
    #[arg(long, default_value_t = 100)]
    first_seed: u64,
    /// Intervals per series.
    #[arg(long, default_value_t = 480)]
    intervals: usize,
}

/// Mean absolute error of `f` against `x[from..]`.
fn mae(x: &[f64], from: usize, f: &[f64]) -> f64 {
    x[from..]
        .iter()
        .zip(f)
        .map(|(a, b)| (a - b).abs())
        .sum::<f64>()
        / f.len().max(1) as f64
}

pub(crate) fn bench(a: ForecastBenchArgs) -> Result<()> {
    anyhow::ensure!(a.series > 0, "--series must be at least 1");
    anyhow::ensure!(a.intervals >= 100, "--intervals must be at least 100");
    println!(
        "forecast-bench: {} series per family of {} intervals, seeds {}..{}; fitted on the first 3/4, one-step MAE on the last 1/4",
        a.series,
        a.intervals,
        a.first_seed,
        a.first_seed + a.series
    );
    println!(
        "{:<9} {:>11} {:>9} {:>11} {:>13} {:>10}",
        "series", "last value", "ARIMA", "ARIMA+GRU", "GRU weight", "orders"
    );
    for family in Family::ALL {
        let (mut lv, mut ar, mut both, mut weights) = (0.0, 0.0, 0.0, 0.0);
        let mut orders = std::collections::BTreeMap::new();
        for seed in a.first_seed..a.first_seed + a.series {
            let x = series(family, a.intervals, seed);
            let cut = a.intervals * 3 / 4;
            let f = Forecaster::fit(&x[..cut], &GruFit::default(), seed)?;
            let naive: Vec<f64> = (cut..x.len()).map(|t| last_value(&x[..t])).collect();
            let arima: Vec<f64> = arima_one_step(&f.arima, &x, cut);
            lv += mae(&x, cut, &naive);
            ar += mae(&x, cut, &arima);
            both += mae(&x, cut, &f.one_step(&x, cut));
            weights += f.weight;
            *orders
                .entry((f.arima.p, f.arima.d, f.arima.q))
                .or_insert(0u32) += 1;
        }
        let n = a.series as f64;
        let top = orders
            .iter()
            .max_by_key(|(_, c)| **c)
            .map(|((p, d, q), c)| format!("({p},{d},{q})×{c}"))
            .unwrap_or_default();
        println!(
            "{:<9} {:>11.3} {:>9.3} {:>11.3} {:>13.2} {:>10}",
            family.name(),
            lv / n,
            ar / n,
            both / n,
            weights / n,
            top
        );
    }
    Ok(())
}

/// ARIMA's one-step forecasts of `x[from..]`.
fn arima_one_step(m: &Arima, x: &[f64], from: usize) -> Vec<f64> {
    let e = m.one_step_errors(x);
    (from..x.len()).map(|t| x[t] - e[t]).collect()
}
