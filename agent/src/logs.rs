//! A task's log files, `<log_dir>/<task>.stdout` and `.stderr`: every line the task prints,
//! appended attempt after attempt. Each attempt (the first start, a restart after a crash or a
//! lost lease, a resume after a preemption) begins with a line starting [`ATTEMPT_MARK`], so an
//! earlier attempt's output (often why it ended) stays to be read, and a reader of progress lines
//! knows which are the current attempt's. Both executors, direct and supervised, open them here.

/// The start of the line that opens each attempt's part of a task's log files (the rest says
/// when). Progress lines before it are an earlier attempt's.
pub const ATTEMPT_MARK: &str = "=== tapfinger: a new attempt of this task starts here";

/// Open a task's log file for a new attempt: created if missing, appended to, and the attempt's
/// marker line written first (where the disk has room: a full disk loses log lines, never the
/// task's start).
pub fn open_attempt_log(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let _ = writeln!(f, "{ATTEMPT_MARK} (unix time {secs}) ===");
    Ok(f)
}
