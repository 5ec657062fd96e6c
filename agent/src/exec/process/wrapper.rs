//! How a task's command line is built: the wrapper that enforces its allocation (joining its
//! cgroups with its device policy in place, else pinned to the least-used CPUs with `taskset`),
//! what clears the agent's ambient capabilities, and the supervisor's command line around it.

use super::{ProcessExecutor, Supervision};
use crate::devices;
use crate::exec::{Allocation, Enforcement, ExecError};
use std::path::PathBuf;
use tapfinger::TaskId;

/// A task's command line as its launcher runs it, and what that enforces.
pub(super) struct Wrapper {
    /// What is enforced.
    pub(super) enforcement: Enforcement,
    /// The wrapper's words, before the command's.
    pub(super) argv: Vec<String>,
    /// CPUs it is pinned to (affinity fallback).
    pub(super) pinned: Vec<usize>,
    /// A v2 device filter for this group, to attach before the task joins it.
    pub(super) filter_at: Option<(PathBuf, devices::DevicePolicy)>,
}

impl Supervision {
    /// The supervisor's command line for `task`, running `inner` (see [`crate::supervise`]):
    /// the lease, the grace, where the exit record and the logs go, and the device filter it
    /// attaches and holds while the task runs.
    pub(super) fn argv(
        &self,
        task: TaskId,
        grace: std::time::Duration,
        log: &std::path::Path,
        filter_at: Option<&(PathBuf, devices::DevicePolicy)>,
        inner: Vec<String>,
    ) -> Vec<String> {
        let mut full = vec![
            "supervise".to_string(),
            "--lease".into(),
            self.lease.display().to_string(),
            "--autonomy-ms".into(),
            self.autonomy_ms.to_string(),
            "--owner".into(),
            self.owner.clone(),
            "--grace-ms".into(),
            grace.as_millis().to_string(),
            "--exit-file".into(),
            self.run_dir
                .join(format!("{}.exit", task.0))
                .display()
                .to_string(),
            "--stdout".into(),
            log.with_extension("stdout").display().to_string(),
            "--stderr".into(),
            log.with_extension("stderr").display().to_string(),
            "--wait-start".into(),
        ];
        // The supervisor attaches the device filter and holds it as long as the task runs.
        if let Some((group, policy)) = filter_at {
            full.extend(["--device-filter".into(), group.display().to_string()]);
            for line in policy.v1_lines() {
                full.extend(["--device-rule".into(), line]);
            }
        }
        full.push("--".into());
        full.extend(inner);
        std::iter::once(self.program.display().to_string())
            .chain(full)
            .collect()
    }
}

/// What a task's command is run through when the agent holds ambient capabilities: they are
/// cleared (ambient and inheritable sets), so the task's program starts with none.
pub(super) const DROP_CAPS: [&str; 4] = ["setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--"];

/// The ambient capability set in the text of `/proc/self/status` (`CapAmb:`, hex).
pub(super) fn ambient_caps(status: &str) -> Option<u64> {
    crate::procs::cap_field(status, "CapAmb:")
}

/// The `n` CPUs (of `total`) that the fewest running tasks are pinned to, lowest index first on
/// ties, so that tasks under the affinity fallback do not all share the first CPUs.
fn least_used_cpus(total: usize, n: usize, pinned: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut load = vec![0usize; total.max(1)];
    for c in pinned {
        if let Some(l) = load.get_mut(c) {
            *l += 1;
        }
    }
    let mut order: Vec<usize> = (0..load.len()).collect();
    order.sort_by_key(|&c| (load[c], c));
    let mut got: Vec<usize> = order.into_iter().take(n.max(1)).collect();
    got.sort_unstable();
    got
}

