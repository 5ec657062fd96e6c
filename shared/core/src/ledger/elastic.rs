//! Elastic sharing in the ledger: what an elastic node shows a policy, what it may still
//! claim, and its re-allocations.
//!
//! An elastic node starts every task at its minimum demand and, once a slot (after the slot's
//! rounds), re-shares its spare units among its running tasks ([`Ledger::rebalance`]). The
//! allocations a slot's rounds decide from are the minimum demands: the re-share of the slot
//! before is not a claim on the units, every slot re-shares afresh. So the views show an elastic
//! node's running tasks at their minimum demands and its free units as its capacity less
//! those ([`Ledger::claimable`]), while the ledger keeps the allocations in force (what the
//! tasks run with, what the speed estimator observes and what attained service counts).
//!
//! **Floors.** On a node where claims set floors ([`Ledger::set_floors`]: a policy that chooses
//! how much a task starts with, [`crate::Policy::floors`]), a task's claimed allocation is its
//! floor for the run: the views show it at its floor, the node's claimable units are its
//! capacity less its tasks' floors, and no re-share takes a task under its floor. A floor is
//! taken from a run's start as the ledger hears of it; a box that first hears of a peer's task
//! after a re-share takes the allocation then in force (only its view of that peer differs; the
//! runner keeps the claimed floor). Without floors (every elastic baseline) a task's floor is its
//! minimum demand.
//!
//! Between a claim and the node's next re-share the allocations in force may add up to more
//! than the capacity: the agent re-shares right after each of its starts (and at the end of each
//! slot's rounds), and the simulator's slot runs only after its re-share.

use super::{Ledger, LedgerError, TaskState};
use crate::resources::Resources;
use crate::task::{NodeId, TaskId};
use std::collections::BTreeSet;

/// `a += b`, kind by kind (saturating; `a` grows to `b`'s kinds).
pub(super) fn add_each(a: &mut Resources, b: &Resources) {
    if a.len() < b.len() {
        a.0.resize(b.len(), 0);
    }
    for (x, y) in a.0.iter_mut().zip(&b.0) {
        *x = x.saturating_add(*y);
    }
}

/// `a -= b`, kind by kind (saturating at 0).
pub(super) fn sub_each(a: &mut Resources, b: &Resources) {
    for (x, y) in a.0.iter_mut().zip(&b.0) {
        *x = x.saturating_sub(*y);
    }
}

impl<M> Ledger<M> {
    /// Make a node share elastically (module doc), or not. Unknown nodes are made (not live).
    pub fn set_elastic(&mut self, node: NodeId, elastic: bool) {
        self.book(node).elastic = elastic;
    }

    /// Make every node, those known and those heard of later, share elastically or not (the
    /// agent: every node runs the same policy).
    pub fn set_all_elastic(&mut self, elastic: bool) {
        self.all_elastic = elastic;
        for b in self.nodes.values_mut() {
            b.elastic = elastic;
        }
    }

    /// Whether a node shares elastically.
    pub fn is_elastic(&self, node: NodeId) -> bool {
        self.nodes.get(&node).is_some_and(|b| b.elastic)
    }

    /// Make claims on a node set their tasks' floors (module doc), or not (the default: a
    /// task's floor is its minimum demand). Runs already started keep the floor they have.
    /// Unknown nodes are made (not live).
    pub fn set_floors(&mut self, node: NodeId, floors: bool) {
        self.book(node).floors = floors;
    }

    /// [`Ledger::set_floors`] for every node, those known and those heard of later.
    pub fn set_all_floors(&mut self, floors: bool) {
        self.all_floors = floors;
        for b in self.nodes.values_mut() {
            b.floors = floors;
        }
    }

    /// A task's floor: the least allocation a re-share may give it while it runs (module doc).
    pub fn floor<'a>(&'a self, task: &'a crate::task::Task) -> &'a Resources {
        self.floors.get(&task.id).unwrap_or(&task.min_demand)
    }

