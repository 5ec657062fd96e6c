//! The multi-node parts of a spec: a `[gang]` (workers and parameter servers) or a
//! `[pipeline]` (a layer chain the exact HeterPS planner provisions at least cost), each turned
//! into a [`GangShape`] and refused at submit when it can never run: more than the eligible
//! boxes hold in all, the total but not the boxes, or a throughput target no plan meets.

use super::{Placement, SpecError, TaskSpec, Units, err, err_boxes, kind_names};
use crate::placement::gang::GangShape;
use crate::resources::{ResourceSpace, Resources};
use crate::task::{NodeId, Task, TaskId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The `[gang]` table of a spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GangSpec {
    /// Workers: a count (`workers = 4`) or a range (`workers = [2, 8]`, as many as fit).
    pub workers: WorkerCount,
    /// Parameter servers (all on one box, the host of rank 0); at least 1.
    #[serde(default = "one_ps")]
    pub ps: i64,
    /// Units per resource kind one worker holds.
    pub worker_demand: BTreeMap<String, f64>,
    /// Units per resource kind one parameter server holds.
    pub ps_demand: BTreeMap<String, f64>,
    /// Seconds of compute per iteration of one worker (for placement; default 1).
    #[serde(default = "one_second")]
    pub compute_seconds: f64,
    /// Megabytes of gradients a worker exchanges with the PS per iteration (for placement: a
    /// worker away from the PS host is slower by this over the link; default 100).
    #[serde(default = "hundred_mb")]
    pub gradient_mb: f64,
    /// Times the gang is put back in the queue when a member fails (all members are stopped
    /// and it is placed again), before it is failed (default 3). Every start counts, also one
    /// after a box hosting a member went silent (which puts the gang back in any case).
    #[serde(default = "three")]
    pub restarts: i64,
}

/// A worker count: at least the first, at most the second. Written as a number (`4`: exactly
/// four) or a range (`[2, 8]`) in TOML and JSON; always as the pair on the wire, whose binary
/// format cannot tell a number from a list by looking.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkerCount(pub i64, pub i64);

impl Serialize for WorkerCount {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() && self.0 == self.1 {
            s.serialize_i64(self.0)
        } else {
            [self.0, self.1].serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for WorkerCount {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Fixed(i64),
            Range([i64; 2]),
        }
        if !d.is_human_readable() {
            let [a, b] = <[i64; 2]>::deserialize(d)?;
            return Ok(WorkerCount(a, b));
        }
        Ok(match Written::deserialize(d)? {
            Written::Fixed(n) => WorkerCount(n, n),
            Written::Range([a, b]) => WorkerCount(a, b),
        })
    }
}

fn one_ps() -> i64 {
    1
}
fn one_second() -> f64 {
    1.0
}
fn hundred_mb() -> f64 {
    100.0
}
pub(super) fn three() -> i64 {
    3
}

/// The `[pipeline]` table of a spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineSpec {
    /// Batches to train.
    pub batches: f64,
    /// Target, batches per second.
    pub throughput: f64,
    /// Bytes per second between two stages (default: 1 Gbit/s).
    #[serde(default = "edge_link")]
    pub link_bandwidth: f64,
    /// Price of one unit-hour per resource kind (`cpu`, `gpu`); a kind not priced is not used.
    pub prices: BTreeMap<String, f64>,
    /// The layers, input first: `time` per batch on one unit of each kind (`cpu`, `gpu`).
    #[serde(rename = "layer")]
    pub layers: Vec<crate::plan::Layer>,
    /// Requeues after a member fails (as [`GangSpec::restarts`]).
    #[serde(default = "three")]
    pub restarts: i64,
}

fn edge_link() -> f64 {
    1.25e8
}