impl ProcessExecutor {
    /// How the task's command is wrapped to enforce `alloc`: joining its cgroups (its device
    /// policy in place first; a v2 filter is returned for its launcher to attach), else pinned to
    /// the CPUs least used by the `others`' pins, else nothing enforced.
    pub(super) fn wrapper(
        &self,
        task: TaskId,
        alloc: &Allocation,
        others: impl Iterator<Item = usize>,
    ) -> Result<Wrapper, ExecError> {
        let spawn_err = |reason: String| ExecError::Spawn { task, reason };
        // A v2 device filter to attach before the task joins this group (and hold while it runs).
        let mut filter_at: Option<(PathBuf, devices::DevicePolicy)> = None;
        let mut pinned = Vec::new();
        let (enforcement, argv): (Enforcement, Vec<String>) = match self.cgroups.create(task, alloc)
        {
            Ok(mut groups) => {
                // The device policy is in place before the task joins its groups; a task that
                // cannot be kept to its GPUs does not start.
                let isolated = self
                    .device_policy(&alloc.gpus)
                    .map_err(devices::DeviceError::Program)
                    .and_then(|p| {
                        let applied =
                            self.devices
                                .apply(&format!("task-{}", task.0), &groups, &p)?;
                        Ok((applied, p))
                    });
                match isolated {
                    Ok((applied, policy)) => {
                        groups.extend(applied.join);
                        filter_at = applied.filter.map(|g| (g, policy));
                    }
                    Err(e) => {
                        self.devices.remove(&format!("task-{}", task.0));
                        self.cgroups.remove(task);
                        return Err(spawn_err(e.to_string()));
                    }
                }
                let joins: Vec<String> = groups
                    .iter()
                    .map(|g| format!("echo $$ > '{}/cgroup.procs'", g.display()))
                    .collect();
                (
                    Enforcement::Cgroup(groups[0].clone()),
                    vec![
                        "sh".into(),
                        "-c".into(),
                        format!("{} && exec \"$@\"", joins.join(" && ")),
                        "tapfinger-task".into(),
                    ],
                )
            }
            Err(e) if self.taskset => {
                let n = alloc.cpus.ceil().max(1.0) as usize;
                pinned = least_used_cpus(self.cpus, n, others);
                let cpus = pinned
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(",");
                (
                    Enforcement::Affinity(format!(
                        "cgroups not writable ({e}); pinned to CPUs {cpus}, memory not limited"
                    )),
                    vec!["taskset".into(), "-c".into(), cpus],
                )
            }
            Err(e) => (
                Enforcement::None(format!(
                    "cgroups not writable ({e}) and taskset not installed: allocation not enforced"
                )),
                Vec::new(),
            ),
        };
        Ok(Wrapper {
            enforcement,
            argv,
            pinned,
            filter_at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ambient_capabilities_are_read_from_the_status_text() {
        let status = "Name:\tx\nCapEff:\t000001ffffffffff\nCapAmb:\t0000000000201000\n";
        assert_eq!(ambient_caps(status), Some(0x20_1000));
        assert_eq!(ambient_caps("CapAmb:\t0000000000000000\n"), Some(0));
        assert_eq!(ambient_caps("Name:\tx\n"), None);
        assert_eq!(
            &DROP_CAPS[..3],
            ["setpriv", "--inh-caps=-all", "--ambient-caps=-all"]
        );
    }

    #[test]
    fn affinity_spreads_tasks_over_the_least_used_cpus() {
        assert_eq!(least_used_cpus(4, 2, [].into_iter()), vec![0, 1]);
        assert_eq!(least_used_cpus(4, 2, [0, 1].into_iter()), vec![2, 3]);
        assert_eq!(least_used_cpus(4, 1, [0, 1, 2, 3, 0].into_iter()), vec![1]);
        assert_eq!(
            least_used_cpus(2, 3, [].into_iter()),
            vec![0, 1],
            "never more than exist"
        );
        assert_eq!(
            least_used_cpus(4, 0, [].into_iter()),
            vec![0],
            "at least one"
        );
    }
}
