//! The product's own placement of one pod, as an agent cluster makes it: every box whose units
//! fit the pod claims it in the decision protocol, the protocol's resolution
//! ([`tapfinger::protocol::resolve`], the code agents run) gives it to the argmax of the Bayes
//! posterior, and the winner's device pool ([`GpuPool`], the code both drivers run) puts a
//! share on the shared device it leaves least fragmented. The prior is the softmax of what the
//! claimants state: their headrooms ([`tapfinger::Resources::headroom`], `tapfinger`, the
//! default), or, where boxes pack GPU shares (`tapfinger-pack`, an agent's `pack_shares`),
//! FGD's growth score of the pod on the box against the typical shapes of the pods arrived so
//! far: the prior a ledger states ([`Ledger::claim_prior`], the code agents run), kept here
//! for the whole cluster as the simulator keeps one, each pod a task that may run on the boxes
//! whose model it accepts, placed pods running and never ending, each box's devices as its
//! pool left them.
//!
//! What this leaves out, and why: the likelihood is 1 for every claimant — a box's policy
//! claiming the one task in its window that fits it; the learned policy's own probability
//! would need each box's view of a full ledger. A box's units cannot see devices, so a box may
//! win a pod that no device of it can hold: the agent then refuses the start and the task
//! waits for the next round, which this models by resolving again without that box (a packing
//! box states 0 there, and loses to any box whose devices can hold it).

use super::policies::Placer;
use super::state::{Cluster, Host, MILLI};
use super::trace::PodSpec;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tapfinger::gpu_pool::GpuPool;
use tapfinger::ledger::{Ledger, TaskState};
use tapfinger::protocol::{Claim, Proposal, Round, resolve};
use tapfinger::{NodeId, Resources, Task, TaskId};

/// The protocol's box choice and the device pool.
#[derive(Debug, Clone)]
pub struct Protocol {
    pools: Vec<GpuPool>,
    /// Each box's agent id: its place in the cluster's tie order, so that the protocol's
    /// exact ties (to the lowest id) fall as the study's policies' do.
    ids: Vec<NodeId>,
    /// The box of each agent id.
    boxes: Vec<usize>,
    next: u64,
    name: &'static str,
    /// Where boxes pack: the ledger agents keep, which states each claim's prior
    /// ([`Ledger::claim_prior`]) from the pods that arrived (each a task that may run on the
    /// boxes whose model it accepts), the pods placed (running, never ending) and each box's
    /// devices as its pool left them. `None`: claims state their headroom.
    ledger: Option<Ledger<()>>,
}

impl Protocol {
    /// Pools for the boxes of `c`, nothing placed; a device is [`MILLI`] grid units.
    pub fn new(c: &Cluster) -> Self {
        Self::with_pools(c, GpuPool::with_shares, "tapfinger")
    }

    /// The protocol of boxes that pack GPU shares (an agent's `pack_shares`): claims state
    /// FGD's growth score ([`Ledger::claim_prior`]) against the shapes arrived so far.
    pub fn packing(c: &Cluster) -> Self {
        let mut p = Self::with_pools(c, GpuPool::with_shares, "tapfinger-pack");
        let mut ledger = Ledger::new(1, 1);
        for (i, h) in c.hosts.iter().enumerate() {
            let node = p.ids[i];
            ledger.set_node(node, units(h.cpu_left, h.gpu_left_total(), h.mem_left));
            ledger.set_devices(node, 1, MILLI, h.gpu_left.clone());
        }
        p.ledger = Some(ledger);
        p
    }

    /// [`Self::packing`] on a cluster that has run this workload before: its ledger has
    /// already learned of `seen` (the pod list), each a finished task, so its typical shapes
    /// are the list's from the first pod on — what the study gives FGD. An agent's ledger
    /// counts the shape of every task it learns of (queued, running or finished) for as long
    /// as the agent runs, so a cluster that has been running its workload holds the mix; a
    /// fresh one ([`Self::packing`]) learns it pod by pod.
    pub fn packing_seen(c: &Cluster, seen: &[PodSpec]) -> Self {
        let mut p = Self::packing(c);
        p.name = "tapfinger-pack-seen";
        let ledger = p.ledger.as_mut().expect("a packing ledger");
        for (k, pod) in seen.iter().enumerate() {
            let on = reachable(c, pod, &p.ids);
            let demand = units(pod.cpu_milli, pod.total_gpu_milli(), pod.memory_mib);
            // Ids above every arrival's: finished tasks of an earlier run.
            let t = Task::new(SEEN_IDS + k as u64, demand.0).on(&on);
            let done = TaskState::Done {
                node: NodeId(0),
                code: Some(0),
                epoch: 1,
            };
            ledger.insert(Arc::new(t), done, ());
        }
        p
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
        let ids = c.ranks().into_iter().map(|r| NodeId(r as u32)).collect();
        Self {
            pools,
            ids,
            boxes: c.order.clone(),
            next: 0,
            name,
            ledger: None,
        }
    }
}

/// Where [`Protocol::packing_seen`] numbers the finished tasks of an earlier run.
const SEEN_IDS: u64 = 1 << 40;

/// Whether `pod` may run on `h`: a CPU pod anywhere, a GPU pod on a model it accepts.
fn may_run(h: &Host, pod: &PodSpec) -> bool {
    pod.num_gpu == 0 || h.accessible(pod)
}