impl TaskSpec {
    /// [`TaskSpec::validate`] of a gang: its shape, refused if it could never run on the
    /// eligible nodes (with why: more than the whole cluster, or the total but not the boxes).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn validate_gang(
        &self,
        g: &GangSpec,
        space: &ResourceSpace,
        types: &[String],
        nodes: &[Placement<'_>],
        id: TaskId,
        arrival: u64,
        units: &Units<'_>,
    ) -> Result<Task, SpecError> {
        if !self.min_demand.is_empty() || !self.max_demand.is_empty() {
            return Err(err(
                "min_demand",
                "a gang gives its demand per member, in gang.worker_demand and gang.ps_demand",
            ));
        }
        let WorkerCount(lo, hi) = g.workers;
        let max = crate::protocol::gang::MAX_MEMBERS as i64;
        if lo < 1 || hi < lo || hi + g.ps > max {
            return Err(err(
                "gang.workers",
                format!(
                    "{lo}..={hi} workers with {} PS: from 1 worker, at most {max} members in all",
                    g.ps
                ),
            ));
        }
        if g.ps < 1 {
            return Err(err("gang.ps", "at least one parameter server"));
        }
        for (f, x) in [
            ("gang.compute_seconds", g.compute_seconds),
            ("gang.gradient_mb", g.gradient_mb),
        ] {
            if !(x.is_finite() && x >= 0.0) || (f == "gang.compute_seconds" && x == 0.0) {
                return Err(err(f, format!("must be a positive number, got {x}")));
            }
        }
        let shape = crate::placement::gang::GangShape {
            workers: (lo as u32, hi as u32),
            ps: g.ps as u32,
            worker_demand: units("gang.worker_demand", &g.worker_demand)?,
            ps_demand: units("gang.ps_demand", &g.ps_demand)?,
            compute_seconds: g.compute_seconds,
            gradient_bytes: g.gradient_mb * 1e6,
            restarts: u32::try_from(g.restarts).map_err(|_| {
                err(
                    "gang.restarts",
                    format!("must be 0 or more, got {}", g.restarts),
                )
            })?,
            stages: Vec::new(),
        };
        for (f, d) in [
            ("gang.worker_demand", &shape.worker_demand),
            ("gang.ps_demand", &shape.ps_demand),
        ] {
            if d.is_zero() {
                return Err(err(
                    f,
                    format!(
                        "at least one kind must be positive (kinds: {})",
                        kind_names(space).join(", ")
                    ),
                ));
            }
            // Members take whole devices: a gang's ranks are not MPS clients.
            if let Some((g, per)) = super::gpu_share::units_per_device(space)
                && !d.get(g).is_multiple_of(per)
            {
                return Err(err(
                    format!("{f}.gpu"),
                    "a gang's members take whole GPUs, not fractions",
                ));
            }
        }
        self.gang_task(shape, types, nodes, id, arrival)
    }

