//! The one rule by which a pending gang is proposed, the same in the simulator and the agents.
//!
//! - **Which gangs.** Pending gangs oldest first (by arrival, then id), so that a gang that waits
//!   is not passed over for ever by newer ones that happen to fit; at most [`GANG_TRIES`] a
//!   round per box, since each try solves an LP and a round must stay short however many wait.
//! - **Who proposes.** The lowest-id round member among the boxes the gang may use
//!   (`reachable`): every box applies the rule alike from what it knows for certain, so one box
//!   proposes each gang, and a box that restarts has nothing to remember. (An owner named at
//!   submission was tried first: a restarted box forgot that it owned the gang, its peers still
//!   named it, and nobody proposed the gang again.)
//! - **Where.** The proposer places the gang on the claimable units of the round members that
//!   may host a member (an agent needs a box's address for the rendezvous) with the driver's
//!   placer and link speeds, and proposes it whole; the round settles it all or nothing.

use super::Ledger;
use crate::placement::gang::{Links, PlaceNow};
use crate::protocol::Proposal;
use crate::resources::Resources;
use crate::task::{NodeId, TaskId};
use std::collections::BTreeSet;

/// Most pending gangs a box tries to place per round (module doc).
pub const GANG_TRIES: usize = 4;

/// How a driver places the gangs its box proposes: the simulator from its scenario, the agent
/// from `agent.toml` (by default the locality-aware LP rounding of `tapfinger-jobs` over edge
/// links).
#[derive(Debug, Clone, Copy)]
pub struct GangPlacement {
    /// The placer.
    pub placer: &'static dyn PlaceNow,
    /// Link speeds within and between boxes.
    pub links: Links,
}

impl Default for GangPlacement {
    /// Pack-first over edge links: the plain placer the core has, for a driver that passes none.
    fn default() -> Self {
        Self {
            placer: &crate::placement::simple::PackFirst,
            links: Links::EDGE,
        }
    }
}

impl<M> Ledger<M> {
    /// `me`'s gang claim this round, if it proposes a pending gang that fits now (module doc).
    /// `members`: the round's members; `hosts`: whether a member may host gang members.
    pub fn gang_proposal(
        &self,
        me: NodeId,
        members: &BTreeSet<NodeId>,
        hosts: impl Fn(NodeId) -> bool,
        how: GangPlacement,
        rng: &mut crate::Rng,
    ) -> Option<Proposal> {
        let mut pending: Vec<(u64, TaskId)> = self
            .pending_gangs()
            .filter_map(|id| self.get(id).map(|e| (e.task.arrival, id)))
            .collect();
        pending.sort_unstable();
        let mut tries = 0;
        for (_, id) in pending {
            let Some(e) = self.get(id) else { continue };
            let Some(shape) = e.task.gang.as_deref() else {
                continue;
            };
            let proposer = e
                .task
                .reachable
                .iter()
                .filter(|n| members.contains(n))
                .min();
            if proposer != Some(&me) {
                continue;
            }
            if tries == GANG_TRIES {
                break;
            }
            tries += 1;
            let free: Vec<(NodeId, Resources)> = e
                .task
                .reachable
                .iter()
                .filter(|n| members.contains(n) && hosts(**n))
                .map(|n| (*n, self.claimable(*n)))
                .collect();
            let claim = crate::protocol::gang::claim(id, shape, how.placer, &free, how.links, rng);
            if claim.is_some() {
                return claim;
            }
        }
        None
    }
}
