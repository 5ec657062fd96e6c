//! Gang claims: one proposal that places every member of a multi-node job (workers and
//! parameter servers, or a pipeline's stages) on the boxes it names, decided in the same round
//! as single claims and all or nothing.
//!
//! A single claim spends only its claimant's own units, so claims never collide on capacity.
//! A gang spends units on several boxes, so the round checks them: every member states its free
//! units with its proposal ([`super::Message::free`]); single claims are resolved first and
//! spend their claimants' units; then each gang task in id order goes to the argmax of the same
//! Bayes posterior as a contested single task, and commits only if every member fits, on every
//! box named, in what the single claims and the earlier gangs of the round left. Otherwise every
//! claim on it loses this round, and no member holds anything. A box that did not state its
//! free units this round (it missed the round, or runs an agent that does not state them) hosts
//! no member. Every member that saw the same proposals and the same stated units computes the
//! same gangs, like everything else in the round.

use super::{Claim, Commit, Proposal};
use crate::resources::Resources;
use crate::task::{NodeId, TaskId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

pub use crate::task::MAX_MEMBERS;

/// A claim on a multi-node task: each member's box and allocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GangClaim {
    /// The claimed task (the whole job).
    pub task: TaskId,
    /// Per member, in rank order: the box that runs it and its allocation. A box may host
    /// several members.
    pub members: Vec<(NodeId, Resources)>,
    /// The claimant's selection probability for the task (Bayes likelihood), in [0, 1].
    pub prob: f64,
    /// The claimant's headroom (Bayes prior), ≥ 0.
    pub headroom: f64,
}

/// A gang that won its round: every member starts on its box.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GangCommit {
    /// The task.
    pub task: TaskId,
    /// The agent whose claim won (the gang's coordinator).
    pub claimant: NodeId,
    /// Per member, in rank order: its box and allocation.
    pub members: Vec<(NodeId, Resources)>,
    /// Number of agents that claimed the task this round.
    pub claimants: u32,
}

/// The claim on gang `task` of `shape`, placed by `placer` on the units `free` lists (one entry
/// per box that may host members), or `None` if it does not fit now. The one way the simulator
/// and the node core propose a gang.
pub fn claim(
    task: TaskId,
    shape: &crate::placement::gang::GangShape,
    placer: &dyn crate::placement::gang::PlaceNow,
    free: &[(NodeId, Resources)],
    links: crate::placement::gang::Links,
    rng: &mut crate::Rng,
) -> Option<Proposal> {
    let members = shape.place(placer, free, links, rng)?;
    Some(Proposal::Gang(GangClaim {
        task,
        members,
        prob: 1.0,
        headroom: 1.0,
    }))
}

/// Why a gang claim is malformed (it is then counted as a pass).
pub(super) fn validate(g: &GangClaim) -> Result<(), String> {
    super::bayes::check_bayes(g.prob, g.headroom)?;
    if g.members.is_empty() || g.members.len() > MAX_MEMBERS {
        return Err(format!(
            "{} members (1 to {MAX_MEMBERS} allowed)",
            g.members.len()
        ));
    }
    if g.members.iter().any(|(_, a)| a.is_zero()) {
        return Err("a member with an empty allocation".into());
    }
    Ok(())
}

/// The gangs of a round, after its single claims (`commits`): winners by task id, and the
/// claims that lost, pushed onto `lost`. Returns the gangs and how many gang tasks were
/// contested.
pub(super) fn resolve(
    proposals: &BTreeMap<NodeId, Proposal>,
    free: &BTreeMap<NodeId, Resources>,
    commits: &[Commit],
    committed: &BTreeSet<TaskId>,
    lost: &mut Vec<(NodeId, TaskId)>,
) -> (Vec<GangCommit>, u32) {
    let mut left: BTreeMap<NodeId, Resources> = free.clone();
    for c in commits {
        if let Some(f) = left.get_mut(&c.agent) {
            // A claim beyond what its claimant stated leaves that box nothing for gangs.
            *f = f
                .checked_sub(&c.alloc)
                .unwrap_or_else(|_| Resources::zeros(f.len()));
        }
    }
    let single: BTreeSet<TaskId> = commits.iter().map(|c| c.task).collect();
    let mut by_task: BTreeMap<TaskId, Vec<(NodeId, &GangClaim)>> = BTreeMap::new();
    for (agent, p) in proposals {
        if let Proposal::Gang(g) = p {
            if committed.contains(&g.task) || single.contains(&g.task) {
                lost.push((*agent, g.task));
            } else {
                by_task.entry(g.task).or_default().push((*agent, g));
            }
        }
    }
    let mut gangs = Vec::new();
    let mut contested = 0;
    for (task, claims) in by_task {
        let winner = if claims.len() == 1 {
            0
        } else {
            contested += 1;
            // The same posterior as a contested single task, from the same two numbers.
            let as_claims: Vec<Claim> = claims
                .iter()
                .map(|(_, g)| Claim {
                    task,
                    alloc: Resources(Vec::new()),
                    prob: g.prob,
                    headroom: g.headroom,
                })
                .collect();
            let pairs: Vec<(NodeId, &Claim)> =
                claims.iter().map(|(a, _)| *a).zip(&as_claims).collect();
            super::bayes::posterior_argmax(&pairs)
        };
        let (claimant, g) = claims[winner];
        let fits = take_all(&mut left, &g.members);
        for (i, (agent, _)) in claims.iter().enumerate() {
            if i != winner || !fits {
                lost.push((*agent, task));
            }
        }
        if fits {
            gangs.push(GangCommit {
                task,
                claimant,
                members: g.members.clone(),
                claimants: u32::try_from(claims.len()).unwrap_or(u32::MAX),
            });
        }
    }
    (gangs, contested)
}

