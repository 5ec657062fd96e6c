//! The task-volume forecast in an episode (a scenario with a forecast interval: `compare
//! --forecast N`, or a model trained with the forecast feature). At the start of every interval
//! of N slots the forecast of the next [`FORECAST_AHEAD`] intervals' arrivals goes into the
//! ledger, so every view of the interval carries it as an agent's does; and the first of them is
//! kept beside the last interval's count and, once the interval is over, beside what arrived.
//!
//! The model (ARIMA + GRU, [`tapfinger::forecast::Forecaster`]) is fitted once per simulator,
//! on a history of arrivals from before the episode ([`PreFit`]): the scenario's arrival process
//! drawn with workload seeds no episode uses, as an agent that has been running for a while has
//! seen. Each episode then forecasts from that history followed by its own counts. Fitting
//! trains the GRU (seconds), so fitting within every episode made a training run hundreds of
//! times slower; the agents refit every interval, on what they saw, and read the forecast the
//! same way. A recorded workload (a trace) has no process to draw a history from (drawing it
//! again would show the model the episode itself): there, and where no model fits, the
//! forecast is the last value, the agents' fallback.

use super::Episode;
use std::sync::Mutex;
use tapfinger::forecast::{Forecaster, gru::GruFit, outlook::MIN_INTERVALS};
use tapfinger::graph::FORECAST_AHEAD;

/// One interval's forecast and what came.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ForecastPoint {
    /// Forecast arrivals.
    pub predicted: f64,
    /// The last interval's arrivals (the baseline).
    pub last_value: f64,
    /// Arrivals.
    pub actual: f64,
    /// Whether a model made it (else the fallback, the last value).
    pub fitted: bool,
}

/// Intervals of history a forecast reads at most (as the agent).
const HISTORY: usize = 500;

/// Intervals of arrivals drawn before the episodes, at least (several workloads of the scenario
/// one after another, at most [`PRE_RUNS`]).
const PRE_INTERVALS: usize = 3 * MIN_INTERVALS;

/// Workloads drawn at most for the history.
const PRE_RUNS: u64 = 8;

/// The history's workload seeds count down from here: far from the development (0–99) and
/// evaluation (100 and up) seeds of every report.
const PRE_SEED: u64 = u64::MAX;

/// The arrivals before the episodes and the model fitted on them.
pub struct PreFit {
    /// Counts per interval, oldest first.
    history: Vec<f64>,
    /// The model, if one fits (locked: episodes run on several threads; forecasting is quick).
    model: Option<Mutex<Forecaster>>,
    /// Why there is none.
    pub why_not: Option<String>,
}

impl PreFit {
    /// The history and model of `sc` forecasting per interval of `every` slots.
    pub(crate) fn fit(sc: &crate::scenario::Scenario, every: u64) -> Self {
        if sc.trace.is_some() {
            return Self {
                history: Vec::new(),
                model: None,
                why_not: Some(
                    "a recorded workload has no arrival process to draw a history from".into(),
                ),
            };
        }
        let mut history = Vec::new();
        for run in 0..PRE_RUNS {
            if history.len() >= PRE_INTERVALS {
                break;
            }
            let tasks = crate::workload::generate(sc, PRE_SEED - run);
            let Some(last) = tasks.iter().map(|t| t.arrival).max() else {
                break;
            };
            let mut counts = vec![0.0; (last / every + 1) as usize];
            for t in &tasks {
                counts[(t.arrival / every) as usize] += 1.0;
            }
            history.extend(counts);
        }
        match Forecaster::fit(&history, &GruFit::default(), PRE_SEED) {
            Ok(f) => Self {
                history,
                model: Some(Mutex::new(f)),
                why_not: None,
            },
            Err(e) => Self {
                history,
                model: None,
                why_not: Some(e.to_string()),
            },
        }
    }

    /// The next `h` intervals after the history followed by `own` (each ≥ 0), and whether the
    /// model made them (else the last value's fallback).
    fn forecast(&self, own: &[f64], h: usize) -> (Vec<f64>, bool) {
        let mut x: Vec<f64> = self.history.iter().chain(own).copied().collect();
        if x.len() > HISTORY {
            x.drain(..x.len() - HISTORY);
        }
        let model = self.model.as_ref().and_then(|m| m.lock().ok());
        match model {
            Some(f) => (f.forecast(&x, h), true),
            None => {
                let last = x.last().copied().unwrap_or(0.0).max(0.0);
                (vec![last; h], false)
            }
        }
    }
}

impl Episode<'_> {
    /// At the start of `slot`, before its arrivals: close the interval that ended, forecast the
    /// ones that begin.
    pub(super) fn forecast(&mut self, slot: u64) {
        let Some((every, pre)) = self.prefit.clone() else {
            return;
        };
        if !slot.is_multiple_of(every) {
            return;
        }
        let own = self.ledger.arrival_counts(every, slot, HISTORY);
        // Judged while tasks still arrive: an episode's workload ends with its last task, and
        // the empty intervals after it would reward whatever predicts zero. (Only the judging
        // knows when arrivals end; the forecast the policies see does not.)
        let last_arrival = self.arrivals.last().map_or(0, |t| t.arrival);
        if let (Some((predicted, last_value, fitted)), Some(actual)) =
            (self.pending_forecast.take(), own.last())
            && slot <= last_arrival
        {
            self.forecasts.push(ForecastPoint {
                predicted,
                last_value,
                actual: *actual,
                fitted,
            });
        }
        let (ahead, fitted) = pre.forecast(&own, FORECAST_AHEAD);
        let last = own.last().or(pre.history.last()).copied().unwrap_or(0.0);
        self.pending_forecast = Some((ahead[0], last, fitted));
        self.ledger.set_forecast(ahead);
    }
}
