//! The pooled lower bound on the average JCT: the cluster as one machine.
//!
//! Each task's isolated bound ([`crate::env::TaskRecord::lower_bound`]) ignores every other
//! task, so under a queue it says little. The pooled bound counts the queue: pool the cluster's
//! capacity of one resource kind into one machine, let every task cost its least area of that
//! kind (slots × the share of the pool it holds, at whichever allocation makes that product
//! smallest), and run preemptive shortest-remaining-first on the true areas. No schedule of the
//! real cluster does better: any schedule packs at most the pool into each slot, so it is a
//! schedule of the one machine, and shortest-remaining-first minimises the total completion time
//! on one machine with arrivals and preemption (Schrage, 1968). Each resource kind gives a bound;
//! the reported bound is the largest of them and of the isolated bound's mean.
//!
//! Nothing a policy sees reads this: it is computed from the finished tasks' records, after the
//! run, on the simulator's true sizes.

/// The cluster's whole capacity per resource kind: the pool every task's area is a share of.
pub fn pool(sc: &crate::scenario::Scenario) -> Vec<f64> {
    (0..sc.kind_names().len())
        .map(|k| sc.nodes.iter().map(|n| f64::from(n.capacity.get(k))).sum())
        .collect()
}

/// Total flow time (completion − arrival, summed) of preemptive shortest-remaining-first on one
/// machine of speed 1, for jobs given as `(arrival, work)`; jobs of no work finish on arrival.
pub fn srpt_flow(jobs: &[(f64, f64)]) -> f64 {
    let mut order: Vec<(f64, f64)> = jobs.iter().copied().filter(|j| j.1 > 0.0).collect();
    order.sort_by(|a, b| a.0.total_cmp(&b.0));
    // A min-heap of the remaining work of the jobs that arrived, with their arrivals.
    let mut heap: std::collections::BinaryHeap<std::cmp::Reverse<(Key, Key)>> = Default::default();
    let (mut now, mut next, mut flow) = (0.0f64, 0usize, 0.0);
    while next < order.len() || !heap.is_empty() {
        if heap.is_empty() {
            now = now.max(order[next].0);
        }
        while next < order.len() && order[next].0 <= now {
            heap.push(std::cmp::Reverse((Key(order[next].1), Key(order[next].0))));
            next += 1;
        }
        let std::cmp::Reverse((Key(left), Key(arrived))) = heap.pop().expect("a job waits");
        // Run it until it ends or the next arrival, whichever is first.
        let until = order.get(next).map_or(f64::INFINITY, |j| j.0);
        if now + left <= until {
            now += left;
            flow += now - arrived;
        } else {
            heap.push(std::cmp::Reverse((Key(left - (until - now)), Key(arrived))));
            now = until;
        }
    }
    flow
}

/// A float ordered totally (the heap's key; areas and arrivals are finite).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Key(f64);

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// A finished task as the bound sees it: its arrival slot, its isolated lower bound (slots)
/// and its least area per resource kind ([`crate::env::TaskRecord`]'s).
pub type Finished<'a> = (u64, u64, &'a [f64]);

/// The pooled bound on these tasks' average JCT (slots): the largest over resource kinds of
/// shortest-remaining-first's mean flow time on the pooled cluster, and the isolated bounds'
/// mean. 0 for no tasks.
pub fn pooled_bound_jct(tasks: &[Finished<'_>]) -> f64 {
    if tasks.is_empty() {
        return 0.0;
    }
    let n = tasks.len() as f64;
    let isolated = tasks.iter().map(|t| t.1 as f64).sum::<f64>() / n;
    let kinds = tasks.iter().map(|t| t.2.len()).max().unwrap_or(0);
    (0..kinds)
        .map(|k| {
            let jobs: Vec<(f64, f64)> = tasks
                .iter()
                .map(|t| (t.0 as f64, t.2.get(k).copied().unwrap_or(0.0)))
                .collect();
            srpt_flow(&jobs) / n
        })
        .fold(isolated, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortest_remaining_first_preempts_for_a_shorter_arrival() {
        // One job of 10 at 0; one of 2 at 1 preempts it (ends at 3, flow 2); the first ends at
        // 12 (flow 12).
        assert!((srpt_flow(&[(0.0, 10.0), (1.0, 2.0)]) - 14.0).abs() < 1e-9);
        // A longer arrival waits: 2 at 0 ends at 2; 10 at 1 ends at 12 (flow 11).
        assert!((srpt_flow(&[(0.0, 2.0), (1.0, 10.0)]) - 13.0).abs() < 1e-9);
        // Idle gaps: each alone.
        assert!((srpt_flow(&[(0.0, 1.0), (5.0, 1.0)]) - 2.0).abs() < 1e-9);
        assert_eq!(srpt_flow(&[]), 0.0);
        assert_eq!(srpt_flow(&[(3.0, 0.0)]), 0.0);
    }

    proptest::proptest! {
        /// Shortest-remaining-first is never beaten by first-come-first-served (a schedule of
        /// the same machine), and never beats the jobs' own work.
        #[test]
        fn srpt_lies_between_the_work_and_fcfs(
            jobs in proptest::collection::vec((0u32..50, 1u32..20), 1..30)
        ) {
            let jobs: Vec<(f64, f64)> =
                jobs.iter().map(|&(a, w)| (f64::from(a), f64::from(w))).collect();
            let mut fcfs = jobs.clone();
            fcfs.sort_by(|a, b| a.0.total_cmp(&b.0));
            let (mut now, mut flow) = (0.0f64, 0.0);
            for (a, w) in &fcfs {
                now = now.max(*a) + w;
                flow += now - a;
            }
            let srpt = srpt_flow(&jobs);
            let work: f64 = jobs.iter().map(|j| j.1).sum();
            proptest::prop_assert!(srpt <= flow + 1e-9);
            proptest::prop_assert!(srpt >= work - 1e-9);
        }
    }
}
