//! What an agent publishes in the Prometheus text format (`/metrics`): [`AgentMetrics`], in a
//! [`Registry`] of its own, updated by the event loop after every step from the status it
//! publishes anyway, with a real round-latency histogram.

use crate::status::Status;
use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use tapfinger::node::TaskState;

pub use tapfinger_net::metrics::Registry;

/// Upper bounds (ms) of the round-latency histogram's buckets.
pub const ROUND_LATENCY_BUCKETS_MS: [f64; 20] = [
    1.0, 2.0, 3.0, 5.0, 7.0, 10.0, 15.0, 20.0, 30.0, 50.0, 70.0, 100.0, 150.0, 200.0, 300.0, 500.0,
    700.0, 1000.0, 2000.0, 5000.0,
];

/// Name of the round-latency histogram.
pub const ROUND_LATENCY: &str = "tapfinger_round_latency_ms";
/// Name of the queue-wait histogram.
pub const QUEUE_WAIT: &str = "tapfinger_queue_wait_ms";
/// Name of the admission-latency histogram.
pub const ADMISSION_LATENCY: &str = "tapfinger_admission_latency_ms";

/// Upper bounds (ms) of the queue-wait histogram's buckets (waits are whole slots: seconds to
/// hours).
pub const QUEUE_WAIT_BUCKETS_MS: [f64; 12] = [
    0.0, 1e3, 5e3, 1e4, 3e4, 6e4, 3e5, 6e5, 1.8e6, 3.6e6, 1.08e7, 3.6e7,
];

/// The gauges an agent publishes, each with its description.
const GAUGES: &[(&str, &str)] = &[
    (
        "tapfinger_storage_full",
        "1 while this agent's journal cannot be written (submissions refused with 507/503), else 0.",
    ),
    (
        "tapfinger_storage_backlog_records",
        "Records (outcomes, ends, preemptions) kept in memory until the journal takes writes.",
    ),
    ("tapfinger_tasks", "Tasks this agent knows, by state."),
    (
        "tapfinger_tasks_by_class",
        "Tasks this agent knows, by state and class (the spec's `type`; empty: none).",
    ),
    (
        "tapfinger_box_info",
        "1, labelled with this box's name (join on it to name the box of every series).",
    ),
    (
        "tapfinger_allocated_units",
        "Units allocated on this node, by resource kind index.",
    ),
    (
        "tapfinger_capacity_units",
        "Units this node offers, by resource kind index.",
    ),
    ("tapfinger_peers", "Live peers."),
    (
        "tapfinger_tasks_gpu_sm_percent",
        "SM utilization of the GPU processes of the tasks running here, summed (percent of one device; NVML). Per task: `show` and the dashboard.",
    ),
    (
        "tapfinger_tasks_gpu_memory_bytes",
        "Device memory held by the GPU processes of the tasks running here, summed (NVML).",
    ),
    (
        "tapfinger_tasks_on_gpus",
        "Tasks running here with a process on a GPU (NVML).",
    ),
    (
        "tapfinger_tasks_converging",
        "Tasks running here whose reported loss (or accuracy) has plateaued.",
    ),
    (
        "tapfinger_forecast_arrivals",
        "Expected task arrivals (cluster-wide) in the interval `ahead` intervals from now (RLPTO's forecast).",
    ),
    (
        "tapfinger_class_samples",
        "Speed samples the estimator holds of a task class (observed slots and profile hints).",
    ),
    (
        "tapfinger_class_slots_at_min",
        "Estimated slots a task of the class takes alone at its minimum demand.",
    ),
    (
        "tapfinger_class_switch_cost",
        "Fraction of a slot a re-allocation costs the class, as measured.",
    ),
    (
        "tapfinger_class_start_cost",
        "Fraction of its first slot a run's start-up costs the class, as measured.",
    ),
    (
        "tapfinger_work_lost",
        "Work the tasks preempted here lost (progress since their last checkpoint, in whole runs).",
    ),
    (
        "tapfinger_queue_length",
        "Pending tasks in the cluster, by priority class.",
    ),
    (
        "tapfinger_policy_version",
        "Policy version in use (0: the start model).",
    ),
    (
        "tapfinger_policy_guard",
        "1 for the policy the coordinator's guard has the cluster run (label policy), 0 for the others.",
    ),
    (
        "tapfinger_policy_refused",
        "Policy announcements or checkpoints refused.",
    ),
    (
        "tapfinger_experience_batches_shipped",
        "Experience batches acknowledged by the coordinator.",
    ),
    (
        "tapfinger_experience_batches_waiting",
        "Experience batches waiting on disk.",
    ),
    (
        "tapfinger_experience_batches_dropped",
        "Experience batches dropped because the spool was full.",
    ),
];

