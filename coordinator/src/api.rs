//! The coordinator's local HTTP API: `/v1/status` (JSON) and `/metrics` (Prometheus), behind
//! an optional bearer token, both read from the state the serving loop shares ([`Shared`]).

use crate::state::Shared;
use std::sync::{Arc, Mutex};

/// The status as JSON (the API's `/v1/status`).
pub fn status_json(s: &Shared) -> serde_json::Value {
    serde_json::json!({
        "policy_version": s.state.version,
        "hash": s.state.hash,
        "published_jct": s.state.published_jct,
        "updates": s.state.updates,
        "decisions_received": s.state.received,
        "decisions_received_since_start": s.received_live,
        "critic_loss": s.state.critic_loss,
        "critic_rounds_assembled": s.state.rounds_assembled,
        "critic_rounds_merged": s.state.rounds_merged,
        "critic_reports_per_round": s.state.reports_per_round,
        "policy_loss": s.state.policy_loss,
        "candidates_refused": s.state.refused,
        "last_evaluation": s.state.last_evaluation,
        "inbox_batches": s.inbox_batches,
        "inbox_dropped": s.inbox_dropped,
        "refused": s.refused,
        "learning": {
            "alive": s.learning.alive,
            "set_aside": s.learning.set_aside,
            "last_set_aside": s.learning.last_set_aside,
            "stopped": s.learning.stopped,
        },
        "tunes": s.state.tunes,
        "last_tune": s.state.last_tune,
        "guard": {
            "policy": s.guard.choice.as_ref().map_or(tapfinger_net::guard::LEARNED, |c| c.policy.as_str()),
            "seq": s.guard.choice.as_ref().map_or(0, |c| c.seq),
            "reason": s.guard.choice.as_ref().map(|c| c.reason.clone()),
            "judged": s.guard.judged,
            "switches": s.guard.switches,
            "busy_share": s.guard_busy_share,
            "last": s.guard.last,
        },
    })
}

/// The coordinator's metrics (`/metrics`), in a registry of its own.
pub struct Metrics(tapfinger_net::metrics::Registry);

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every metric described.
    pub fn new() -> Self {
        use metrics::{describe_counter, describe_gauge};
        let r = tapfinger_net::metrics::Registry::new(&[]);
        r.with(|| {
            describe_gauge!(
                "tapfinger_coordinator_policy_version",
                "Published policy version."
            );
            describe_gauge!("tapfinger_coordinator_updates", "Training updates run.");
            describe_gauge!(
                "tapfinger_coordinator_critic_loss",
                "Value loss of the last update."
            );
            describe_gauge!(
                "tapfinger_coordinator_critic_rounds_assembled",
                "Rounds whose global state (all agents' reports merged) the critic trained on."
            );
            describe_gauge!(
                "tapfinger_coordinator_critic_reports_per_round",
                "Mean agents' reports per round in the last update."
            );
            describe_gauge!(
                "tapfinger_coordinator_published_jct",
                "Validation average JCT of the published policy (slots)."
            );
            describe_gauge!(
                "tapfinger_coordinator_candidates_refused",
                "Candidates the evaluation gate refused."
            );
            describe_gauge!(
                "tapfinger_coordinator_inbox_batches",
                "Experience batches waiting for an update."
            );
            describe_counter!(
                "tapfinger_coordinator_decisions_received",
                "Decisions received per agent."
            );
            describe_gauge!(
                "tapfinger_coordinator_guard_choice",
                "1 for the policy the guard has the cluster run (label policy), 0 for the others."
            );
            describe_gauge!(
                "tapfinger_coordinator_guard_seq",
                "Number of the guard's choice in force (grows by one per switch)."
            );
            describe_counter!(
                "tapfinger_coordinator_guard_switches_total",
                "Times the guard switched the cluster's policy."
            );
            describe_counter!(
                "tapfinger_coordinator_guard_judgements_total",
                "Workloads the guard judged."
            );
            describe_gauge!(
                "tapfinger_coordinator_guard_busy_share",
                "Share of one core the guard's judgements used since the coordinator started."
            );
            describe_gauge!(
                "tapfinger_coordinator_learning_alive",
                "1 while the learner's thread and the serving loop run (0: the process is about to exit)."
            );
            describe_counter!(
                "tapfinger_coordinator_batches_set_aside_total",
                "Experience batches set aside because an update panicked on them or they did not read."
            );
            describe_counter!(
                "tapfinger_coordinator_refused_total",
                "Connections and requests refused from peers off the allowlist, by what they tried."
            );
        });
        Self(r)
    }

    /// The Prometheus text for the state `s`.
    pub fn render(&self, s: &Shared) -> String {
        use metrics::{counter, gauge};
        self.0.with(|| {
            gauge!("tapfinger_coordinator_policy_version").set(s.state.version as f64);
            gauge!("tapfinger_coordinator_updates").set(s.state.updates as f64);
            gauge!("tapfinger_coordinator_critic_loss").set(s.state.critic_loss);
            gauge!("tapfinger_coordinator_critic_rounds_assembled")
                .set(s.state.rounds_assembled as f64);
            gauge!("tapfinger_coordinator_critic_reports_per_round").set(s.state.reports_per_round);
            gauge!("tapfinger_coordinator_published_jct").set(s.state.published_jct);
            gauge!("tapfinger_coordinator_candidates_refused").set(s.state.refused as f64);
            gauge!("tapfinger_coordinator_inbox_batches").set(s.inbox_batches as f64);
            gauge!("tapfinger_coordinator_learning_alive").set(if s.learning.alive {
                1.0
            } else {
                0.0
            });
            counter!("tapfinger_coordinator_batches_set_aside_total")
                .absolute(s.learning.set_aside);
            let (seq, policy) = s
                .guard
                .choice
                .as_ref()
                .map_or((0, tapfinger_net::guard::LEARNED), |c| {
                    (c.seq, c.policy.as_str())
                });
            // Every candidate has a series, so the one that was in force reads 0 after a switch.
            for name in tapfinger_sim::guard::candidates() {
                gauge!("tapfinger_coordinator_guard_choice", "policy" => name)
                    .set(if name == policy { 1.0 } else { 0.0 });
            }
            gauge!("tapfinger_coordinator_guard_seq").set(seq as f64);
            counter!("tapfinger_coordinator_guard_switches_total").absolute(s.guard.switches);
            counter!("tapfinger_coordinator_guard_judgements_total").absolute(s.guard.judged);
            gauge!("tapfinger_coordinator_guard_busy_share").set(s.guard_busy_share);
            for (what, n) in &s.refused {
                counter!("tapfinger_coordinator_refused_total", "what" => what.clone())
                    .absolute(*n);
            }
            for (node, n) in &s.state.received {
                counter!("tapfinger_coordinator_decisions_received", "node" => node.to_string())
                    .absolute(*n);
            }
        });
        self.0.render()
    }
}