/// Take every member's allocation from what is left on its box, or nothing if one does not fit.
fn take_all(left: &mut BTreeMap<NodeId, Resources>, members: &[(NodeId, Resources)]) -> bool {
    let mut need: BTreeMap<NodeId, Resources> = BTreeMap::new();
    for (node, alloc) in members {
        let n = need
            .entry(*node)
            .or_insert_with(|| Resources::zeros(alloc.len()));
        match n.checked_add(alloc) {
            Ok(sum) => *n = sum,
            Err(_) => return false,
        }
    }
    let fits = need
        .iter()
        .all(|(node, n)| left.get(node).is_some_and(|f| n.fits_in(f)));
    if fits {
        for (node, n) in need {
            if let Some(f) = left.get_mut(&node)
                && let Ok(rest) = f.checked_sub(&n)
            {
                *f = rest;
            }
        }
    }
    fits
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Round, resolve_with_free};

    fn gang(task: u64, members: &[(u32, u32)], prob: f64) -> Proposal {
        Proposal::Gang(GangClaim {
            task: TaskId(task),
            members: members
                .iter()
                .map(|&(n, cpu)| (NodeId(n), Resources(vec![cpu])))
                .collect(),
            prob,
            headroom: 1.0,
        })
    }

    fn free(units: &[u32]) -> BTreeMap<NodeId, Resources> {
        units
            .iter()
            .enumerate()
            .map(|(i, &u)| (NodeId(i as u32), Resources(vec![u])))
            .collect()
    }

    #[test]
    fn a_gang_that_fits_is_placed_whole_and_one_that_does_not_holds_nothing() {
        let mut props = BTreeMap::new();
        props.insert(NodeId(0), gang(1, &[(0, 2), (1, 2), (1, 1)], 0.9));
        props.insert(NodeId(1), gang(2, &[(1, 1), (2, 4)], 0.9));
        props.insert(NodeId(2), Proposal::Pass);
        let o = resolve_with_free(
            Round::default(),
            &props,
            &free(&[2, 4, 3]),
            &BTreeSet::new(),
        );
        // Gang 1 takes 2 on box 0 and 3 on box 1; gang 2 then needs 4 on box 2, which has 3.
        assert_eq!(o.gangs.len(), 1);
        assert_eq!(o.gangs[0].task, TaskId(1));
        assert_eq!(o.gangs[0].members.len(), 3);
        assert_eq!(o.lost, vec![(NodeId(1), TaskId(2))]);
        assert!(!o.slot_ended);
    }

    #[test]
    fn single_wins_spend_their_boxes_first_and_a_silent_box_hosts_nothing() {
        let mut props = BTreeMap::new();
        props.insert(
            NodeId(0),
            Proposal::Claim(Claim {
                task: TaskId(9),
                alloc: Resources(vec![3]),
                prob: 1.0,
                headroom: 1.0,
            }),
        );
        props.insert(NodeId(1), gang(1, &[(0, 2)], 1.0));
        let o = resolve_with_free(Round::default(), &props, &free(&[4, 4]), &BTreeSet::new());
        assert_eq!(o.commits.len(), 1);
        assert!(o.gangs.is_empty(), "box 0 has 1 left after the single win");
        // Box 2 stated nothing: a member there cannot be placed.
        props.insert(NodeId(1), gang(1, &[(1, 1), (2, 1)], 1.0));
        let o = resolve_with_free(Round::default(), &props, &free(&[4, 4]), &BTreeSet::new());
        assert!(o.gangs.is_empty());
        assert!(o.lost.contains(&(NodeId(1), TaskId(1))));
    }

    #[test]
    fn a_contested_gang_goes_to_the_posterior_argmax() {
        let mut props = BTreeMap::new();
        props.insert(NodeId(0), gang(1, &[(0, 1), (1, 1)], 0.2));
        props.insert(NodeId(1), gang(1, &[(1, 1), (2, 1)], 0.8));
        let o = resolve_with_free(
            Round::default(),
            &props,
            &free(&[4, 4, 4]),
            &BTreeSet::new(),
        );
        assert_eq!(o.gangs.len(), 1);
        assert_eq!(o.gangs[0].claimant, NodeId(1));
        assert_eq!(o.gangs[0].claimants, 2);
        assert_eq!(o.contested, 1);
        assert_eq!(o.lost, vec![(NodeId(0), TaskId(1))]);
        // Without stated units (the plain `resolve`) no gang is placed.
        let o = crate::protocol::resolve(Round::default(), &props, &BTreeSet::new());
        assert!(o.gangs.is_empty() && o.slot_ended);
    }
}
