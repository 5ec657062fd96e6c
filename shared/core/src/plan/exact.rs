//! The exact planner: a dynamic program over the layer chain.
//!
//! A plan is a cut of the chain into stages with a type per stage (two neighbouring stages of
//! one type would be one stage). The program walks the chain: a state is "layers before `i`
//! planned, the last stage on type `p`", and a move adds a stage `[i, j)` on another type `r`,
//! provisioned with the fewest units that reach the target. Without unit limits one label per
//! state (its least cost) is enough; with limits, a cheaper prefix can use up units a later
//! stage needs, so a state keeps every label that no other beats on cost and on units used of
//! every limited type (a Pareto set). The sets stay small because only limited types count.
//! O(L² · R² · labels) stage provisionings for L layers and R types.

use super::{Plan, PlanError, Problem};

/// One partial plan: its hourly price, the units it holds of each limited type, its types.
#[derive(Debug, Clone)]
struct Label {
    /// Hourly price so far.
    cost: f64,
    /// Units held of each limited type.
    used: Vec<u32>,
    /// The type of each layer so far.
    assign: Vec<usize>,
}

impl Label {
    /// No worse on cost and on every limited type's units.
    fn dominates(&self, other: &Label) -> bool {
        self.cost <= other.cost && self.used.iter().zip(&other.used).all(|(a, b)| a <= b)
    }
}

/// The least-cost plan that reaches the target within the unit limits; when none does,
/// [`PlanError::Unreachable`] with the highest throughput any plan reaches.
pub fn plan(p: &Problem) -> Result<Plan, PlanError> {
    match search(p) {
        Some(assign) => p.evaluate(&assign, "exact"),
        None => Err(PlanError::Unreachable {
            target: p.job.throughput,
            best: best_throughput(p),
        }),
    }
}

/// Whether some plan reaches the target.
pub fn feasible(p: &Problem) -> bool {
    search(p).is_some()
}

/// The highest throughput any plan reaches within the unit limits (bisection on the target:
/// whether a plan exists is monotone in it). 0 when not even a trickle is possible.
pub fn best_throughput(p: &Problem) -> f64 {
    let mut hi = p.job.throughput;
    let mut lo = hi;
    let mut steps = 0;
    while !feasible(&p.with_target(lo)) {
        hi = lo;
        lo /= 2.0;
        steps += 1;
        if steps > 60 {
            return 0.0;
        }
    }
    if lo == p.job.throughput {
        // Feasible at the target already: search upwards.
        while feasible(&p.with_target(hi)) && steps < 60 {
            lo = hi;
            hi *= 2.0;
            steps += 1;
        }
    }
    for _ in 0..50 {
        let mid = 0.5 * (lo + hi);
        if feasible(&p.with_target(mid)) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The least-cost assignment, if any reaches the target.
fn search(p: &Problem) -> Option<Vec<usize>> {
    let (n, types) = (p.layers(), p.types());
    // prefix[r][l]: time of layers < l on r; blocked[r][l]: layers < l that r cannot run.
    let mut prefix = vec![vec![0.0; n + 1]; types];
    let mut blocked = vec![vec![0usize; n + 1]; types];
    for r in 0..types {
        for l in 0..n {
            let t = p.time(l, r);
            prefix[r][l + 1] = prefix[r][l] + t.unwrap_or(0.0);
            blocked[r][l + 1] = blocked[r][l] + usize::from(t.is_none());
        }
    }
    // labels[i][prev]: partial plans of layers < i whose last stage is on `prev` (`types`: none).
    let mut labels: Vec<Vec<Vec<Label>>> = vec![vec![Vec::new(); types + 1]; n + 1];
    labels[0][types].push(Label {
        cost: 0.0,
        used: vec![0; types],
        assign: Vec::new(),
    });
    for i in 0..n {
        // A stage starting at i > 0 sends layer i − 1's output over the link.
        if i > 0 && !p.meets(p.link_rate(i - 1)) {
            continue;
        }
        for prev in 0..=types {
            let from = std::mem::take(&mut labels[i][prev]);
            if from.is_empty() {
                continue;
            }
            for r in (0..types).filter(|&r| r != prev) {
                let limited = p.limit(r) != u32::MAX;
                let price = p.prices.resources[r].price;
                for j in i + 1..=n {
                    if blocked[r][j] > blocked[r][i] {
                        break;
                    }
                    // A longer stage only needs more units (or none suffice): stop there.
                    let Some(k) = p.provision(prefix[r][j] - prefix[r][i], r) else {
                        break;
                    };
                    if k > p.limit(r) {
                        break;
                    }
                    for lab in &from {
                        let mut used = lab.used.clone();
                        if limited {
                            used[r] += k;
                            if used[r] > p.limit(r) {
                                continue;
                            }
                        }
                        let mut assign = lab.assign.clone();
                        assign.resize(j, r);
                        insert(
                            &mut labels[j][r],
                            Label {
                                cost: lab.cost + price * f64::from(k),
                                used,
                                assign,
                            },
                        );
                    }
                }
            }
        }
    }
    labels[n]
        .iter()
        .flatten()
        .min_by(|a, b| a.cost.total_cmp(&b.cost))
        .map(|l| l.assign.clone())
}

/// Add a label to a Pareto set unless one there dominates it; drop those it dominates.
fn insert(set: &mut Vec<Label>, new: Label) {
    if set.iter().any(|l| l.dominates(&new)) {
        return;
    }
    set.retain(|l| !new.dominates(l));
    set.push(new);
}
