//! GPU devices by task: the node core counts GPUs, only the daemon knows device indices.

use std::collections::{BTreeMap, BTreeSet};
use tapfinger::TaskId;

/// Which GPU devices each task running here holds, so that two tasks never get the same device
/// (the node core counts GPUs; only the daemon knows device indices).
#[derive(Debug, Default)]
pub(super) struct GpuPool {
    /// Devices no task holds.
    pub(super) free: BTreeSet<u32>,
    /// The devices each task running here holds (given back when it exits).
    pub(super) held: BTreeMap<TaskId, Vec<u32>>,
}

impl GpuPool {
    pub(super) fn new(devices: &[u32]) -> Self {
        Self {
            free: devices.iter().copied().collect(),
            held: BTreeMap::new(),
        }
    }

    /// Take `n` free devices for `task` (lowest indices first); None if fewer are free, which the
    /// core's capacity accounting should make impossible.
    pub(super) fn take(&mut self, task: TaskId, n: usize) -> Option<Vec<u32>> {
        if self.free.len() < n {
            return None;
        }
        let got: Vec<u32> = self.free.iter().take(n).copied().collect();
        for d in &got {
            self.free.remove(d);
        }
        if !got.is_empty() {
            self.held.insert(task, got.clone());
        }
        Some(got)
    }

    /// Devices an adopted task holds (from the journal).
    pub(super) fn hold(&mut self, task: TaskId, devices: Vec<u32>) {
        for d in &devices {
            self.free.remove(d);
        }
        if !devices.is_empty() {
            self.held.insert(task, devices);
        }
    }

    pub(super) fn release(&mut self, task: TaskId) {
        if let Some(ds) = self.held.remove(&task) {
            self.free.extend(ds);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_devices_are_never_shared_and_come_back() {
        let mut pool = GpuPool::new(&[0, 1, 2]);
        assert_eq!(pool.take(TaskId(1), 2), Some(vec![0, 1]));
        assert_eq!(pool.take(TaskId(2), 2), None, "only one is free");
        assert_eq!(pool.take(TaskId(2), 1), Some(vec![2]));
        assert_eq!(pool.take(TaskId(3), 0), Some(vec![]));
        pool.release(TaskId(1));
        pool.release(TaskId(3));
        assert_eq!(pool.take(TaskId(4), 2), Some(vec![0, 1]));
        pool.release(TaskId(2));
        pool.release(TaskId(2));
        assert_eq!(pool.free.iter().copied().collect::<Vec<_>>(), vec![2]);
    }
}
