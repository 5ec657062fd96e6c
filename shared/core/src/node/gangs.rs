//! Gangs in the node core: who proposes a pending gang, how a decided gang starts on every box
//! that hosts a member, and how it ends.
//!
//! - **Proposing.** The ledger's rule, as in the simulator
//!   ([`crate::ledger::Ledger::gang_proposal`]: the lowest-id round member among a pending
//!   gang's boxes places it, with the driver's placer, and proposes it whole instead of a single
//!   claim). Only boxes that state an address ([`super::NodeConfig::addr`]) host members: the
//!   others could not be reached at rendezvous.
//! - **Starting.** Every box decides the same gangs from the same round, and holds each as
//!   started. A box that decided the round with every member's proposal starts its members as
//!   one process group ([`Action::Start`] with a [`GangStart`]: their ranks and the rendezvous
//!   every member reads) and tells the others ([`Body::Started`]). A box that decided it without
//!   some proposal (rounds out of step) starts none of its own, since another box may have
//!   decided otherwise. It still holds the gang, so that it does not place it again, until a
//!   member box says it started; if none does within two peer timeouts, the gang goes back to
//!   pending. A gang that some boxes started without this one's members fails at rendezvous and
//!   is requeued.
//! - **Ending.** The gang succeeds when its host (rank 0's box) exits 0. When a box's members
//!   fail, every box stops its members and the gang goes back in the queue, up to its
//!   `restarts` (counted in real runs: starts from a complete round, this box's own or those a
//!   member box announced; a tentative hold that no box confirmed is none, though it raises the
//!   epoch); after that it fails. Either
//!   way the word goes to every box ([`Body::Failed`] with `requeue`, or the outcome), and each
//!   stops its members. When a box hosting a member goes silent (the peer timeout), every box puts the
//!   gang back to pending at once, freeing its units, and stops its own members of it: a gang
//!   missing a member cannot go on, and the silent box does the same on its side.

use super::{Action, NodeCore, TaskState};
use crate::ledger::Requeue;
use crate::protocol::{GangCommit, Proposal};
use crate::resources::Resources;
use crate::task::{NodeId, TaskId};
use crate::wire::{Body, Outcome};

/// The first port rank 0 of a gang may listen on; [`master_port`] picks one of the next 1000.
pub const GANG_PORTS: u16 = 29500;

/// The port rank 0 of gang `task` listens on (and its PS after it, one port each): the same on
/// every box, from the task id.
pub fn master_port(task: TaskId) -> u16 {
    GANG_PORTS + (task.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) as u16 % 1000
}

/// What a box needs to start its members of a gang.
#[derive(Debug, Clone, PartialEq)]
pub struct GangStart {
    /// The ranks of the members on this box, ascending (ranks below `ps` are PS).
    pub ranks: Vec<u32>,
    /// Parameter servers in the gang.
    pub ps: u32,
    /// Members in the gang.
    pub world_size: u32,
    /// Rank 0's box address.
    pub master_addr: String,
    /// Rank 0's port.
    pub master_port: u16,
    /// `address:port` of each PS, by rank.
    pub ps_hosts: Vec<String>,
    /// Address of each worker's box, by rank.
    pub worker_hosts: Vec<String>,
}

impl GangStart {
    /// The environment every member on this box gets (the launcher adds `RANK` and
    /// `LOCAL_RANK` per member).
    pub fn env(&self) -> Vec<(String, String)> {
        let join = |v: &[String]| v.join(",");
        vec![
            ("MASTER_ADDR".into(), self.master_addr.clone()),
            ("MASTER_PORT".into(), self.master_port.to_string()),
            ("WORLD_SIZE".into(), self.world_size.to_string()),
            ("TAPFINGER_GANG_PS".into(), self.ps.to_string()),
            (
                "TAPFINGER_GANG_RANKS".into(),
                self.ranks
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            ("TAPFINGER_PS_HOSTS".into(), join(&self.ps_hosts)),
            ("TAPFINGER_WORKER_HOSTS".into(), join(&self.worker_hosts)),
        ]
    }
}

impl NodeCore {
    /// The address gang members on `node` are reached at ("" if it states none).
    fn addr_of(&self, node: NodeId) -> &str {
        if node == self.cfg.me {
            &self.cfg.addr
        } else {
            self.peers.get(&node).map_or("", |p| p.state.addr.as_str())
        }
    }

