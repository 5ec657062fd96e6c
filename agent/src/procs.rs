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

/// The task supervisors (`<agent> supervise ... --exit-file <run_dir>/<task>.exit ...`) alive on
/// this host whose exit file lies in `run_dir`: (task number, pid, start time). What a restarted
/// agent finds of its tasks whatever its data directory says (a directory restored from an
/// older copy holds no record of what started after the copy); `/proc/<pid>/cmdline` is
/// readable for every process of the agent's own user. Directories are compared after
/// resolving links, so a relative or linked data directory is still found.
pub fn supervisors_in(run_dir: &Path) -> Vec<(u64, u32, u64)> {
    let want = std::fs::canonicalize(run_dir).unwrap_or_else(|_| run_dir.to_path_buf());
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let Some(exit_file) = supervised_exit_file(&cmdline) else {
            continue;
        };
        let dir = exit_file.parent().map(|d| {
            // Relative to the supervisor's own working directory.
            let d = if d.is_relative() {
                e.path().join("cwd").join(d)
            } else {
                d.to_path_buf()
            };
            std::fs::canonicalize(&d).unwrap_or(d)
        });
        let task = exit_file
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<u64>().ok());
        if let (Some(task), Some(start), true) = (
            task,
            start_time(pid),
            dir.as_deref() == Some(want.as_path()),
        ) {
            found.push((task, pid, start));
        }
    }
    found
}

/// The `--exit-file` of a supervisor's command line (arguments separated by NUL), if it is one:
/// its first argument is `supervise`; only the options before the task's own command (after
/// `--`) count, so a task whose command names an exit file is not taken for a supervisor.
fn supervised_exit_file(cmdline: &[u8]) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut args = cmdline.split(|b| *b == 0);
    args.next()?;
    if args.next()? != b"supervise" {
        return None;
    }
    let mut args = args.take_while(|a| *a != b"--");
    while let Some(a) = args.next() {
        if a == b"--exit-file" {
            return Some(std::ffi::OsStr::from_bytes(args.next()?).into());
        }
        if let Some(v) = a.strip_prefix(b"--exit-file=") {
            return Some(std::ffi::OsStr::from_bytes(v).into());
        }
    }
    None
}

/// A capability set in the text of `/proc/self/status` (`field` is e.g. `CapEff:` or `CapAmb:`,
/// hex), as a bit mask.
pub fn cap_field(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

/// Whether `program --version` runs and succeeds (util-linux's tools, here).
pub fn installed(program: &str) -> bool {
    std::process::Command::new(program)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
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
    fn a_supervisors_exit_file_is_read_from_its_options_only() {
        let line = |args: &[&str]| args.join("\0").into_bytes();
        let sup = line(&[
            "/bin/agent",
            "supervise",
            "--owner",
            "3",
            "--exit-file",
            "/d/runs/7.exit",
            "--",
            "sh",
        ]);
        assert_eq!(supervised_exit_file(&sup), Some("/d/runs/7.exit".into()));
        let eq = line(&[
            "agent",
            "supervise",
            "--exit-file=/d/runs/8.exit",
            "--",
            "x",
        ]);
        assert_eq!(supervised_exit_file(&eq), Some("/d/runs/8.exit".into()));
        // A task's own command naming an exit file is not a supervisor's option.
        let task = line(&[
            "agent",
            "supervise",
            "--owner",
            "3",
            "--",
            "x",
            "--exit-file",
            "/e",
        ]);
        assert_eq!(supervised_exit_file(&task), None);
        assert_eq!(
            supervised_exit_file(&line(&["sh", "-c", "supervise"])),
            None
        );
    }

    #[test]
    fn start_time_tells_this_process_and_no_other() {
        let me = std::process::id();
        let t = start_time(me).expect("this process has a start time");
        assert!(alive(me, t));
        assert!(!alive(me, t + 1));
        assert_eq!(start_time(u32::MAX - 1), None);
    }
}
