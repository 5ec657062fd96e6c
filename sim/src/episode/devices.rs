//! The GPU devices of each node where a device is shared in fractions (a GPU step below one
//! device): every slot, each running task's GPU units are placed on its node's devices by the
//! agents' own pool (`tapfinger::gpu_pool`), so that a share lives on one device and a device
//! holds shares or whole-device tasks, never both. A task whose share fits the node's free
//! units but no single device goes back to the queue, as an agent sends it back
//! (`NodeCore::on_start_refused`). Tasks sharing a device progress at the scenario's
//! co-location factor of their pair (`crate::scenario::Colocation`; the smallest over their
//! device's other tasks).

use super::Episode;
use std::collections::BTreeMap;
use tapfinger::TaskId;
use tapfinger::gpu_pool::GpuPool;
use tapfinger::ledger::TaskState;

/// Each node's devices (node i's pool at index i) and the GPU kind's index.
pub(super) struct Devices {
    kind: usize,
    pools: Vec<GpuPool>,
}

impl Devices {
    /// Tell the ledger how each node's devices stand (`ids[i]` is pool i's node): the packing
    /// prior of the next slot's claims reads it ([`tapfinger::ledger::Ledger::set_devices`]).
    pub(super) fn state<M>(
        &self,
        ledger: &mut tapfinger::ledger::Ledger<M>,
        ids: &[tapfinger::NodeId],
    ) {
        for (pool, node) in self.pools.iter().zip(ids) {
            ledger.set_devices(*node, self.kind, pool.per_device(), pool.left());
        }
    }
}

impl Devices {
    /// The devices of `sc`'s nodes, if its GPU step is below one device.
    pub(super) fn of(sc: &crate::scenario::Scenario) -> Option<Self> {
        let (kind, per) = tapfinger::spec::units_per_device(&sc.space)?;
        let pools = sc
            .nodes
            .iter()
            .map(|n| {
                let devices: Vec<u32> = (0..n.capacity.get(kind) / per).collect();
                GpuPool::with_shares(&devices, per)
            })
            .collect();
        Some(Self { kind, pools })
    }
}

impl Episode<'_> {
    /// Place the slot's running tasks on their nodes' devices (tasks that moved, ended or
    /// changed their units first give theirs back); send back to the queue those no device
    /// holds; the co-location factor of each task that shares a device (others: 1).
    pub(super) fn place_on_devices(&mut self) -> BTreeMap<TaskId, f64> {
        let mut factors = BTreeMap::new();
        let Some(dev) = &mut self.devices else {
            return factors;
        };
        let mut refused = Vec::new();
        for (i, pool) in dev.pools.iter_mut().enumerate() {
            let node = self.ids[i];
            let units: BTreeMap<TaskId, u32> = self
                .ledger
                .running_on(node)
                .filter_map(|id| match &self.ledger[&id].state {
                    TaskState::Running { alloc, .. } => Some((id, alloc.get(dev.kind))),
                    _ => None,
                })
                .collect();
            let stale: Vec<TaskId> = pool
                .tasks()
                .filter(|t| units.get(t) != Some(&pool.units_of(*t)))
                .collect();
            for t in stale {
                pool.release(t);
            }
            for (&id, &u) in &units {
                if u > 0 && !pool.holds(id) && pool.place(id, u).is_none() {
                    refused.push(id);
                }
            }
            for &id in units.keys() {
                let Some((device, _)) = pool.share_of(id) else {
                    continue;
                };
                let ty = usize::from(self.ledger[&id].task.ty.0);
                let f = pool
                    .sharers(device)
                    .filter(|(other, _)| *other != id)
                    .map(|(other, _)| {
                        let other = usize::from(self.ledger[&other].task.ty.0);
                        self.sc
                            .colocation
                            .as_ref()
                            .map_or(1.0, |c| c.factor(ty, other))
                    })
                    .fold(1.0, f64::min);
                factors.insert(id, f);
            }
        }
        if self.sc.pack_shares {
            dev.state(&mut self.ledger, &self.ids);
        }
        for id in refused {
            self.ledger
                .requeue(id, tapfinger::ledger::Requeue::StartRefused);
            for p in &mut self.protocols {
                p.release(id);
            }
        }
        factors
    }
}