    /// This node's gang claim for the round, if it proposes a pending gang that fits now: the
    /// ledger's rule ([`crate::ledger::Ledger::gang_proposal`]), hosting on round members that
    /// state an address, placed by the driver's placer and links ([`NodeCore::set_gangs`]).
    pub(super) fn gang_proposal(&mut self) -> Option<Proposal> {
        let members: std::collections::BTreeSet<NodeId> =
            self.protocol.members().iter().copied().collect();
        let hosts: std::collections::BTreeSet<NodeId> = members
            .iter()
            .copied()
            .filter(|n| !self.addr_of(*n).is_empty())
            .collect();
        let how = self.gangs;
        self.tasks.gang_proposal(
            self.cfg.me,
            &members,
            |n| hosts.contains(&n),
            how,
            &mut self.rng,
        )
    }

    /// The round's gangs: held as started here; this box's members start only if the round was
    /// `complete` (module doc).
    pub(super) fn start_gangs(
        &mut self,
        gangs: &[GangCommit],
        complete: bool,
        slot: u64,
        now: u64,
    ) -> Vec<Action> {
        let me = self.cfg.me;
        let mut out = Vec::new();
        for g in gangs {
            let pending = self
                .tasks
                .get(g.task)
                .is_some_and(|t| t.state == TaskState::Pending);
            if !pending {
                continue;
            }
            if !complete {
                self.reconcile
                    .gang_unconfirmed(g.task, now + 2 * self.cfg.peer_timeout_ms);
            }
            self.tasks.set_state(
                g.task,
                TaskState::Gang {
                    members: g.members.clone(),
                    progress: 0.0,
                    started: slot,
                },
            );
            let start = self.gang_start(g);
            let Some(m) = self.tasks.meta_mut(g.task) else {
                continue;
            };
            m.epoch = crate::wire::next_epoch(m.epoch, g.claimant);
            m.owner = Some(g.claimant);
            let spec = m.spec.clone();
            if complete {
                self.reconcile.gang_ran(g.task, m.epoch);
            }
            let mut alloc: Option<Resources> = None;
            for (n, a) in &g.members {
                if *n == me {
                    alloc = Some(match alloc {
                        Some(x) => x.checked_add(a).unwrap_or(x),
                        None => a.clone(),
                    });
                }
            }
            if let Some(alloc) = alloc.filter(|_| complete) {
                let epoch = m.epoch;
                self.copies.started(g.task);
                out.push(Action::Start {
                    task: g.task,
                    spec,
                    alloc: alloc.clone(),
                    gang: Some(start),
                });
                out.push(self.envelope(Body::Started {
                    task: g.task,
                    alloc,
                    epoch,
                }));
            }
        }
        out
    }

    fn gang_start(&self, g: &GangCommit) -> GangStart {
        let me = self.cfg.me;
        let ps = self
            .tasks
            .get(g.task)
            .and_then(|t| t.task.gang.as_ref().map(|s| s.ps))
            .unwrap_or(1);
        let host = g.members.first().map_or(me, |(n, _)| *n);
        let port = master_port(g.task);
        let addr = |n: NodeId| self.addr_of(n).to_string();
        GangStart {
            ranks: (0..g.members.len() as u32)
                .filter(|r| g.members[*r as usize].0 == me)
                .collect(),
            ps,
            world_size: g.members.len() as u32,
            master_addr: addr(host),
            master_port: port,
            ps_hosts: (0..ps)
                .map(|i| format!("{}:{}", addr(host), port + i as u16))
                .collect(),
            worker_hosts: g
                .members
                .iter()
                .skip(ps as usize)
                .map(|(n, _)| addr(*n))
                .collect(),
        }
    }

