//! Gangs in an episode: who proposes a pending gang, how a decided gang starts, and how a
//! running gang progresses.
//!
//! Proposing follows the agents' rule, kept in the ledger
//! ([`tapfinger::ledger::Ledger::gang_proposal`]): at every decision step the lowest-id box
//! among a pending gang's boxes places the oldest pending gangs it proposes (at most
//! [`tapfinger::ledger::GANG_TRIES`]) on what every box can give now (the ledger's claimable
//! units, the same every box states with its proposal) with the scenario's placer and links,
//! and proposes the first that fits as a [`GangClaim`](tapfinger::protocol::GangClaim) instead
//! of its single claim; the round settles single claims first and then the gang, all or nothing
//! ([`tapfinger::protocol`]). The policies do not see gangs: they see the units gang members
//! hold as taken. A gang keeps its members until it ends, and does `rate × slot_seconds`
//! iterations a slot, the rate from its members' placement and its true compute time
//! ([`crate::gangs::GangTruth`]).

use super::{Episode, SimError, TaskRecord};
use tapfinger::ledger::TaskState;
use tapfinger::protocol::Proposal;
use tapfinger::{NodeId, Resources, RoundOutcome, TaskId};

impl Episode<'_> {
    /// Agent `i`'s gang claim this step, if it proposes a pending gang that fits now.
    pub(super) fn gang_proposal(&mut self, i: usize) -> Option<Proposal> {
        let g = self.sc.gangs.as_ref()?;
        let members: std::collections::BTreeSet<NodeId> = self.ids.iter().copied().collect();
        let how = tapfinger::ledger::GangPlacement {
            placer: tapfinger::jobs::placer(self.placer),
            links: g.links,
        };
        self.ledger
            .gang_proposal(self.ids[i], &members, |_| true, how, &mut self.rngs[i])
    }

    /// Start the round's gangs: every member's units are checked against its box's claimable
    /// units (after the round's single starts) and held at once.
    pub(super) fn start_gangs(
        &mut self,
        outcome: &RoundOutcome,
        slot: u64,
    ) -> Result<(), SimError> {
        for g in &outcome.gangs {
            let mut need: std::collections::BTreeMap<NodeId, Resources> = Default::default();
            for (node, alloc) in &g.members {
                let e = need
                    .entry(*node)
                    .or_insert_with(|| Resources::zeros(alloc.len()));
                *e = e.checked_add(alloc).unwrap_or_else(|_| alloc.clone());
            }
            for (node, units) in &need {
                let free = self.ledger.claimable(*node);
                if !units.fits_in(&free) {
                    let reason = format!(
                        "gang {} needs {units} on node {node}, which has {free} claimable",
                        g.task
                    );
                    return Err(self.violation(g.claimant.0 as usize, slot, reason));
                }
            }
            self.ledger.set_state(
                g.task,
                TaskState::Gang {
                    members: g.members.clone(),
                    progress: 0.0,
                    started: slot,
                },
            );
            if let Some(m) = self.ledger.meta_mut(g.task) {
                m.start = slot;
            }
        }
        Ok(())
    }

    /// The slot runs for every gang: progress at its placement's rate; a finished gang leaves.
    pub(super) fn progress_gangs(&mut self, slot: u64, observe: &mut dyn super::Observer) {
        let Some(g) = self.sc.gangs.as_ref() else {
            return;
        };
        let running: std::collections::BTreeSet<TaskId> = self
            .ids
            .iter()
            .flat_map(|n| self.ledger.gangs_on(*n).collect::<Vec<_>>())
            .collect();
        for id in running {
            let e = &self.ledger[&id];
            let (
                TaskState::Gang {
                    members,
                    progress,
                    started,
                },
                Some(shape),
                Some(truth),
            ) = (e.state.clone(), e.task.gang.clone(), self.truths.get(&id))
            else {
                continue;
            };
            let held: f64 = members.iter().map(|(_, a)| self.node_slots(a)).sum();
            if let Some(m) = self.ledger.meta_mut(id) {
                m.learning.resource_time += held;
            }
            let e = &self.ledger[&id];
            let rate = shape.rate(&members, g.links, truth.compute_seconds);
            let progress = progress + rate * self.sc.slot_seconds / truth.iterations;
            let finished = progress >= 1.0 - 1e-12;
            observe.progressed(slot, id, progress.min(1.0), finished);
            if finished {
                let task = e.task.clone();
                let finish = slot + 1;
                let lower_bound = truth.lower_bound(&shape, g.links, self.sc.slot_seconds);
                let area = truth.area(&shape, self.sc.slot_seconds, &crate::bound::pool(self.sc));
                self.records.push(TaskRecord {
                    id: id.0,
                    ty: task.ty.0,
                    arrival: task.arrival,
                    start: e.meta.start,
                    finish,
                    node: members.first().map_or(0, |(n, _)| n.0),
                    jct: finish - task.arrival,
                    lower_bound,
                    area,
                    failures: 0,
                    members: members.len() as u32,
                    priority: task.priority,
                    accuracy: None,
                    accuracy_at_plateau: None,
                    resource_time: e.meta.learning.resource_time,
                    preemptions: 0,
                    work_lost: 0.0,
                    gpu_changes: 0,
                    cluster_reward: self.sc.reward.of(
                        None,
                        finish - task.arrival,
                        e.meta.learning.resource_time,
                    ),
                    size: self.size(id),
                });
                self.ledger.remove(id);
            } else {
                self.ledger.set_state(
                    id,
                    TaskState::Gang {
                        members,
                        progress,
                        started,
                    },
                );
            }
        }
    }
}
