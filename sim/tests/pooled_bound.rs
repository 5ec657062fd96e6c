//! The pooled bound is a bound: on every preset, and on every preset with four times its
//! arrival rate (where tasks queue), for every baseline, the clairvoyant reference and the
//! learned policy, no episode's average JCT is below it, and it is never below the isolated
//! bound; under the heavier load it is tighter than the isolated bound.
#![allow(clippy::unwrap_used)]

use tapfinger_sim::{Scenario, Simulator, catalog, metrics, policies};

#[test]
fn no_policy_beats_the_pooled_bound_on_any_preset() {
    let mut tighter = Vec::new();
    let loads = catalog::presets()
        .into_iter()
        .flat_map(|(p, _)| [(p.clone(), 1.0), (p, 4.0)]);
    for (preset, load) in loads {
        let mut sc = Scenario::load(&preset).unwrap();
        sc.tasks = sc.tasks.min(60);
        sc.lambda *= load;
        let preset = format!("{preset} at {load}× its arrival rate");
        let kinds = sc.kind_names();
        let sim = Simulator::new(sc);
        let mut names = policies::every_policy();
        names.push(policies::TAPFINGER);
        let mut seen = None;
        for name in names {
            let ps = if name == policies::TAPFINGER {
                policies::learned(&sim, None).unwrap()
            } else {
                policies::build(&sim, name).unwrap()
            };
            let r = sim
                .run(ps, 5)
                .unwrap_or_else(|e| panic!("{preset}/{name}: {e}"));
            let m = metrics::summarize(&r, &kinds);
            assert!(
                m.pooled_bound_jct >= m.lower_bound_jct - 1e-9,
                "{preset}/{name}: pooled {} below isolated {}",
                m.pooled_bound_jct,
                m.lower_bound_jct
            );
            assert!(
                m.avg_jct >= m.pooled_bound_jct - 1e-9,
                "{preset}/{name}: average JCT {} below the pooled bound {}",
                m.avg_jct,
                m.pooled_bound_jct
            );
            seen.get_or_insert((m.pooled_bound_jct, m.lower_bound_jct));
        }
        let (pooled, isolated) = seen.unwrap();
        println!("{preset}: pooled {pooled:.2}, isolated {isolated:.2}");
        if load > 1.0 && pooled > 1.05 * isolated {
            tighter.push(preset);
        }
    }
    assert!(
        tighter.len() >= 3,
        "the queue should count on some presets: {tighter:?}"
    );
}
