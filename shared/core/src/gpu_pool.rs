//! GPU devices by task on one node: the node core counts GPU units, the node's driver (an
//! agent's daemon, the simulator) places them on devices. A task holds whole devices, or a share
//! of one device (an MPS client on an agent) counted in grid units of the GPU step; a device that
//! holds shares holds no whole-device task, and the other way round. A share goes to a device
//! already shared where one has room, so that whole devices stay free for whole-device tasks;
//! among those (or the first free device) it takes the one that leaves the box least fragmented
//! for the GPU shapes the pool has been asked to place so far ([`crate::frag`]: FGD's measure,
//! the pool's own record standing for the workload's mix), the fullest on a tie.
//!
//! The core's units cannot see devices: shares of several devices can leave room that no single
//! device has. A driver whose placement fails sends the task back to the queue
//! (`crate::node::NodeCore::on_start_refused`); the simulator does the same.

use crate::frag::{Devices, Mix, TYPICAL_COVER, fragment};
use crate::task::TaskId;
use std::collections::{BTreeMap, BTreeSet};

/// Which GPU devices each task running on a node holds, so that two tasks never get the same
/// device and shares of one device never exceed it.
#[derive(Debug, Default, Clone)]
pub struct GpuPool {
    /// Devices no task holds.
    free: BTreeSet<u32>,
    /// The devices each task holds (given back when it ends).
    held: BTreeMap<TaskId, Vec<u32>>,
    /// Grid units of one device (1 / the GPU step; 1: no shares).
    per_device: u32,
    /// Units of each device held by shares (a device here is not in `free`).
    shares: BTreeMap<u32, u32>,
    /// The share each task holds: (device, units).
    shared: BTreeMap<TaskId, (u32, u32)>,
    /// Every device, in order.
    all: Vec<u32>,
    /// The GPU units of every placement asked of the pool: the shapes whose fragments a share
    /// avoids. Where it is empty, a share takes the fullest device.
    mix: Mix<u32>,
    /// Whether shares avoid fragments (else: the fullest device, the ablation).
    by_fragment: bool,
}

impl GpuPool {
    /// A pool of whole devices.
    #[cfg(test)]
    fn new(devices: &[u32]) -> Self {
        Self::with_shares(devices, 1)
    }

    /// Devices no task holds.
    pub fn free_devices(&self) -> usize {
        self.free.len()
    }

    /// Every task holding devices or a share here.
    pub fn tasks(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.held.keys().chain(self.shared.keys()).copied()
    }

