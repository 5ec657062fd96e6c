//! Profiling runs: each task type alone at a grid of CPU × GPU levels, as the Optimus scheduler
//! profiles jobs before placing them, and the same runs as the speed estimator's profile hints.
//! Reads the scenario's true speed model, as a profiler running the task would measure it; only
//! Optimus's own model and the hints (which an agent takes from a task's spec) see the result.
//! Below the policies and the episode, which both use it.

use crate::scenario::Scenario;
use tapfinger::TaskTypeId;
use tapfinger::baselines::ProfileSample;

/// Profiling levels of one kind: min, quarter, half and full of the largest usable amount.
fn levels(lo: u32, hi: u32) -> Vec<u32> {
    let mut v: Vec<u32> = [lo, lo + (hi - lo) / 4, lo + (hi - lo) / 2, hi].into();
    v.dedup();
    v
}

/// Profiling runs for Optimus: each type alone at a 4 × 4 grid of CPU × GPU levels; other kinds at
/// the type's true need (a profiling run that runs out of memory is retried with more, so the
/// profiler learns the need).
pub fn profile(sc: &Scenario) -> Vec<ProfileSample> {
    let (cpu, gpu) = sc.cpu_gpu_kinds();
    let mut out = Vec::new();
    for (ty, t) in sc.types.iter().enumerate() {
        let base = t.min_demand.max_each(&t.need);
        let Some(host) = sc
            .nodes
            .iter()
            .map(|n| {
                t.max_demand
                    .as_ref()
                    .map_or(n.capacity.clone(), |m| m.min_each(&n.capacity))
            })
            .filter(|c| base.fits_in(c))
            .max_by_key(|c| c.0.iter().map(|x| u64::from(*x)).sum::<u64>())
        else {
            continue;
        };
        for c in levels(base.get(cpu), host.get(cpu)) {
            for g in levels(base.get(gpu), host.get(gpu)) {
                let mut a = base.clone();
                a.0[cpu] = c;
                a.0[gpu] = g;
                if let Some((_, slots)) = t.speed.isolated(&a, sc.slot_seconds) {
                    out.push(ProfileSample {
                        ty: TaskTypeId(ty as u16),
                        alloc: a,
                        slots,
                    });
                }
            }
        }
    }
    out
}

/// The scenario's profiling runs ([`profile`]) as profile hints (`profile_hints`: before any observation the estimator
/// uses the profile hints in a task spec): each type's runs go to
/// the speed estimator with the episode's first task of the type, as an agent's estimator takes
/// a spec's hints when it first hears of a task. Every policy's views then carry the same
/// estimates; Optimus fits the same runs in its own model.
pub(crate) fn hint_profiles<M>(
    sc: &Scenario,
    arrivals: &[tapfinger::Task],
    ledger: &mut tapfinger::ledger::Ledger<M>,
) {
    let samples = profile(sc);
    let mut seen = std::collections::BTreeSet::new();
    for t in arrivals.iter().filter(|t| seen.insert(t.ty)) {
        let hints: Vec<(tapfinger::Resources, f64)> = samples
            .iter()
            .filter(|s| s.ty == t.ty)
            .map(|s| (s.alloc.clone(), s.slots))
            .collect();
        ledger.hint(t, &hints);
    }
}
