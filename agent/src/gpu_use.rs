//! What each task uses of its GPUs, from NVML: each offered device's compute processes with the
//! device memory they hold (`nvmlDeviceGetComputeRunningProcesses`) and their SM utilization
//! over the last sample period (`nvmlDeviceGetProcessUtilization`), summed per task over its
//! processes. A process is a task's when its environment carries the task's
//! `TAPFINGER_TASK_ID` (every process a task starts inherits it), read from `/proc/<pid>/environ`
//! (the agent runs as the tasks' user or as root); the MPS server and processes of no task are
//! left out. So an operator sees what a share buys: a quarter GPU's task at 25 % of the SMs is
//! using what it was given, one at 3 % is not.
//!
//! Where NVML cannot be loaded there is nothing to show. A stand-in serves tests on machines
//! without a GPU: the `TAPFINGER_FAKE_NVML` environment variable names a JSON file ([`FakeNvml`])
//! whose GPUs discovery reports and whose processes the probe samples, instead of NVML's. Only
//! a build with the feature `dev` reads it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tapfinger::TaskId;

pub use crate::nvml::ProcUse;

/// What one task uses of its GPUs, summed over its processes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskGpuUse {
    /// SM utilization in percent of one device (a task on two devices may show up to 200).
    pub sm_percent: u32,
    /// Device memory held, in bytes.
    pub memory_bytes: u64,
    /// The devices its processes use.
    pub devices: Vec<u32>,
}

/// A source of samples.
pub trait GpuProbe: Send {
    /// The processes on the offered devices now.
    fn sample(&mut self) -> Vec<ProcUse>;
}

pub use crate::nvml::{FAKE_NVML, FakeNvml, fake_nvml};

/// The probe for `devices`: the stand-in if [`FAKE_NVML`] names a file, else NVML if it loads.
pub fn probe(devices: &[u32]) -> Option<Box<dyn GpuProbe>> {
    if let Some(path) = crate::nvml::fake_nvml_path() {
        return Some(Box::new(FileProbe(path.into())));
    }
    NvmlProbe::open(devices).map(|p| Box::new(p) as Box<dyn GpuProbe>)
}

/// NVML's view of the offered devices.
pub struct NvmlProbe {
    nvml: nvml_wrapper::Nvml,
    devices: Vec<u32>,
    /// Per device, the newest utilization sample seen (NVML returns those after it).
    last_seen: BTreeMap<u32, u64>,
}

impl NvmlProbe {
    /// NVML for `devices`, if its library loads.
    pub fn open(devices: &[u32]) -> Option<Self> {
        if devices.is_empty() {
            return None;
        }
        let nvml = nvml_wrapper::Nvml::init().ok()?;
        Some(Self {
            nvml,
            devices: devices.to_vec(),
            last_seen: BTreeMap::new(),
        })
    }
}

impl GpuProbe for NvmlProbe {
    fn sample(&mut self) -> Vec<ProcUse> {
        let mut out = Vec::new();
        for &d in &self.devices {
            let Ok(dev) = self.nvml.device_by_index(d) else {
                continue;
            };
            let mut sm: BTreeMap<u32, u32> = BTreeMap::new();
            let since = self.last_seen.get(&d).copied();
            // Not supported on every device: then memory only.
            if let Ok(samples) = dev.process_utilization_stats(since) {
                for s in samples {
                    self.last_seen
                        .insert(d, s.timestamp.max(since.unwrap_or(0)));
                    let e = sm.entry(s.pid).or_default();
                    *e = (*e).max(s.sm_util);
                }
            }
            for p in dev.running_compute_processes().unwrap_or_default() {
                out.push(ProcUse {
                    pid: p.pid,
                    device: d,
                    sm_percent: sm.remove(&p.pid),
                    memory_bytes: match p.used_gpu_memory {
                        nvml_wrapper::enums::device::UsedGpuMemory::Used(b) => Some(b),
                        nvml_wrapper::enums::device::UsedGpuMemory::Unavailable => None,
                    },
                });
            }
            // Utilization of processes NVML no longer lists as holding memory (rare).
            out.extend(sm.into_iter().map(|(pid, s)| ProcUse {
                pid,
                device: d,
                sm_percent: Some(s),
                memory_bytes: None,
            }));
        }
        out
    }
}

