//! The loop's state besides the core, grouped with its rules: how the ends of this box's
//! processes are read ([`Ends`]), the box's own upkeep ([`Upkeep`]: the quorum's log, the lease
//! file, the members file, the sweep of old task logs), what was turned away from peers
//! ([`Turned`]) and where the state goes out ([`Outlets`]: status, replies, metrics, history).

use super::super::{Files, Status};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use tapfinger::node::{NodeCore, TaskState};
use tapfinger::{NodeId, TaskId};

/// How this box reads the ends of its processes: which it stopped itself (their exit is no
/// outcome), which it stops to start again with other GPU devices, which ran to completion, and
/// which outcomes the journal holds.
#[derive(Default)]
pub(super) struct Ends {
    /// Tasks this loop asked the executor to stop.
    stopped: BTreeSet<TaskId>,
    /// Tasks stopped to start again with other GPU devices (an elastic re-share changed their
    /// GPU count): they start again at once with `TAPFINGER_RESUME=1`.
    restarting: BTreeSet<TaskId>,
    /// Tasks run to completion here, in order.
    finished: Vec<TaskId>,
    /// Outcomes already journaled.
    recorded: BTreeSet<TaskId>,
}

impl Ends {
    /// With the outcomes the journal already holds.
    pub(super) fn new(recorded: BTreeSet<TaskId>) -> Self {
        Self {
            recorded,
            ..Self::default()
        }
    }

    /// This loop stops `task`'s process: its exit is no outcome.
    pub(super) fn stopping(&mut self, task: TaskId) {
        self.stopped.insert(task);
    }

    /// A new run of `task` starts here: an earlier stop no longer describes it.
    pub(super) fn starting(&mut self, task: TaskId) {
        self.stopped.remove(&task);
    }

    /// `task` is stopped to start again with other devices; false if it already is.
    pub(super) fn restart(&mut self, task: TaskId) -> bool {
        self.restarting.insert(task)
    }

    /// `task`'s process exited: whether it is to start again (stopped for new devices, and not
    /// stopped for good since).
    pub(super) fn restarts(&mut self, task: TaskId) -> bool {
        self.restarting.remove(&task) && !self.stopped.contains(&task)
    }

    /// `task`'s process exited: whether this loop had asked it to stop.
    pub(super) fn asked(&mut self, task: TaskId) -> bool {
        self.stopped.remove(&task)
    }

    /// `task` ran to completion here.
    pub(super) fn finished(&mut self, task: TaskId) {
        self.finished.push(task);
    }

    /// The tasks run to completion here, in order.
    pub(super) fn finished_here(&self) -> &[TaskId] {
        &self.finished
    }

    /// `task`'s outcome goes to the journal now: false if it is there already.
    pub(super) fn journal(&mut self, task: TaskId) -> bool {
        self.recorded.insert(task)
    }
}

/// Messages and connections turned away from peers.
#[derive(Default, Clone, Copy)]
pub(super) struct Turned {
    /// Malformed or spoofed messages dropped.
    pub(super) dropped: u64,
    /// Connections and requests refused from peers off the allowlist.
    pub(super) refused: u64,
}

/// The box's own upkeep after every step (module doc).
#[derive(Default)]
pub(super) struct Upkeep {
    /// When the lease file was last touched (at most every 200 ms).
    last_touch: Option<Instant>,
    /// When old task logs and records were last swept (hourly, when a retention is set).
    last_sweep: Option<Instant>,
    /// Whether a quorum held at the last upkeep (a change is logged once, not every step).
    had_quorum: Option<bool>,
    /// When the size history was last saved, and how many sizes it had learned then.
    sizes_saved: Option<(Instant, u64)>,
}

/// How often the size history is saved while it learns (a restart loses at most this much of
/// it).
const SAVE_SIZES_EVERY: Duration = Duration::from_secs(60);

