//! Per-task cgroups: where they can be created (v2 or v1), the limits written for an allocation,
//! and their removal. Enforcement only: which process joins a group is the executor's business.

use super::Allocation;
use std::path::{Path, PathBuf};
use tapfinger::TaskId;

/// Where cgroups can be created.
#[derive(Debug, Clone, PartialEq)]
pub enum Cgroups {
    /// Unified hierarchy (v2) at this path.
    V2(PathBuf),
    /// v1 controllers: cpu (required) and memory (optional).
    V1 {
        /// `.../cpu/<prefix>`.
        cpu: PathBuf,
        /// `.../memory/<prefix>`.
        memory: Option<PathBuf>,
    },
    /// Not writable; why.
    Unavailable(String),
}

/// CFS period used for quotas (100 ms, the kernel default).
pub const CFS_PERIOD_US: u64 = 100_000;

impl Cgroups {
    /// Find a writable hierarchy under `root` (normally `/sys/fs/cgroup`) and create the agent's
    /// parent group `prefix` in it.
    pub fn detect(root: &Path, prefix: &str) -> Self {
        let v2 = root.join("cgroup.controllers");
        if v2.exists() {
            let dir = root.join(prefix);
            return match std::fs::create_dir_all(&dir) {
                Ok(()) => {
                    // Controllers must be enabled for children of our group (best effort).
                    let _ = std::fs::write(root.join("cgroup.subtree_control"), "+cpu +memory");
                    let _ = std::fs::write(dir.join("cgroup.subtree_control"), "+cpu +memory");
                    Cgroups::V2(dir)
                }
                Err(e) => Cgroups::Unavailable(format!("{}: {e}", dir.display())),
            };
        }
        let cpu = root.join("cpu");
        if cpu.join("cpu.cfs_quota_us").exists() {
            let dir = cpu.join(prefix);
            return match std::fs::create_dir_all(&dir) {
                Ok(()) => {
                    let mem = root.join("memory").join(prefix);
                    let memory = std::fs::create_dir_all(&mem).ok().map(|()| mem);
                    Cgroups::V1 { cpu: dir, memory }
                }
                Err(e) => Cgroups::Unavailable(format!("{}: {e}", dir.display())),
            };
        }
        Cgroups::Unavailable(format!(
            "no cgroup hierarchy found under {}",
            root.display()
        ))
    }

    /// Create the task's group(s) and write the limits; returns the files whose `cgroup.procs` the
    /// child must join.
    pub(crate) fn create(&self, task: TaskId, alloc: &Allocation) -> std::io::Result<Vec<PathBuf>> {
        let quota = (alloc.cpus * CFS_PERIOD_US as f64).round().max(1000.0) as u64;
        let name = format!("task-{}", task.0);
        match self {
            Cgroups::V2(dir) => {
                let g = dir.join(&name);
                std::fs::create_dir_all(&g)?;
                std::fs::write(g.join("cpu.max"), format!("{quota} {CFS_PERIOD_US}"))?;
                if let Some(m) = alloc.memory_bytes {
                    std::fs::write(g.join("memory.max"), m.to_string())?;
                }
                Ok(vec![g])
            }
            Cgroups::V1 { cpu, memory } => {
                let g = cpu.join(&name);
                std::fs::create_dir_all(&g)?;
                std::fs::write(g.join("cpu.cfs_period_us"), CFS_PERIOD_US.to_string())?;
                std::fs::write(g.join("cpu.cfs_quota_us"), quota.to_string())?;
                let mut groups = vec![g];
                if let (Some(mem), Some(bytes)) = (memory, alloc.memory_bytes) {
                    let m = mem.join(&name);
                    std::fs::create_dir_all(&m)?;
                    std::fs::write(m.join("memory.limit_in_bytes"), bytes.to_string())?;
                    groups.push(m);
                }
                Ok(groups)
            }
            Cgroups::Unavailable(why) => Err(std::io::Error::other(why.clone())),
        }
    }

    /// Remove a finished task's groups (they must be empty; failures are left for the next start).
    pub(crate) fn remove(&self, task: TaskId) {
        let name = format!("task-{}", task.0);
        let dirs: Vec<PathBuf> = match self {
            Cgroups::V2(d) => vec![d.join(&name)],
            Cgroups::V1 { cpu, memory } => {
                let mut v = vec![cpu.join(&name)];
                if let Some(m) = memory {
                    v.push(m.join(&name));
                }
                v
            }
            Cgroups::Unavailable(_) => Vec::new(),
        };
        for d in dirs {
            let _ = std::fs::remove_dir(d);
        }
    }
}
