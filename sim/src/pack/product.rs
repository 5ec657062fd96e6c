//! The product's own placement of one pod, as an agent cluster makes it: every box whose units
//! fit the pod claims it in the decision protocol, the protocol's resolution
//! ([`tapfinger::protocol::resolve`], the code agents run) gives it to the argmax of the Bayes
//! posterior, and the winner's device pool ([`GpuPool`], the code both drivers run) puts a
//! share on the shared device it leaves least fragmented. The prior is the softmax of what the
//! claimants state: their headrooms ([`tapfinger::Resources::headroom`], `tapfinger`, the
//! default), or, where boxes pack GPU shares (`tapfinger-pack`, an agent's `pack_shares`),
//! FGD's growth score of the pod on the box ([`packing_prior`]) against the typical shapes of
//! the pods arrived so far, each pod counted as it arrives: what
//! `tapfinger::ledger::Ledger::claim_prior` computes from the tasks a ledger has seen (shape:
//! the demand and where the task may run; here the models a pod accepts).
//!
//! What this leaves out, and why: the likelihood is 1 for every claimant — a box's policy
//! claiming the one task in its window that fits it; the learned policy's own probability
//! would need each box's view of a full ledger. A box's units cannot see devices, so a box may
//! win a pod that no device of it can hold: the agent then refuses the start and the task
//! waits for the next round, which this models by resolving again without that box (a packing
//! box states 0 there, and loses to any box whose devices can hold it).

use super::policies::Placer;
use super::state::{Cluster, MILLI};
use super::trace::PodSpec;
use std::collections::{BTreeMap, BTreeSet};
use tapfinger::frag::{Devices, Mix, TYPICAL_COVER, packing_prior};
use tapfinger::gpu_pool::GpuPool;
use tapfinger::protocol::{Claim, Proposal, Round, resolve};
use tapfinger::{NodeId, Resources, TaskId};

/// A pod's shape as a ledger counts it: its demand and the models it accepts.
type Shape = (Vec<u32>, Vec<String>);

/// The protocol's box choice and the device pool.
#[derive(Debug, Clone)]
pub struct Protocol {
    pools: Vec<GpuPool>,
    next: u64,
    name: &'static str,
    /// The shapes of the pods that arrived, as a ledger counts them: demand and the models a
    /// pod may run on (a task's reachable boxes).
    mix: Mix<Shape>,
    /// The typical shapes of `mix`, refreshed as pods arrive.
    typical: Vec<(Shape, f64)>,
    /// Whether claims state the packing prior (else the headroom).
    packs: bool,
}

impl Protocol {
    /// Pools for the boxes of `c`, nothing placed; a device is [`MILLI`] grid units.
    pub fn new(c: &Cluster) -> Self {
        Self::with_pools(c, GpuPool::with_shares, "tapfinger")
    }

    /// The protocol of boxes that pack GPU shares (an agent's `pack_shares`): claims state
    /// FGD's growth score ([`packing_prior`]) against the shapes arrived so far.
    pub fn packing(c: &Cluster) -> Self {
        Self {
            packs: true,
            ..Self::with_pools(c, GpuPool::with_shares, "tapfinger-pack")
        }
    }

    /// The same with pools that put a share on the fullest device it fits, whatever it
    /// fragments ([`GpuPool::fullest_first`]): the ablation.
    pub fn fullest_first(c: &Cluster) -> Self {
        Self::with_pools(c, GpuPool::fullest_first, "tapfinger-fullest")
    }

    fn with_pools(c: &Cluster, pool: fn(&[u32], u32) -> GpuPool, name: &'static str) -> Self {
        let pools = c
            .hosts
            .iter()
            .map(|h| {
                let devices: Vec<u32> = (0..h.gpu_left.len() as u32).collect();
                pool(&devices, MILLI)
            })
            .collect();
        Self {
            pools,
            next: 0,
            name,
            mix: Mix::default(),
            typical: Vec::new(),
            packs: false,
        }
    }
}

/// Whether a pod that accepts the models `spec` (empty: any) may run on `h`.
fn runs_on(spec: &[String], h: &super::state::Host) -> bool {
    spec.is_empty()
        || h.model
            .as_ref()
            .is_some_and(|m| spec.iter().any(|x| x == m))
}

/// Units of CPU thousandths, GPU thousandths and memory MiB, as one box's ledger counts them.
fn units(cpu: u64, gpu: u64, mem: u64) -> Resources {
    let u = |x: u64| u32::try_from(x).unwrap_or(u32::MAX);
    Resources(vec![u(cpu), u(gpu), u(mem)])
}

impl Placer for Protocol {
    fn name(&self) -> String {
        self.name.into()
    }

