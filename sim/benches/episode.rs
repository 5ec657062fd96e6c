//! Simulator speed: one full `hetero6` episode (384 tasks, 6 agents, every round through the
//! shared protocol) with Tiresias and with Random. Goal: under 20 ms per episode.

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use tapfinger_sim::{Scenario, Simulator, policies};

fn episode(c: &mut Criterion) {
    let sim = Simulator::new(Scenario::load("hetero6").expect("preset"));
    let mut g = c.benchmark_group("hetero6_episode");
    for name in ["tiresias", "random"] {
        let mut seed = 0u64;
        g.bench_function(name, |b| {
            b.iter(|| {
                seed += 1;
                let ps = policies::build(&sim, name).expect("policy");
                black_box(sim.run(ps, seed % 16).expect("episode"))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, episode);
criterion_main!(benches);
