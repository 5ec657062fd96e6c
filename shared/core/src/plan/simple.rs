//! The simple plans the exact and learned planners are measured against: every layer on one CPU
//! type, every layer on one GPU type, and greedy (each layer on the type where one batch of it
//! costs least), each provisioned the same way ([`Problem::evaluate`]).

use super::{Kind, Plan, PlanError, Problem};

/// Every layer on one type of `kind`: the cheapest such plan that meets the target.
fn single_kind(p: &Problem, kind: Kind, planner: &'static str) -> Result<Plan, PlanError> {
    let mut best: Option<Plan> = None;
    let mut why = None;
    for r in (0..p.types()).filter(|&r| p.prices.resources[r].kind == kind) {
        match p.evaluate(&vec![r; p.layers()], planner) {
            Ok(plan) => {
                if best.as_ref().is_none_or(|b| plan.cost < b.cost) {
                    best = Some(plan);
                }
            }
            Err(e) => why = why.or(Some(e)),
        }
    }
    best.ok_or_else(|| {
        why.unwrap_or(PlanError::Infeasible {
            planner,
            why: format!("has no {kind:?} type in the price list"),
        })
    })
}

/// Every layer on the CPU type that does it cheapest.
pub fn cpu_only(p: &Problem) -> Result<Plan, PlanError> {
    single_kind(p, Kind::Cpu, "cpu-only")
}

/// Every layer on the GPU type that does it cheapest.
pub fn gpu_only(p: &Problem) -> Result<Plan, PlanError> {
    single_kind(p, Kind::Gpu, "gpu-only")
}

/// Each layer on the type where one batch of it costs least on one unit (price × time), blind
/// to stages, scaling overheads, links and limits.
pub fn greedy(p: &Problem) -> Result<Plan, PlanError> {
    let assign: Vec<usize> = (0..p.layers())
        .map(|l| {
            (0..p.types())
                .filter_map(|r| p.time(l, r).map(|t| (r, t * p.prices.resources[r].price)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map_or(0, |(r, _)| r)
        })
        .collect();
    p.evaluate(&assign, "greedy")
}
