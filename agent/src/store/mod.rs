//! The agent's durable task store: an append-only journal (`<data_dir>/tasks.journal`) of
//! checksummed records ([`frame`]), a commit counter beside it ([`commit`]), compaction and
//! repair ([`compact`]), and the lock that keeps one agent per data directory ([`lock`]).
//!
//! What it records, each record `fsync`ed before the agent acts on it:
//! - `accepted`: a task submitted here, before the API answers that it was accepted;
//! - `run`: a task this node started (any node may have accepted it), with its epoch, allocation,
//!   GPU devices and the supervisor's pid and start time, so that a restarted agent adopts it;
//! - `ended`: a run here ended (finished, stopped or failed to start);
//! - `outcome`: a task accepted here is known finished (who ran it, exit code, epoch) — the
//!   finished history a restarted agent shows;
//! - `ids`: the largest id accepted here (a compacted journal's first record);
//! - `preempted`: a task was preempted here (its count and the work it lost so far, the latest
//!   record wins), so that `show`, `tasks` and `/metrics` keep them across a restart.
//!
//! On restart the agent replays the journal: ids continue after the largest one accepted here,
//! unfinished tasks are announced again, runs without an end are adopted (or found finished, or
//! lost), and the history is restored, so an accepted task is never silently dropped nor its id
//! reused.
//!
//! **A write that fails** (a full disk, an I/O error) leaves the journal as it was: the bytes of
//! a short write are cut off again before anything else is written. An `accepted` or `run` record
//! that cannot be written is refused to its caller (the API answers 507 or 503 with
//! `Retry-After`; a start is undone and the task goes back to the queue); an `outcome`, `ended`
//! or `preempted` record is kept in memory, in order, and written as soon as the disk takes
//! writes again ([`Store::retry`]). [`Store::health`] says whether the store is failing.
//!
//! **Damage** (`store/open.rs`): a torn last write is cut off; a record that does not
//! check out, a gap in the commit numbers, or a journal shorter than its commit counter (records
//! lost: truncated, emptied, deleted, restored from an older copy) make [`Store::open`] refuse,
//! naming what was lost and the command that accepts the loss (`tapfinger-agent repair-journal`).
//!
//! **Size.** Once the journal has grown to twice its live records (and at least
//! [`StoreOptions::compact_min_lines`]), it is rewritten as a snapshot of them; finished tasks
//! beyond the [`StoreOptions::keep_finished`] most recent are forgotten then. So its size and the
//! agent's restart time follow the live tasks, not all the tasks it ever saw.

pub mod commit;
pub mod compact;
mod error;
pub mod frame;
pub mod lock;
mod open;

use error::is_full;
pub use error::{Health, REFUSED_FAILING, REFUSED_FULL, StoreError, free_bytes};

use crate::exec::Handle;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tapfinger::spec::TaskSpec;
use tapfinger::{NodeId, Resources, Task, TaskId};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Record {
    Accepted {
        task: Box<Task>,
        spec: Box<TaskSpec>,
    },
    /// Finished, details unknown (journals from before outcomes were recorded).
    Finished {
        task: TaskId,
    },
    Outcome {
        task: TaskId,
        node: NodeId,
        code: Option<i32>,
        epoch: u64,
    },
    Run(Box<Run>),
    Ended {
        task: TaskId,
    },
    Ids {
        last: TaskId,
    },
    Preempted {
        task: TaskId,
        times: u32,
        work_lost: f64,
    },
}

/// A task started on this node, as the journal keeps it until it ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// The task.
    pub task: Task,
    /// Its spec.
    pub spec: TaskSpec,
    /// Epoch of this start.
    pub epoch: u64,
    /// Allocation (grid units).
    pub alloc: Resources,
    /// GPU devices handed to it.
    pub gpus: Vec<u32>,
    /// Its supervisor's process, if the executor supervises tasks.
    pub handle: Option<Handle>,
}

/// A finished task accepted here: who ran it, its exit code and the epoch of that copy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Finish {
    /// Node that ran it (or cancelled it).
    pub node: NodeId,
    /// Exit code.
    pub code: Option<i32>,
    /// Epoch of the copy.
    pub epoch: u64,
}

