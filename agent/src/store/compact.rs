//! Keeping the journal small: compaction into an atomic snapshot, and the repair command for a
//! journal the agent refuses to open.
//!
//! **Compaction** rewrites the journal as the records of what is still live: the tasks accepted
//! here and not finished, the runs on this node without an end, the outcomes of the
//! `keep_finished` most recent finished tasks (with their specs, the history a restarted agent
//! shows) and the largest id accepted here (so numbering never goes back). Its records carry the
//! next commit numbers, so the counter only grows. The steps:
//! 1. write `tasks.journal.compact` and `fsync` it (on error it is removed: a full disk keeps the
//!    old journal and gets its space back);
//! 2. rename it over `tasks.journal` (atomic on POSIX file systems) and `fsync` the directory;
//! 3. reopen the append handle, then move the commit counter up.
//!
//! A crash before step 2 leaves the old journal whole (a leftover `.compact` file is removed at the
//! next open); after it, the new one, whose last commit number is at least the counter's. Either
//! holds every acknowledged record, so no step loses a task; the store's tests kill a child
//! process at each step and check that.
//!
//! **Repair** reads any bytes (either format, any encoding), keeps every record that checks out,
//! reports each one dropped with the task id and name still legible in it, and moves the counter
//! to what it kept: running it is how an operator accepts a loss the agent refused to start with.

use super::frame::{self, Bad};
use super::{Record, Recovered, Store, StoreError, commit};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A point in compaction where a test may kill the process (`Store::crash_at`, compiled into
/// the unit tests only: no release binary can be made to abort by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Half of the snapshot written, not synced.
    MidSnapshot,
    /// The snapshot written and synced, not renamed.
    Synced,
    /// Renamed, the directory not synced.
    Renamed,
}

/// The snapshot's path beside the journal.
pub(super) fn snapshot_path(journal: &Path) -> PathBuf {
    let mut name = journal.as_os_str().to_owned();
    name.push(".compact");
    PathBuf::from(name)
}

/// The live records of `r`, oldest finished tasks beyond `keep_finished` dropped (from `r` too).
pub(super) fn live_records(r: &mut Recovered, keep_finished: usize) -> Vec<Record> {
    // Ids of one node grow with acceptance, so the largest ids are the most recent.
    let finished: Vec<_> = r
        .accepted
        .keys()
        .filter(|id| r.outcomes.contains_key(id) && !r.runs.contains_key(id))
        .copied()
        .collect();
    let drop = finished.len().saturating_sub(keep_finished);
    for id in &finished[..drop] {
        r.accepted.remove(id);
        r.outcomes.remove(id);
    }
    let mut out = Vec::with_capacity(r.accepted.len() + r.outcomes.len() + r.runs.len() + 1);
    if let Some(last) = r.last_id {
        out.push(Record::Ids { last });
    }
    for (id, (task, spec)) in &r.accepted {
        out.push(Record::Accepted {
            task: Box::new(task.clone()),
            spec: Box::new(spec.clone()),
        });
        match r.outcomes.get(id) {
            Some(Some(f)) => out.push(Record::Outcome {
                task: *id,
                node: f.node,
                code: f.code,
                epoch: f.epoch,
            }),
            Some(None) => out.push(Record::Finished { task: *id }),
            None => {}
        }
    }
    for run in r.runs.values() {
        out.push(Record::Run(Box::new(run.clone())));
    }
    // Preemption counts of the most recent tasks (any node may have accepted them).
    let drop = r.preempted.len().saturating_sub(keep_finished);
    let old: Vec<_> = r.preempted.keys().take(drop).copied().collect();
    for id in old {
        r.preempted.remove(&id);
    }
    for (task, (times, work_lost)) in &r.preempted {
        out.push(Record::Preempted {
            task: *task,
            times: *times,
            work_lost: *work_lost,
        });
    }
    out
}

