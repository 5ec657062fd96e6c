//! Keeping the journal small: compaction into an atomic snapshot, and the repair command for a
//! journal that cannot be read.
//!
//! **Compaction** rewrites the journal as the records of what is still live: the tasks accepted
//! here and not finished, the runs on this node without an end, the outcomes of the
//! `keep_finished` most recent finished tasks (with their specs, the history a restarted agent
//! shows) and the largest id accepted here (so numbering never goes back). The steps:
//! 1. write `tasks.jsonl.compact` and `fsync` it;
//! 2. rename it over `tasks.jsonl` (atomic on POSIX file systems) and `fsync` the directory;
//! 3. reopen the append handle.
//!
//! A crash before step 2 leaves the old journal whole (a leftover `.compact` file is removed at the
//! next open); after it, the new one. Either holds every acknowledged record, so no step loses a
//! task; the store's tests kill a child process at each step and check that.
//!
//! Why not an embedded database (redb, sled)? The journal's records are a handful of kinds written
//! one at a time, read once at start; JSON lines keep it readable with `jq` and `grep` for an
//! operator, and a snapshot in the same format keeps one reader. What a database would add is
//! atomic multi-record commits, which nothing here needs: each record is durable on its own.

use super::{Record, Recovered, Store, StoreError};
use std::io::{BufRead, Write};
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

fn line(r: &Record) -> std::io::Result<Vec<u8>> {
    let mut l = serde_json::to_vec(r).map_err(std::io::Error::other)?;
    l.push(b'\n');
    Ok(l)
}

fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    std::fs::File::open(dir.unwrap_or(Path::new(".")))?.sync_all()
}

impl Store {
    /// Compact now (module doc). On error the old journal stays in use.
    pub fn compact(&mut self) -> std::io::Result<()> {
        let records = live_records(&mut self.live, self.opts.keep_finished);
        let tmp = snapshot_path(&self.path);
        {
            let mut f = std::fs::File::create(&tmp)?;
            let half = records.len() / 2;
            for (i, r) in records.iter().enumerate() {
                if i == half {
                    self.crash_point(Step::MidSnapshot);
                }
                f.write_all(&line(r)?)?;
            }
            f.sync_all()?;
        }
        self.crash_point(Step::Synced);
        std::fs::rename(&tmp, &self.path)?;
        self.crash_point(Step::Renamed);
        sync_dir(&self.path)?;
        self.file = std::fs::OpenOptions::new().append(true).open(&self.path)?;
        self.lines = records.len() as u64;
        self.compactions += 1;
        Ok(())
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
    /// Lines that could not be read, with their line numbers (1-based) and text.
    pub dropped: Vec<(usize, String)>,
    /// Where the journal as it was is kept.
    pub backup: PathBuf,
}

/// The operator's recovery for a journal the agent refuses to read: keep a copy of it as
/// `tasks.jsonl.corrupt-<unix seconds>`, then rewrite it with the readable lines only (through
/// the same atomic rename as compaction). The dropped lines are returned so they can be shown:
/// a task named in them may need to be submitted again.
pub fn repair(path: &Path) -> Result<Repaired, StoreError> {
    let io = |e| StoreError::Io(path.to_path_buf(), e);
    let f = std::fs::File::open(path).map_err(io)?;
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for (i, l) in std::io::BufReader::new(f).lines().enumerate() {
        let l = l.map_err(io)?;
        if l.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(&l) {
            Ok(_) => kept.push(l),
            Err(_) => dropped.push((i + 1, l)),
        }
    }
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut backup = path.as_os_str().to_owned();
    backup.push(format!(".corrupt-{secs}"));
    let backup = PathBuf::from(backup);
    std::fs::copy(path, &backup).map_err(io)?;
    let tmp = snapshot_path(path);
    {
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        for l in &kept {
            f.write_all(l.as_bytes()).map_err(io)?;
            f.write_all(b"\n").map_err(io)?;
        }
        f.sync_all().map_err(io)?;
    }
    std::fs::rename(&tmp, path).map_err(io)?;
    sync_dir(path).map_err(io)?;
    Ok(Repaired {
        kept: kept.len(),
        dropped,
        backup,
    })
}
