//! The share file: how a running task learns the share it holds, which elastic sharing changes
//! while it runs (a process sizes its thread pools from it). The process executor writes
//! `<log_dir>/<task>.share.json` before the task's program starts and again at every re-share
//! that takes effect, and names it in the task's environment as [`ENV`]; a task re-reads it when
//! it wants to (its modification time changes with every rewrite). It is written whole to a
//! temporary file and renamed over the old one, so a reader never sees half of it. Tasks can
//! write in the log directory, so the temporary file is always a new one under a name no task
//! knows in advance, created without following a link (a link planted there by a task makes the
//! write fail, it never redirects it), and the rename replaces whatever is at the share file's
//! name (a link included) without following it.
//!
//! It says what is in force, the same under cgroup v1 and v2 and without cgroups:
//! `{"cpus": 2.0, "memory_bytes": 1073741824, "gpus": [0], "gpu_share": 0.25,
//! "enforced": "cgroup", "generation": 1}` — CPU cores (may be fractional), the memory limit
//! (`null`: memory not scheduled), the GPU devices it sees, the fraction of its one device an
//! MPS client holds (`null`: whole devices), how the CPU share is enforced (`cgroup`, `affinity`:
//! pinned to as many CPUs, `none`), and a count that grows with every rewrite. A task pinned by
//! the affinity fallback keeps the CPUs it started with, and its file keeps saying so.

use super::{Allocation, Enforcement};
use std::path::{Path, PathBuf};

/// The environment variable naming the task's share file.
pub const ENV: &str = "TAPFINGER_SHARE_FILE";

/// The share file of the task whose log files are `log` (`<log_dir>/<task>`).
pub fn path(log: &Path) -> PathBuf {
    log.with_extension("share.json")
}

/// Write `alloc`, enforced as `how`, as the `generation`th share of the task.
pub fn write(
    path: &Path,
    alloc: &Allocation,
    how: &Enforcement,
    generation: u64,
) -> std::io::Result<()> {
    let enforced = match how {
        Enforcement::Cgroup(_) => "cgroup",
        Enforcement::Affinity(_) => "affinity",
        Enforcement::None(_) | Enforcement::Simulated => "none",
    };
    let body = serde_json::json!({
        "cpus": alloc.cpus,
        "memory_bytes": alloc.memory_bytes,
        "gpus": alloc.gpus,
        "gpu_share": alloc.gpu_share,
        "enforced": enforced,
        "generation": generation,
    });
    let (tmp, mut f) = create_new_beside(path)?;
    let written = std::io::Write::write_all(&mut f, format!("{body}\n").as_bytes())
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// A new file beside `path` (`<path>.<nonce>.tmp`), created exclusively and without following
/// a link: an existing file or link at the name is never opened (another name is tried).
fn create_new_beside(path: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::os::unix::fs::OpenOptionsExt;
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut last = None;
    for _ in 0..8 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{}-{n}-{nanos}.tmp", std::process::id()));
        let tmp = PathBuf::from(name);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            // Readable by the task whatever the agent's umask (it may run as another user).
            .mode(0o644)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free temporary name")))
}

/// The count of shares written to the file at `path` (0 where there is none to read).
pub fn generation(path: &Path) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        .and_then(|v| v["generation"].as_u64())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_says_the_share_and_is_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(&dir.path().join("7"));
        assert_eq!(p, dir.path().join("7.share.json"));
        let mut alloc = Allocation {
            cpus: 1.5,
            memory_bytes: Some(1 << 30),
            gpus: vec![2],
            gpu_share: Some(0.25),
            gpu_env: Vec::new(),
        };
        write(&p, &alloc, &Enforcement::Cgroup(PathBuf::from("/x")), 1).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(v["cpus"], 1.5);
        assert_eq!(v["memory_bytes"], 1u64 << 30);
        assert_eq!(v["gpus"], serde_json::json!([2]));
        assert_eq!(v["gpu_share"], 0.25);
        assert_eq!(v["enforced"], "cgroup");
        alloc.cpus = 4.0;
        alloc.memory_bytes = None;
        write(&p, &alloc, &Enforcement::None("no cgroup".into()), 2).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(v["cpus"].as_f64(), Some(4.0));
        assert_eq!(generation(&p), 2);
        assert!(v["memory_bytes"].is_null());
        assert_eq!(v["enforced"], "none");
        // Only the file itself is left.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    /// A task planted links where the agent writes: at the old temporary name and at the share
    /// file's name, both to a file outside. The write touches neither target, and the share
    /// file is a file of its own afterwards.
    #[test]
    fn a_planted_link_redirects_no_write() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "precious").unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        let p = path(&logs.join("7"));
        std::os::unix::fs::symlink(&outside, p.with_extension("json.tmp")).unwrap();
        std::os::unix::fs::symlink(&outside, &p).unwrap();
        let alloc = Allocation {
            cpus: 1.0,
            ..Default::default()
        };
        write(&p, &alloc, &Enforcement::None("x".into()), 2).unwrap();
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "precious");
        assert!(
            !std::fs::symlink_metadata(&p)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(generation(&p), 2);
    }
}
