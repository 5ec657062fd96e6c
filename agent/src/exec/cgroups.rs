//! Per-task cgroups: where they can be created (v2 or v1), the limits written for an allocation,
//! and their removal. Enforcement only: which process joins a group is the executor's business.
//!
//! **Where.** An agent run by systemd with `Delegate=yes` (deploy/tapfinger-agent.service) owns
//! its service's cgroup and nothing above it, so [`Cgroups::detect_for_agent`] first tries the
//! agent's own cgroup (from `/proc/self/cgroup`): on v2 the agent moves itself into a leaf
//! `<own>/agent` (the kernel lets a group hand controllers to its children only when it holds no
//! process itself) and creates the tasks' groups under `<own>/tasks`; on v1 it uses
//! `<own>/tapfinger` in the `cpu` and `memory` hierarchies. An agent in the root group (run by
//! hand as root, or in a container) uses `<root>/tapfinger` as before. Either way each agent's
//! tasks go in a subgroup named after the agent ([`Cgroups::of_agent`]): several agents on one
//! host (or started from one shell, so sharing one cgroup) never touch each other's tasks.

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
    /// Where this agent's tasks' groups go (module doc): its own delegated cgroup, described by
    /// `self_cgroup` (the text of `/proc/self/cgroup`), when that is not the root and is
    /// writable; else [`Cgroups::detect`] with `prefix` under `root`.
    pub fn detect_for_agent(root: &Path, self_cgroup: &str, prefix: &str) -> Self {
        match Self::delegated(root, self_cgroup, prefix) {
            Some(Ok(c)) => c,
            Some(Err(e)) => {
                tracing::info!(error = %e, "own cgroup not usable, trying the hierarchy's root");
                Self::detect(root, prefix)
            }
            None => Self::detect(root, prefix),
        }
    }

    fn delegated(root: &Path, self_cgroup: &str, prefix: &str) -> Option<std::io::Result<Self>> {
        // Lines are `id:controllers:path`; v2's is `0::/path`.
        let own = |pick: &dyn Fn(&str) -> bool| {
            self_cgroup.lines().find_map(|l| {
                let mut f = l.splitn(3, ':');
                let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
                let path = path.trim().trim_start_matches('/');
                (pick(ctl) && !path.is_empty()).then(|| PathBuf::from(path))
            })
        };
        if root.join("cgroup.controllers").exists() {
            let dir = root.join(own(&|c: &str| c.is_empty())?);
            return Some((|| {
                let agent = dir.join("agent");
                let tasks = dir.join("tasks");
                std::fs::create_dir_all(&agent)?;
                std::fs::create_dir_all(&tasks)?;
                // "0" moves the writing process (every thread of it) into the leaf.
                std::fs::write(agent.join("cgroup.procs"), "0")?;
                std::fs::write(dir.join("cgroup.subtree_control"), "+cpu +memory")?;
                std::fs::write(tasks.join("cgroup.subtree_control"), "+cpu +memory")?;
                Ok(Cgroups::V2(tasks))
            })());
        }
        let has = |name: &'static str| move |c: &str| c.split(',').any(|x| x == name);
        let cpu_own = own(&has("cpu"))?;
        Some((|| {
            let cpu = root.join("cpu").join(cpu_own).join(prefix);
            std::fs::create_dir_all(&cpu)?;
            let memory = own(&has("memory"))
                .map(|m| root.join("memory").join(m).join(prefix))
                .filter(|m| std::fs::create_dir_all(m).is_ok());
            Ok(Cgroups::V1 { cpu, memory })
        })())
    }

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

    /// The groups of one agent among those that share this hierarchy (several agents on one
    /// host, or in one service's cgroup): a subgroup `agent` (a name carrying the agent's
    /// identity) under which its tasks' groups go, so that no agent ever counts, kills or
    /// removes another agent's copy of a task (task ids are the cluster's, and a task moves
    /// between agents). On v2 the controllers are handed down to it.
    pub fn of_agent(self, agent: &str) -> Self {
        match self {
            Cgroups::V2(dir) => {
                let own = dir.join(agent);
                match std::fs::create_dir_all(&own) {
                    Ok(()) => {
                        // Best effort, as for the parent: without it the task groups' limit
                        // files are missing and their starts fail, saying so.
                        let _ = std::fs::write(dir.join("cgroup.subtree_control"), "+cpu +memory");
                        let _ = std::fs::write(own.join("cgroup.subtree_control"), "+cpu +memory");
                        Cgroups::V2(own)
                    }
                    Err(e) => Cgroups::Unavailable(format!("{}: {e}", own.display())),
                }
            }
            Cgroups::V1 { cpu, memory } => {
                let cpu = cpu.join(agent);
                if let Err(e) = std::fs::create_dir_all(&cpu) {
                    return Cgroups::Unavailable(format!("{}: {e}", cpu.display()));
                }
                let memory = memory
                    .map(|m| m.join(agent))
                    .filter(|m| std::fs::create_dir_all(m).is_ok());
                Cgroups::V1 { cpu, memory }
            }
            other => other,
        }
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

    /// Change a running task's limits (elastic sharing) in the groups [`Cgroups::create`] made:
    /// the CPU quota becomes the new share; memory: the soft limit (v2 `memory.high`, v1
    /// `memory.soft_limit_in_bytes`) becomes the new share and the hard limit is raised to it
    /// if below, never lowered. Lowering a hard limit under what the task uses gets it killed;
    /// above its soft limit the kernel reclaims the task's memory instead. The minimum demand, which a task is
    /// asked to keep within, is never re-shared away (every share is at least the minimum).
    pub(crate) fn resize(&self, task: TaskId, alloc: &Allocation) -> std::io::Result<()> {
        let quota = (alloc.cpus * CFS_PERIOD_US as f64).round().max(1000.0) as u64;
        let name = format!("task-{}", task.0);
        let raise = |file: &Path, bytes: u64| -> std::io::Result<()> {
            let now = std::fs::read_to_string(file)?;
            // "max" (v2) or a huge number (v1) is no limit: nothing to raise.
            match now.trim().parse::<u64>() {
                Ok(n) if n < bytes => std::fs::write(file, bytes.to_string()),
                _ => Ok(()),
            }
        };
        match self {
            Cgroups::V2(dir) => {
                let g = dir.join(&name);
                std::fs::write(g.join("cpu.max"), format!("{quota} {CFS_PERIOD_US}"))?;
                if let Some(m) = alloc.memory_bytes {
                    raise(&g.join("memory.max"), m)?;
                    std::fs::write(g.join("memory.high"), m.to_string())?;
                }
                Ok(())
            }
            Cgroups::V1 { cpu, memory } => {
                std::fs::write(cpu.join(&name).join("cpu.cfs_quota_us"), quota.to_string())?;
                if let (Some(mem), Some(bytes)) = (memory, alloc.memory_bytes) {
                    let m = mem.join(&name);
                    raise(&m.join("memory.limit_in_bytes"), bytes)?;
                    std::fs::write(m.join("memory.soft_limit_in_bytes"), bytes.to_string())?;
                }
                Ok(())
            }
            Cgroups::Unavailable(why) => Err(std::io::Error::other(why.clone())),
        }
    }

    /// Remove a finished task's groups (they must be empty; failures are left for the next start).
    pub(crate) fn remove(&self, task: TaskId) {
        for d in self.groups_of(task) {
            let _ = std::fs::remove_dir(d);
        }
    }

    /// Kill every process left in `task`'s groups (a task whose supervisor is gone): through
    /// `cgroup.kill` where the kernel has it (cgroup v2, Linux 5.14 on), else each process its
    /// `cgroup.procs` lists. Returns how many processes the groups held.
    pub(crate) fn kill_all(&self, task: TaskId) -> usize {
        let mut found = 0;
        for d in self.groups_of(task) {
            let procs: Vec<i32> = std::fs::read_to_string(d.join("cgroup.procs"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect();
            if procs.is_empty() {
                continue;
            }
            found += procs.len();
            if std::fs::write(d.join("cgroup.kill"), "1").is_err() {
                for p in procs {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(p),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
        found
    }

    /// The tasks that have a group here (`task-<id>`), empty or not: under this agent's own
    /// group ([`Cgroups::of_agent`]), every one is this agent's.
    pub(crate) fn task_groups(&self) -> std::collections::BTreeSet<TaskId> {
        self.bases()
            .into_iter()
            .filter_map(|b| std::fs::read_dir(b).ok())
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name();
                let id = name.to_str()?.strip_prefix("task-")?.parse::<u64>().ok()?;
                e.file_type().ok()?.is_dir().then_some(TaskId(id))
            })
            .collect()
    }

    fn bases(&self) -> Vec<&PathBuf> {
        match self {
            Cgroups::V2(d) => vec![d],
            Cgroups::V1 { cpu, memory } => std::iter::once(cpu).chain(memory).collect(),
            Cgroups::Unavailable(_) => Vec::new(),
        }
    }

    /// Remove the empty groups of the tasks in `mine` but not in `keep` (what a killed agent
    /// left: a task's end removes its groups only while the agent runs). Only this agent's
    /// tasks (`mine`): other agents on the box share the hierarchy. A group that still holds
    /// processes stays. Returns how many were removed.
    pub(crate) fn sweep(
        &self,
        mine: &std::collections::BTreeSet<TaskId>,
        keep: &std::collections::BTreeSet<TaskId>,
    ) -> usize {
        let mut removed = 0;
        for base in self.bases() {
            let Ok(entries) = std::fs::read_dir(base) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name();
                let task = name
                    .to_str()
                    .and_then(|n| n.strip_prefix("task-"))
                    .and_then(|n| n.parse::<u64>().ok())
                    .map(TaskId);
                if task.is_some_and(|t| mine.contains(&t) && !keep.contains(&t))
                    && std::fs::remove_dir(e.path()).is_ok()
                {
                    removed += 1;
                }
            }
        }
        removed
    }

    /// The groups [`Cgroups::create`] makes for `task` (the first: its CPU group, on v2 its
    /// only one).
    pub(crate) fn groups_of(&self, task: TaskId) -> Vec<PathBuf> {
        let name = format!("task-{}", task.0);
        match self {
            Cgroups::V2(d) => vec![d.join(&name)],
            Cgroups::V1 { cpu, memory } => {
                let mut v = vec![cpu.join(&name)];
                if let Some(m) = memory {
                    v.push(m.join(&name));
                }
                v
            }
            Cgroups::Unavailable(_) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    // Test helpers may unwrap: a failure there is a test failure with its message.
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn alloc(cpus: f64, gib: u64) -> Allocation {
        Allocation {
            cpus,
            memory_bytes: Some(gib << 30),
            ..Allocation::default()
        }
    }

    fn read(p: &Path) -> String {
        std::fs::read_to_string(p).unwrap().trim().to_string()
    }

    // Which groups an agent in a delegated cgroup uses, in plain directories laid out as the
    // hierarchy is: what the kernel enforces there (its rule that a group with processes cannot
    // hand controllers to children) is not exercised by this test, and this project's machines
    // mount cgroup v1 at the root, so no test here runs under a real v2 delegation.
    /// Two agents sharing one hierarchy (one host, one shell's cgroup) name one task's group
    /// differently: neither counts, kills or removes the other's copy.
    #[test]
    fn agents_on_one_host_have_groups_of_their_own() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("tapfinger");
        std::fs::create_dir_all(&base).unwrap();
        let a = Cgroups::V2(base.clone()).of_agent("node-1");
        let b = Cgroups::V2(base.clone()).of_agent("node-2");
        let task = TaskId(7);
        assert_eq!(a.groups_of(task), vec![base.join("node-1/task-7")]);
        assert_ne!(a.groups_of(task), b.groups_of(task));
        // b's copy holds a process (as its group's process list says): a finds none of it.
        let b_group = &b.groups_of(task)[0];
        std::fs::create_dir_all(b_group).unwrap();
        std::fs::write(b_group.join("cgroup.procs"), "999999\n").unwrap();
        assert_eq!(a.kill_all(task), 0);
        let v1 = Cgroups::V1 {
            cpu: base.join("cpu"),
            memory: None,
        }
        .of_agent("node-3");
        assert_eq!(v1.groups_of(task), vec![base.join("cpu/node-3/task-7")]);
    }

    #[test]
    fn an_agent_in_a_delegated_cgroup_puts_its_tasks_under_its_own_group() {
        let dir = std::env::temp_dir().join(format!("tapfinger-cgd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let service = "system.slice/tapfinger-agent.service";
        // v2: the agent moves itself into a leaf, tasks go beside it.
        let v2 = dir.join("v2");
        std::fs::create_dir_all(v2.join(service)).unwrap();
        std::fs::write(v2.join("cgroup.controllers"), "cpu memory").unwrap();
        let cg = Cgroups::detect_for_agent(&v2, &format!("0::/{service}\n"), "tapfinger");
        assert_eq!(cg, Cgroups::V2(v2.join(service).join("tasks")));
        assert_eq!(read(&v2.join(service).join("agent/cgroup.procs")), "0");
        assert_eq!(
            read(&v2.join(service).join("cgroup.subtree_control")),
            "+cpu +memory"
        );
        // v1: the agent's own group in the cpu and memory hierarchies.
        let v1 = dir.join("v1");
        std::fs::create_dir_all(v1.join("cpu")).unwrap();
        std::fs::create_dir_all(v1.join("memory")).unwrap();
        let text = format!("4:memory:/{service}\n2:cpu,cpuacct:/{service}\n0::/\n");
        let cg = Cgroups::detect_for_agent(&v1, &text, "tapfinger");
        assert_eq!(
            cg,
            Cgroups::V1 {
                cpu: v1.join("cpu").join(service).join("tapfinger"),
                memory: Some(v1.join("memory").join(service).join("tapfinger")),
            }
        );
        // In the root group: the hierarchy's root, as before.
        std::fs::write(v2.join("cgroup.controllers"), "cpu memory").unwrap();
        let cg = Cgroups::detect_for_agent(&v2, "0::/\n", "tapfinger");
        assert_eq!(cg, Cgroups::V2(v2.join("tapfinger")));
        let _ = std::fs::remove_dir_all(&dir);
    }

    // Leftovers in a plain directory laid out as a v1 hierarchy: a removable (empty) group is
    // one without processes; a non-empty directory stands for one that still holds some.
    #[test]
    fn a_restart_removes_the_empty_groups_of_tasks_it_does_not_run() {
        let dir = tempfile::tempdir().unwrap();
        let (cpu, mem) = (dir.path().join("cpu"), dir.path().join("memory"));
        for base in [&cpu, &mem] {
            for t in ["task-1", "task-2", "task-3", "not-a-task"] {
                std::fs::create_dir_all(base.join(t)).unwrap();
            }
        }
        std::fs::write(cpu.join("task-3/busy"), "").unwrap();
        let cg = Cgroups::V1 {
            cpu: cpu.clone(),
            memory: Some(mem.clone()),
        };
        let mine = [TaskId(1), TaskId(2), TaskId(3)].into();
        let keep = [TaskId(2)].into();
        std::fs::create_dir_all(cpu.join("task-4")).unwrap();
        assert_eq!(
            cg.sweep(&mine, &keep),
            3,
            "task-1 twice, task-3's memory group"
        );
        assert!(cpu.join("task-4").exists(), "another agent's task");
        assert!(!cpu.join("task-1").exists() && !mem.join("task-1").exists());
        assert!(cpu.join("task-2").exists() && mem.join("task-2").exists());
        assert!(cpu.join("task-3").exists() && !mem.join("task-3").exists());
        assert!(cpu.join("not-a-task").exists());
    }

    // The files a resize writes, in a plain directory laid out as the hierarchy is (what the
    // kernel then does with them is the kernel's; the quota test in `exec` uses a real one).
    #[test]
    fn a_resize_moves_the_quota_and_the_soft_limit_and_never_lowers_the_hard_one() {
        let dir = std::env::temp_dir().join(format!("tapfinger-cg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cg = Cgroups::V2(dir.clone());
        let g = cg.create(TaskId(7), &alloc(1.0, 2)).unwrap().remove(0);
        assert_eq!(read(&g.join("cpu.max")), "100000 100000");
        cg.resize(TaskId(7), &alloc(2.5, 6)).unwrap();
        assert_eq!(read(&g.join("cpu.max")), "250000 100000");
        assert_eq!(read(&g.join("memory.max")), (6u64 << 30).to_string());
        assert_eq!(read(&g.join("memory.high")), (6u64 << 30).to_string());
        cg.resize(TaskId(7), &alloc(0.5, 3)).unwrap();
        assert_eq!(read(&g.join("cpu.max")), "50000 100000");
        assert_eq!(read(&g.join("memory.max")), (6u64 << 30).to_string());
        assert_eq!(read(&g.join("memory.high")), (3u64 << 30).to_string());

        let v1 = Cgroups::V1 {
            cpu: dir.join("cpu"),
            memory: Some(dir.join("memory")),
        };
        v1.create(TaskId(8), &alloc(1.0, 2)).unwrap();
        v1.resize(TaskId(8), &alloc(3.0, 1)).unwrap();
        let (c, m) = (dir.join("cpu/task-8"), dir.join("memory/task-8"));
        assert_eq!(read(&c.join("cpu.cfs_quota_us")), "300000");
        assert_eq!(
            read(&m.join("memory.limit_in_bytes")),
            (2u64 << 30).to_string()
        );
        assert_eq!(
            read(&m.join("memory.soft_limit_in_bytes")),
            (1u64 << 30).to_string()
        );
        assert!(
            Cgroups::Unavailable("x".into())
                .resize(TaskId(9), &alloc(1.0, 1))
                .is_err()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
