//! The agent's graceful stop (SIGTERM, the packaged unit's stop): a preemption of everything
//! here, then a hand-off ([`tapfinger::node::NodeCore::leave`]).
//!
//! The loop goes on while the box leaves: its copies get their checkpoint signal and grace; each
//! end is journaled and handed back as it is reported (a copy that exits 0 within its grace has
//! succeeded); heartbeats keep its peers from counting it silent meanwhile. Once nothing runs
//! here the box says farewell (its peers drop it from their quorum) and the loop ends. The wait
//! is bounded by the longest grace of the copies here plus a margin, and by the agent's
//! `stop_timeout_seconds`; past it, or at a second stop signal, the copies still running are
//! stopped at once, and their ends awaited a little longer. A copy whose end is never reported
//! is not handed back: its box says no farewell, and its peers treat it as a box that vanished.

use super::Daemon;
use std::time::{Duration, Instant};
use tapfinger::node::{Action, TaskState};
use tokio::sync::oneshot;

/// Time for a copy's end to be reported after its grace (its supervisor's poll, the journal).
const MARGIN: Duration = Duration::from_secs(5);

/// How long the ends of copies stopped at once are awaited before the agent exits anyway.
const AFTER_STOP: Duration = Duration::from_secs(5);

/// A graceful stop under way.
pub(super) struct Leaving {
    /// Who waits for the stop to be over.
    replies: Vec<oneshot::Sender<()>>,
    /// When the copies still running are stopped at once.
    deadline: Instant,
    /// When they were (a second signal, or the deadline).
    stopped_at: Option<Instant>,
}

impl Daemon {
    /// Begin the graceful stop (or, if one is under way, wait for it too): the core's actions.
    pub(super) fn begin_leaving(&mut self, reply: oneshot::Sender<()>) -> Vec<Action> {
        if let Some(l) = &mut self.leaving {
            l.replies.push(reply);
            return Vec::new();
        }
        let me = self.me;
        let core = &self.p.core;
        let copies: Vec<_> = core.tasks().running_on(me).collect();
        let grace = copies
            .iter()
            .filter_map(|t| core.tasks().get(*t))
            .map(|e| Duration::from_secs(e.meta.spec.grace_seconds.clamp(0, 3600) as u64))
            .max()
            .unwrap_or_default();
        let wait = (grace + MARGIN).min(self.stop_timeout);
        tracing::info!(
            tasks = copies.len(),
            wait_s = wait.as_secs(),
            "stopping: each task gets its checkpoint signal and grace, then goes back to the cluster"
        );
        self.leaving = Some(Leaving {
            replies: vec![reply],
            deadline: Instant::now() + wait,
            stopped_at: None,
        });
        self.p.core.leave()
    }

    /// A second stop signal: the copies still running are stopped at once.
    pub(super) fn stop_now(&mut self) -> Vec<Action> {
        match &mut self.leaving {
            Some(l) if l.stopped_at.is_none() => {
                tracing::warn!("stopping the tasks still running at once");
                l.stopped_at = Some(Instant::now());
                self.p.core.leave_now()
            }
            _ => Vec::new(),
        }
    }

    /// After every step of a graceful stop: carry it on; whether the loop ends now (its replies
    /// sent).
    pub(super) async fn leaving_step(&mut self) -> bool {
        let Some(l) = &mut self.leaving else {
            return false;
        };
        let now = Instant::now();
        // A copy a round started after the stop began gets its checkpoint signal too.
        let mut actions = self.p.core.leave();
        let over = if self.p.core.nothing_runs_here() {
            actions.extend(self.p.core.farewell());
            true
        } else {
            match l.stopped_at {
                None if now >= l.deadline => {
                    tracing::warn!(
                        "the tasks' grace is over (or the agent's stop_timeout_seconds): stopping \
                         the tasks still running at once"
                    );
                    l.stopped_at = Some(now);
                    actions.extend(self.p.core.leave_now());
                    false
                }
                Some(t) if now >= t + AFTER_STOP => {
                    let left: Vec<String> = self
                        .p
                        .core
                        .tasks()
                        .iter()
                        .filter(|(_, e)| matches!(e.state, TaskState::Running { node, .. } if node == self.me))
                        .map(|(id, _)| id.to_string())
                        .collect();
                    tracing::warn!(
                        tasks = %left.join(","),
                        "exiting with copies whose end was not reported: their supervisors end them when this box's lease runs out, and the cluster runs them again after that"
                    );
                    true
                }
                _ => false,
            }
        };
        for a in actions {
            self.execute(a).await;
        }
        if !over {
            return false;
        }
        self.journal_outcomes();
        // Give the hand-backs and the farewell a moment to leave.
        tokio::time::sleep(Duration::from_millis(200)).await;
        if let Some(l) = self.leaving.take() {
            for r in l.replies {
                let _ = r.send(());
            }
        }
        true
    }
}