    /// The task of a gang `shape`, refused if it can never run on the eligible nodes.
    pub(super) fn gang_task(
        &self,
        shape: crate::placement::gang::GangShape,
        types: &[String],
        nodes: &[Placement<'_>],
        id: TaskId,
        arrival: u64,
    ) -> Result<Task, SpecError> {
        let field = if shape.stages.is_empty() {
            "gang"
        } else {
            "pipeline"
        };
        let eligible = self.eligible(nodes);
        if eligible.is_empty() {
            return Err(err_boxes(
                "require_labels",
                "no node carries all the required labels (and is among `nodes`)",
            ));
        }
        let caps: Vec<Resources> = eligible.iter().map(|n| n.capacity.clone()).collect();
        if let Some(why) = shape.never_fits(&caps, crate::placement::gang::Links::EDGE) {
            return Err(err_boxes(
                field,
                format!("can never run on the {} eligible nodes: {why}", caps.len()),
            ));
        }
        let mut reachable: Vec<NodeId> = eligible.iter().map(|n| n.id).collect();
        reachable.sort();
        Ok(Task {
            id,
            ty: self.type_id(types),
            min_demand: shape.stages.first().unwrap_or(&shape.worker_demand).clone(),
            max_demand: None,
            priority: self.class()?,
            reachable,
            arrival,
            gang: Some(Box::new(shape)),
        })
    }

    /// The exact plan of a pipeline on the eligible boxes, as a gang shape: one member per
    /// stage, holding the stage's units of its kind (split over several members where a stage
    /// needs more than the largest box has).
    pub(super) fn plan_pipeline(
        &self,
        p: &PipelineSpec,
        space: &ResourceSpace,
        nodes: &[Placement<'_>],
    ) -> Result<GangShape, SpecError> {
        if !self.min_demand.is_empty() || !self.max_demand.is_empty() {
            return Err(err(
                "min_demand",
                "a pipeline's demand comes from its plan; leave min_demand and max_demand out",
            ));
        }
        let names = kind_names(space);
        let eligible = self.eligible(nodes);
        let mut resources = Vec::new();
        let mut index = Vec::new();
        // Grid units per planned unit of each kind: the planner counts whole GPUs (a layer's time
        // is on a GPU), where the cluster may count quarters.
        let per = |k: usize| match super::gpu_share::units_per_device(space) {
            Some((g, per)) if g == k => per,
            _ => 1,
        };
        for (kind, price) in &p.prices {
            let Some(k) = names.iter().position(|n| n == kind) else {
                return Err(err(
                    format!("pipeline.prices.{kind}"),
                    format!(
                        "unknown resource kind; this cluster has {}",
                        names.join(", ")
                    ),
                ));
            };
            let plan_kind = match kind.as_str() {
                "cpu" => crate::plan::Kind::Cpu,
                "gpu" => crate::plan::Kind::Gpu,
                _ => {
                    return Err(err(
                        format!("pipeline.prices.{kind}"),
                        "a pipeline's layers run on `cpu` or `gpu`",
                    ));
                }
            };
            let units: u64 = eligible
                .iter()
                .map(|n| u64::from(n.capacity.get(k) / per(k)))
                .sum();
            resources.push(crate::plan::ResourceType {
                name: kind.clone(),
                kind: plan_kind,
                price: *price,
                units: Some(u32::try_from(units).unwrap_or(u32::MAX)),
                scaling: 0.05,
            });
            index.push(k);
        }
        let job = crate::plan::Job {
            name: self.name.clone(),
            batches: p.batches,
            throughput: p.throughput,
            // A kind not priced is not used: its times are dropped.
            layers: p
                .layers
                .iter()
                .map(|l| crate::plan::Layer {
                    time: l
                        .time
                        .iter()
                        .filter(|(k, _)| p.prices.contains_key(*k))
                        .map(|(k, t)| (k.clone(), *t))
                        .collect(),
                    ..l.clone()
                })
                .collect(),
        };
        let prices = crate::plan::Prices {
            link_bandwidth: p.link_bandwidth,
            resources,
        };
        let problem =
            crate::plan::Problem::new(job, prices).map_err(|e| err("pipeline", e.to_string()))?;
        let plan = crate::plan::exact::plan(&problem).map_err(|e| match e {
            crate::plan::PlanError::Unreachable { .. } => err_boxes(
                "pipeline.throughput",
                format!("{e}, on the {} eligible boxes", eligible.len()),
            ),
            other => err("pipeline", other.to_string()),
        })?;
        let mut stages = Vec::new();
        for s in &plan.stages {
            let r = problem
                .prices
                .resources
                .iter()
                .position(|t| t.name == s.resource)
                .ok_or_else(|| {
                    err(
                        "pipeline",
                        format!("plan names unknown type {}", s.resource),
                    )
                })?;
            let k = index[r];
            let largest = eligible
                .iter()
                .map(|n| n.capacity.get(k) / per(k))
                .max()
                .unwrap_or(0)
                .max(1);
            let mut left = s.units;
            while left > 0 {
                let take = left.min(largest);
                let mut m = Resources::zeros(names.len());
                m.0[k] = take * per(k);
                stages.push(m);
                left -= take;
            }
        }
        let n = stages.len() as u32;
        Ok(GangShape {
            workers: (n, n),
            ps: 0,
            worker_demand: Resources::zeros(names.len()),
            ps_demand: Resources::zeros(names.len()),
            compute_seconds: 1.0,
            gradient_bytes: 0.0,
            restarts: u32::try_from(p.restarts).map_err(|_| {
                err(
                    "pipeline.restarts",
                    format!("must be 0 or more, got {}", p.restarts),
                )
            })?,
            stages,
        })
    }
}