/// The counters an agent publishes, each with its description.
const COUNTERS: &[(&str, &str)] = &[
    (
        "tapfinger_messages_taken_total",
        "Messages from peers taken, by path: direct (from a connected author) or relayed by gossip.",
    ),
    (
        "tapfinger_message_copies_total",
        "Copies of messages already taken (a message that came both ways).",
    ),
    (
        "tapfinger_frames_dropped_slow_peer_total",
        "Frames not sent to a peer whose queue was full (it did not keep up).",
    ),
    (
        "tapfinger_messages_gossiped_total",
        "Messages this agent also sent by gossip (to reach agents it is not connected to).",
    ),
    (
        "tapfinger_dropped_messages_total",
        "Malformed or spoofed messages dropped.",
    ),
    (
        "tapfinger_refused_peers_total",
        "Connections and requests refused from peers off the allowlist.",
    ),
    (
        "tapfinger_finished_here_total",
        "Tasks run to completion on this node.",
    ),
    ("tapfinger_rounds_total", "Negotiation rounds decided."),
    (
        "tapfinger_preempted_total",
        "Tasks this node preempted for a higher priority class.",
    ),
    (
        "tapfinger_requeued_total",
        "Tasks sent back to the queue, by reason (this node's ledger: its own and its peers').",
    ),
    ("tapfinger_claims_total", "Claims this agent made."),
    (
        "tapfinger_claims_lost_total",
        "Claims of this agent that lost a conflict.",
    ),
    (
        "tapfinger_conflicts_total",
        "Tasks claimed by more than one agent in a round.",
    ),
    (
        "tapfinger_missing_proposals_total",
        "Peers whose proposal missed a round deadline.",
    ),
    (
        "tapfinger_rounds_held_back_total",
        "Rounds with a win not started: a proposal missing, or members' sets differed.",
    ),
    (
        "tapfinger_rounds_sets_differ_total",
        "Rounds decided over differing member sets: only owners' tasks started.",
    ),
    (
        "tapfinger_messages_received_total",
        "Messages received from peers.",
    ),
    (
        "tapfinger_resizes_total",
        "Shares of tasks running here changed by an elastic re-share.",
    ),
    (
        "tapfinger_reshares_refused_total",
        "Re-shares of this agent's policy refused as out of bounds (a policy bug).",
    ),
    (
        "tapfinger_messages_sent_total",
        "Messages this agent broadcast, by kind.",
    ),
];

/// What an agent publishes.
#[derive(Debug)]
pub struct AgentMetrics {
    /// The agent's own registry (never the process-global one: tests run several agents).
    registry: Registry,
    /// Priority classes whose queue length was ever published.
    classes: std::sync::Mutex<std::collections::BTreeSet<u8>>,
    /// (state, task class) pairs ever published.
    by_class: std::sync::Mutex<std::collections::BTreeSet<(&'static str, String)>>,
}

impl Default for AgentMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl AgentMetrics {
    /// A fresh registry with every metric described.
    pub fn new() -> Self {
        let registry = Registry::new(&[
            (ROUND_LATENCY, &ROUND_LATENCY_BUCKETS_MS),
            (ADMISSION_LATENCY, &ROUND_LATENCY_BUCKETS_MS),
            (QUEUE_WAIT, &QUEUE_WAIT_BUCKETS_MS),
        ]);
        registry.with(|| {
            for (name, what) in GAUGES {
                describe_gauge!(*name, *what);
            }
            for (name, what) in COUNTERS {
                describe_counter!(*name, *what);
            }
            describe_histogram!(
                ROUND_LATENCY,
                metrics::Unit::Milliseconds,
                "From this agent's proposal to the round's decision."
            );
            describe_histogram!(
                QUEUE_WAIT,
                metrics::Unit::Milliseconds,
                "How long tasks started here waited, from submission (whole slots)."
            );
            describe_histogram!(
                ADMISSION_LATENCY,
                metrics::Unit::Milliseconds,
                "From a submission's arrival at the API to its answer (validated and journaled)."
            );
        });
        Self {
            registry,
            classes: Default::default(),
            by_class: Default::default(),
        }
    }

