//! How far the start estimates users see (`tapfinger::ledger::Ledger::expected`, what an
//! agent's `GET /v1/tasks` shows) are from when the tasks started: each task's estimate is taken
//! as it arrives (the ledger as it stood after the slot's arrivals joined the queues) and set
//! against the slot its run began (its last run, where it was preempted) under the policy that
//! ran, on the true speeds. The estimate never reads the speed model or the tasks' true sizes:
//! only what the ledger learned.

use crate::Simulator;
use crate::episode::Observer;
use crate::report::{self, CompareError};
use serde::Serialize;
use std::collections::BTreeMap;
use tapfinger::TaskId;
use tapfinger::ledger::Expected;

/// The estimates' error on some workloads of one scenario under one policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StartError {
    /// The policy that ran.
    pub policy: String,
    /// Workloads (seeds) run.
    pub workloads: usize,
    /// Tasks that started.
    pub tasks: usize,
    /// Of them, those that had an estimate at arrival.
    pub estimated: usize,
    /// Median |estimated start − start| over the estimated tasks (slots).
    pub median_abs: f64,
    /// Its 90th percentile (slots).
    pub p90_abs: f64,
    /// Median wait from arrival to start of the estimated tasks (slots): the scale of the error.
    pub median_wait: f64,
    /// Mean wait (slots).
    pub mean_wait: f64,
    /// Share of estimates within a slot or a quarter of the wait, whichever is more.
    pub close: f64,
    /// Share of estimates at or after the start (pessimistic ones).
    pub late: f64,
    /// Slot length (s), to read the slots as time.
    pub slot_seconds: f64,
}

/// Each task's estimated start slot, as taken at its arrival.
#[derive(Default)]
struct Taken {
    start: BTreeMap<u64, f64>,
}

impl Observer for Taken {
    fn wants_estimates(&self) -> bool {
        true
    }
    fn expected(&mut self, slot: u64, arrived: &[TaskId], expected: &BTreeMap<TaskId, Expected>) {
        for id in arrived {
            if let Some(e) = expected.get(id) {
                self.start.insert(id.0, slot as f64 + e.start);
            }
        }
    }
}

/// The start estimates of `policy` on `sim`'s workloads of `seeds` against when tasks started.
pub fn measure(sim: &Simulator, policy: &str, seeds: &[u64]) -> Result<StartError, CompareError> {
    let (mut errs, mut waits, mut tasks) = (Vec::new(), Vec::new(), 0);
    let (mut close, mut late) = (0usize, 0usize);
    for &seed in seeds {
        let ps = report::instances_for_seed(sim, policy, None, seed)?;
        let mut taken = Taken::default();
        let r = sim
            .run_observed(ps, seed, &mut taken)
            .map_err(|source| CompareError::Episode {
                policy: policy.to_string(),
                seed,
                source,
            })?;
        for t in &r.tasks {
            tasks += 1;
            let Some(&at) = taken.start.get(&t.id) else {
                continue;
            };
            let wait = t.start.saturating_sub(t.arrival) as f64;
            let err = (at - t.start as f64).abs();
            close += usize::from(err <= (0.25 * wait).max(1.0));
            late += usize::from(at >= t.start as f64);
            errs.push(err);
            waits.push(wait);
        }
    }
    let n = errs.len();
    Ok(StartError {
        policy: policy.to_string(),
        workloads: seeds.len(),
        tasks,
        estimated: n,
        median_abs: quantile(&mut errs.clone(), 0.5),
        p90_abs: quantile(&mut errs, 0.9),
        median_wait: quantile(&mut waits.clone(), 0.5),
        mean_wait: waits.iter().sum::<f64>() / n.max(1) as f64,
        close: close as f64 / n.max(1) as f64,
        late: late as f64 / n.max(1) as f64,
        slot_seconds: sim.scenario().slot_seconds,
    })
}

/// The `q` quantile of `v` (the nearest rank; 0 for none).
fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a preset, every task that waited had an estimate, the error is measured against the
    /// run's own starts, and a cluster that never queues is estimated to the slot.
    #[test]
    fn start_estimates_are_scored_against_the_runs_starts() {
        let sim = Simulator::new(crate::Scenario::load("hetero6").unwrap());
        let e = measure(&sim, "tiresias", &[100, 101]).unwrap();
        assert_eq!(e.workloads, 2);
        assert!(e.tasks > 0 && e.estimated == e.tasks, "{e:?}");
        assert!(e.median_abs >= 0.0 && e.p90_abs >= e.median_abs, "{e:?}");
        assert!((0.0..=1.0).contains(&e.close) && (0.0..=1.0).contains(&e.late));
    }
}
