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
/// renamed over it.
pub(crate) fn write_json<T: Serialize>(value: &T, path: &Path, tmp: &str) -> std::io::Result<()> {
    let tmp = path.with_extension(tmp);
    std::fs::write(
        &tmp,
        serde_json::to_vec(value).map_err(std::io::Error::other)?,
    )?;
    std::fs::rename(&tmp, path)
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