/// The agent ids of the boxes `pod` may run on ([`may_run`]).
fn reachable(c: &Cluster, pod: &PodSpec, ids: &[NodeId]) -> Vec<u32> {
    (0..c.hosts.len())
        .filter(|i| may_run(&c.hosts[*i], pod))
        .map(|i| ids[i].0)
        .collect()
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
        let id = TaskId(self.next);
        self.next += 1;
        // The boxes the pod may run on, and of them those whose units fit: what each box's
        // core sees of itself.
        // A ledger counts every arrival's shape before its first round.
        let on = reachable(c, pod, &self.ids);
        let task = self.ledger.as_mut().map(|l| {
            let t = Arc::new(Task::new(id.0, demand.0.clone()).on(&on));
            l.insert(t.clone(), TaskState::Pending, ());
            t
        });
        let mut claims: BTreeMap<NodeId, Proposal> = c
            .hosts
            .iter()
            .enumerate()
            .filter(|(_, h)| {
                h.cpu_left >= pod.cpu_milli
                    && h.mem_left >= pod.memory_mib
                    && h.gpu_left_total() >= pod.total_gpu_milli()
                    && may_run(h, pod)
            })
            .map(|(i, h)| {
                let node = self.ids[i];
                let prior = match (&self.ledger, &task) {
                    (Some(l), Some(t)) => l.claim_prior(node, t, &demand),
                    _ => units(h.cpu_left, h.gpu_left_total(), h.mem_left).headroom(&demand),
                };
                let claim = Claim {
                    task: id,
                    alloc: demand.clone(),
                    prob: 1.0,
                    headroom: prior,
                };
                (node, Proposal::Claim(claim))
            })
            .collect();
        let round = Round { slot: 0, step: 0 };
        loop {
            let out = resolve(round, &claims, &BTreeSet::new());
            let winner = out.commits.first()?.agent;
            let h = self.boxes[winner.0 as usize];
            let units = u32::try_from(pod.total_gpu_milli()).unwrap_or(u32::MAX);
            let devices = if pod.num_gpu == 0 {
                Vec::new()
            } else {
                match self.pools[h].place(id, units) {
                    Some(d) => d,
                    // The start is refused: the pod waits for a round without this box.
                    None => {
                        claims.remove(&winner);
                        continue;
                    }
                }
            };
            if let Some(l) = &mut self.ledger {
                let running = TaskState::Running {
                    node: winner,
                    alloc: demand.clone(),
                    progress: 0.0,
                    started: 0,
                };
                l.set_state(id, running);
                l.set_devices(winner, 1, MILLI, self.pools[h].left());
            }
            return Some((h, devices.iter().map(|d| *d as usize).collect()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::policies::Study;
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

    #[test]
    fn ties_fall_in_the_clusters_tie_order() {
        // Eight equal boxes: the first pod's exact tie goes to the first box of the run's tie
        // order (the protocol's lowest agent id), as the study's policies' ties do.
        let nodes: Vec<_> = (0..8).map(|_| node(16_000, 1, "T4")).collect();
        let mut rng = tapfinger::Rng::seed_from_u64(1);
        let firsts: Vec<usize> = [1, 2, 3]
            .iter()
            .map(|s| Cluster::new(&nodes).with_tie_order(*s).order[0])
            .collect();
        assert!(
            firsts.iter().any(|h| *h != 0),
            "the orders do not all start at box 0"
        );
        for seed in [1, 2, 3] {
            let c = Cluster::new(&nodes).with_tie_order(seed);
            for mut p in [Protocol::packing(&c), Protocol::new(&c)] {
                let (h, _) = p.place(&c, &pod(1000, 1, 500), &mut rng).unwrap();
                assert_eq!(h, c.order[0], "{} seed {seed}", p.name());
                let (s, _) = Study::Packing
                    .place(&c, &pod(1000, 1, 500), &mut rng)
                    .unwrap();
                assert_eq!(s, h);
            }
        }
    }

    #[test]
    fn a_cluster_that_has_seen_the_workload_packs_for_its_whole_mix() {
        // The workload is mostly whole devices with 32 cores, and a few half shares. Box 1 has
        // too few cores for a whole-device pod: its device is a fragment for most of the mix,
        // so a half share belongs there. A fresh ledger has seen only the share when it
        // arrives (both boxes score alike; the tie goes to box 0); one that has seen the
        // list puts it on box 1.
        let c = Cluster::new(&[node(64_000, 1, "T4"), node(4_000, 1, "T4")]);
        let mut list: Vec<PodSpec> = (0..9).map(|_| pod(32_000, 1, 1000)).collect();
        list.push(pod(1000, 1, 500));
        let mut rng = tapfinger::Rng::seed_from_u64(1);
        let share = pod(1000, 1, 500);
        let (fresh, _) = Protocol::packing(&c).place(&c, &share, &mut rng).unwrap();
        assert_eq!(fresh, 0);
        let mut seen = Protocol::packing_seen(&c, &list);
        assert_eq!(seen.name(), "tapfinger-pack-seen");
        let (h, _) = seen.place(&c, &share, &mut rng).unwrap();
        assert_eq!(h, 1);
    }
}