    /// Record the floor of a run entering `state` (before it is indexed): its allocation on a
    /// node whose claims set floors, where that is above the minimum demand; else none.
    pub(super) fn set_floor(&mut self, task: &crate::task::Task, state: &TaskState) {
        match state {
            TaskState::Running { node, alloc, .. }
                if self.nodes.get(node).map_or(self.all_floors, |b| b.floors)
                    && *alloc != task.min_demand
                    && task.min_demand.fits_in(alloc) =>
            {
                self.floors.insert(task.id, alloc.clone());
            }
            _ => {
                self.floors.remove(&task.id);
            }
        }
    }

    /// The units a claim on `node` may take: its free units, or on an elastic node its capacity
    /// less the floors of its running tasks (their minimum demands unless claims set floors).
    pub fn claimable(&self, node: NodeId) -> Resources {
        match self.nodes.get(&node) {
            Some(b) if b.elastic => {
                let mut f = b.capacity.clone();
                sub_each(&mut f, &b.min_used);
                f
            }
            Some(_) => self.free(node),
            None => Resources::default(),
        }
    }

    /// A running task's allocation as the views show it: its floor (module doc) on an elastic
    /// node, else the allocation in force.
    pub(super) fn shown_alloc<'a>(
        &'a self,
        node: NodeId,
        task: &'a crate::task::Task,
        alloc: &'a Resources,
    ) -> &'a Resources {
        if self.is_elastic(node) {
            self.floor(task)
        } else {
            alloc
        }
    }

    /// Re-allocate tasks running on `node`: each new allocation within [floor, cap], all of
    /// the node's tasks together within its capacity (tasks not named keep their allocation, or
    /// on an elastic node go back to their floor). On error nothing changes. Returns the tasks
    /// whose allocation in force changed, with their new allocation. The capacity is what gang
    /// members on the node leave.
    pub fn rebalance(
        &mut self,
        node: NodeId,
        changes: &[(TaskId, Resources)],
    ) -> Result<Vec<(TaskId, Resources)>, LedgerError> {
        // Gang members' units are not the node's to re-share.
        let mut cap = self.capacity(node);
        sub_each(&mut cap, &self.held(node));
        let running: BTreeSet<TaskId> = self.running_on(node).collect();
        for (id, a) in changes {
            if !running.contains(id) {
                return Err(LedgerError::NotRunningHere { task: *id, node });
            }
            let task = &self.tasks[id].task;
            let floor = self.floor(task);
            if !floor.fits_in(a) || !a.fits_in(&task.cap(&cap)) {
                return Err(LedgerError::OutOfBounds {
                    task: *id,
                    alloc: a.clone(),
                    min: floor.clone(),
                    cap: task.cap(&cap),
                });
            }
        }
        let mut new = Vec::with_capacity(running.len());
        let mut total = Resources::zeros(cap.len());
        for id in &running {
            let e = &self.tasks[id];
            let TaskState::Running { alloc, .. } = &e.state else {
                continue;
            };
            let a = changes
                .iter()
                .rev()
                .find(|(x, _)| x == id)
                .map(|(_, a)| a)
                .unwrap_or_else(|| self.shown_alloc(node, &e.task, alloc));
            add_each(&mut total, a);
            if a != alloc {
                new.push((*id, a.clone()));
            }
        }
        if !total.fits_in(&cap) {
            return Err(LedgerError::OverCapacity {
                total,
                capacity: cap,
            });
        }
        for (id, a) in &new {
            self.set_alloc(*id, a.clone());
        }
        Ok(new)
    }

    /// Set a running task's allocation in force (as its runner re-shared it); other states:
    /// nothing. Its progress and start stay.
    pub fn set_alloc(&mut self, id: TaskId, alloc: Resources) {
        if let Some(TaskState::Running {
            node,
            progress,
            started,
            ..
        }) = self.tasks.get(&id).map(|e| e.state.clone())
        {
            self.set_state(
                id,
                TaskState::Running {
                    node,
                    alloc,
                    progress,
                    started,
                },
            );
        }
    }
}
