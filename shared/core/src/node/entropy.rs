//! Anti-entropy of the task lists: every node comes to know every task its peers know, and
//! which of them have finished, whatever messages it missed (a restart that forgot tasks it ran
//! for another node, a greet lost while a connection came up, a partition).
//!
//! Three steps, each only while the one before shows a difference, so a cluster whose views agree
//! exchanges a digest a heartbeat (a count and a 64-bit hash, at most 18 bytes encoded) and
//! nothing more (under a steady stream of submissions the newest tasks make digests differ now
//! and then: a node then sends its ranges at most once per [`RESEND`] heartbeats, and the ids of
//! the newest block, and asks for nothing):
//!
//! 1. Every heartbeat carries a [`Digest`] of the sender's list: how many tasks it knows and a
//!    hash of their ids and finished flags.
//! 2. A node whose digest differs from a peer's for [`PERSIST`] heartbeats of that peer in a row
//!    (a task just submitted reaches nodes at slightly different times) broadcasts its digest per
//!    block of ids ([`Body::Ranges`]): per origin (the node that numbered the task: the upper
//!    half of its id) and block of 1024 numbers ([`crate::wire::BLOCK_BITS`]).
//! 3. A node that receives ranges sends, for each block where its own digest differs, the ids it
//!    knows there with their finished flags, [`Body::Ids`]; a receiver asks for the ids it lacks,
//!    or knows as unfinished when the sender says finished, with [`Body::Want`], which the node
//!    that speaks for each task answers with its announcement or its outcome.
//!
//! Both sides see the difference, so each sends its ranges and each learns what it lacks. A
//! node sends ranges, and ids of a block, at most once per [`RESEND`] heartbeat periods. Tasks
//! are numbered in a row, so a difference (the newest tasks, what one restart forgot) is one
//! block's ids, not a node's whole history.

use super::{Action, NodeCore, TaskState};
use crate::task::{NodeId, TaskId};
use crate::wire::{BLOCK_BITS, Body, Digest, MAX_IDS, MAX_WANT, OriginIds, Range};
use std::collections::BTreeMap;

/// Heartbeats of a peer in a row whose digest differs from this node's before it sends ranges.
const PERSIST: u32 = 3;

/// Heartbeat periods between two sendings of this node's ranges, or of its ids of one origin.
const RESEND: u64 = 5;

/// Most [`Body::Want`] messages one received [`Body::Ids`] makes this node send (what remains
/// is asked for after the next exchange).
const WANTS_PER_IDS: usize = 16;

/// What this node keeps of the exchange.
#[derive(Default)]
pub(super) struct Entropy {
    /// Heartbeats in a row, by peer, whose digest differed from this node's.
    differ: BTreeMap<NodeId, u32>,
    /// When this node last sent its ranges.
    ranges_sent: Option<u64>,
    /// When this node last sent its ids of each block (origin, block).
    ids_sent: BTreeMap<(u32, u32), u64>,
}

impl Entropy {
    /// A heartbeat of `from` whose digest was the `same` as this node's or not: whether to send
    /// this node's ranges now, after [`PERSIST`] differing ones in a row and at most once per
    /// `resend` ms (then marked sent at `now`).
    fn send_ranges(&mut self, from: NodeId, same: bool, now: u64, resend: u64) -> bool {
        if same {
            self.differ.remove(&from);
            return false;
        }
        let n = self.differ.entry(from).or_default();
        *n += 1;
        if *n < PERSIST
            || self
                .ranges_sent
                .is_some_and(|t| now.saturating_sub(t) < resend)
        {
            return false;
        }
        self.ranges_sent = Some(now);
        true
    }

    /// Whether this node's ids of block `b` may be sent at `now` (not within `resend` ms of the
    /// last time).
    fn ids_due(&self, b: (u32, u32), now: u64, resend: u64) -> bool {
        self.ids_sent
            .get(&b)
            .is_none_or(|t| now.saturating_sub(*t) >= resend)
    }
}