    /// This box's members of gang `task` exited (`stopped`: this box stopped them). The host's
    /// success ends the gang; any box's failure ends it as failed.
    pub(super) fn gang_exit(
        &mut self,
        task: TaskId,
        code: Option<i32>,
        stopped: bool,
    ) -> Vec<Action> {
        let me = self.cfg.me;
        let Some(t) = self.tasks.get(task) else {
            return Vec::new();
        };
        let TaskState::Gang { members, .. } = &t.state else {
            return Vec::new();
        };
        let host = members.first().map(|(n, _)| *n);
        if stopped || (code == Some(0) && host != Some(me)) {
            // Stopped here, or a worker box done before its host: the host says when the gang
            // is done.
            return Vec::new();
        }
        let epoch = t.meta.epoch;
        let restarts = t.task.gang.as_ref().map_or(0, |s| s.restarts);
        // Its real runs as this box knows them (this one among them: its members ran here).
        let runs = self.reconcile.gang_runs(task);
        if code != Some(0) && runs as u64 <= u64::from(restarts) {
            // A member failed and the gang may run again: every box stops its members and
            // puts it back in the queue.
            let mut out = self.requeue_gang(task);
            out.push(self.envelope(Body::Failed {
                task,
                reason: format!("a member on {} exited with {code:?}", self.cfg.name),
                requeue: true,
                attained: None,
            }));
            return out;
        }
        let o = Outcome {
            task,
            node: me,
            epoch,
            exit_code: code,
            work: None,
        };
        let mut out = self.end_gang(&o);
        self.copies.remember(o.clone());
        out.push(self.envelope(Body::Finished(o)));
        out
    }

    /// The gang of `o` ended: this box stops its members (if it has any) and records the end.
    pub(super) fn end_gang(&mut self, o: &Outcome) -> Vec<Action> {
        let me = self.cfg.me;
        self.reconcile.gang_ended(o.task);
        let here = self.tasks.get(o.task).is_some_and(|t| {
            matches!(&t.state, TaskState::Gang { members, .. } if members.iter().any(|(n, _)| *n == me))
        });
        let stop = (here && o.node != me).then(|| self.stop_copy(o.task));
        self.tasks.set_state(
            o.task,
            TaskState::Done {
                node: o.node,
                code: o.exit_code,
                epoch: o.epoch,
            },
        );
        self.protocol.mark_committed(o.task);
        stop.into_iter().collect()
    }

    /// A peer's heartbeat lists gang run `g` on its box. A start newer than any this node knows
    /// of (it missed the round, or was not among its members) is taken as running, so that
    /// this node does not place the gang again. A run it knows of is not taken again: it may
    /// have been requeued since the heartbeat was sent.
    pub(super) fn gang_heard(&mut self, g: &crate::wire::GangRun) {
        let Some(t) = self.tasks.get(g.task) else {
            return;
        };
        let newer = g.epoch > t.meta.epoch;
        if !newer || matches!(t.state, TaskState::Done { .. }) || t.task.gang.is_none() {
            return;
        }
        let slot = self.slot();
        self.tasks.set_state(
            g.task,
            TaskState::Gang {
                members: g.members.clone(),
                progress: 0.0,
                started: slot,
            },
        );
        if let Some(m) = self.tasks.meta_mut(g.task) {
            m.epoch = g.epoch;
        }
        self.protocol.mark_committed(g.task);
        self.reconcile.gang_confirmed(g.task);
    }

    /// Peer `from`'s heartbeat lists `listed` as the gang runs with members on its box. A gang
    /// this node believes has members there and that the peer has not listed for a peer timeout
    /// is no longer run there (the peer sent it back to the queue, or restarted, and this node
    /// missed the message): it goes back to pending here too, and this box stops its members.
    /// Kept, it held units on every member box in this node's books for good, and, with this
    /// node its proposer, was never placed again. (The wait is that of single copies: a box
    /// lists a gang from the round that starts it on, and a heartbeat may leave before that.)
    pub(super) fn gangs_unlisted(
        &mut self,
        from: NodeId,
        listed: &[crate::wire::GangRun],
        now: u64,
    ) -> Vec<Action> {
        let believed: Vec<TaskId> = self.tasks.gangs_on(from).collect();
        let mut out = Vec::new();
        for id in believed {
            if listed.iter().any(|g| g.task == id) {
                // Only this box's own wait ends: another member box may still leave it out
                // (every member box lists a running gang, so each heartbeat would reset it).
                self.reconcile.listed_by(id, from);
                continue;
            }
            if self.reconcile.unlisted_for(id, from, now) >= self.cfg.peer_timeout_ms {
                self.reconcile.listed(id);
                self.stats.gangs_broken += 1;
                out.extend(self.requeue_gang(id));
            }
        }
        out
    }