impl Store {
    /// Compact now (module doc). On error the old journal stays in use.
    pub fn compact(&mut self) -> std::io::Result<()> {
        let records = live_records(&mut self.live, self.opts.keep_finished);
        let tmp = snapshot_path(&self.path);
        let written = self.write_snapshot(&tmp, &records);
        let len = match written {
            Ok(len) => len,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        };
        self.crash_point(Step::Synced);
        std::fs::rename(&tmp, &self.path)?;
        self.crash_point(Step::Renamed);
        commit::sync_dir(&self.path)?;
        self.file = std::fs::OpenOptions::new().append(true).open(&self.path)?;
        self.len = len;
        self.dirty_tail = false;
        self.seq += records.len() as u64;
        self.lines = records.len() as u64;
        self.compactions += 1;
        let c = commit::Committed {
            seq: self.seq,
            last_id: self.live.last_id.map_or(0, |t| t.0),
        };
        if let Err(e) = self.counter.set(c) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot update the commit counter");
        }
        Ok(())
    }

    /// The snapshot's file, synced; its length.
    fn write_snapshot(&self, tmp: &Path, records: &[Record]) -> std::io::Result<u64> {
        let mut f = commit::private()
            .write(true)
            .create(true)
            .truncate(true)
            .open(tmp)?;
        f.write_all(frame::HEADER)?;
        let mut len = frame::HEADER.len() as u64;
        let half = records.len() / 2;
        for (i, r) in records.iter().enumerate() {
            if i == half {
                self.crash_point(Step::MidSnapshot);
            }
            let line = frame::encode(self.seq + 1 + i as u64, r)?;
            f.write_all(&line)?;
            len += line.len() as u64;
        }
        f.sync_all()?;
        Ok(len)
    }

    /// Compact when the journal has grown to twice its live records (so the work of compacting
    /// is at most one snapshot line per record appended).
    pub(super) fn maybe_compact(&mut self) {
        // The lines a snapshot would have: the unfinished tasks, the finished ones kept (spec
        // and outcome each), the runs and the ids line.
        let finished = self.live.outcomes.len();
        let kept = finished.min(self.opts.keep_finished);
        let live = (self.live.accepted.len().saturating_sub(finished)
            + 2 * kept
            + self.live.runs.len()
            + self.live.preempted.len().min(self.opts.keep_finished)
            + 1) as u64;
        if self.lines >= self.opts.compact_min_lines.max(2 * live)
            && let Err(e) = self.compact()
        {
            // The journal stays correct, only longer: try again after more records.
            tracing::warn!(path = %self.path.display(), error = %e, "journal compaction failed");
            self.lines = 0;
        }
    }

    /// Kill the process at `step` of the next compactions (tests of crash safety).
    #[cfg(test)]
    pub(crate) fn crash_at(&mut self, step: Step) {
        self.crash = Some(step);
    }

    #[cfg(test)]
    fn crash_point(&self, step: Step) {
        if self.crash == Some(step) {
            std::process::abort();
        }
    }

    /// Outside the unit tests a compaction never aborts.
    #[cfg(not(test))]
    fn crash_point(&self, _step: Step) {}
}

/// What [`repair`] did.
#[derive(Debug)]
pub struct Repaired {
    /// Records kept.
    pub kept: usize,
    /// Records that did not check out: line, task id and name where legible, text.
    pub dropped: Vec<Bad>,
    /// Commit numbers missing (between records, or after the last one the journal held, by the
    /// counter): `(first, last)`.
    pub missing: Vec<(u64, u64)>,
    /// Where the journal as it was is kept (none when there was no journal).
    pub backup: Option<PathBuf>,
    /// Tasks kept without an outcome whose exit record this node's run directory still holds
    /// (they ran here and ended): their outcomes, recorded again so that they do not run again.
    pub outcomes_from_runs: Vec<(tapfinger::TaskId, Option<i32>)>,
}

