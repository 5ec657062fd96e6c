//! The task-volume forecast in an episode (`compare --forecast N`): at the start of every
//! interval of N slots, the forecast of its arrivals from the counts the ledger keeps, kept
//! beside the last interval's count; once the interval is over, beside what arrived. The model
//! (ARIMA + GRU, [`tapfinger::forecast::Forecaster`]) is fitted once 40 intervals are known and
//! again every [`REFIT`] intervals, forecasting from the whole history in between (a fit trains
//! the GRU: refitting every interval made a 20-seed comparison take minutes); before the first
//! fit the forecast is the last value, as the agents' fallback. Policies do not see it yet.

use super::Episode;
use tapfinger::forecast::{Forecaster, gru::GruFit, outlook::MIN_INTERVALS};

/// Intervals between refits.
pub(super) const REFIT: usize = 10;

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

/// Intervals of history a fit reads at most (as the agent).
const HISTORY: usize = 500;

impl Episode<'_> {
    /// At the start of `slot`, before its arrivals: close the interval that ended, forecast the
    /// one that begins.
    pub(super) fn forecast(&mut self, slot: u64) {
        let Some(every) = self.sc.forecast_interval_slots else {
            return;
        };
        // Judged while tasks still arrive: an episode's workload ends with its last task, and
        // the empty intervals after it would reward whatever predicts zero.
        let last_arrival = self.arrivals.last().map_or(0, |t| t.arrival);
        if slot == 0 || !slot.is_multiple_of(every) || slot > last_arrival {
            return;
        }
        let history = self.ledger.arrival_counts(every, slot, HISTORY);
        if let (Some((predicted, last_value, fitted)), Some(actual)) =
            (self.pending_forecast.take(), history.last())
        {
            self.forecasts.push(ForecastPoint {
                predicted,
                last_value,
                actual: *actual,
                fitted,
            });
        }
        let due = self
            .forecaster
            .as_ref()
            .is_none_or(|(_, at)| history.len() >= at + REFIT);
        if history.len() >= MIN_INTERVALS && due {
            // A series no model fits keeps the last model (or the fallback).
            if let Ok(f) = Forecaster::fit(&history, &GruFit::default(), self.curve_seed ^ slot) {
                self.forecaster = Some((f, history.len()));
            }
        }
        let last = history.last().copied().unwrap_or(0.0);
        self.pending_forecast = Some(match &self.forecaster {
            Some((f, _)) => (f.forecast(&history, 1)[0], last, true),
            None => (last, last, false),
        });
    }
}