    /// A member box of gang `task` started its members at `epoch`: the gang is confirmed here,
    /// and that start was a run.
    pub(super) fn gang_started(&mut self, task: TaskId, epoch: u64) {
        self.reconcile.gang_started(task, epoch);
    }

    /// Gangs held from an incomplete round that no member box confirmed in time go back to
    /// pending (module doc).
    pub(super) fn unconfirmed_gangs(&mut self, now: u64) -> Vec<Action> {
        let due = self.reconcile.gangs_due(now);
        let mut out = Vec::new();
        for task in due {
            let held = self
                .tasks
                .get(task)
                .is_some_and(|t| matches!(t.state, TaskState::Gang { .. }));
            if held {
                out.extend(self.requeue_gang(task));
            }
        }
        out
    }

    /// Gang `task` goes back to pending here (a member failed and it may run again); this box
    /// stops its members of it. Returns the stop, if any.
    pub(super) fn requeue_gang(&mut self, task: TaskId) -> Vec<Action> {
        let me = self.cfg.me;
        let here = self.tasks.gangs_on(me).any(|g| g == task);
        let stop = here.then(|| self.stop_copy(task));
        self.reconcile.gang_confirmed(task);
        self.tasks.requeue(task, Requeue::GangBroken);
        self.protocol.release(task);
        stop.into_iter().collect()
    }

