//! The cluster's workload as this agent observed it, for its twin: every task the node core
//! knows (its own and those its peers announced), fed to the shared recorder once a slot, and
//! written for a window with the speed estimator's figures and every box heard of
//! (`GET /v1/workload?since_s=N`, `tapfinger-agent workload export --since 6h`). What it holds
//! is what the protocol carried — arrivals, classes, demands, runs, outcomes, boxes — and
//! what the estimator learned from progress; never anything a task's speed is computed from.

use std::collections::BTreeMap;
use tapfinger::estimate::GPU_MODEL_LABEL;
use tapfinger::node::NodeCore;
use tapfinger::twin::{Context, NodeRecord, Recorder, Seen, Workload};
use tapfinger::{NodeId, ResourceKind, Resources};

/// The recorder and the boxes heard of (a box that left keeps its record: its tasks' runs name
/// it).
#[derive(Default)]
pub struct Observed {
    recorder: Recorder,
    boxes: BTreeMap<NodeId, NodeRecord>,
}

impl Observed {
    /// Note the tasks of the current slot and the boxes heard of.
    pub fn observe(&mut self, core: &NodeCore) {
        let labels = core.node_labels();
        let gpu_model = |id: &NodeId| {
            labels
                .get(id)
                .and_then(|l| l.get(GPU_MODEL_LABEL))
                .filter(|m| !m.trim().is_empty())
                .cloned()
        };
        let mut heard: Vec<(NodeId, String, Resources)> = core
            .peer_table()
            .into_iter()
            .map(|(id, name, cap, _)| (id, name, cap))
            .collect();
        heard.push((
            core.id(),
            core.config().name.clone(),
            core.capacity().clone(),
        ));
        for (id, name, capacity) in heard {
            self.boxes.insert(
                id,
                NodeRecord {
                    id,
                    name,
                    capacity,
                    gpu_model: gpu_model(&id),
                },
            );
        }
        let tasks = core.tasks();
        self.recorder.observe(
            core.slot(),
            tasks.values().map(|e| Seen {
                identity: &e.identity,
                task: &e.task,
                state: &e.state,
                class: &e.meta.spec.task_type,
                work: e.meta.spec.work,
            }),
        );
    }

    /// The workload of the tasks that arrived in the last `since_slots` slots.
    pub fn export(&self, core: &NodeCore, since_slots: u64) -> Workload {
        let cfg = core.config();
        let kinds = cfg
            .kind_names
            .iter()
            .enumerate()
            .map(|(k, name)| ResourceKind {
                name: name.clone(),
                unit: String::new(),
                step: cfg.steps.get(k).copied().unwrap_or(1.0),
            })
            .collect();
        let ctx = Context {
            sizes: Some(core.tasks().sizes()),
            slot_seconds: cfg.slot_ms as f64 / 1e3,
            kinds,
            nodes: self.boxes.values().cloned().collect(),
            estimator: core.tasks().estimator(),
            // The links the node core places gangs with.
            links: Some(tapfinger::placement::gang::Links::EDGE),
        };
        let to = core.slot() + 1;
        self.recorder
            .export(to.saturating_sub(since_slots), to, &ctx)
    }
}
