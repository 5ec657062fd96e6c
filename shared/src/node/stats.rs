//! What a node counts about its own negotiation (rounds, claims, conflicts, messages, round
//! latency), for metrics and benchmarks. Counting only: nothing here decides anything.

use std::collections::BTreeMap;

/// Upper bounds (ms) of the round-latency histogram buckets (the last bucket is unbounded).
pub const LATENCY_BUCKETS_MS: [u64; 20] = [
    1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100, 150, 200, 300, 500, 700, 1000, 2000, 5000,
];

/// What a node counts about its own negotiation (for metrics and benchmarks). Counters only
/// grow; a histogram keeps round latency without keeping every sample.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NodeStats {
    /// Rounds decided here.
    pub rounds: u64,
    /// Claims this node made (proposals that were not a pass).
    pub claims: u64,
    /// Claims of this node that lost to another agent's.
    pub claims_lost: u64,
    /// Tasks claimed by more than one agent, summed over rounds.
    pub conflicts: u64,
    /// Members whose proposal was missing at a round's deadline, summed over rounds.
    pub missing: u64,
    /// Messages this node broadcast, by kind (`heartbeat`, `protocol`, ...).
    pub sent: BTreeMap<String, u64>,
    /// Messages received from peers.
    pub received: u64,
    /// Round latency: from this node's proposal to the round's decision here. Counts per bucket
    /// of [`LATENCY_BUCKETS_MS`] plus one overflow bucket.
    pub latency_buckets: Vec<u64>,
    /// Sum of the latencies (ms).
    pub latency_sum_ms: u64,
    /// Copies of tasks this node stopped because another copy won (higher epoch, an outcome).
    #[serde(default)]
    pub copies_stopped: u64,
    /// Copies this node stopped because its lease lapsed (cut off longer than the autonomy time).
    #[serde(default)]
    pub lease_stops: u64,
    /// Announcements refused: a task id known with another task.
    #[serde(default)]
    pub refused_announces: u64,
    /// Rounds whose commits were not started because some member's proposal was missing.
    #[serde(default)]
    pub rounds_held_back: u64,
}

impl NodeStats {
    pub(super) fn observe_latency(&mut self, ms: u64) {
        if self.latency_buckets.is_empty() {
            self.latency_buckets = vec![0; LATENCY_BUCKETS_MS.len() + 1];
        }
        let i = LATENCY_BUCKETS_MS
            .iter()
            .position(|b| ms <= *b)
            .unwrap_or(LATENCY_BUCKETS_MS.len());
        self.latency_buckets[i] += 1;
        self.latency_sum_ms += ms;
    }

    /// Total messages sent.
    pub fn sent_total(&self) -> u64 {
        self.sent.values().sum()
    }

    /// Add another node's counters to these (for cluster-wide figures).
    pub fn merge(&mut self, o: &NodeStats) {
        self.rounds += o.rounds;
        self.claims += o.claims;
        self.claims_lost += o.claims_lost;
        self.conflicts += o.conflicts;
        self.missing += o.missing;
        for (k, v) in &o.sent {
            *self.sent.entry(k.clone()).or_default() += v;
        }
        self.received += o.received;
        if self.latency_buckets.len() < o.latency_buckets.len() {
            self.latency_buckets.resize(o.latency_buckets.len(), 0);
        }
        for (a, b) in self.latency_buckets.iter_mut().zip(&o.latency_buckets) {
            *a += b;
        }
        self.latency_sum_ms += o.latency_sum_ms;
        self.copies_stopped += o.copies_stopped;
        self.lease_stops += o.lease_stops;
        self.refused_announces += o.refused_announces;
        self.rounds_held_back += o.rounds_held_back;
    }

    /// The `q`-quantile of round latency (ms), interpolated linearly inside its bucket as
    /// Prometheus' `histogram_quantile` does; None without samples. The overflow bucket
    /// reports its lower bound.
    pub fn latency_quantile(&self, q: f64) -> Option<f64> {
        let total: u64 = self.latency_buckets.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total as f64;
        let mut seen = 0u64;
        for (i, c) in self.latency_buckets.iter().enumerate() {
            if *c > 0 && (seen + c) as f64 >= rank {
                let lo = if i == 0 { 0 } else { LATENCY_BUCKETS_MS[i - 1] } as f64;
                let Some(hi) = LATENCY_BUCKETS_MS.get(i) else {
                    return Some(lo);
                };
                let frac = (rank - seen as f64) / *c as f64;
                return Some(lo + (*hi as f64 - lo) * frac.clamp(0.0, 1.0));
            }
            seen += c;
        }
        None
    }
}
