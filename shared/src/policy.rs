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

    /// For elastic policies: the allocations of the tasks running on the agent's node for the
    /// coming slot. Called once per slot after the decision steps, with running tasks shown at
    /// their minimum demand and `free` what remains. Tasks not listed keep their allocation.
    fn rebalance(&mut self, _view: &View<'_>, _rng: &mut Rng) -> Vec<(TaskId, Resources)> {
        Vec::new()
    }
}
