//! What the store says when it cannot be used or cannot write now ([`StoreError`]), and how
//! the agent shows a failing store ([`Health`], the refusals' fields).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tapfinger::TaskId;

/// Why the journal cannot be used, or a record cannot be written now.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Reading it, or setting it up, failed.
    #[error("{0}: {1}")]
    Io(PathBuf, #[source] std::io::Error),
    /// Records that do not check out, or missing between records that do.
    #[error(
        "{path}: {what}; the agent will not start rather than drop the tasks they may hold. \
         Stop the agent and run `tapfinger-agent repair-journal {path}` to keep every record \
         that checks out (the journal as it was is copied beside it first)"
    )]
    Corrupt {
        /// The journal.
        path: String,
        /// The damage, for the operator (lines, task ids and names where still legible).
        what: String,
        /// The first damaged line (1-based).
        line: usize,
    },
    /// The journal holds fewer records than were committed: it was truncated, emptied,
    /// deleted or restored from an older copy.
    #[error(
        "{path}: the journal ends at commit {found} but {committed} were committed ({}): \
         records are missing (truncated, emptied, deleted or restored from an older copy){}. \
         The agent will not start rather than forget acknowledged tasks: restore the journal if \
         a current copy exists; otherwise stop the agent and run `tapfinger-agent \
         repair-journal {path}` to accept the loss (it keeps every record that checks out; \
         numbering continues after every id ever accepted here, and the cluster's peers still \
         announce the tasks they hold)",
        counter.display(),
        lost_ids(*last_found, *last_committed)
    )]
    Lost {
        /// The journal.
        path: String,
        /// The commit counter's file.
        counter: PathBuf,
        /// The last commit number the journal holds (0: none).
        found: u64,
        /// The commit counter's.
        committed: u64,
        /// Largest task id the journal holds.
        last_found: u64,
        /// Largest task id the counter says was accepted here.
        last_committed: u64,
    },
    /// The commit counter is missing or unreadable while the journal holds records: nothing
    /// can tell any more whether records were lost, so the protection it gives is not
    /// silently switched off.
    #[error(
        "{}: the commit counter is {what} while the journal {path} holds {records} record(s): \
         whether records were lost (truncated, deleted, restored from an older copy) can no \
         longer be told. The agent will not start without it: restore both files from one copy \
         if one exists; otherwise stop the agent and run `tapfinger-agent repair-journal \
         {path}`, which keeps every record that checks out and writes a new counter",
        counter.display()
    )]
    Counter {
        /// The journal.
        path: String,
        /// The counter's file.
        counter: PathBuf,
        /// `missing` or `unreadable (no slot checks out)`.
        what: String,
        /// Records the journal holds.
        records: u64,
    },
    /// Neither the journal nor its counter exists, but the data directory shows it held work
    /// (member list, lease, task records, logs): they were deleted or lost, with every task
    /// accepted here.
    #[error(
        "{path}: the journal and its commit counter are missing, but {} held work before ({}): \
         the tasks accepted here are lost with them. The agent will not start as if the box \
         were new: restore them if a copy exists; otherwise stop the agent and run \
         `tapfinger-agent repair-journal {path}` to accept the loss (it recovers the outcomes of \
         tasks that ran here from their exit records, and the cluster's peers still announce \
         the tasks they hold)",
        dir.display(),
        evidence.join(", ")
    )]
    Vanished {
        /// The journal.
        path: String,
        /// The data directory.
        dir: PathBuf,
        /// What shows it held work.
        evidence: Vec<String>,
    },
    /// A record cannot be written now (full disk, I/O error); the journal is as it was.
    #[error(
        "cannot record durably in {}: {error}{}; retry once space is freed",
        dir.display(),
        free.map(|f| format!(" ({:.1} MiB free)", f as f64 / f64::from(1u32 << 20))).unwrap_or_default()
    )]
    Unavailable {
        /// The data directory.
        dir: PathBuf,
        /// What the write said.
        error: String,
        /// Whether the disk is full.
        full: bool,
        /// Free bytes there, if known.
        free: Option<u64>,
    },
    /// Another agent holds the data directory.
    #[error(
        "{}: another agent{} is using this data directory; stop it first (two agents on one \
         directory would hand out the same task ids)",
        dir.display(),
        pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
    )]
    Locked {
        /// The data directory.
        dir: PathBuf,
        /// The holder's pid, as it wrote it.
        pid: Option<u32>,
    },
}

fn lost_ids(found: u64, committed: u64) -> String {
    if committed > found {
        format!(
            "; tasks accepted here after {} (up to {}) may be among them",
            TaskId(found),
            TaskId(committed)
        )
    } else {
        String::new()
    }
}

/// Whether the store is writing: what [`super::Store::health`] says (`storage` in `GET /v1/node`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// The directory the journal is in.
    pub data_dir: PathBuf,
    /// The last write failed and none has succeeded since: why.
    pub failing: Option<String>,
    /// That failure was a full disk (or quota): "storage full".
    pub full: bool,
    /// Records kept in memory until they can be written (outcomes, ends, preemptions).
    pub backlog: usize,
    /// Free bytes in the data directory when asked (the API fills it in; the status the loop
    /// publishes leaves it out, so that it changes only with the store's state).
    #[serde(default)]
    pub free_bytes: Option<u64>,
}

/// Free bytes of the file system holding `path`.
pub fn free_bytes(path: &Path) -> Option<u64> {
    let s = nix::sys::statvfs::statvfs(path).ok()?;
    // The field types differ between platforms.
    #[allow(clippy::useless_conversion)]
    let avail = u64::from(s.blocks_available());
    Some(avail.saturating_mul(s.fragment_size()))
}

/// Whether an I/O error is a full disk or quota.
pub(super) fn is_full(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

/// The field of a submission refused because the disk is full (the API answers 507
/// Insufficient Storage with `Retry-After`).
pub const REFUSED_FULL: &str = "storage.full";
/// The field of a submission refused because the journal cannot be written for another reason
/// (503 with `Retry-After`).
pub const REFUSED_FAILING: &str = "storage";