/// A task's contribution to a digest: its id and whether it has finished, mixed (SplitMix64's
/// finalizer) so that XOR over a set tells sets apart.
fn mix(id: TaskId, done: bool) -> u64 {
    let mut z = id.0.wrapping_mul(2).wrapping_add(u64::from(done));
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A task's block: (origin, block of its number).
fn block(id: TaskId) -> (u32, u32) {
    ((id.0 >> 32) as u32, (id.0 as u32) >> BLOCK_BITS)
}

impl Digest {
    fn add(&mut self, id: TaskId, done: bool) {
        self.count += 1;
        self.hash ^= mix(id, done);
    }
}

impl NodeCore {
    fn done(&self, id: TaskId) -> bool {
        self.tasks
            .get(id)
            .is_some_and(|t| matches!(t.state, TaskState::Done { .. }))
    }

    /// The digest of every task this node knows (sent in its heartbeats).
    pub(super) fn digest(&self) -> Digest {
        let mut d = Digest::default();
        for t in self.tasks.values() {
            d.add(t.task.id, matches!(t.state, TaskState::Done { .. }));
        }
        d
    }

    /// The digest per block.
    fn ranges(&self) -> BTreeMap<(u32, u32), Digest> {
        let mut r: BTreeMap<(u32, u32), Digest> = BTreeMap::new();
        for t in self.tasks.values() {
            let id = t.task.id;
            r.entry(block(id))
                .or_default()
                .add(id, matches!(t.state, TaskState::Done { .. }));
        }
        r
    }

    /// A peer's heartbeat carried `theirs`: after [`PERSIST`] differing ones in a row, send this
    /// node's ranges (at most once per [`RESEND`] heartbeats).
    pub(super) fn compare_digest(&mut self, from: NodeId, theirs: Digest, now: u64) -> Vec<Action> {
        let same = theirs == self.digest();
        let resend = RESEND * self.cfg.heartbeat_ms;
        if !self.entropy.send_ranges(from, same, now, resend) {
            return Vec::new();
        }
        let ranges: Vec<Range> = self
            .ranges()
            .into_iter()
            .map(|((origin, block), digest)| Range {
                origin,
                block,
                digest,
            })
            .collect();
        if ranges.is_empty() {
            // A node that knows no task at all (its journal lost, the loss accepted) still says
            // so: its peers send their ids of every block it does not list, which is how it
            // learns the tasks, its own unfinished ones among them, that no heartbeat's recent
            // outcomes mention. Sending nothing left it empty for good.
            return vec![self.envelope(Body::Ranges(Vec::new()))];
        }
        ranges
            .chunks(MAX_IDS)
            .map(|c| self.envelope(Body::Ranges(c.to_vec())))
            .collect()
    }

    /// A peer's ranges: send this node's ids of each block where its digest differs (the blocks
    /// the peer lists, and those it does not list at all).
    pub(super) fn on_ranges(&mut self, theirs: &[Range], now: u64) -> Vec<Action> {
        let mine = self.ranges();
        let resend = RESEND * self.cfg.heartbeat_ms;
        let listed: std::collections::BTreeSet<(u32, u32)> =
            theirs.iter().map(|r| (r.origin, r.block)).collect();
        let differ: Vec<(u32, u32)> = theirs
            .iter()
            .filter(|r| mine.get(&(r.origin, r.block)) != Some(&r.digest))
            .map(|r| (r.origin, r.block))
            .chain(mine.keys().copied().filter(|b| !listed.contains(b)))
            .filter(|b| mine.contains_key(b))
            .filter(|b| self.entropy.ids_due(*b, now, resend))
            .collect();
        let mut out = Vec::new();
        for b in differ {
            self.entropy.ids_sent.insert(b, now);
            let ids: Vec<(u32, bool)> = self
                .tasks
                .values()
                .map(|t| t.task.id)
                .filter(|id| block(*id) == b)
                .map(|id| (id.0 as u32, self.done(id)))
                .collect();
            for chunk in ids.chunks(MAX_IDS) {
                out.push(self.envelope(Body::Ids(OriginIds {
                    origin: b.0,
                    ids: chunk.to_vec(),
                })));
            }
        }
        out
    }

    /// A peer's ids of one origin: ask for those this node lacks, or knows as unfinished where
    /// the peer says finished.
    pub(super) fn on_ids(&mut self, ids: &OriginIds, now: u64) -> Vec<Action> {
        let timeout = self.cfg.peer_timeout_ms;
        let lacking: Vec<TaskId> = ids
            .ids
            .iter()
            .map(|(seq, done)| {
                (
                    TaskId((u64::from(ids.origin) << 32) | u64::from(*seq)),
                    *done,
                )
            })
            .filter(|(id, done)| match self.tasks.get(*id) {
                None => true,
                Some(_) => *done && !self.done(*id),
            })
            .map(|(id, _)| id)
            .collect();
        let lacking = self
            .reconcile
            .ask_now(lacking, now, timeout, WANTS_PER_IDS * MAX_WANT);
        lacking
            .chunks(MAX_WANT)
            .map(|c| self.envelope(Body::Want(c.to_vec())))
            .collect()
    }

    /// A peer gone for good takes its count of differing heartbeats with it.
    pub(super) fn forget_entropy(&mut self, peer: NodeId) {
        self.entropy.differ.remove(&peer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_tells_sets_and_finished_flags_apart() {
        let mut a = Digest::default();
        let mut b = Digest::default();
        for i in 0..100u64 {
            a.add(TaskId(i), i % 3 == 0);
            b.add(TaskId(99 - i), (99 - i) % 3 == 0);
        }
        assert_eq!(a, b, "the order of the tasks does not matter");
        let mut c = b;
        c.add(TaskId(100), false);
        assert_ne!(a, c);
        let mut d = Digest::default();
        for i in 0..100u64 {
            d.add(TaskId(i), i % 3 == 0 && i != 42);
        }
        assert_ne!(a, d, "a finished flag counts");
    }
}
