//! One agent per data directory: an exclusive lock on `<data_dir>/agent.lock`, taken before the
//! agent reads or writes anything there and held until it exits (the kernel drops it with the
//! process, however it ends, so a crash leaves nothing to clean up). The holder writes its pid
//! into the file so that a second agent can name it.
//!
//! `flock`-style locks through `std::fs::File::try_lock` (no unsafe code, no extra crate); the
//! descriptor is close-on-exec, so the task supervisors the agent starts do not inherit it.

use super::StoreError;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

/// The held lock (released when dropped or when the process ends).
#[derive(Debug)]
pub struct DataDirLock {
    _file: std::fs::File,
}

/// Take the data directory's lock, or say who holds it.
pub fn lock(dir: &Path) -> Result<DataDirLock, StoreError> {
    let path = dir.join("agent.lock");
    let io = |e| StoreError::Io(path.clone(), e);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            return Err(StoreError::Locked {
                dir: dir.to_path_buf(),
                pid: text.trim().parse().ok(),
            });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
    }
    // Ours now: say who holds it. A full disk may refuse the pid; the lock holds regardless.
    let _ = file
        .set_len(0)
        .and_then(|()| file.seek(SeekFrom::Start(0)))
        .and_then(|_| writeln!(file, "{}", std::process::id()));
    Ok(DataDirLock { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid() {
        let dir = tempfile::tempdir().unwrap();
        let held = lock(dir.path()).unwrap();
        let Err(e) = lock(dir.path()) else {
            panic!("locked twice");
        };
        assert!(
            matches!(e, StoreError::Locked { pid: Some(p), .. } if p == std::process::id()),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains(&format!("pid {}", std::process::id())),
            "{e}"
        );
        drop(held);
        lock(dir.path()).unwrap();
    }
}
