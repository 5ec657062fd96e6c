//! Opening the journal: read it, say what is damaged or missing, migrate an old one, and leave
//! the file ready to append to.
//!
//! What is read and what is refused:
//! - **a torn last write** (bytes after the last record that checks out, which the commit counter
//!   shows were never committed: a crash or a full disk in the middle of a write) is cut off with
//!   a warning: it was never acknowledged;
//! - **a record that does not check out** before the last one that does (flipped bytes, a changed
//!   digit), or a gap in the commit numbers, is refused as [`StoreError::Corrupt`], naming each
//!   line with the task id and name still legible in it;
//! - **a journal shorter than its counter** (the last commit number in it below the counter's:
//!   truncated at any point, emptied, deleted, restored from an older copy) is refused as
//!   [`StoreError::Lost`], naming the commits and task ids missing;
//! - **a missing or unreadable counter** beside a journal that holds records is refused as
//!   [`StoreError::Counter`]: without it no loss could be told any more. Only a journal of the
//!   old format (before counters) is read without one, with the old rule: a single
//!   unterminated last line is a torn write, anything else after the last good record is
//!   damage;
//! - **neither journal nor counter** where the data directory shows an agent ran there (its
//!   member list, lease, task records or logs) is refused as
//!   [`StoreError::Vanished`]: both were deleted or lost with every task accepted here.
//!
//! Both refusals name `tapfinger-agent repair-journal`, the command that accepts the loss
//! ([`super::compact::repair`]): the agent does not start on its own with tasks missing.
//!
//! **Migration.** A journal of bare JSON lines (agents before checksums) is read with the old
//! rules and rewritten in this format, through the same atomic rename as a compaction.

use super::commit::{self, Committed};
use super::frame::{self, Scan};
use super::{Recovered, Store, StoreError, StoreOptions};
use std::io::Write;
use std::path::Path;

fn describe(s: &Scan) -> Option<(String, usize)> {
    let mut parts: Vec<String> = s
        .damaged
        .iter()
        .map(|b| format!("{} does not check out", b.describe()))
        .collect();
    for (a, b) in &s.gaps {
        parts.push(if a == b {
            format!("commit {a} is missing")
        } else {
            format!("commits {a}..{b} are missing")
        });
    }
    for (before, this) in &s.disorder {
        parts.push(format!(
            "commit {this} comes after commit {before} (records repeated or out of order)"
        ));
    }
    let line = s.damaged.first().map_or(0, |b| b.line);
    (!parts.is_empty()).then(|| (parts.join("; "), line))
}

/// What a missing or unreadable counter means (the module doc): a journal of records with no
/// counter that checks out is refused, as is a data directory that held work but has neither.
/// The one counter that may be missing is a journal's from before counters (the old format,
/// migrated); the one that may be unreadable is an empty file beside an empty journal (its
/// creation cut short at the first start).
fn refuse_without_counter(
    path: &Path,
    counter: &Path,
    state: commit::State,
    v1: bool,
    records: usize,
) -> Result<(), StoreError> {
    let refuse = |what: &str| StoreError::Counter {
        path: path.display().to_string(),
        counter: counter.to_path_buf(),
        what: what.into(),
        records: records as u64,
    };
    match state {
        commit::State::Count(_) => Ok(()),
        commit::State::Unreadable(0) if records == 0 => Ok(()),
        commit::State::Unreadable(_) => Err(refuse("unreadable (no slot checks out)")),
        commit::State::Absent if v1 => Ok(()),
        commit::State::Absent if records > 0 => Err(refuse("missing")),
        commit::State::Absent => {
            let dir = path.parent().unwrap_or(Path::new("."));
            let evidence = held_work(dir);
            if evidence.is_empty() {
                Ok(())
            } else {
                Err(StoreError::Vanished {
                    path: path.display().to_string(),
                    dir: dir.to_path_buf(),
                    evidence,
                })
            }
        }
    }
}

/// What in data directory `dir` shows an agent ran there before: the member list and lease it
/// keeps, task records in `runs` and task logs in `logs`. A new box's directory has none of
/// them; its identity key alone is no sign (an operator may put one in place before the first
/// start, to list the box's peer id in the others' allowlists).
pub(crate) fn held_work(dir: &Path) -> Vec<String> {
    let mut found: Vec<String> = ["members.json", "lease"]
        .into_iter()
        .filter(|f| dir.join(f).exists())
        .map(str::to_string)
        .collect();
    for (sub, what) in [("runs", "task record(s)"), ("logs", "task log(s)")] {
        let n = std::fs::read_dir(dir.join(sub)).map_or(0, |d| d.flatten().count());
        if n > 0 {
            found.push(format!("{n} {what} in {sub}/"));
        }
    }
    found
}

