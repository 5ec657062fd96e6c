//! What `/proc` says of a process (its start time, its process group), to tell a process from a
//! later one that reuses its pid, and whole-or-nothing JSON files: what the supervisor, the guard,
//! a restarted agent and its member list share.

use serde::Serialize;
use std::path::Path;

/// The start time of process `pid` (clock ticks since boot, field 22 of `/proc/<pid>/stat`), to
/// tell a process from a later one that reuses its pid; `None` if there is no such process.
pub fn start_time(pid: u32) -> Option<u64> {
    stat_field(pid, 22)
}

/// Field `n` (1-based, as `proc(5)` numbers them, from 3 on) of `/proc/<pid>/stat`; `None` if
/// there is no such process or it is a zombie (it counts as gone).
pub fn stat_field(pid: u32, n: usize) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces: split after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (the state).
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(n.checked_sub(3)?)?.parse().ok()
}

/// Whether the process `pid` started at `start` is still alive.
pub fn alive(pid: u32, start: u64) -> bool {
    start_time(pid) == Some(start)
}

/// Write `value` as JSON to `path` whole or not at all: to a file beside it (extension `tmp`),
/// renamed over it. Where that fails (a full disk has no block for the new file) and `path`
/// holds room kept by [`reserve`], the JSON is written into that room instead, padded with
/// blanks: it needs no new block (a crash in the middle of that write leaves a record that does
/// not parse, which readers take for none).
pub(crate) fn write_json<T: Serialize>(value: &T, path: &Path, tmp: &str) -> std::io::Result<()> {
    let tmp = path.with_extension(tmp);
    let json = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    let whole = std::fs::write(&tmp, &json).and_then(|()| std::fs::rename(&tmp, path));
    let Err(e) = whole else { return Ok(()) };
    let _ = std::fs::remove_file(&tmp);
    let room = std::fs::metadata(path).map_or(0, |m| m.len());
    if (json.len() as u64) > room {
        return Err(e);
    }
    use std::io::Write;
    let mut padded = json;
    padded.resize(room as usize, b' ');
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(&padded)?;
    f.sync_data()
}

/// Bytes [`reserve`] keeps: more than any record written with [`write_json`] where it is used
/// (a task's exit record and process group).
pub(crate) const RESERVED: usize = 1024;

/// Keep room at `path` for a record [`write_json`] may have to write there on a full disk: a
/// file of blanks (which a reader takes for no record). Fails where the disk has no room now.
pub(crate) fn reserve(path: &Path) -> std::io::Result<()> {
    std::fs::write(path, [b' '; RESERVED])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_tells_this_process_and_no_other() {
        let me = std::process::id();
        let t = start_time(me).expect("this process has a start time");
        assert!(alive(me, t));
        assert!(!alive(me, t + 1));
        assert_eq!(start_time(u32::MAX - 1), None);
    }
}
