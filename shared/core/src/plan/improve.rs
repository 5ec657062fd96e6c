//! Local search on a plan: move a run of consecutive layers onto one resource type while that
//! lowers the cost and the plan stays feasible (target, links, unit limits). The learned planner
//! finishes its best draw with it; any planner's plan can be passed in.
//!
//! Why segment moves and not single layers: a stage's cost is its provisioned units, so moving
//! one layer out of a stage usually opens a new stage (more units, a link to cross) and costs
//! more, while moving a whole run of layers merges or splits stages at once. Every move is
//! costed by [`Problem::evaluate`], the one judge of every planner. The search is bounded (at most
//! [`MAX_MOVES`] accepted moves, each the best of its pass), so it ends on any chain; it finds a
//! local optimum, not the exact one ([`super::exact`] does that).

use super::{Plan, Problem};

/// Accepted moves at most (each strictly lowers the cost, so the search ends anyway; this bounds
/// its time on long chains).
pub const MAX_MOVES: usize = 64;

/// Relative cost decrease a move must bring to be taken (float noise is no improvement).
const GAIN: f64 = 1e-9;

/// `plan` after best-improvement segment moves: each pass tries every run of layers `i..=j` on
/// every type, takes the cheapest feasible result if it is cheaper than the plan, and stops when
/// no move helps. The plan keeps its planner's name.
pub fn improve(p: &Problem, plan: Plan) -> Plan {
    let mut best = plan;
    let n = best.assign.len();
    for _ in 0..MAX_MOVES {
        let mut found: Option<Plan> = None;
        for i in 0..n {
            for j in i..n {
                for r in 0..p.types() {
                    if best.assign[i..=j].iter().all(|&a| a == r) {
                        continue;
                    }
                    let mut assign = best.assign.clone();
                    assign[i..=j].fill(r);
                    let Ok(q) = p.evaluate(&assign, best.planner) else {
                        continue;
                    };
                    let bar = found.as_ref().map_or(best.cost, |f| f.cost);
                    if q.cost < bar * (1.0 - GAIN) {
                        found = Some(q);
                    }
                }
            }
        }
        match found {
            Some(q) => best = q,
            None => break,
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{exact, random, simple};

    #[test]
    fn the_search_never_makes_a_plan_worse_or_infeasible_and_reaches_a_local_optimum() {
        for seed in 0..40 {
            let (job, prices) = random::chain(seed, seed % 2 == 0);
            let p = Problem::new(job, prices).unwrap();
            let Ok(start) = simple::greedy(&p) else {
                continue;
            };
            let out = improve(&p, start.clone());
            assert!(out.cost <= start.cost, "seed {seed}");
            // Feasible: the judge agrees with the plan it returns.
            assert_eq!(p.evaluate(&out.assign, out.planner).unwrap(), out);
            // Never below the optimum.
            if let Ok(opt) = exact::plan(&p) {
                assert!(out.cost >= opt.cost * (1.0 - 1e-9), "seed {seed}");
            }
            // A fixed point: running it again changes nothing.
            assert_eq!(improve(&p, out.clone()), out, "seed {seed}");
        }
    }

    #[test]
    fn the_exact_plan_is_a_fixed_point_and_greedy_plans_get_cheaper() {
        // From the exact plan of a chain the search stays put; from the greedy one on the same
        // chains it closes at least part of the gap somewhere.
        let mut closed = 0;
        for seed in 0..40 {
            let (job, prices) = random::chain(seed, false);
            let p = Problem::new(job, prices).unwrap();
            let opt = exact::plan(&p).unwrap();
            assert_eq!(improve(&p, opt.clone()).cost, opt.cost, "seed {seed}");
            if let Ok(g) = simple::greedy(&p)
                && improve(&p, g.clone()).cost < g.cost
            {
                closed += 1;
            }
        }
        assert!(closed > 0, "the search improved no greedy plan");
    }
}
