//! Resolving a round: the pure function every member applies to the same set of proposals
//! (claims on committed tasks lose; a contested task goes to the argmax of the Bayes posterior,
//! exact ties to the lowest agent id), and the check that turns an invalid claim into a pass.

use super::{Claim, Commit, Message, Proposal, Round, RoundOutcome};
use crate::task::{NodeId, TaskId};
use std::collections::{BTreeMap, BTreeSet};

/// The two numbers the Bayes rule reads from a claim (single or gang): a likelihood in [0, 1]
/// and a finite non-negative headroom.
pub(crate) fn check_bayes(prob: f64, headroom: f64) -> Result<(), String> {
    if !(prob.is_finite() && (0.0..=1.0).contains(&prob)) {
        return Err(format!("probability {prob} outside [0, 1]"));
    }
    if !(headroom.is_finite() && headroom >= 0.0) {
        return Err(format!(
            "headroom {headroom} is not a finite non-negative number"
        ));
    }
    Ok(())
}

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

/// Largest headroom used in the prior; larger values (a node with nothing demanded of a kind)
/// would overflow `exp` without changing the argmax.
const MAX_HEADROOM: f64 = 1e6;

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

/// The Bayes posterior of each claimant of one task, in the order given.
pub fn posteriors(claims: &[(NodeId, &Claim)]) -> Vec<f64> {
    let rho: Vec<f64> = claims
        .iter()
        .map(|(_, c)| c.headroom.min(MAX_HEADROOM))
        .collect();
    let max_rho = rho.iter().copied().fold(f64::MIN, f64::max);
    let prior: Vec<f64> = rho.iter().map(|r| (r - max_rho).exp()).collect();
    let z_prior: f64 = prior.iter().sum();
    let joint: Vec<f64> = claims
        .iter()
        .zip(&prior)
        .map(|((_, c), p)| c.prob * p / z_prior)
        .collect();
    let z: f64 = joint.iter().sum();
    if z > 0.0 {
        joint.iter().map(|j| j / z).collect()
    } else {
        // Every likelihood is zero: the posterior is the prior.
        prior.iter().map(|p| p / z_prior).collect()
    }
}

/// Index of the winning claim: the posterior argmax; ties go to the lowest agent id.
pub(super) fn posterior_argmax(claims: &[(NodeId, &Claim)]) -> usize {
    let post = posteriors(claims);
    let mut best = 0;
    for i in 1..claims.len() {
        let better =
            post[i] > post[best] || (post[i] == post[best] && claims[i].0 < claims[best].0);
        if better {
            best = i;
        }
    }
    best
}