impl Store {
    /// Open (or create) the journal and replay it (the module doc of `store/open.rs`).
    pub fn open_with(path: &Path, opts: StoreOptions) -> Result<(Self, Recovered), StoreError> {
        let io = |e| StoreError::Io(path.to_path_buf(), e);
        // A snapshot that was never renamed is an unfinished compaction: the journal is whole.
        let _ = std::fs::remove_file(super::compact::snapshot_path(path));
        let counter_path = commit::counter_path(path);
        let counter_state = commit::state(&counter_path).map_err(io)?;
        let committed = match counter_state {
            commit::State::Count(c) => Some(c),
            _ => None,
        };
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io(e)),
        };
        let v1 = frame::is_v1(&bytes);
        let scan = if v1 {
            frame::scan_v1(&bytes)
        } else {
            frame::scan(&bytes)
        };
        let corrupt = |what: String, line: usize| StoreError::Corrupt {
            path: path.display().to_string(),
            what,
            line,
        };
        if let Some((what, line)) = describe(&scan) {
            return Err(corrupt(what, line));
        }
        let found = if v1 { None } else { scan.last_seq() };
        refuse_without_counter(path, &counter_path, counter_state, v1, scan.records.len())?;
        let mut r = Recovered::default();
        let lines = scan.records.len() as u64;
        for (_, rec) in scan.records {
            r.apply(rec);
        }
        if let Some(c) = committed
            && c.seq > found.unwrap_or(0)
        {
            return Err(StoreError::Lost {
                path: path.display().to_string(),
                counter: counter_path,
                found: found.unwrap_or(0),
                committed: c.seq,
                last_found: r.last_id.map_or(0, |t| t.0),
                last_committed: c.last_id,
            });
        }
        if !scan.tail.is_empty() {
            // Without a counter only a single unterminated line can be told to be a torn write.
            let proven = committed.is_some() && !v1;
            if !(proven || scan.tail.len() == 1 && scan.tail_unterminated) {
                let b = &scan.tail[0];
                return Err(corrupt(
                    format!("{} does not check out", b.describe()),
                    b.line,
                ));
            }
            for b in &scan.tail {
                tracing::warn!(path = %path.display(), line = b.line,
                    "cutting off bytes after the last committed record (a write the agent never acknowledged)");
            }
            r.skipped = scan.tail.len();
        }
        if let Some(c) = committed {
            r.last_id = r
                .last_id
                .max((c.last_id > 0).then_some(tapfinger::TaskId(c.last_id)));
        }
        let seq = found.unwrap_or(0).max(committed.map_or(0, |c| c.seq));
        let counter = commit::Counter::open(
            &counter_path,
            Committed {
                seq,
                last_id: r.last_id.map_or(0, |t| t.0),
            },
        )
        .map_err(io)?;
        let mut file = commit::private()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        // A journal written before it was kept private is made so.
        {
            use std::os::unix::fs::PermissionsExt;
            for f in [path, counter_path.as_path()] {
                std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
            }
        }
        let mut len = scan.good_end as u64;
        if v1 {
            // Rewritten below.
        } else if bytes.is_empty() || len == 0 {
            file.set_len(0).map_err(io)?;
            file.write_all(frame::HEADER).map_err(io)?;
            file.sync_data().map_err(io)?;
            len = frame::HEADER.len() as u64;
        } else if len < bytes.len() as u64 {
            // Appending after a torn write would glue the next record onto it.
            file.set_len(len).map_err(io)?;
            file.sync_data().map_err(io)?;
        }
        if !v1 && bytes.get(len as usize - 1).is_some_and(|b| *b != b'\n') {
            // The last record checks out but lost its newline.
            file.write_all(b"\n").map_err(io)?;
            file.sync_data().map_err(io)?;
            len += 1;
        }
        let mut store = Self {
            path: path.to_path_buf(),
            file,
            len,
            dirty_tail: false,
            seq,
            counter,
            opts,
            live: r.clone(),
            lines,
            compactions: 0,
            backlog: Default::default(),
            failing: None,
            tried: None,
            #[cfg(test)]
            crash: None,
        };
        if v1 {
            tracing::info!(path = %path.display(), "migrating the journal to checksummed records");
            store.compact().map_err(io)?;
            store.compactions = 0;
            store.committed();
        }
        store.maybe_compact();
        Ok((store, r))
    }
}