/// Serve the HTTP API on `addr` until the process ends; with `token`, every request must carry
/// `Authorization: Bearer <token>` (compared in constant time).
pub async fn api(
    addr: &str,
    shared: Arc<Mutex<Shared>>,
    token: Option<String>,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("api: cannot bind {addr}: {e}"))?;
    axum::serve(listener, router(shared, token)).await?;
    Ok(())
}

/// The HTTP API's routes (`/v1/status`, `/metrics`) behind the token check.
pub fn router(shared: Arc<Mutex<Shared>>, token: Option<String>) -> axum::Router {
    use axum::routing::get;
    let s1 = shared.clone();
    let registry = Arc::new(Metrics::new());
    let app = axum::Router::new()
        .route(
            "/v1/status",
            get(move || {
                let s = s1.lock().map(|s| s.clone()).unwrap_or_default();
                async move { axum::Json(status_json(&s)) }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let s = shared.lock().map(|s| s.clone()).unwrap_or_default();
                let text = registry.render(&s);
                async move { text }
            }),
        );
    let token = Arc::new(token);
    app.layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            let token = token.clone();
            async move {
                use axum::response::IntoResponse;
                if let Some(t) = token.as_ref() {
                    let given = req
                        .headers()
                        .get(axum::http::header::AUTHORIZATION)
                        .and_then(|v| v.to_str().ok());
                    if !tapfinger_net::secret::bearer_matches(t, given) {
                        return (
                            axum::http::StatusCode::UNAUTHORIZED,
                            "missing or wrong bearer token",
                        )
                            .into_response();
                    }
                }
                next.run(req).await
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_renders_as_prometheus_metrics() {
        let mut s = Shared::default();
        s.state.version = 3;
        s.state.received.insert(7, 120);
        s.refused.insert("experience".into(), 2);
        let text = Metrics::new().render(&s);
        for line in [
            "# TYPE tapfinger_coordinator_policy_version gauge",
            "tapfinger_coordinator_policy_version 3",
            "tapfinger_coordinator_decisions_received{node=\"7\"} 120",
            "tapfinger_coordinator_refused_total{what=\"experience\"} 2",
            "tapfinger_coordinator_learning_alive 0",
            "tapfinger_coordinator_batches_set_aside_total 0",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
    }
}
