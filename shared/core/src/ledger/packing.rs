//! The prior a claim states in the Bayes rule that settles a contested task: where the box's
//! driver packs GPU shares and has said how its devices stand ([`Ledger::set_devices`]), FGD's
//! growth score of the claim on the box ([`crate::frag::packing_prior`]) against the typical
//! shapes of the workload the ledger has seen arrive; elsewhere the box's headroom for the
//! task. The ledger counts units; only the box's driver knows which device holds what, so the
//! devices are the last snapshot it gave: the simulator gives them at the end of each slot,
//! where it places the slot's tasks on devices; an agent each time its pool changes.
//!
//! Packing is a driver's choice, off unless asked (`pack_shares` on an agent, `--pack-shares`
//! in the simulator): it fits more of a filling cluster's fractional demand (the FGD
//! benchmark, docs/PACKING.md), and it co-locates shares that spreading keeps apart, which
//! slows tasks where the cluster has room (the JCT of `small-gpu-edge`, docs/RESULTS.md).

use super::Ledger;
use crate::frag::{Devices, Mix, TYPICAL_COVER, packing_prior};
use crate::resources::Resources;
use crate::task::{NodeId, Task};
use std::collections::BTreeMap;

/// At most this many typical shapes: where boxes are reachable by random subsets, every task
/// has a shape of its own, and a prior over thousands of shapes would cost each claim that
/// many passes over the box's devices. The most frequent shapes still come first.
pub const MAX_SHAPES: usize = 64;

/// A task's shape for the measure: its minimum demand, and the boxes it may run on.
type Shape = (Vec<u32>, Vec<NodeId>);

/// One box's devices as its driver last stated them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stated {
    kind: usize,
    per: u32,
    left: Vec<u32>,
}

/// What the packing prior keeps.
#[derive(Debug, Clone, Default)]
pub(super) struct Packing {
    mix: Mix<Shape>,
    /// The typical shapes of `mix`: worked out at each arrival once a driver has stated
    /// devices, so that an arrival counts before its first round; before that (and where no
    /// box packs, ever) the arrivals are only counted, sorting the shapes once devices come.
    typical: Vec<(Shape, f64)>,
    /// Arrivals counted since `typical` was last worked out.
    stale: bool,
    devices: BTreeMap<NodeId, Stated>,
}

impl Packing {
    /// Count a task's arrival. Gangs are left out: no claim places them, their members'
    /// shapes are placed all at once.
    pub(super) fn observe(&mut self, task: &Task) {
        if task.gang.is_some() {
            return;
        }
        self.mix
            .observe((task.min_demand.0.clone(), task.reachable.clone()));
        self.stale = true;
        if !self.devices.is_empty() {
            self.refresh();
        }
    }

    /// Work out the typical shapes again if arrivals were counted since.
    fn refresh(&mut self) {
        if std::mem::take(&mut self.stale) {
            self.typical = self.mix.typical_at_most(TYPICAL_COVER, MAX_SHAPES);
        }
    }
}

impl<M> Ledger<M> {
    /// How `node`'s devices stand: `left` grid units on each, `per` units a device, in the
    /// resource kind `kind`. A driver that packs GPU shares gives this whenever it places or
    /// frees devices; a node never given it states its headroom.
    pub fn set_devices(&mut self, node: NodeId, kind: usize, per: u32, left: Vec<u32>) {
        self.packing
            .devices
            .insert(node, Stated { kind, per, left });
        self.packing.refresh();
    }

    /// The prior `node` states when it claims `task` at `alloc` (the [`crate::protocol::Claim`]'s
    /// `headroom` field): the growth score, 0 to 100, where its devices are known (0 where they
    /// cannot hold `alloc`: a start there would be refused), else its headroom for the task's
    /// minimum demand.
    pub fn claim_prior(&self, node: NodeId, task: &Task, alloc: &Resources) -> f64 {
        let free = self.claimable(node);
        let Some(s) = self.packing.devices.get(&node) else {
            return free.headroom(&task.min_demand);
        };
        let devices = Devices {
            left: &s.left,
            per: s.per,
            kind: s.kind,
        };
        let shapes: Vec<(&[u32], f64, bool)> = self
            .packing
            .typical
            .iter()
            .map(|((d, on), p)| (&d[..], *p, on.binary_search(&node).is_ok()))
            .collect();
        packing_prior(&free.0, &devices, &alloc.0, &shapes).unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::TaskState;
    use std::sync::Arc;

    /// Two boxes of 8 CPUs and two devices of 4 units (quarters): box 0 runs two tasks, of 3
    /// units on device 0 and 2 on device 1; box 1 runs nothing.
    fn ledger() -> Ledger<()> {
        let mut l = Ledger::new(8, 1);
        l.set_node(NodeId(0), Resources(vec![8, 8]));
        l.set_node(NodeId(1), Resources(vec![8, 8]));
        for (id, gpu) in [(100, 3), (101, 2)] {
            let t = Arc::new(Task::new(id, [1, gpu]).on(&[0, 1]));
            l.insert(t.clone(), TaskState::Pending, ());
            l.set_state(
                t.id,
                TaskState::Running {
                    node: NodeId(0),
                    alloc: Resources(vec![1, gpu]),
                    progress: 0.0,
                    started: 0,
                },
            );
        }
        l
    }

    /// The devices as box 0's two tasks left them, box 1's free: stated after the arrivals,
    /// as a driver states them after a slot.
    fn state_devices(l: &mut Ledger<()>) {
        l.set_devices(NodeId(0), 1, 4, vec![1, 2]);
        l.set_devices(NodeId(1), 1, 4, vec![4, 4]);
    }

    #[test]
    fn a_quarter_goes_where_it_fills_a_fragment_and_a_whole_device_where_it_leaves_none() {
        let mut l = ledger();
        // The workload: quarters and whole devices.
        for i in 0..4 {
            l.insert(
                Arc::new(Task::new(i, [1, 1]).on(&[0, 1])),
                TaskState::Pending,
                (),
            );
            l.insert(
                Arc::new(Task::new(10 + i, [1, 4]).on(&[0, 1])),
                TaskState::Pending,
                (),
            );
        }
        state_devices(&mut l);
        let quarter = Task::new(0, [1, 1]).on(&[0, 1]);
        let q = Resources(vec![1, 1]);
        // On box 0 it takes the last quarter of device 0, which no other shape could use: a
        // fragment removed; on box 1 it would leave three quarters no whole device can use.
        assert!(l.claim_prior(NodeId(0), &quarter, &q) > l.claim_prior(NodeId(1), &quarter, &q));
        // A whole device fits box 1's devices only: box 0 states 0.
        let whole = Task::new(10, [1, 4]).on(&[0, 1]);
        let w = Resources(vec![1, 4]);
        assert_eq!(l.claim_prior(NodeId(0), &whole, &w), 0.0);
        assert!(l.claim_prior(NodeId(1), &whole, &w) > 0.0);
        // On a box whose devices were never stated: the headroom.
        l.set_node(NodeId(2), Resources(vec![2, 8]));
        assert_eq!(l.claim_prior(NodeId(2), &quarter, &q), 2.0);
    }
}