/// Outcomes of `r`'s unfinished tasks that ran on this node, from the exit records its
/// supervisors wrote (`<data_dir>/runs/<task>.exit`; kept for the log retention).
fn outcomes_from_runs(journal: &Path, r: &Recovered) -> Vec<(tapfinger::TaskId, Option<i32>)> {
    let runs = journal.parent().unwrap_or(Path::new(".")).join("runs");
    r.accepted
        .keys()
        .filter(|id| !r.outcomes.contains_key(id) && !r.runs.contains_key(id))
        .filter_map(|id| {
            let rec = crate::supervise::ExitRecord::read(&runs.join(format!("{}.exit", id.0)))?;
            // A preempted copy that exited 0 within its grace had finished too.
            let finished = rec.how == "exited" || (rec.how == "preempted" && rec.code == Some(0));
            finished.then_some((*id, rec.code))
        })
        .collect()
}

/// The operator's recovery for a journal the agent refuses to open (module doc): keep a copy of
/// it as `<journal>.corrupt-<unix seconds>`, then rewrite it with the records that check out,
/// numbered after everything the counter says was committed (through the same atomic rename as
/// compaction), and move the counter there. What was dropped or is missing is returned to be
/// shown: a task named there may need to be submitted again.
pub fn repair(path: &Path) -> Result<Repaired, StoreError> {
    let io = |e| StoreError::Io(path.to_path_buf(), e);
    let _ = std::fs::remove_file(snapshot_path(path));
    let bytes = match std::fs::read(path) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io(e)),
    };
    let data = bytes.as_deref().unwrap_or_default();
    let scan = if frame::is_v1(data) {
        frame::scan_v1(data)
    } else {
        frame::scan(data)
    };
    let counter_path = commit::counter_path(path);
    let committed = commit::read(&counter_path).map_err(io)?.unwrap_or_default();
    let mut missing = scan.gaps.clone();
    let found = scan.last_seq().unwrap_or(0);
    if !frame::is_v1(data) && committed.seq > found {
        missing.push((found + 1, committed.seq));
    }
    let mut dropped = scan.damaged.clone();
    dropped.extend(scan.tail.iter().cloned());
    let mut r = Recovered::default();
    for (_, rec) in &scan.records {
        r.apply(rec.clone());
    }
    let last_id = r.last_id.map_or(0, |t| t.0).max(committed.last_id);
    let mut records: Vec<Record> = Vec::with_capacity(scan.records.len() + 1);
    if last_id > 0 {
        records.push(Record::Ids {
            last: tapfinger::TaskId(last_id),
        });
    }
    records.extend(scan.records.into_iter().map(|(_, rec)| rec));
    let outcomes = outcomes_from_runs(path, &r);
    for (task, code) in &outcomes {
        // It ran here: this node (the upper half of an id is the node that accepted it, and
        // only tasks accepted here are in this journal) ran it; its epoch is not known.
        records.push(Record::Outcome {
            task: *task,
            node: tapfinger::NodeId((task.0 >> 32) as u32),
            code: *code,
            epoch: 0,
        });
    }
    let backup = match &bytes {
        Some(_) => {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let mut backup = path.as_os_str().to_owned();
            backup.push(format!(".corrupt-{secs}"));
            let backup = PathBuf::from(backup);
            std::fs::copy(path, &backup).map_err(io)?;
            Some(backup)
        }
        None => None,
    };
    let start = committed.seq.max(found);
    let tmp = snapshot_path(path);
    {
        let mut f = commit::private()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(io)?;
        f.write_all(frame::HEADER).map_err(io)?;
        for (i, rec) in records.iter().enumerate() {
            f.write_all(&frame::encode(start + 1 + i as u64, rec).map_err(io)?)
                .map_err(io)?;
        }
        f.sync_all().map_err(io)?;
    }
    std::fs::rename(&tmp, path).map_err(io)?;
    commit::sync_dir(path).map_err(io)?;
    let end = commit::Committed {
        seq: start + records.len() as u64,
        last_id,
    };
    let mut counter = commit::Counter::open(&counter_path, end).map_err(io)?;
    counter.set(end).map_err(io)?;
    Ok(Repaired {
        kept: records.len() - usize::from(last_id > 0) - outcomes.len(),
        outcomes_from_runs: outcomes,
        dropped,
        missing,
        backup,
    })
}
