//! Gangs in an episode: who proposes a pending gang, how a decided gang starts, and how a
//! running gang progresses.
//!
//! Each pending gang has one owner, the agent of index `id mod nodes` (in the agent: the box
//! that accepted it). At every decision step the owner places its oldest pending gang that fits
//! (trying at most [`tapfinger::node::gangs::GANG_TRIES`])
//! on what every box can give now (the ledger's claimable units, the same every box states with
//! its proposal) and proposes it as a [`GangClaim`] instead of its single claim; the round
//! settles single claims first and then the gang, all or nothing ([`tapfinger::protocol`]).
//! The policies do not see gangs: they see the units gang members hold as taken. (With the
//! `policy` placer, the learned policy places the members of the gangs its agent owns instead
//! of the placer: [`tapfinger::Policy::place_gang`].) A gang keeps
//! its members until it ends, and does `rate × slot_seconds` iterations a slot, the rate from
//! its members' placement and its true compute time ([`crate::gangs::GangTruth`]).

use super::{Episode, SimError, TaskRecord};
use tapfinger::ledger::TaskState;
use tapfinger::placement::gang::GangPlacer;
use tapfinger::policy::GangAsk;
use tapfinger::protocol::Proposal;
use tapfinger::{NodeId, Resources, RoundOutcome, TaskId};

impl Episode<'_> {
    /// Agent `i`'s gang claim this step, if it owns a pending gang that fits now.
    pub(super) fn gang_proposal(
        &mut self,
        i: usize,
        view: &tapfinger::view::ClusterView,
    ) -> Option<Proposal> {
        let g = self.sc.gangs.as_ref()?;
        let n = self.ids.len() as u64;
        let owned: Vec<TaskId> = self
            .ledger
            .pending_gangs()
            .filter(|id| id.0 % n == i as u64)
            .collect();
        if owned.is_empty() {
            return None;
        }
        // The oldest first (ids follow arrivals), at most as many as an agent tries.
        for id in owned.into_iter().take(tapfinger::node::gangs::GANG_TRIES) {
            let Some(task) = self.ledger.get(id).map(|e| e.task.clone()) else {
                continue;
            };
            let Some(shape) = &task.gang else {
                continue;
            };
            let free: Vec<(NodeId, Resources)> = task
                .reachable
                .iter()
                .map(|id| (*id, self.ledger.claimable(*id)))
                .collect();
            // With the `policy` placer a policy that places gangs does so itself (the learned
            // one, `tapfinger::model`'s `gang` module); the others leave it to the locality
            // placer.
            let claim = if self.placer == GangPlacer::Policy && self.policies[i].places_gangs() {
                let ledger = &self.ledger;
                let estimate = |t: &tapfinger::Task| ledger.estimate_now(t);
                let ask = GangAsk {
                    cluster: view,
                    task: &task,
                    free: &free,
                    estimate: &estimate,
                };
                self.policies[i]
                    .place_gang(&ask, &mut self.rngs[i])
                    .map(|members| tapfinger::protocol::gang::claim_members(id, members))
            } else {
                tapfinger::protocol::gang::claim(
                    id,
                    shape,
                    self.placer,
                    &free,
                    g.links,
                    &mut self.rngs[i],
                )
            };
            if claim.is_some() {
                return claim;
            }
        }
        None
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
                self.records.push(TaskRecord {
                    id: id.0,
                    ty: task.ty.0,
                    arrival: task.arrival,
                    start: e.meta.start,
                    finish,
                    node: members.first().map_or(0, |(n, _)| n.0),
                    jct: finish - task.arrival,
                    lower_bound,
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
