//! The commit counter: how many records the journal has committed, and the largest task id
//! accepted here, kept in a file of its own beside the journal (`tasks.commit`) so that a
//! journal that lost records (truncated, emptied, deleted, restored from an older copy) is seen
//! to be shorter than what was committed, instead of being taken for a torn last write.
//!
//! It is written after each record is durable in the journal, so it is a lower bound: a crash
//! between the two leaves the journal one record ahead, never behind. Two slots of 24 bytes
//! (commit number, last id, CRC-32), written in turn in place with `fsync`: a write cut short
//! damages one slot, and the other still holds the number before it. Writing in place also
//! needs no new blocks, so it succeeds on a full disk once the file exists.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

const SLOT: usize = 24;

/// Options for the store's files: the agent's alone (mode 0600 when created), since tasks may run
/// as another user ([`crate::exec::TaskUser`]) and the journal holds every task's command and
/// environment.
pub(super) fn private() -> std::fs::OpenOptions {
    use std::os::unix::fs::OpenOptionsExt;
    let mut o = std::fs::OpenOptions::new();
    o.mode(0o600);
    o
}

/// What the counter says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Committed {
    /// Records committed so far (the last record's commit number).
    pub seq: u64,
    /// Largest task id accepted here (0: none).
    pub last_id: u64,
}

/// The counter's file.
pub(super) struct Counter {
    file: std::fs::File,
    now: Committed,
}

/// The counter's path beside the journal (`tasks.journal` → `tasks.commit`).
pub fn counter_path(journal: &Path) -> PathBuf {
    journal.with_extension("commit")
}

fn slot_bytes(c: Committed) -> [u8; SLOT] {
    let mut b = [0u8; SLOT];
    b[..8].copy_from_slice(&c.seq.to_le_bytes());
    b[8..16].copy_from_slice(&c.last_id.to_le_bytes());
    let sum = crc32fast::hash(&b[..16]);
    b[16..20].copy_from_slice(&sum.to_le_bytes());
    b
}

fn read_slot(b: &[u8]) -> Option<Committed> {
    let word = |r: std::ops::Range<usize>| b.get(r).and_then(|s| s.try_into().ok());
    let seq = u64::from_le_bytes(word(0..8)?);
    let last_id = u64::from_le_bytes(word(8..16)?);
    let sum = u32::from_le_bytes(b.get(16..20)?.try_into().ok()?);
    (crc32fast::hash(&b[..16]) == sum).then_some(Committed { seq, last_id })
}

/// The counter in `path`, if the file exists and a slot checks out.
pub fn read(path: &Path) -> std::io::Result<Option<Committed>> {
    let mut bytes = Vec::new();
    match std::fs::File::open(path) {
        Ok(mut f) => f.read_to_end(&mut bytes)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let a = read_slot(&bytes);
    let b = bytes.get(SLOT..).and_then(read_slot);
    Ok(match (a, b) {
        (Some(a), Some(b)) => Some(if a.seq >= b.seq { a } else { b }),
        (a, b) => a.or(b),
    })
}

/// What the counter's file holds, told apart: absent, present but with no slot that checks out
/// (damaged, or garbage; an empty file is a creation cut short), or a count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// No file.
    Absent,
    /// A file of this many bytes with no slot that checks out.
    Unreadable(u64),
    /// What it says.
    Count(Committed),
}

/// [`read`], telling an unreadable file from an absent one.
pub fn state(path: &Path) -> std::io::Result<State> {
    match read(path)? {
        Some(c) => Ok(State::Count(c)),
        None => match std::fs::metadata(path) {
            Ok(m) => Ok(State::Unreadable(m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State::Absent),
            Err(e) => Err(e),
        },
    }
}

impl Counter {
    /// Open the counter (created with `start` in both slots if absent).
    pub(super) fn open(path: &Path, start: Committed) -> std::io::Result<Self> {
        let now = read(path)?;
        let mut file = private()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let mut c = Self {
            file: {
                if now.is_none() {
                    file.set_len(0)?;
                    file.write_all(&slot_bytes(start))?;
                    file.write_all(&slot_bytes(start))?;
                    file.sync_all()?;
                    sync_dir(path)?;
                }
                file
            },
            now: now.unwrap_or(start),
        };
        if c.now.seq < start.seq || c.now.last_id < start.last_id {
            c.set(start.max_with(c.now))?;
        }
        Ok(c)
    }

    /// What it says now.
    #[cfg(test)]
    pub(super) fn get(&self) -> Committed {
        self.now
    }

    /// Record `c` (durable when this returns).
    pub(super) fn set(&mut self, c: Committed) -> std::io::Result<()> {
        let slot = (c.seq % 2) * SLOT as u64;
        self.file.seek(SeekFrom::Start(slot))?;
        self.file.write_all(&slot_bytes(c))?;
        self.file.sync_data()?;
        self.now = c;
        Ok(())
    }
}

impl Committed {
    fn max_with(self, o: Committed) -> Committed {
        Committed {
            seq: self.seq.max(o.seq),
            last_id: self.last_id.max(o.last_id),
        }
    }
}

/// `fsync` the directory holding `path` (a rename or a new file there made durable).
pub(super) fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    std::fs::File::open(dir.unwrap_or(Path::new(".")))?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_slot_that_checks_out_wins() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.commit");
        assert_eq!(read(&path).unwrap(), None);
        let mut c = Counter::open(&path, Committed::default()).unwrap();
        for seq in 1..=5 {
            c.set(Committed {
                seq,
                last_id: 40 + seq,
            })
            .unwrap();
        }
        drop(c);
        let five = Committed {
            seq: 5,
            last_id: 45,
        };
        assert_eq!(read(&path).unwrap(), Some(five));
        // A torn write of slot 0 (seq 6): the other slot still says 5.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[3] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(read(&path).unwrap(), Some(five));
        // Reopened with a larger start (a migration), it moves up, never down.
        let c = Counter::open(&path, Committed { seq: 9, last_id: 1 }).unwrap();
        assert_eq!(
            c.get(),
            Committed {
                seq: 9,
                last_id: 45
            }
        );
    }
}