    fn place(
        &mut self,
        c: &Cluster,
        pod: &PodSpec,
        _rng: &mut tapfinger::Rng,
    ) -> Option<(usize, Vec<usize>)> {
        let demand = units(pod.cpu_milli, pod.total_gpu_milli(), pod.memory_mib);
        let task = TaskId(self.next);
        self.next += 1;
        // The ledger counts every arrival's shape before its first round.
        self.mix.observe((demand.0.clone(), pod.gpu_spec.clone()));
        self.typical = self.mix.typical(TYPICAL_COVER);
        // The boxes whose units fit: what each box's core sees of itself.
        let mut claims: BTreeMap<NodeId, Proposal> = c
            .hosts
            .iter()
            .enumerate()
            .filter(|(_, h)| {
                h.cpu_left >= pod.cpu_milli
                    && h.mem_left >= pod.memory_mib
                    && h.gpu_left_total() >= pod.total_gpu_milli()
                    && (pod.num_gpu == 0 || h.accessible(pod))
            })
            .map(|(i, h)| {
                let free = units(h.cpu_left, h.gpu_left_total(), h.mem_left);
                let prior = if self.packs {
                    let devices = Devices {
                        left: &h.gpu_left,
                        per: MILLI,
                        kind: 1,
                    };
                    let shapes: Vec<(&[u32], f64, bool)> = self
                        .typical
                        .iter()
                        .map(|((d, spec), p)| (&d[..], *p, runs_on(spec, h)))
                        .collect();
                    packing_prior(&free.0, &devices, &demand.0, &shapes)
                } else {
                    Some(free.headroom(&demand))
                };
                let claim = Claim {
                    task,
                    alloc: demand.clone(),
                    prob: 1.0,
                    headroom: prior.unwrap_or(0.0),
                };
                (NodeId(i as u32), Proposal::Claim(claim))
            })
            .collect();
        let round = Round { slot: 0, step: 0 };
        loop {
            let out = resolve(round, &claims, &BTreeSet::new());
            let winner = out.commits.first()?.agent;
            let h = winner.0 as usize;
            let units = u32::try_from(pod.total_gpu_milli()).unwrap_or(u32::MAX);
            if pod.num_gpu == 0 {
                return Some((h, Vec::new()));
            }
            match self.pools[h].place(task, units) {
                Some(devices) => return Some((h, devices.iter().map(|d| *d as usize).collect())),
                // The start is refused: the pod waits for a round without this box.
                None => {
                    claims.remove(&winner);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::state::tests::{node, pod};
    use super::*;
    use rand::SeedableRng as _;

    #[test]
    fn the_box_with_most_headroom_wins_and_the_pool_packs_shares() {
        let c = Cluster::new(&[node(16_000, 2, "T4"), node(64_000, 8, "G2")]);
        let mut p = Protocol::new(&c);
        let mut rng = tapfinger::Rng::seed_from_u64(1);
        let (h, d) = p.place(&c, &pod(4000, 1, 500), &mut rng).unwrap();
        assert_eq!((h, d), (1, vec![0]));
    }

    #[test]
    fn a_packing_box_takes_the_share_that_fills_its_device() {
        // Two boxes of one device: the second half-device pod goes beside the first where
        // boxes pack (no device left part-used), to the other box where they state headroom.
        let c0 = Cluster::new(&[node(16_000, 1, "T4"), node(16_000, 1, "T4")]);
        let mut rng = tapfinger::Rng::seed_from_u64(1);
        for (mut p, second) in [(Protocol::packing(&c0), 0), (Protocol::new(&c0), 1)] {
            let mut c = c0.clone();
            let half = pod(1000, 1, 500);
            let (h, d) = p.place(&c, &half, &mut rng).unwrap();
            assert_eq!(h, 0, "{}", p.name());
            c.hosts[h].take(&half, &d);
            let (h, _) = p.place(&c, &half, &mut rng).unwrap();
            assert_eq!(h, second, "{}", p.name());
        }
    }

    #[test]
    fn a_box_whose_devices_cannot_hold_the_pod_gives_way() {
        // Box 0 has 1.2 devices of units free, 0.4 on each of three devices: a whole-device pod
        // fits its units and no device, so box 1 (less headroom) gets it.
        let nodes = [node(64_000, 3, "T4"), node(8_000, 1, "T4")];
        let mut c = Cluster::new(&nodes);
        let mut p = Protocol::new(&c);
        let mut rng = tapfinger::Rng::seed_from_u64(1);
        for _ in 0..3 {
            let q = pod(0, 1, 600);
            let (h, d) = p.place(&c, &q, &mut rng).unwrap();
            assert_eq!(h, 0);
            c.hosts[h].take(&q, &d);
        }
        let whole = pod(1000, 1, 1000);
        let (h, _) = p.place(&c, &whole, &mut rng).unwrap();
        assert_eq!(h, 1);
    }
}
