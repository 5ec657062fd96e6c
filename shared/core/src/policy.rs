//! The `Policy` trait: the one interface that learned policies and heuristic baselines share.
//!
//! A policy looks at a [`View`] and either claims one task of the agent's window with an
//! allocation, or passes. It must not mutate shared state or read anything outside the view and
//! the RNG it is given; that keeps every decision reproducible and lets the same policy object run
//! in the simulator and in the daemon.

use crate::Rng;
use crate::resources::Resources;
use crate::task::TaskId;
use crate::view::View;

/// What an agent does in one decision step.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Start nothing this step.
    Pass,
    /// Claim a task from the window with an allocation.
    Claim {
        /// The task.
        task: TaskId,
        /// Allocation, within `min_demand ≤ alloc ≤ min(free, cap)`.
        alloc: Resources,
        /// The policy's probability of having selected this task (the Bayes likelihood). Heuristic
        /// policies that choose deterministically report 1.
        prob: f64,
    },
}

/// A scheduling policy run by every agent.
pub trait Policy: Send {
    /// Short name, as used on the command line.
    fn name(&self) -> &str;

    /// Decide for one step of the protocol.
    fn decide(&mut self, view: &View<'_>, rng: &mut Rng) -> Decision;

    /// True if the policy re-allocates running tasks every slot (elastic baselines).
    fn elastic(&self) -> bool {
        false
    }

    /// For elastic policies: whether a claim's allocation is the task's floor for its run (the
    /// least a re-share gives it; [`crate::ledger::Ledger::set_floors`]) rather than a start at
    /// the minimum demand. Off by default (every elastic baseline claims at the minimum).
    fn floors(&self) -> bool {
        false
    }

    /// For elastic policies: the allocations of the tasks running on the agent's node for the
    /// coming slot. Called once per slot after the decision steps, with running tasks shown at
    /// their floor (their minimum demand unless [`Policy::floors`]) and `free` what remains. Tasks not listed keep their allocation.
    fn rebalance(&mut self, _view: &View<'_>, _rng: &mut Rng) -> Vec<(TaskId, Resources)> {
        Vec::new()
    }

    /// The interval in slots of the arrival forecast this policy reads from its views, if it
    /// reads one (an RLPTO model: the interval it was trained with): a driver without a
    /// forecast of its own makes one at this interval.
    fn forecast_interval(&self) -> Option<u64> {
        None
    }
}

/// Check a policy's decision against the view it was made on and turn it into the protocol's
/// proposal (the claim carries the node's headroom for the Bayes prior). Shared by every driver
/// (simulator and agent) so that both refuse the same decisions.
pub fn to_proposal(d: &Decision, v: &View<'_>) -> Result<crate::protocol::Proposal, DecisionError> {
    use crate::protocol::{Claim, Proposal};
    match d {
        Decision::Pass => Ok(Proposal::Pass),
        Decision::Claim { task, alloc, prob } => {
            let Some(t) = v.window().find(|t| t.id == *task) else {
                return Err(DecisionError::NotInWindow(*task));
            };
            let free = &v.node().free;
            if !t.allows(alloc, free) {
                return Err(DecisionError::OutOfBounds {
                    task: *task,
                    alloc: alloc.clone(),
                    min: t.min_demand.clone(),
                    cap: t.cap(free),
                });
            }
            if !(prob.is_finite() && (0.0..=1.0).contains(prob)) {
                return Err(DecisionError::Probability(*prob));
            }
            Ok(Proposal::Claim(Claim {
                task: *task,
                alloc: alloc.clone(),
                prob: *prob,
                headroom: free.headroom(&t.min_demand),
            }))
        }
    }
}

/// A decision the rules forbid (a bug in the policy that made it).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecisionError {
    /// A claim on a task outside the agent's window.
    #[error("claimed {0}, which is not in its window")]
    NotInWindow(crate::task::TaskId),
    /// An allocation below the task's minimum or above its cap.
    #[error("allocation {alloc} for {task} is outside [min {min}, cap {cap}]")]
    OutOfBounds {
        /// Task.
        task: crate::task::TaskId,
        /// Allocation claimed.
        alloc: crate::resources::Resources,
        /// The task's minimum demand.
        min: crate::resources::Resources,
        /// Its cap on the node.
        cap: crate::resources::Resources,
    },
    /// A selection probability outside [0, 1].
    #[error("selection probability {0} outside [0, 1]")]
    Probability(f64),
}

/// Min: a uniformly random feasible window task at its minimum demand. The simplest policy that
/// claims anything, the core's own (its node tests decide with it); the baselines offer it as
/// `min`.
#[derive(Debug, Clone, Default)]
pub struct MinPolicy;

impl Policy for MinPolicy {
    fn name(&self) -> &str {
        "min"
    }
    fn decide(&mut self, view: &View<'_>, rng: &mut Rng) -> Decision {
        use rand::RngExt;
        let feasible: Vec<&crate::task::Task> = view.feasible().collect();
        if feasible.is_empty() {
            return Decision::Pass;
        }
        let t = feasible[rng.random_range(0..feasible.len())];
        Decision::Claim {
            task: t.id,
            alloc: t.min_demand.clone(),
            prob: 1.0 / feasible.len() as f64,
        }
    }
}