impl Upkeep {
    /// Log a change of quorum; touch the lease file while the quorum holds; save the members
    /// when they changed; sweep task logs past their retention (not those of tasks whose end is
    /// not journaled yet).
    pub(super) fn run(
        &mut self,
        core: &mut NodeCore,
        files: &Files,
        store: Option<&crate::store::Store>,
        now: u64,
    ) {
        let quorum = core.has_quorum(now);
        if self.had_quorum != Some(quorum) {
            let known = core.known().len();
            if quorum {
                tracing::info!(
                    members = known,
                    "a quorum of the cluster is reachable: lease held"
                );
            } else {
                tracing::warn!(
                    members = known,
                    autonomy_ms = core.config().autonomy_ms,
                    "no quorum of the cluster is reachable: tasks here keep running for the autonomy time"
                );
            }
            self.had_quorum = Some(quorum);
        }
        if quorum
            && self
                .last_touch
                .is_none_or(|t| t.elapsed() >= Duration::from_millis(200))
        {
            self.last_touch = Some(Instant::now());
            if let Err(e) = crate::supervise::touch(&files.lease, &core.id().0.to_string()) {
                tracing::warn!(path = %files.lease.display(), error = %e, "cannot touch the lease file");
            }
        }
        if core.take_known_changed()
            && let Err(e) = crate::store::save_members(&files.members, core.known())
        {
            tracing::warn!(path = %files.members.display(), error = %e, "cannot save the members");
        }
        self.save_sizes(core.tasks().sizes(), &files.sizes, false);
        if let Some(retention) = files.retention
            && self
                .last_sweep
                .is_none_or(|t| t.elapsed() >= Duration::from_secs(3600))
        {
            self.last_sweep = Some(Instant::now());
            let me = core.id();
            // Running here, or ended without the end journaled: an exit record is never deleted
            // before its outcome is journaled (after a loss it is what the repair reads).
            let mut keep: std::collections::BTreeSet<_> = core
                .tasks()
                .iter()
                .filter(|(_, t)| matches!(&t.state, TaskState::Running { node, .. } if *node == me))
                .map(|(id, _)| id)
                .collect();
            keep.extend(
                store
                    .map(crate::store::Store::unsettled)
                    .unwrap_or_default(),
            );
            let dirs: Vec<&std::path::Path> = files.sweep.iter().map(|d| d.as_path()).collect();
            let n = crate::recover::sweep(&dirs, retention, &keep);
            if n > 0 {
                tracing::info!(files = n, "deleted task logs past their retention");
            }
        }
    }
}

impl Upkeep {
    /// Save the size history if it learned since it was last saved, at most every
    /// [`SAVE_SIZES_EVERY`] unless `now` (a graceful stop): written aside, then renamed over
    /// the old file, so a crash leaves the old history or the new, never half of one.
    pub(super) fn save_sizes(
        &mut self,
        book: &tapfinger::sizes::SizeBook,
        path: &std::path::Path,
        now: bool,
    ) {
        let learned = book.learned();
        let due = self
            .sizes_saved
            .is_none_or(|(t, n)| n != learned && (now || t.elapsed() >= SAVE_SIZES_EVERY));
        if !due || (self.sizes_saved.is_none() && learned == 0) {
            return;
        }
        self.sizes_saved = Some((Instant::now(), learned));
        let tmp = path.with_extension("json.tmp");
        let written = serde_json::to_vec(book)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), error = %e, "cannot save the size history");
        }
    }
}

/// Start and finish estimates by task ([`tapfinger::ledger::Ledger::expected`]).
type Estimates = std::sync::Arc<std::collections::BTreeMap<TaskId, tapfinger::ledger::Expected>>;

/// Where the loop's state goes out: the status (and the API replies waiting for it), `/metrics`,
/// the dashboard's history, and the names of the boxes heard of.
pub(super) struct Outlets {
    /// Replies to API commands wait until the status they imply is published, so a caller that
    /// reads the status right after the reply sees its own change (a cancelled task is done).
    replies: Vec<Box<dyn FnOnce() + Send>>,
    /// What `/metrics` shows, updated at every publication.
    pub(super) metrics: std::sync::Arc<crate::metrics::AgentMetrics>,
    /// When the status was last published.
    published: Option<Instant>,
    /// The name of every box heard of since the agent started, by id.
    box_names: std::collections::BTreeMap<NodeId, String>,
    /// The dashboard's history, sampled once a slot.
    history: std::sync::Arc<crate::history::History>,
    /// The slot of the last sample.
    sampled_slot: Option<u64>,
    /// The start and finish estimates, and the slot and task states they were made for (made
    /// again once either changes, not at every publication).
    expected: Option<(u64, u64, Estimates)>,
    /// How far the estimates published were from the starts ([`Outlets::start_error`]).
    start_errors: tapfinger::ledger::StartErrors,
}