    /// After a step: the status as published, and the round latencies observed since the last
    /// step (ms).
    pub fn update(&self, st: &Status, latencies: &[u64]) {
        self.registry.with(|| {
            let (mut pending, mut running, mut done) = (0u32, 0u32, 0u32);
            for t in st.tasks.values() {
                match t {
                    TaskState::Pending => pending += 1,
                    TaskState::Running { .. } | TaskState::Gang { .. } => running += 1,
                    TaskState::Done { .. } => done += 1,
                }
            }
            for (state, n) in [("pending", pending), ("running", running), ("done", done)] {
                gauge!("tapfinger_tasks", "state" => state).set(n);
            }
            gauge!("tapfinger_box_info", "box" => st.name.clone()).set(1.0);
            // By task class (a cluster runs few): pairs seen before and now empty read 0.
            let mut counts: std::collections::BTreeMap<(&'static str, String), u32> =
                Default::default();
            for (id, t) in &st.tasks {
                let state = match t {
                    TaskState::Pending => "pending",
                    TaskState::Running { .. } | TaskState::Gang { .. } => "running",
                    TaskState::Done { .. } => "done",
                };
                let class = st
                    .names
                    .get(id)
                    .map(|n| n.class.clone())
                    .unwrap_or_default();
                *counts.entry((state, class)).or_default() += 1;
            }
            let seen = self
                .by_class
                .lock()
                .map(|mut s| {
                    s.extend(counts.keys().cloned());
                    s.clone()
                })
                .unwrap_or_default();
            for (state, class) in seen {
                let n = counts.get(&(state, class.clone())).copied().unwrap_or(0);
                gauge!("tapfinger_tasks_by_class", "state" => state, "class" => class).set(n);
            }
            if let (Some(used), Some(cap)) = (&st.used, &st.capacity) {
                for k in 0..cap.len() {
                    let kind = k.to_string();
                    gauge!("tapfinger_allocated_units", "kind" => kind.clone()).set(used.get(k));
                    gauge!("tapfinger_capacity_units", "kind" => kind).set(cap.get(k));
                }
            }
            gauge!("tapfinger_peers").set(st.peers.len() as f64);
            if let Some(h) = &st.storage {
                gauge!("tapfinger_storage_full").set(if h.failing.is_some() { 1.0 } else { 0.0 });
                gauge!("tapfinger_storage_backlog_records").set(h.backlog as f64);
            }
            // Summed, not per task: a series per task would grow with every task ever run.
            let g = st.gpu_use.values();
            gauge!("tapfinger_tasks_gpu_sm_percent")
                .set(g.clone().map(|u| f64::from(u.sm_percent)).sum::<f64>());
            gauge!("tapfinger_tasks_gpu_memory_bytes")
                .set(g.clone().map(|u| u.memory_bytes as f64).sum::<f64>());
            gauge!("tapfinger_tasks_on_gpus").set(st.gpu_use.len() as f64);
            gauge!("tapfinger_tasks_converging")
                .set(st.reports.values().filter(|r| r.converging).count() as f64);
            let mut by_class: std::collections::BTreeMap<u8, u32> = Default::default();
            for q in &st.queue {
                *by_class.entry(q.priority).or_default() += 1;
            }
            // Classes seen before and now empty read 0, not their last length.
            for p in self
                .classes
                .lock()
                .map(|mut c| {
                    c.extend(by_class.keys());
                    c.clone()
                })
                .unwrap_or_default()
            {
                gauge!("tapfinger_queue_length", "priority" => p.to_string())
                    .set(by_class.get(&p).copied().unwrap_or(0));
            }
            counter!("tapfinger_dropped_messages_total").absolute(st.dropped);
            counter!("tapfinger_refused_peers_total").absolute(st.refused);
            let t = &st.traffic;
            for (path, n) in [("direct", t.direct), ("relayed", t.relayed)] {
                counter!("tapfinger_messages_taken_total", "path" => path).absolute(n);
            }
            counter!("tapfinger_message_copies_total").absolute(t.duplicates);
            counter!("tapfinger_frames_dropped_slow_peer_total").absolute(t.queue_full);
            counter!("tapfinger_messages_gossiped_total").absolute(t.gossip_sent);
            counter!("tapfinger_finished_here_total").absolute(st.finished_here.len() as u64);
            let n = &st.stats;
            counter!("tapfinger_rounds_total").absolute(n.rounds);
            counter!("tapfinger_preempted_total").absolute(n.preempted);
            for why in tapfinger::ledger::Requeue::ALL {
                counter!("tapfinger_requeued_total", "reason" => why.as_str())
                    .absolute(st.requeued.get(&why).copied().unwrap_or(0));
            }
            if let Some(f) = &st.forecast {
                for (i, v) in f.next.iter().enumerate() {
                    gauge!("tapfinger_forecast_arrivals", "ahead" => (i + 1).to_string()).set(*v);
                }
            }
            // Labelled by the class's name (`#ID` where no spec names it): the classes a cluster
            // runs are few, and a class once heard of stays in the estimator.
            for c in &st.estimates {
                // A class learned per GPU model has a series per model.
                let labels = || {
                    [
                        ("class", c.name.clone()),
                        ("gpu_model", c.gpu_model.clone()),
                    ]
                };
                let e = &c.estimate;
                gauge!("tapfinger_class_samples", &labels()).set(e.samples as f64);
                gauge!("tapfinger_class_slots_at_min", &labels()).set(e.slots_at_min);
                gauge!("tapfinger_class_switch_cost", &labels()).set(e.switch_cost);
                gauge!("tapfinger_class_start_cost", &labels()).set(e.start_cost);
            }
            gauge!("tapfinger_work_lost")
                .set(st.preempted.values().map(|p| p.work_lost).sum::<f64>());
            counter!("tapfinger_claims_total").absolute(n.claims);
            counter!("tapfinger_claims_lost_total").absolute(n.claims_lost);
            counter!("tapfinger_conflicts_total").absolute(n.conflicts);
            counter!("tapfinger_missing_proposals_total").absolute(n.missing);
            counter!("tapfinger_rounds_held_back_total").absolute(n.rounds_held_back);
            counter!("tapfinger_rounds_sets_differ_total").absolute(n.rounds_sets_differ);
            counter!("tapfinger_messages_received_total").absolute(n.received);
            counter!("tapfinger_resizes_total").absolute(n.resizes);
            counter!("tapfinger_reshares_refused_total").absolute(n.reshares_refused);
            for (kind, v) in &n.sent {
                counter!("tapfinger_messages_sent_total", "kind" => kind.clone()).absolute(*v);
            }
            let h = histogram!(ROUND_LATENCY);
            for ms in latencies {
                h.record(*ms as f64);
            }
            if let Some(p) = &st.policy {
                policy_gauges(p);
            }
        });
    }

    /// A task started here after waiting `ms`.
    pub fn queue_wait(&self, ms: u64) {
        self.registry
            .with(|| histogram!(QUEUE_WAIT).record(ms as f64));
    }

    /// A submission answered after `ms`.
    pub fn admission(&self, ms: f64) {
        self.registry
            .with(|| histogram!(ADMISSION_LATENCY).record(ms));
    }

    /// The Prometheus text.
    pub fn render(&self) -> String {
        self.registry.render()
    }
}

/// The online policy's gauges: its version, the guard's choice (every candidate has a series, so
/// the one that was in force reads 0 after a switch), refusals and experience batches.
fn policy_gauges(p: &crate::online::PolicyStatus) {
    use metrics::gauge;
    gauge!("tapfinger_policy_version").set(p.version as f64);
    let names = std::iter::once(tapfinger_net::guard::LEARNED).chain(
        tapfinger::baselines::Baseline::JUDGED
            .iter()
            .map(|b| b.name()),
    );
    for name in names {
        let on = p.guard_policy == name
            || (p.guard_policy.is_empty() && name == tapfinger_net::guard::LEARNED);
        gauge!("tapfinger_policy_guard", "policy" => name).set(if on { 1.0 } else { 0.0 });
    }
    gauge!("tapfinger_policy_refused").set(p.refused as f64);
    gauge!("tapfinger_experience_batches_shipped").set(p.batches_shipped as f64);
    gauge!("tapfinger_experience_batches_waiting").set(p.batches_waiting as f64);
    gauge!("tapfinger_experience_batches_dropped").set(p.batches_dropped as f64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapfinger::{NodeId, Resources, TaskId};

    #[test]
    fn the_status_and_latencies_render_as_prometheus_metrics() {
        let m = AgentMetrics::new();
        let mut st = Status {
            used: Some(Resources(vec![2, 1, 4])),
            capacity: Some(Resources(vec![8, 2, 16])),
            peers: vec![NodeId(2), NodeId(3)],
            traffic: crate::net::Traffic {
                direct: 40,
                relayed: 2,
                queue_full: 1,
                ..Default::default()
            },
            ..Status::default()
        };
        st.tasks.insert(TaskId(1), TaskState::Pending);
        st.name = "box-7".into();
        st.names.insert(
            TaskId(1),
            crate::status::TaskNames {
                name: "job1".into(),
                class: "etl".into(),
                arrival: 0,
            },
        );
        st.stats.rounds = 7;
        st.requeued.insert(tapfinger::ledger::Requeue::Preempted, 3);
        st.stats.rounds_sets_differ = 2;
        let queued = |id, priority| crate::status::Queued {
            id: TaskId(id),
            priority,
            arrival: 0,
            min_demand: Resources(vec![1, 0, 0]),
        };
        st.queue = vec![queued(1, 0), queued(2, 2), queued(3, 2)];
        st.estimates = vec![crate::status::ClassInfo {
            name: "bert".into(),
            gpu_model: "v100".into(),
            estimate: tapfinger::estimate::ClassSummary {
                class: tapfinger::TaskTypeId(1030),
                gpu_model: tapfinger::estimate::GpuModel::of("v100"),
                samples: 12,
                hints: 0,
                min: [2.0, 1.0, 1.0],
                fitted: true,
                slots_at_min: 12.5,
                slots_at_double: 9.0,
                switch_cost: 0.25,
                start_cost: 0.5,
            },
        }];
        m.update(&st, &[3, 40]);
        m.queue_wait(12_000);
        m.admission(2.5);
        let mut drained = Status {
            queue: vec![queued(1, 0)],
            ..st.clone()
        };
        drained.tasks.clear();
        m.update(&drained, &[4000]);
        let text = m.render();
        for line in [
            "tapfinger_box_info{box=\"box-7\"} 1",
            // A (state, class) pair seen before and now empty reads 0.
            "tapfinger_tasks_by_class{state=\"pending\",class=\"etl\"} 0",
            "tapfinger_allocated_units{kind=\"2\"} 4",
            "tapfinger_peers 2",
            "tapfinger_messages_taken_total{path=\"direct\"} 40",
            "tapfinger_messages_taken_total{path=\"relayed\"} 2",
            "tapfinger_frames_dropped_slow_peer_total 1",
            "tapfinger_rounds_total 7",
            "tapfinger_rounds_sets_differ_total 2",
            "tapfinger_requeued_total{reason=\"preempted\"} 3",
            // Every reason has a series, at 0 until one happens.
            "tapfinger_requeued_total{reason=\"gang_broken\"} 0",
            "tapfinger_round_latency_ms_bucket{le=\"3\"} 1",
            "tapfinger_round_latency_ms_bucket{le=\"50\"} 2",
            "tapfinger_round_latency_ms_bucket{le=\"+Inf\"} 3",
            "tapfinger_round_latency_ms_count 3",
            "# TYPE tapfinger_round_latency_ms histogram",
            // A class that emptied reads 0, not its last length.
            "tapfinger_queue_length{priority=\"0\"} 1",
            "tapfinger_queue_length{priority=\"2\"} 0",
            "tapfinger_queue_wait_ms_bucket{le=\"10000\"} 0",
            "tapfinger_queue_wait_ms_bucket{le=\"30000\"} 1",
            "tapfinger_admission_latency_ms_bucket{le=\"3\"} 1",
            "tapfinger_class_samples{class=\"bert\",gpu_model=\"v100\"} 12",
            "tapfinger_class_slots_at_min{class=\"bert\",gpu_model=\"v100\"} 12.5",
            "tapfinger_class_switch_cost{class=\"bert\",gpu_model=\"v100\"} 0.25",
            "tapfinger_class_start_cost{class=\"bert\",gpu_model=\"v100\"} 0.5",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
    }
}