    /// Peer `gone` went silent: every gang with a member there goes back to pending (its units
    /// are free again), and this box stops its own members of them. The silent box, if it is
    /// only cut off, does the same on its side within the same peer timeout, so no member of
    /// the broken run outlives it by more than that.
    pub(super) fn break_gangs(&mut self, gone: NodeId) -> Vec<Action> {
        let me = self.cfg.me;
        let broken: Vec<TaskId> = self.tasks.gangs_on(gone).collect();
        let mut out = Vec::new();
        for task in broken {
            if self.tasks.gangs_on(me).any(|g| g == task) {
                out.push(self.stop_copy(task));
            }
            self.tasks.requeue(task, Requeue::GangBroken);
            self.protocol.release(task);
            self.stats.gangs_broken += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::gang::GangShape;
    use std::collections::BTreeMap;

    fn node() -> NodeCore {
        let mut n = super::super::test_core(0, Resources(vec![4, 0]));
        let shape = GangShape {
            workers: (1, 1),
            ps: 1,
            worker_demand: Resources(vec![1, 0]),
            ps_demand: Resources(vec![1, 0]),
            compute_seconds: 1.0,
            gradient_bytes: 1e6,
            restarts: 0,
            stages: Vec::new(),
        };
        let task = crate::task::Task {
            gang: Some(Box::new(shape)),
            ..super::super::test_task(7)
        };
        let spec = crate::spec::TaskSpec::from_toml(
            "command = [\"x\"]\n[gang]\nworkers = 1\nworker_demand = { cpu = 1 }\nps_demand = { cpu = 1 }\n",
        )
        .unwrap();
        n.submit(task, spec);
        n
    }

    fn commit() -> GangCommit {
        GangCommit {
            task: TaskId(7),
            claimant: NodeId(1),
            members: vec![
                (NodeId(1), Resources(vec![1, 0])),
                (NodeId(0), Resources(vec![1, 0])),
            ],
            claimants: 1,
        }
    }

    fn starts(out: &[Action]) -> Vec<&GangStart> {
        out.iter()
            .filter_map(|a| match a {
                Action::Start { gang: Some(g), .. } => Some(g),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_complete_round_starts_this_boxs_members_with_their_rendezvous_and_says_so() {
        let mut n = node();
        let out = n.start_gangs(&[commit()], true, 0, 1000);
        let s = starts(&out);
        assert_eq!(s.len(), 1);
        assert_eq!(
            (s[0].ranks.clone(), s[0].world_size, s[0].ps),
            (vec![1], 2, 1)
        );
        let env: BTreeMap<String, String> = s[0].env().into_iter().collect();
        assert_eq!(env["MASTER_PORT"], master_port(TaskId(7)).to_string());
        assert_eq!(env["TAPFINGER_GANG_RANKS"], "1");
        assert_eq!(env["TAPFINGER_WORKER_HOSTS"], "127.0.0.1");
        assert!(
            out.iter().any(
                |a| matches!(a, Action::Broadcast(e) if matches!(e.body, Body::Started { .. }))
            )
        );
        assert_eq!(n.tasks().held(NodeId(0)), Resources(vec![1, 0]));
    }

    #[test]
    fn an_incomplete_round_holds_the_gang_without_starting_and_requeues_it_unless_confirmed() {
        // Nobody confirms: after two peer timeouts it is pending again, and nothing is held.
        let mut n = node();
        let out = n.start_gangs(&[commit()], false, 0, 1000);
        assert!(starts(&out).is_empty(), "started from an incomplete round");
        assert!(matches!(
            n.tasks()[&TaskId(7)].state,
            TaskState::Gang { .. }
        ));
        assert!(n.unconfirmed_gangs(1000 + 2 * 300 - 1).is_empty());
        assert!(matches!(
            n.tasks()[&TaskId(7)].state,
            TaskState::Gang { .. }
        ));
        n.unconfirmed_gangs(1000 + 2 * 300);
        assert_eq!(n.tasks()[&TaskId(7)].state, TaskState::Pending);
        assert_eq!(n.tasks().held(NodeId(0)), Resources(vec![0, 0]));
        // A member box confirms: it stays held (this box will not place it again meanwhile).
        let mut n = node();
        n.start_gangs(&[commit()], false, 0, 1000);
        n.gang_started(TaskId(7), 1);
        n.unconfirmed_gangs(10_000);
        assert!(matches!(
            n.tasks()[&TaskId(7)].state,
            TaskState::Gang { .. }
        ));
    }

    #[test]
    fn a_heartbeat_tells_a_box_that_missed_the_start_but_not_one_that_requeued_since() {
        let mut n = node();
        let run = crate::wire::GangRun {
            task: TaskId(7),
            epoch: 1,
            members: commit().members,
        };
        n.gang_heard(&run);
        assert!(matches!(
            n.tasks()[&TaskId(7)].state,
            TaskState::Gang { .. }
        ));
        assert_eq!(n.tasks()[&TaskId(7)].meta.epoch, 1);
        assert!(
            n.protocol.is_committed(TaskId(7)),
            "it would place the gang again"
        );
        // Requeued here since (a member failed): the same run in a late heartbeat is not taken.
        n.requeue_gang(TaskId(7));
        n.gang_heard(&run);
        assert_eq!(n.tasks()[&TaskId(7)].state, TaskState::Pending);
    }

    /// A worker box's member ends before its host does (the usual order); the host's finish
    /// then ends the gang here. The member is gone already: its units are free, not kept for a
    /// stop of a process that no longer exists (kept, the box never hosted the gang again).
    #[test]
    fn a_member_that_ended_before_its_gang_keeps_no_units_after_the_gang_ends() {
        let mut n = node();
        n.start_gangs(&[commit()], true, 0, 1000);
        assert_eq!(n.free(), Resources(vec![3, 0]));
        assert!(n.on_exit(TaskId(7), Some(0), false).is_empty());
        let done = Outcome {
            task: TaskId(7),
            node: NodeId(1),
            epoch: 1,
            exit_code: Some(0),
            work: None,
        };
        n.apply_outcome(done);
        assert!(n.draining().is_empty(), "{:?}", n.draining());
        assert_eq!(n.free(), Resources(vec![4, 0]));
    }

    /// A member still running when its gang is sent back to the queue is stopped, and its
    /// units stay taken until it has ended.
    #[test]
    fn a_member_stopped_with_its_gang_keeps_its_units_until_it_ends() {
        let mut n = node();
        n.start_gangs(&[commit()], true, 0, 1000);
        let out = n.requeue_gang(TaskId(7));
        assert!(matches!(out.as_slice(), [Action::Stop { .. }]), "{out:?}");
        assert_eq!(n.tasks()[&TaskId(7)].state, TaskState::Pending);
        assert_eq!(n.free(), Resources(vec![3, 0]));
        n.on_exit(TaskId(7), None, true);
        assert_eq!(n.free(), Resources(vec![4, 0]));
    }

    /// A member box stops listing a gang this box runs members of (it sent the gang back to
    /// the queue in a message this box missed): after a peer timeout, the gang is pending here
    /// too and this box's members are stopped; a listing in time keeps it.
    #[test]
    fn a_gang_its_member_box_no_longer_lists_goes_back_to_pending() {
        let run = crate::wire::GangRun {
            task: TaskId(7),
            epoch: 1,
            members: commit().members,
        };
        let mut n = node();
        n.start_gangs(&[commit()], true, 0, 1000);
        assert!(
            n.gangs_unlisted(NodeId(1), std::slice::from_ref(&run), 1100)
                .is_empty()
        );
        assert!(n.gangs_unlisted(NodeId(1), &[], 1200).is_empty());
        assert!(n.gangs_unlisted(NodeId(1), &[run], 1400).is_empty());
        assert!(n.gangs_unlisted(NodeId(1), &[], 1500).is_empty());
        assert!(matches!(
            n.tasks()[&TaskId(7)].state,
            TaskState::Gang { .. }
        ));
        let out = n.gangs_unlisted(NodeId(1), &[], 1500 + 300);
        assert!(matches!(out.as_slice(), [Action::Stop { .. }]), "{out:?}");
        assert_eq!(n.tasks()[&TaskId(7)].state, TaskState::Pending);
        assert!(
            !n.protocol.is_committed(TaskId(7)),
            "it would never be placed again"
        );
    }

    /// A gang held from an incomplete round that no box confirmed, then really started, whose
    /// member fails: with one restart it runs again (the tentative hold raised the epoch, and
    /// the epoch once counted it as a run, so the gang failed without its restart).
    #[test]
    fn a_tentative_hold_is_not_a_run_for_the_restarts() {
        let mut n = node();
        let mut task = (*n.tasks()[&TaskId(7)].task).clone();
        if let Some(s) = task.gang.as_mut() {
            s.restarts = 1;
        }
        n.tasks.replace_task(std::sync::Arc::new(task)).unwrap();
        n.start_gangs(&[commit()], false, 0, 1000);
        n.unconfirmed_gangs(1000 + 2 * 300);
        assert_eq!(n.tasks()[&TaskId(7)].state, TaskState::Pending);
        let out = n.start_gangs(&[commit()], true, 1, 2000);
        assert_eq!(starts(&out).len(), 1);
        // Two starts: the tentative hold's and the real one, each a counter above the last.
        assert_eq!(
            crate::wire::epoch_counter(n.tasks()[&TaskId(7)].meta.epoch),
            2
        );
        let out = n.on_exit(TaskId(7), Some(1), false);
        assert!(
            out.iter().any(|a| matches!(a, Action::Broadcast(e)
                if matches!(e.body, Body::Failed { requeue: true, .. }))),
            "failed without its restart: {out:?}"
        );
        assert_eq!(n.tasks()[&TaskId(7)].state, TaskState::Pending);
        // Its second real run fails too: no restart left.
        n.start_gangs(&[commit()], true, 2, 3000);
        let out = n.on_exit(TaskId(7), Some(1), false);
        assert!(
            out.iter().any(|a| matches!(a, Action::Broadcast(e)
                if matches!(e.body, Body::Finished(_)))),
            "{out:?}"
        );
    }
}