impl Outlets {
    pub(super) fn new(
        metrics: std::sync::Arc<crate::metrics::AgentMetrics>,
        history: std::sync::Arc<crate::history::History>,
    ) -> Self {
        Self {
            replies: Vec::new(),
            metrics,
            published: None,
            box_names: Default::default(),
            history,
            sampled_slot: None,
            expected: None,
            start_errors: Default::default(),
        }
    }

    /// Answer an API command once the status it implies is out.
    pub(super) fn reply_after_publishing(&mut self, reply: Box<dyn FnOnce() + Send>) {
        self.replies.push(reply);
    }

    /// Whether the status is due: what runs here changed, a reply waits, or `every` has passed.
    pub(super) fn due(&self, runs_changed: bool, every: Duration) -> bool {
        runs_changed
            || !self.replies.is_empty()
            || self.published.is_none_or(|t| t.elapsed() >= every)
    }

    /// The ledger's start and finish estimates now ([`tapfinger::ledger::Ledger::expected`]),
    /// made again when the slot or a task's state changed.
    pub(super) fn expected(&mut self, core: &NodeCore) -> Estimates {
        let (slot, changes) = (core.slot(), core.tasks().changes());
        match &self.expected {
            Some((s, c, x)) if *s == slot && *c == changes => x.clone(),
            _ => {
                let x = std::sync::Arc::new(core.tasks().expected(slot));
                self.start_errors.note(slot, &x, core.tasks());
                self.expected = Some((slot, changes, x.clone()));
                x
            }
        }
    }

    /// How far the start estimates this box published were from when the tasks started.
    pub(super) fn start_error(&self) -> Option<tapfinger::ledger::StartError> {
        self.start_errors.summary()
    }

    /// The name of every box heard of, this one's (`me`) included: tasks a box ran are listed
    /// after it has gone.
    pub(super) fn names(
        &mut self,
        core: &NodeCore,
        me: NodeId,
    ) -> std::collections::BTreeMap<NodeId, String> {
        for (id, name, _, _) in core.peer_table() {
            self.box_names.insert(id, name);
        }
        self.box_names.insert(me, core.config().name.clone());
        self.box_names.clone()
    }

    /// Send out `snapshot`: `/metrics` (with the rounds' latencies), the history once a slot
    /// (returns true then, for the caller's own once-a-slot samples), the status if it changed,
    /// then the replies waiting for it.
    pub(super) fn publish(
        &mut self,
        snapshot: Status,
        latencies: &[u64],
        status: &tokio::sync::watch::Sender<std::sync::Arc<Status>>,
    ) -> bool {
        self.published = Some(Instant::now());
        self.metrics.update(&snapshot, latencies);
        let sampled = self.sampled_slot != Some(snapshot.slot);
        if sampled {
            self.sampled_slot = Some(snapshot.slot);
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            self.history.record(&snapshot, now);
        }
        status.send_if_modified(|s| {
            if **s == snapshot {
                false
            } else {
                *s = std::sync::Arc::new(snapshot);
                true
            }
        });
        for r in self.replies.drain(..) {
            r();
        }
        sampled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapfinger::sizes::{Identity, Query, SizeBook};

    fn learned(n: usize) -> SizeBook {
        let mut b = SizeBook::new();
        let who = Identity::default();
        let min = tapfinger::Resources(vec![1, 0, 1]);
        for i in 0..n {
            let q = Query {
                identity: &who,
                class: tapfinger::TaskTypeId(0),
                min_demand: &min,
            };
            b.observe(&q, 10.0 + i as f64);
        }
        b
    }

    /// The history is written once it learned, not again until it learns more and the period
    /// passed (or a stop asks), and what is on disk reads back as what was learned.
    #[test]
    fn the_size_history_is_saved_when_it_learned_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sizes.json");
        let mut u = Upkeep::default();
        u.save_sizes(&SizeBook::new(), &path, false);
        assert!(!path.exists(), "nothing learned, nothing written");
        u.save_sizes(&learned(3), &path, false);
        let on_disk: SizeBook = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(on_disk.learned(), 3);
        // Learned more within the period: not yet; on a stop: at once.
        u.save_sizes(&learned(5), &path, false);
        let on_disk: SizeBook = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(on_disk.learned(), 3);
        u.save_sizes(&learned(5), &path, true);
        let on_disk: SizeBook = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(on_disk.learned(), 5);
        assert!(!dir.path().join("sizes.json.tmp").exists());
    }
}