/// A stand-in for NVML: the processes of a [`FakeNvml`] file, read at every sample; a missing
/// or unreadable file is no process.
pub struct FileProbe(pub std::path::PathBuf);

impl GpuProbe for FileProbe {
    fn sample(&mut self) -> Vec<ProcUse> {
        crate::nvml::read_fake(&self.0).processes
    }
}

/// Samples at most every [`Sampler::EVERY`], summed per task: what the status shows.
pub struct Sampler {
    probe: Option<Box<dyn GpuProbe>>,
    last: Option<std::time::Instant>,
    latest: BTreeMap<TaskId, TaskGpuUse>,
}

impl Sampler {
    /// How often NVML is asked (its utilization samples cover about a second each).
    pub const EVERY: std::time::Duration = std::time::Duration::from_secs(2);

    /// A sampler of `probe` (`None`: nothing to show).
    pub fn new(probe: Option<Box<dyn GpuProbe>>) -> Self {
        Self {
            probe,
            last: None,
            latest: BTreeMap::new(),
        }
    }

    /// Each task's use as of the latest sample, sampling again if it is older than
    /// [`Self::EVERY`].
    pub fn latest(&mut self) -> &BTreeMap<TaskId, TaskGpuUse> {
        if let Some(p) = &mut self.probe
            && self.last.is_none_or(|t| t.elapsed() >= Self::EVERY)
        {
            self.last = Some(std::time::Instant::now());
            self.latest = by_task(&p.sample(), task_of);
        }
        &self.latest
    }
}

/// The task a process belongs to: its environment's `TAPFINGER_TASK_ID`.
pub fn task_of(pid: u32) -> Option<TaskId> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0).find_map(|kv| {
        let v = kv.strip_prefix(b"TAPFINGER_TASK_ID=")?;
        std::str::from_utf8(v).ok()?.parse().ok().map(TaskId)
    })
}

/// The samples summed per task (`task_of` says whose each process is; others are left out).
pub fn by_task(
    samples: &[ProcUse],
    task_of: impl Fn(u32) -> Option<TaskId>,
) -> BTreeMap<TaskId, TaskGpuUse> {
    let mut out: BTreeMap<TaskId, TaskGpuUse> = BTreeMap::new();
    for s in samples {
        let Some(t) = task_of(s.pid) else {
            continue;
        };
        let u = out.entry(t).or_default();
        u.sm_percent += s.sm_percent.unwrap_or(0);
        u.memory_bytes += s.memory_bytes.unwrap_or(0);
        if !u.devices.contains(&s.device) {
            u.devices.push(s.device);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Processes of one task add up; processes of no task are left out.
    #[test]
    fn a_task_s_processes_add_up() {
        let s = |pid, device, sm, mem| ProcUse {
            pid,
            device,
            sm_percent: sm,
            memory_bytes: mem,
        };
        let samples = [
            s(10, 0, Some(20), Some(1 << 30)),
            s(11, 0, Some(5), None),
            s(12, 1, None, Some(2 << 30)),
            s(99, 0, Some(70), Some(8 << 30)),
        ];
        let owner = |pid| match pid {
            10 | 11 => Some(TaskId(1)),
            12 => Some(TaskId(2)),
            _ => None,
        };
        let u = by_task(&samples, owner);
        assert_eq!(u.len(), 2);
        assert_eq!(
            u[&TaskId(1)],
            TaskGpuUse {
                sm_percent: 25,
                memory_bytes: 1 << 30,
                devices: vec![0]
            }
        );
        assert_eq!(u[&TaskId(2)].memory_bytes, 2 << 30);
    }

    /// A process's task is read from its environment; this test process belongs to none.
    #[test]
    fn a_process_s_task_is_in_its_environment() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .env("TAPFINGER_TASK_ID", "4242")
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"));
        // Until the child has exec'd, its environment is still its parent's.
        let mut got = None;
        for _ in 0..200 {
            got = task_of(child.id());
            if got.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(got, Some(TaskId(4242)));
        assert_eq!(task_of(std::process::id()), None);
    }
}