    /// The tasks holding shares of `device`, with their units.
    pub fn sharers(&self, device: u32) -> impl Iterator<Item = (TaskId, u32)> + '_ {
        self.shared
            .iter()
            .filter(move |(_, (d, _))| *d == device)
            .map(|(t, (_, u))| (*t, *u))
    }

    /// Place `units` grid units for `task`: a share of one device if fewer than a device has,
    /// else whole devices (`units` / per device, rounded down). The devices, or None if none
    /// has room.
    pub fn place(&mut self, task: TaskId, units: u32) -> Option<Vec<u32>> {
        if units > 0 && units < self.per_device {
            return self.take_share(task, units).map(|d| vec![d]);
        }
        self.take(task, (units / self.per_device) as usize)
    }

    /// A pool whose devices are `per_device` grid units each, so that a task may hold a share of
    /// one device (fewer units than a device has).
    pub fn with_shares(devices: &[u32], per_device: u32) -> Self {
        Self {
            free: devices.iter().copied().collect(),
            held: BTreeMap::new(),
            per_device: per_device.max(1),
            shares: BTreeMap::new(),
            shared: BTreeMap::new(),
            all: devices.to_vec(),
            mix: Mix::default(),
            by_fragment: true,
        }
    }

    /// The pool whose shares go to the fullest device they fit, whatever they fragment: the
    /// ablation of [`Self::with_shares`].
    pub fn fullest_first(devices: &[u32], per_device: u32) -> Self {
        Self {
            by_fragment: false,
            ..Self::with_shares(devices, per_device)
        }
    }

    /// Units left on each device, in the order given at creation: what the ledger's packing
    /// prior reads ([`crate::ledger::Ledger::set_devices`]).
    pub fn left(&self) -> Vec<u32> {
        self.left_with(u32::MAX, 0)
    }

    /// Grid units of one device.
    pub fn per_device(&self) -> u32 {
        self.per_device
    }

    /// Units left on each device (in the order given at creation) were `extra` units of
    /// `device` taken.
    fn left_with(&self, device: u32, extra: u32) -> Vec<u32> {
        self.all
            .iter()
            .map(|d| {
                let used = if self.free.contains(d) {
                    0
                } else {
                    self.shares.get(d).copied().unwrap_or(self.per_device)
                };
                let used = used + if *d == device { extra } else { 0 };
                self.per_device.saturating_sub(used)
            })
            .collect()
    }

    /// The expected fragment of the devices (GPU shapes only) were `units` put on `device`.
    fn fragment_with(&self, device: u32, units: u32, shapes: &[(u32, f64)]) -> f64 {
        let left = self.left_with(device, units);
        let devices = Devices {
            left: &left,
            per: self.per_device,
            kind: 0,
        };
        let demands: Vec<[u32; 1]> = shapes.iter().map(|(u, _)| [*u]).collect();
        fragment(
            &[],
            &devices,
            demands
                .iter()
                .zip(shapes)
                .map(|(d, (_, p))| (&d[..], *p, true)),
        )
    }

    /// Take a share of `units` grid units (fewer than a device has) of one device for `task`:
    /// on the device already shared that it fills best, else on a free device (which then holds
    /// shares only). None if no device has room, which the core's accounting should make
    /// impossible, or if `units` is not a share.
    pub fn take_share(&mut self, task: TaskId, units: u32) -> Option<u32> {
        if units == 0 || units >= self.per_device {
            return None;
        }
        self.mix.observe(units);
        // Shared devices with room, fullest first (the lowest id of equals).
        let mut room: Vec<(u32, u32)> = self
            .shares
            .iter()
            .filter(|(_, used)| **used + units <= self.per_device)
            .map(|(d, u)| (*d, *u))
            .collect();
        room.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let shapes = if self.by_fragment {
            self.mix.typical(TYPICAL_COVER)
        } else {
            Vec::new()
        };
        let mut best: Option<(f64, u32)> = None;
        for (d, _) in &room {
            let f = if shapes.is_empty() {
                0.0
            } else {
                self.fragment_with(*d, units, &shapes)
            };
            if best.is_none_or(|(b, _)| f < b) {
                best = Some((f, *d));
            }
        }
        let best = best.map(|(_, d)| d);
        let device = match best {
            Some(d) => d,
            None => {
                let d = *self.free.iter().next()?;
                self.free.remove(&d);
                d
            }
        };
        *self.shares.entry(device).or_default() += units;
        self.shared.insert(task, (device, units));
        Some(device)
    }

    /// The share `task` holds: (device, units).
    pub fn share_of(&self, task: TaskId) -> Option<(u32, u32)> {
        self.shared.get(&task).copied()
    }

    /// Grid units `task` holds: its share, or its whole devices.
    pub fn units_of(&self, task: TaskId) -> u32 {
        match self.shared.get(&task) {
            Some((_, units)) => *units,
            None => self
                .held
                .get(&task)
                .map_or(0, |d| d.len() as u32 * self.per_device),
        }
    }

    /// The devices `task` holds: its whole devices, or the one its share is of.
    pub fn devices_of(&self, task: TaskId) -> Vec<u32> {
        match self.shared.get(&task) {
            Some((device, _)) => vec![*device],
            None => self.held.get(&task).cloned().unwrap_or_default(),
        }
    }

    /// Whether `task` holds devices or a share here.
    pub fn holds(&self, task: TaskId) -> bool {
        self.held.contains_key(&task) || self.shared.contains_key(&task)
    }

    /// Mark `units` of `device` as held by `task` (an adopted fractional task).
    pub fn hold_share(&mut self, task: TaskId, device: u32, units: u32) {
        self.free.remove(&device);
        *self.shares.entry(device).or_default() += units;
        self.shared.insert(task, (device, units));
    }

    /// Take `n` free devices for `task` (lowest indices first); None if fewer are free, which the
    /// core's capacity accounting should make impossible.
    pub fn take(&mut self, task: TaskId, n: usize) -> Option<Vec<u32>> {
        if n > 0 {
            self.mix.observe(
                u32::try_from(n)
                    .unwrap_or(u32::MAX)
                    .saturating_mul(self.per_device),
            );
        }
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
    pub fn hold(&mut self, task: TaskId, devices: Vec<u32>) {
        for d in &devices {
            self.free.remove(d);
        }
        if !devices.is_empty() {
            self.held.insert(task, devices);
        }
    }

    /// Give back what `task` holds; the device of its share, if it held one (whose MPS client
    /// it was).
    pub fn release(&mut self, task: TaskId) -> Option<u32> {
        if let Some(ds) = self.held.remove(&task) {
            self.free.extend(ds);
        }
        let (device, units) = self.shared.remove(&task)?;
        let used = self.shares.entry(device).or_default();
        *used = used.saturating_sub(units);
        if *used == 0 {
            // Its last share ended: whole again.
            self.shares.remove(&device);
            self.free.insert(device);
        }
        Some(device)
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

    /// Quarter shares pack onto the fullest device that fits; a device with shares is never
    /// given whole, and is whole again once its last share ends.
    #[test]
    fn shares_pack_onto_one_device_and_never_meet_a_whole_device_task() {
        let mut pool = GpuPool::with_shares(&[0, 1], 4);
        assert_eq!(pool.take_share(TaskId(1), 1), Some(0));
        assert_eq!(pool.take_share(TaskId(2), 3), Some(0), "fills GPU 0");
        assert_eq!(pool.take(TaskId(3), 2), None, "GPU 0 holds shares");
        assert_eq!(pool.take_share(TaskId(4), 2), Some(1));
        assert_eq!(
            pool.take_share(TaskId(5), 3),
            None,
            "no device has 3 quarters free"
        );
        assert_eq!(pool.take_share(TaskId(6), 2), Some(1));
        assert_eq!(
            pool.take_share(TaskId(7), 4),
            None,
            "a whole device is not a share"
        );
        assert_eq!(pool.share_of(TaskId(2)), Some((0, 3)));
        pool.release(TaskId(1));
        pool.release(TaskId(2));
        assert_eq!(
            pool.take(TaskId(3), 1),
            Some(vec![0]),
            "GPU 0 is whole again"
        );
        pool.release(TaskId(4));
        pool.release(TaskId(6));
        assert_eq!(pool.free.iter().copied().collect::<Vec<_>>(), vec![1]);
    }

    /// A share avoids leaving a sliver that the shapes the pool has placed cannot use; the
    /// fullest-first pool (the ablation) leaves it.
    #[test]
    fn a_share_goes_where_it_leaves_the_least_fragment() {
        for by_fragment in [true, false] {
            let devices = [0, 1, 2, 3, 4, 5];
            let mut pool = if by_fragment {
                GpuPool::with_shares(&devices, 4)
            } else {
                GpuPool::fullest_first(&devices, 4)
            };
            // Three half-device tasks: device 0 full, device 1 half used.
            for t in 1..=3 {
                pool.take_share(TaskId(t), 2).unwrap();
            }
            assert_eq!(pool.share_of(TaskId(3)), Some((1, 2)));
            // An adopted quarter on device 2.
            pool.hold_share(TaskId(4), 2, 1);
            // A quarter: on device 1 it leaves a quarter there, too small for the half-device
            // shape; on device 2 both devices keep a half.
            let d = pool.take_share(TaskId(5), 1).unwrap();
            assert_eq!(
                d,
                if by_fragment { 2 } else { 1 },
                "by_fragment {by_fragment}"
            );
        }
    }
}
