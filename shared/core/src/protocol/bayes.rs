//! The Bayes rule that settles a contested claim: each claimant's posterior from its claim's
//! likelihood and a prior over the claimants' headrooms, and the check that a claim's two numbers
//! can be read by it. Below both single and gang resolution, which both use it; it knows nothing
//! of rounds or messages.

use super::Claim;
use crate::task::NodeId;

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

/// Largest headroom used in the prior; larger values (a node with nothing demanded of a kind)
/// would overflow `exp` without changing the argmax.
const MAX_HEADROOM: f64 = 1e6;

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
pub(crate) fn posterior_argmax(claims: &[(NodeId, &Claim)]) -> usize {
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
