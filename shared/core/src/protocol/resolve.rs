//! Resolving a round: the pure function every member applies to the same set of proposals
//! (claims on committed tasks lose; a contested task goes to the argmax of the Bayes posterior
//! ([`super::bayes`]), exact ties to the lowest agent id; then gang claims ([`super::gang`])),
//! and the check that turns an invalid claim into a pass.

use super::bayes::{check_bayes, posterior_argmax};
use super::{Claim, Commit, Message, Proposal, Round, RoundOutcome};
use crate::task::{NodeId, TaskId};
use std::collections::{BTreeMap, BTreeSet};

pub(super) fn validate(msg: &Message) -> Result<(), String> {
    if let Proposal::Claim(c) = &msg.proposal {
        check_bayes(c.prob, c.headroom)?;
        if c.alloc.is_zero() {
            return Err("empty allocation".into());
        }
    }
    if let Proposal::Gang(g) = &msg.proposal {
        super::gang::validate(g)?;
    }
    Ok(())
}

/// Resolve one round: the pure, order-independent core of the protocol.
///
/// `proposals` is keyed by agent id, so iteration (and therefore every floating-point sum) runs in
/// agent-id order on every member. Claims on tasks in `committed` lose. Gang claims need the
/// free units their boxes stated ([`resolve_with_free`]); here none are stated, so every gang
/// claim loses.
pub fn resolve(
    round: Round,
    proposals: &BTreeMap<NodeId, Proposal>,
    committed: &BTreeSet<TaskId>,
) -> RoundOutcome {
    resolve_with_free(round, proposals, &BTreeMap::new(), committed)
}

/// [`resolve`] with the free units each member stated with its proposal, against which gang
/// claims are placed all or nothing after the single claims ([`super::gang`]).
pub fn resolve_with_free(
    round: Round,
    proposals: &BTreeMap<NodeId, Proposal>,
    free: &BTreeMap<NodeId, crate::resources::Resources>,
    committed: &BTreeSet<TaskId>,
) -> RoundOutcome {
    let mut by_task: BTreeMap<TaskId, Vec<(NodeId, &Claim)>> = BTreeMap::new();
    let mut lost = Vec::new();
    for (agent, p) in proposals {
        if let Proposal::Claim(c) = p {
            if committed.contains(&c.task) {
                lost.push((*agent, c.task));
            } else {
                by_task.entry(c.task).or_default().push((*agent, c));
            }
        }
    }
    let mut commits = Vec::new();
    let mut contested = 0;
    for (task, claims) in &by_task {
        let winner = if claims.len() == 1 {
            0
        } else {
            contested += 1;
            posterior_argmax(claims)
        };
        for (i, (agent, c)) in claims.iter().enumerate() {
            if i == winner {
                commits.push(Commit {
                    task: *task,
                    agent: *agent,
                    alloc: c.alloc.clone(),
                    claimants: u32::try_from(claims.len()).unwrap_or(u32::MAX),
                });
            } else {
                lost.push((*agent, *task));
            }
        }
    }
    let (gangs, gangs_contested) =
        super::gang::resolve(proposals, free, &commits, committed, &mut lost);
    contested += gangs_contested;
    lost.sort();
    let slot_ended = commits.is_empty() && gangs.is_empty();
    let next = if slot_ended {
        Round {
            slot: round.slot + 1,
            step: 0,
        }
    } else {
        Round {
            slot: round.slot,
            step: round.step + 1,
        }
    };
    RoundOutcome {
        round,
        commits,
        gangs,
        lost,
        contested,
        missing: Vec::new(),
        ahead: Vec::new(),
        disagree: Vec::new(),
        slot_ended,
        next,
    }
}
