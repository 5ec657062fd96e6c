//! A task's logs through any box: the API of a box that did not run the task asks the box that
//! did (its last runner, as the ledger knows it) over the peers' request-response protocol
//! ([`Request::Logs`]), and a box answers such a request from its own log files. Peers are the
//! cluster's members (its key, its allowlist), which the API's token holders of any box already
//! trust with every task's spec.
//!
//! Answers are matched to the questions by peer and task, oldest first; a failed request fails
//! the oldest question to that peer. Questions are bounded per peer, and one whose asker gave up
//! (the API's own timeout) is dropped when the answer comes.

use super::Daemon;
use crate::learn::{Request, Response, TaskLogs};
use libp2p::PeerId;
use std::collections::{BTreeMap, VecDeque};
use tapfinger::{NodeId, TaskId};
use tokio::sync::oneshot;

/// Questions waiting for one peer's answers, at most.
const MAX_WAITING: usize = 64;

/// Where an answer goes: the task's logs, or why there are none.
pub(crate) type LogsReply = oneshot::Sender<Result<TaskLogs, String>>;

/// The peers' ids and the questions waiting for their answers.
#[derive(Default)]
pub(super) struct PeerLogs {
    /// Each peer's libp2p id by node id (from its messages and connections).
    peers: BTreeMap<NodeId, PeerId>,
    /// Per peer and task: the askers waiting, oldest first.
    waiting: BTreeMap<(PeerId, u64), VecDeque<LogsReply>>,
}

impl PeerLogs {
    /// `peer` speaks for node `node`.
    pub(super) fn heard(&mut self, node: NodeId, peer: PeerId) {
        self.peers.insert(node, peer);
    }

    /// The answer of `from` about `task`.
    fn answer(&mut self, from: PeerId, task: u64, r: Result<TaskLogs, String>) {
        if let Some(q) = self.waiting.get_mut(&(from, task)) {
            if let Some(tx) = q.pop_front() {
                let _ = tx.send(r);
            }
            if q.is_empty() {
                self.waiting.remove(&(from, task));
            }
        }
    }

    /// A request to `to` failed: its oldest question fails.
    pub(super) fn failed(&mut self, to: PeerId, reason: &str) -> bool {
        let Some(key) = self.waiting.keys().find(|(p, _)| *p == to).copied() else {
            return false;
        };
        self.answer(
            to,
            key.1,
            Err(format!("the box that ran it did not answer: {reason}")),
        );
        true
    }
}

impl Daemon {
    /// The API asks for the logs of `task`, which ran on `node`: ask that box.
    pub(super) async fn ask_logs(
        &mut self,
        node: NodeId,
        task: TaskId,
        from: (Option<u64>, Option<u64>),
        reply: LogsReply,
    ) {
        let Some(peer) = self.peer_logs.peers.get(&node).copied() else {
            let _ = reply.send(Err(format!(
                "the box that ran it (node {}) has not been heard since this agent started",
                node.0
            )));
            return;
        };
        let q = self.peer_logs.waiting.entry((peer, task.0)).or_default();
        q.retain(|tx| !tx.is_closed());
        if q.len() >= MAX_WAITING {
            let _ = reply.send(Err("too many questions to that box at once".into()));
            return;
        }
        q.push_back(reply);
        let r = Request::Logs {
            task: task.0,
            stdout_from: from.0,
            stderr_from: from.1,
        };
        if let Err(e) = self.p.net.request(peer, r).await {
            self.peer_logs.failed(peer, &e.to_string());
        }
    }

    /// A peer's answer: whether it was one about logs (else it is the coordinator link's).
    pub(super) fn logs_answer(&mut self, from: PeerId, r: &Response) -> bool {
        let Response::Logs { task, logs } = r else {
            return false;
        };
        let answer = match logs {
            Some(l) => Ok((**l).clone()),
            None => {
                Err("the box that ran it has no logs of it (swept after the log retention?)".into())
            }
        };
        self.peer_logs.answer(from, *task, answer);
        true
    }

    /// A peer asks for a task's logs on this box: the answer, from the log files.
    pub(super) fn logs_for_peer(&self, task: u64, from: (Option<u64>, Option<u64>)) -> Response {
        let none = Response::Logs { task, logs: None };
        let Some(dir) = self.p.files.as_ref().map(|f| f.logs.clone()) else {
            return none;
        };
        let out = crate::logs::read_log(&dir.join(format!("{task}.stdout")), from.0);
        let err = crate::logs::read_log(&dir.join(format!("{task}.stderr")), from.1);
        if out.is_none() && err.is_none() {
            return none;
        }
        Response::Logs {
            task,
            logs: Some(Box::new(TaskLogs {
                stdout_size: out.as_ref().map_or(0, |o| o.1),
                stderr_size: err.as_ref().map_or(0, |e| e.1),
                stdout: out.map(|o| o.0).unwrap_or_default(),
                stderr: err.map(|e| e.0).unwrap_or_default(),
            })),
        }
    }
}