/// How the journal keeps itself small.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoreOptions {
    /// Finished tasks accepted here that a compaction keeps (the most recent ones), with their
    /// specs and outcomes: the history a restarted agent shows.
    pub keep_finished: usize,
    /// No compaction below this many lines.
    pub compact_min_lines: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            keep_finished: 10_000,
            compact_min_lines: 4096,
        }
    }
}

/// How often a failing store tries its backlog again, and a store that is not failing looks at
/// the free space.
const RETRY_EVERY: Duration = Duration::from_secs(1);

/// Below this much free space in the data directory the store counts as full before any write
/// fails: what a start writes (its journal record, the room kept for its exit record and process
/// group, its share file, the first blocks of its logs) takes a few pages, so a start with less
/// would fail half-way; submissions are refused (507) and starts wait instead.
pub const FULL_BELOW: u64 = 64 * 1024;

/// Free space at which a store counted full takes writes again (above [`FULL_BELOW`], so that a
/// disk at the edge does not flap).
pub const ROOM_AGAIN: u64 = 128 * 1024;

/// The journal.
pub struct Store {
    /// The journal file.
    path: PathBuf,
    /// It, open for appending.
    file: std::fs::File,
    /// Its length up to the last whole record (a failed write is cut back to it).
    len: u64,
    /// A failed write's bytes could not be cut off yet.
    dirty_tail: bool,
    /// The last record's commit number.
    seq: u64,
    /// The commit counter beside it.
    counter: commit::Counter,
    /// Sync and compaction settings.
    opts: StoreOptions,
    /// What the journal holds, kept up to date with every record (compaction writes it).
    live: Recovered,
    /// Records in the journal file.
    lines: u64,
    /// Compactions done since open.
    compactions: u64,
    /// Records to write once the disk takes them, in order.
    backlog: VecDeque<Record>,
    /// The failure since the last write that succeeded.
    failing: Option<(std::io::Error, Instant)>,
    /// When the backlog was last tried, or the free space last looked at.
    tried: Option<Instant>,
    /// A test's kill point (unit tests only).
    #[cfg(test)]
    crash: Option<compact::Step>,
}

/// What a restart recovers.
#[derive(Debug, Default, Clone)]
pub struct Recovered {
    /// Every task accepted here, by id.
    pub accepted: BTreeMap<TaskId, (Task, TaskSpec)>,
    /// Outcomes of tasks accepted here (absent: not known finished).
    pub outcomes: BTreeMap<TaskId, Option<Finish>>,
    /// Runs on this node that have no end.
    pub runs: BTreeMap<TaskId, Run>,
    /// Largest task id accepted here (to continue numbering after it).
    pub last_id: Option<TaskId>,
    /// Torn last lines cut off (a crash in the middle of a write).
    pub skipped: usize,
    /// Tasks preempted here: times and work lost.
    pub preempted: BTreeMap<TaskId, (u32, f64)>,
}

impl Recovered {
    /// Tasks accepted here and not known finished (nor running here).
    pub fn unfinished(&self) -> Vec<(Task, TaskSpec)> {
        self.accepted
            .iter()
            .filter(|(id, _)| !self.outcomes.contains_key(id) && !self.runs.contains_key(id))
            .map(|(_, t)| t.clone())
            .collect()
    }

    fn apply(&mut self, r: Record) {
        match r {
            Record::Accepted { task, spec } => {
                self.last_id = self.last_id.max(Some(task.id));
                self.accepted.insert(task.id, (*task, *spec));
            }
            Record::Finished { task } => {
                self.outcomes.insert(task, None);
            }
            Record::Outcome {
                task,
                node,
                code,
                epoch,
            } => {
                self.outcomes
                    .insert(task, Some(Finish { node, code, epoch }));
            }
            Record::Run(run) => {
                self.runs.insert(run.task.id, *run);
            }
            Record::Ended { task } => {
                self.runs.remove(&task);
            }
            Record::Ids { last } => self.last_id = self.last_id.max(Some(last)),
            Record::Preempted {
                task,
                times,
                work_lost,
            } => {
                self.preempted.insert(task, (times, work_lost));
            }
        }
    }
}

impl Store {
    /// Open (or create) the journal with the default options and replay it.
    pub fn open(path: &Path) -> Result<(Self, Recovered), StoreError> {
        Self::open_with(path, StoreOptions::default())
    }

