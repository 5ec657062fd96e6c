//! A Prometheus registry of one's own (never the process-global recorder: tests and benches run
//! many agents in one process), through the `metrics` facade and its Prometheus exporter.

use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

/// A registry of its own, rendered on demand.
#[derive(Debug)]
pub struct Registry {
    /// Records this registry's metrics.
    recorder: PrometheusRecorder,
    /// Renders them as Prometheus text.
    handle: PrometheusHandle,
}

impl Registry {
    /// A registry whose histograms `(name, bucket upper bounds)` render as Prometheus histograms.
    pub fn new(histograms: &[(&str, &[f64])]) -> Self {
        let mut b = PrometheusBuilder::new();
        // The exporter refuses only an empty bucket list (that metric then renders as a summary).
        for (name, buckets) in histograms.iter().filter(|(_, b)| !b.is_empty()) {
            b = match b.set_buckets_for_metric(Matcher::Full((*name).to_string()), buckets) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(metric = name, error = %e, "histogram buckets refused");
                    PrometheusBuilder::new()
                }
            };
        }
        let recorder = b.build_recorder();
        let handle = recorder.handle();
        Self { recorder, handle }
    }

    /// Record into this registry: the `metrics` macros inside `f` go here.
    pub fn with<R>(&self, f: impl FnOnce() -> R) -> R {
        metrics::with_local_recorder(&self.recorder, f)
    }

    /// The Prometheus text.
    pub fn render(&self) -> String {
        self.handle.render()
    }
}
