//! A task's log files, `<log_dir>/<task>.stdout` and `.stderr`: every line the task prints,
//! appended attempt after attempt. Each attempt (the first start, a restart after a crash or a
//! lost lease, a resume after a preemption) begins with a line starting [`ATTEMPT_MARK`], so an
//! earlier attempt's output (often why it ended) stays to be read, and a reader of progress lines
//! knows which are the current attempt's. Both executors, direct and supervised, open them here;
//! the API, and the agent answering a peer, read them here.

/// The start of the line that opens each attempt's part of a task's log files (the rest says
/// when). Progress lines before it are an earlier attempt's.
pub const ATTEMPT_MARK: &str = "=== tapfinger: a new attempt of this task starts here";

/// Open a task's log file for a new attempt: created if missing, appended to, and the attempt's
/// marker line written first (where the disk has room: a full disk loses log lines, never the
/// task's start).
pub fn open_attempt_log(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    // The agent's alone: a task running as another user cannot read another task's output.
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let _ = writeln!(f, "{ATTEMPT_MARK} (unix time {secs}) ===");
    Ok(f)
}

/// Most bytes of a log returned (the end of it).
pub const MAX_LOG: u64 = 1 << 20;

/// A log file from byte `from` (at most [`MAX_LOG`] of it; without `from`, its last MiB), and
/// its size; `None` if there is no such file.
pub fn read_log(path: &std::path::Path, from: Option<u64>) -> Option<(String, u64)> {
    use std::io::{Read as _, Seek as _};
    let mut f = std::fs::File::open(path).ok()?;
    let size = f.metadata().ok()?.len();
    let start = from.map_or(size.saturating_sub(MAX_LOG), |f| f.min(size));
    f.seek(std::io::SeekFrom::Start(start)).ok()?;
    let mut bytes = Vec::new();
    f.take(MAX_LOG).read_to_end(&mut bytes).ok()?;
    // A character cut at the end (still being written) waits for the next read.
    if let Err(e) = std::str::from_utf8(&bytes)
        && e.error_len().is_none()
    {
        bytes.truncate(e.valid_up_to());
    }
    let end = start + bytes.len() as u64;
    Some((String::from_utf8_lossy(&bytes).into_owned(), end))
}