    /// Write one record (durable when this returns); on error the journal is as it was.
    fn write(&mut self, r: &Record) -> std::io::Result<()> {
        if self.dirty_tail {
            self.file.set_len(self.len)?;
            self.dirty_tail = false;
        }
        let line = frame::encode(self.seq + 1, r)?;
        if let Err(e) = self
            .file
            .write_all(&line)
            .and_then(|()| self.file.sync_data())
        {
            // Back to the last whole record: the bytes of a short write would otherwise glue
            // the next record onto them.
            if self
                .file
                .set_len(self.len)
                .and_then(|()| self.file.sync_data())
                .is_err()
            {
                self.dirty_tail = true;
            }
            return Err(e);
        }
        self.len += line.len() as u64;
        self.seq += 1;
        self.lines += 1;
        Ok(())
    }

    /// After records were written: the counter follows (a lower bound, module doc of
    /// [`commit`]), and compaction when due.
    fn committed(&mut self) {
        let c = commit::Committed {
            seq: self.seq,
            last_id: self.live.last_id.map_or(0, |t| t.0),
        };
        if let Err(e) = self.counter.set(c) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot update the commit counter");
        }
        self.maybe_compact();
    }

    /// Write the backlog, in order, then `r`.
    fn commit(&mut self, r: Option<Record>) -> std::io::Result<()> {
        let result = self.flush().and_then(|()| match r {
            Some(r) => self.write(&r).map(|()| self.live.apply(r)),
            None => Ok(()),
        });
        match result {
            Ok(()) => {
                if let Some((e, since)) = self.failing.take() {
                    tracing::info!(path = %self.path.display(), failed = %e,
                        seconds = since.elapsed().as_secs(), "the journal takes writes again");
                }
                self.committed();
                Ok(())
            }
            Err(e) => {
                let kind = e.kind();
                if self.failing.is_none() {
                    tracing::warn!(path = %self.path.display(), error = %e, backlog = self.backlog.len(),
                        "the journal cannot be written: submissions are refused until it can");
                }
                let msg = e.to_string();
                self.failing = Some((e, Instant::now()));
                Err(std::io::Error::new(kind, msg))
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        while let Some(r) = self.backlog.pop_front() {
            if let Err(e) = self.write(&r) {
                self.backlog.push_front(r);
                return Err(e);
            }
            self.live.apply(r);
        }
        Ok(())
    }

    /// A record that must be durable before its caller goes on (refused otherwise).
    fn must(&mut self, r: Record) -> Result<(), StoreError> {
        self.commit(Some(r)).map_err(|e| self.unavailable(&e))
    }

    /// A record that may wait: kept in memory, in order, if it cannot be written now.
    fn keep(&mut self, r: Record) -> Result<(), StoreError> {
        if self.backlog.is_empty() && self.failing.is_none() {
            match self.write(&r) {
                Ok(()) => {
                    self.live.apply(r);
                    self.committed();
                    return Ok(());
                }
                Err(e) => {
                    self.backlog.push_back(r);
                    let err = self.unavailable(&e);
                    self.failing = Some((e, Instant::now()));
                    return Err(err);
                }
            }
        }
        self.backlog.push_back(r);
        self.commit(None).map_err(|e| self.unavailable(&e))
    }

    fn unavailable(&self, e: &std::io::Error) -> StoreError {
        let dir = self.dir();
        StoreError::Unavailable {
            free: free_bytes(&dir),
            dir,
            error: e.to_string(),
            full: is_full(e),
        }
    }

    fn dir(&self) -> PathBuf {
        self.path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf()
    }

    /// At most once a second: while failing, write the backlog, or, with nothing to write, see
    /// whether the disk has room again ([`ROOM_AGAIN`]); while not, count the store full when
    /// the free space is below [`FULL_BELOW`].
    pub fn retry(&mut self) {
        if self.tried.is_some_and(|t| t.elapsed() < RETRY_EVERY) {
            return;
        }
        self.tried = Some(Instant::now());
        if self.failing.is_none() && self.backlog.is_empty() {
            // Full before a write fails: the status says so, submissions get 507 and starts
            // wait, rather than a start fail half-way for want of a page.
            if let Some(e) = self.short_of_room() {
                self.note_failure(&e);
            }
            return;
        }
        if self.backlog.is_empty() {
            // Nothing waits: the status says "full" while the disk has no room for a task's
            // records; the next write tells for sure.
            if free_bytes(&self.dir()).is_some_and(|f| f >= ROOM_AGAIN)
                && let Some((e, since)) = self.failing.take()
            {
                tracing::info!(path = %self.path.display(), failed = %e,
                    seconds = since.elapsed().as_secs(), "the data directory has room again");
            }
            return;
        }
        let _ = self.commit(None);
    }

    /// The data directory has less than [`FULL_BELOW`] free: what a start may write might not
    /// fit (a full-disk error saying how much is free); `None` where there is room, or the free
    /// space cannot be read.
    pub fn short_of_room(&self) -> Option<std::io::Error> {
        let free = free_bytes(&self.dir()).filter(|f| *f < FULL_BELOW)?;
        Some(std::io::Error::new(
            std::io::ErrorKind::StorageFull,
            format!(
                "only {free} bytes free (below {} KiB, what a start may write)",
                FULL_BELOW / 1024
            ),
        ))
    }

    /// Count the data directory as failing after a write elsewhere in it failed (a task's
    /// records): starts and submissions wait until [`Store::retry`] finds room again.
    pub fn note_failure(&mut self, e: &std::io::Error) {
        if self.failing.is_none() {
            tracing::warn!(path = %self.path.display(), error = %e,
                "the data directory takes no writes: submissions and starts wait until it has room");
            self.failing = Some((std::io::Error::new(e.kind(), e.to_string()), Instant::now()));
            self.tried = Some(Instant::now());
        }
    }

    /// Whether writes fail now, and what waits to be written.
    pub fn health(&self) -> Health {
        Health {
            data_dir: self.dir(),
            failing: self.failing.as_ref().map(|(e, _)| e.to_string()),
            full: self.failing.as_ref().is_some_and(|(e, _)| is_full(e)),
            backlog: self.backlog.len(),
            free_bytes: None,
        }
    }

    /// Record that `task` has now been preempted here `times` times, losing `work_lost` in all
    /// (kept in memory until written if the disk refuses).
    pub fn preempted(
        &mut self,
        task: TaskId,
        times: u32,
        work_lost: f64,
    ) -> Result<(), StoreError> {
        self.keep(Record::Preempted {
            task,
            times,
            work_lost,
        })
    }

    /// Record an accepted task (durable when this returns Ok; nothing recorded otherwise).
    pub fn accepted(&mut self, task: &Task, spec: &TaskSpec) -> Result<(), StoreError> {
        // A task acknowledged now could not start here: refused (507) while the room is short.
        if let Some(e) = self.short_of_room() {
            self.note_failure(&e);
            return Err(self.unavailable(&e));
        }
        self.must(Record::Accepted {
            task: Box::new(task.clone()),
            spec: Box::new(spec.clone()),
        })
    }

    /// Record that a task accepted here finished (anywhere): who ran it, how, which copy (kept
    /// in memory until written if the disk refuses).
    pub fn outcome(&mut self, task: TaskId, f: Finish) -> Result<(), StoreError> {
        self.keep(Record::Outcome {
            task,
            node: f.node,
            code: f.code,
            epoch: f.epoch,
        })
    }

    /// Record a start on this node (durable before the task is announced as started; on error
    /// nothing is recorded and the start must be undone).
    pub fn run(&mut self, run: &Run) -> Result<(), StoreError> {
        self.must(Record::Run(Box::new(run.clone())))
    }

    /// Record that a run on this node ended (kept in memory until written if the disk refuses).
    pub fn ended(&mut self, task: TaskId) -> Result<(), StoreError> {
        self.keep(Record::Ended { task })
    }

    /// The tasks whose end here is not journaled yet: runs the journal holds open, and ends and
    /// outcomes still waiting in the backlog. Their exit records in `runs/` are the only trace
    /// of how they ended, so the log retention keeps them.
    pub fn unsettled(&self) -> BTreeSet<TaskId> {
        let waiting = self.backlog.iter().filter_map(|r| match r {
            Record::Ended { task } | Record::Outcome { task, .. } => Some(*task),
            _ => None,
        });
        self.live.runs.keys().copied().chain(waiting).collect()
    }

    /// Whether the journal holds `task` as accepted here (finished ones forgotten by a
    /// compaction are no longer held).
    pub fn has_accepted(&self, task: TaskId) -> bool {
        self.live.accepted.contains_key(&task)
    }

    /// The journal's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records in the journal now, and compactions since open.
    pub fn size(&self) -> (u64, u64) {
        (self.lines, self.compactions)
    }
}

/// The members a node counts for its quorum, kept across restarts (`<data_dir>/members.json`);
/// an absent or unreadable file is an empty set (the node learns its peers again).
pub fn load_members(path: &Path) -> BTreeSet<NodeId> {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Save the members (atomically: a crash leaves the old file or the new one).
pub fn save_members(path: &Path, members: &BTreeSet<NodeId>) -> std::io::Result<()> {
    crate::procs::write_json(members, path, "tmp")
}

#[cfg(test)]
mod faults_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: u64) -> Task {
        Task::new(id, [1, 0, 0]).on(&[1])
    }

    fn spec() -> TaskSpec {
        TaskSpec::from_toml("command = [\"x\"]\nmin_demand = { cpu = 1 }\n").unwrap()
    }

    fn done(code: i32) -> Finish {
        Finish {
            node: NodeId(1),
            code: Some(code),
            epoch: 1,
        }
    }

    /// A journal's path in a new folder, removed when the folder is dropped.
    fn fresh(name: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::Builder::new()
            .prefix(&format!("tf-store-{name}-"))
            .tempdir()
            .unwrap();
        let path = dir.path().join("tasks.journal");
        (dir, path)
    }

    fn append_raw(path: &Path, bytes: &[u8]) {
        std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .unwrap()
            .write_all(bytes)
            .unwrap();
    }

    /// A spec's profile hints survive a restart (its estimator hints come back with it), and a
    /// journal written before specs had them, and before records were checksummed, still reads
    /// (the field defaults to none; the journal is migrated).
    #[test]
    fn profile_hints_survive_the_journal_and_old_records_still_read() {
        let (_dir, path) = fresh("hints");
        let hinted = TaskSpec::from_toml(
            "command = [\"x\"]\nmin_demand = { cpu = 1 }\n\
             [[profile]]\nalloc = { cpu = 2 }\nseconds = 30\n",
        )
        .unwrap();
        {
            let (mut s, _) = Store::open(&path).unwrap();
            s.accepted(&task(1), &hinted).unwrap();
        }
        let (_, r) = Store::open(&path).unwrap();
        assert_eq!(r.unfinished()[0].1, hinted);
        // Records as older agents wrote them (bare JSON lines): the same spec without the
        // field, and hints in whole numbers from before amounts were in natural units.
        let line = serde_json::to_string(&Record::Accepted {
            task: Box::new(task(1)),
            spec: Box::new(hinted.clone()),
        })
        .unwrap();
        let old = line.replace(
            ",\"profile\":[{\"alloc\":{\"cpu\":2.0},\"seconds\":30.0}]",
            "",
        );
        assert_ne!(old, line, "the record carries no profile: {line}");
        let ints = line.replace("\"cpu\":2.0}", "\"cpu\":2}");
        assert!(ints.contains("\"alloc\":{\"cpu\":2}"), "{ints}");
        let v1 = format!(
            "{line}\n{}\n{}\n",
            old.replace("\"id\":1", "\"id\":2"),
            ints.replace("\"id\":1", "\"id\":3")
        );
        let (_dir, path) = fresh("hints-v1");
        std::fs::write(&path, v1).unwrap();
        let (_, r) = Store::open(&path).unwrap();
        assert_eq!(r.skipped, 0);
        assert!(
            std::fs::read(&path).unwrap().starts_with(frame::HEADER),
            "migrated"
        );
        let specs: BTreeMap<u64, TaskSpec> = r
            .unfinished()
            .iter()
            .map(|(t, s)| (t.id.0, s.clone()))
            .collect();
        assert_eq!(specs[&1], hinted);
        assert!(specs[&2].profile.is_empty());
        assert_eq!(specs[&3].profile, hinted.profile);
        // Migrated once: it reads the same again.
        let (_, again) = Store::open(&path).unwrap();
        assert_eq!(again.accepted.len(), 3);
    }

    #[test]
    fn replays_unfinished_tasks_and_survives_a_torn_line() {
        let (_dir, path) = fresh("replay");
        let spec = spec();
        {
            let (mut s, r) = Store::open(&path).unwrap();
            assert!(r.unfinished().is_empty() && r.last_id.is_none());
            for id in 1..=4 {
                s.accepted(&task(id), &spec).unwrap();
            }
            s.outcome(TaskId(2), done(0)).unwrap();
            let run = |id| Run {
                task: task(id),
                spec: spec.clone(),
                epoch: 1,
                alloc: Resources(vec![1, 0, 0]),
                gpus: Vec::new(),
                handle: Some(Handle { pid: 7, start: 9 }),
            };
            s.run(&run(4)).unwrap();
            s.run(&run(5)).unwrap();
            s.ended(TaskId(5)).unwrap();
        }
        // A crash in the middle of a write.
        append_raw(&path, b"{\"accepted\": {\"task\"");
        let (mut s, r) = Store::open(&path).unwrap();
        let ids: Vec<u64> = r.unfinished().iter().map(|(t, _)| t.id.0).collect();
        assert_eq!(ids, vec![1, 3]);
        assert_eq!(r.last_id, Some(TaskId(4)));
        assert_eq!(r.skipped, 1);
        assert_eq!(r.unfinished()[0].1, spec);
        assert_eq!(r.outcomes[&TaskId(2)].map(|f| f.code), Some(Some(0)));
        assert_eq!(r.runs.keys().copied().collect::<Vec<_>>(), vec![TaskId(4)]);
        assert_eq!(r.runs[&TaskId(4)].handle, Some(Handle { pid: 7, start: 9 }));
        // The torn line was cut off, so the next record is whole and read back.
        s.accepted(&task(6), &spec).unwrap();
        drop(s);
        let (_, r) = Store::open(&path).unwrap();
        assert_eq!(r.skipped, 0);
        assert!(
            r.accepted.contains_key(&TaskId(6)),
            "{:?}",
            r.accepted.keys()
        );
    }

    #[test]
    fn a_damaged_line_is_refused_and_the_repair_keeps_the_rest() {
        let (_dir, path) = fresh("corrupt");
        {
            let (mut s, _) = Store::open(&path).unwrap();
            s.accepted(&task(1), &spec()).unwrap();
            append_raw(&path, b"{\"accepted\": garbage}\n");
            s.accepted(&task(2), &spec()).unwrap();
        }
        let Err(e) = Store::open(&path) else {
            panic!("a damaged journal was opened");
        };
        let msg = e.to_string();
        // Line 1 is the header.
        assert!(matches!(e, StoreError::Corrupt { line: 3, .. }), "{msg}");
        assert!(
            msg.contains("line 3") && msg.contains("tapfinger-agent repair-journal"),
            "{msg}"
        );
        let rep = compact::repair(&path).unwrap();
        assert_eq!(rep.kept, 2);
        assert_eq!(rep.dropped.len(), 1);
        assert_eq!(rep.dropped[0].line, 3);
        assert!(std::fs::read(rep.backup.unwrap()).unwrap().ends_with(b"\n"));
        let (_, r) = Store::open(&path).unwrap();
        assert_eq!(r.accepted.len(), 2);
    }

    #[test]
    fn preemption_counts_survive_a_restart_and_a_compaction() {
        let (_dir, path) = fresh("preempted");
        let opts = StoreOptions {
            keep_finished: 2,
            compact_min_lines: 4,
        };
        {
            let (mut s, _) = Store::open_with(&path, opts).unwrap();
            s.preempted(TaskId(3), 1, 0.25).unwrap();
            s.preempted(TaskId(3), 2, 0.5).unwrap();
            s.preempted(TaskId(9), 1, 0.0).unwrap();
        }
        let (mut s, r) = Store::open_with(&path, opts).unwrap();
        assert_eq!(r.preempted[&TaskId(3)], (2, 0.5));
        assert_eq!(r.preempted[&TaskId(9)], (1, 0.0));
        // Past keep_finished, the oldest tasks' counts go with a compaction.
        s.preempted(TaskId(12), 1, 0.125).unwrap();
        s.compact().unwrap();
        drop(s);
        let (_, r) = Store::open_with(&path, opts).unwrap();
        let kept: Vec<_> = r.preempted.iter().map(|(k, v)| (k.0, *v)).collect();
        assert_eq!(kept, vec![(9, (1, 0.0)), (12, (1, 0.125))]);
    }

    #[test]
    fn compaction_keeps_the_live_tasks_and_bounds_the_journal() {
        let (_dir, path) = fresh("compact");
        let opts = StoreOptions {
            keep_finished: 50,
            compact_min_lines: 200,
        };
        let (mut s, _) = Store::open_with(&path, opts).unwrap();
        let spec = spec();
        let mut max_lines = 0;
        for id in 1..=3000u64 {
            s.accepted(&task(id), &spec).unwrap();
            // Every task but each hundredth finishes; each tenth of them ran here.
            if id % 100 != 0 {
                if id % 10 == 0 {
                    s.run(&Run {
                        task: task(id),
                        spec: spec.clone(),
                        epoch: 1,
                        alloc: Resources(vec![1, 0, 0]),
                        gpus: Vec::new(),
                        handle: None,
                    })
                    .unwrap();
                    s.ended(TaskId(id)).unwrap();
                }
                s.outcome(TaskId(id), done(0)).unwrap();
            }
            max_lines = max_lines.max(s.size().0);
        }
        assert!(s.size().1 > 5, "compactions: {:?}", s.size());
        // 30 unfinished and 50 finished live: the journal never grew past the threshold's
        // order, whatever the number of tasks.
        assert!(max_lines <= 2 * (30 + 2 * 50 + 2) + 200, "{max_lines}");
        drop(s);
        let (_, r) = Store::open_with(&path, opts).unwrap();
        let unfinished: Vec<u64> = r.unfinished().iter().map(|(t, _)| t.id.0).collect();
        assert_eq!(unfinished, (1..=30).map(|i| i * 100).collect::<Vec<_>>());
        assert_eq!(r.last_id, Some(TaskId(3000)));
        let finished: Vec<u64> = r.outcomes.keys().map(|t| t.0).collect();
        assert!(
            finished.len() >= 50 && finished.len() < 50 + 4 * 82 + 200,
            "{}",
            finished.len()
        );
        assert!(
            finished.contains(&2999),
            "the most recent finished tasks are kept"
        );
    }

    /// Set by the parent test: the child appends, then dies at this compaction step.
    const CRASH_ENV: &str = "TAPFINGER_STORE_CRASH_CHILD";

    fn crash_child(path: &Path, step: compact::Step) {
        let opts = StoreOptions {
            keep_finished: 5,
            compact_min_lines: 1_000_000,
        };
        let (mut s, _) = Store::open_with(path, opts).unwrap();
        for id in 1..=40u64 {
            s.accepted(&task(id), &spec()).unwrap();
            if id % 2 == 0 {
                s.outcome(TaskId(id), done(0)).unwrap();
            }
        }
        s.crash_at(step);
        let _ = s.compact();
        panic!("the child was not killed at {step:?}");
    }

    #[test]
    fn a_kill_at_any_step_of_compaction_loses_no_acknowledged_task() {
        use compact::Step;
        let steps = [
            ("mid", Step::MidSnapshot),
            ("synced", Step::Synced),
            ("renamed", Step::Renamed),
        ];
        if let Ok(which) = std::env::var(CRASH_ENV) {
            let (_, step) = steps.iter().find(|(n, _)| which.ends_with(n)).unwrap();
            return crash_child(Path::new(&which[..which.rfind(':').unwrap()]), *step);
        }
        for (name, _) in steps {
            let (_dir, path) = fresh(&format!("kill-{name}"));
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "store::tests::a_kill_at_any_step_of_compaction_loses_no_acknowledged_task",
                    "--nocapture",
                ])
                .env(CRASH_ENV, format!("{}:{name}", path.display()))
                .output()
                .unwrap();
            // Killed by SIGABRT: no exit code.
            assert_eq!(out.status.code(), None, "{name}: {out:?}");
            let (_, r) = Store::open(&path).unwrap();
            let unfinished: Vec<u64> = r.unfinished().iter().map(|(t, _)| t.id.0).collect();
            assert_eq!(
                unfinished,
                (1..=20).map(|i| 2 * i - 1).collect::<Vec<_>>(),
                "{name}"
            );
            assert_eq!(r.last_id, Some(TaskId(40)), "{name}");
            assert!(r.outcomes.contains_key(&TaskId(40)), "{name}");
            assert!(!compact::snapshot_path(&path).exists(), "{name}");
        }
    }
}
