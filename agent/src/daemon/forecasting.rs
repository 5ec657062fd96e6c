//! The task-volume forecast on a running agent: once per interval, the arrival counts its
//! ledger keeps ([`tapfinger::ledger::Ledger::arrival_counts`]; every agent counts the same
//! series) go to [`tapfinger::forecast::outlook::outlook`] on a blocking thread (fitting trains a
//! small GRU), and the latest outlook is shown in `GET /v1/node` and `/metrics` and carried by
//! the node's views (an RLPTO model reads the next intervals from them).

use tapfinger::forecast::outlook::{Outlook, outlook};
use tapfinger::node::NodeCore;

/// Intervals ahead the outlook covers.
pub(super) const HORIZON: usize = 6;
/// Intervals of history a fit reads at most.
pub(super) const HISTORY: usize = 500;

/// The forecast's state in the loop.
#[derive(Debug, Default)]
pub(super) struct Forecasting {
    /// Slots per interval (0: no forecast).
    interval_slots: u64,
    /// The interval the last fit was started in.
    at: Option<u64>,
    /// A fit under way.
    running: Option<tokio::task::JoinHandle<Outlook>>,
    /// The latest outlook.
    latest: Option<Outlook>,
}

impl Forecasting {
    /// Forecast per interval of `interval_slots` slots (0: never).
    pub(super) fn new(interval_slots: u64) -> Self {
        Self {
            interval_slots,
            ..Self::default()
        }
    }

    /// After a step: take a finished fit's outlook; the node's views carry its first
    /// intervals from then on (what an RLPTO model reads).
    pub(super) async fn collect(&mut self, core: &mut NodeCore) {
        if self.running.as_ref().is_some_and(|h| h.is_finished())
            && let Some(h) = self.running.take()
        {
            match h.await {
                Ok(o) => {
                    core.set_forecast(
                        o.next
                            .iter()
                            .take(tapfinger::graph::FORECAST_AHEAD)
                            .copied()
                            .collect(),
                    );
                    self.latest = Some(o);
                }
                Err(e) => tracing::warn!(error = %e, "the forecast's fit failed"),
            }
        }
    }

    /// Then: start a fit once a new interval has begun (and none is under way).
    pub(super) fn start(&mut self, core: &NodeCore) {
        if self.interval_slots == 0 {
            return;
        }
        let slot = core.slot();
        let interval = slot / self.interval_slots;
        if self.running.is_some() || self.at == Some(interval) {
            return;
        }
        self.at = Some(interval);
        let history = core
            .tasks()
            .arrival_counts(self.interval_slots, slot, HISTORY);
        let every = self.interval_slots;
        self.running = Some(tokio::task::spawn_blocking(move || {
            outlook(&history, every, HORIZON, interval)
        }));
    }

    /// The latest outlook, if one was made.
    pub(super) fn latest(&self) -> Option<&Outlook> {
        self.latest.as_ref()
    }
}
