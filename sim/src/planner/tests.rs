// Test helpers may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

use super::*;
use tapfinger::plan::{exact, random};

fn problem(seed: u64, limited: bool) -> Problem {
    let (job, prices) = random::chain(seed, limited);
    Problem::new(job, prices).unwrap()
}

#[test]
fn draws_never_break_the_mask() {
    let device = Device::flex();
    let net = PlannerNet::new(&PlannerConfig::default(), &device);
    let mut rng = tapfinger::seeded_rng(3);
    let mut slow_links = 0;
    let mut dead_ends = 0;
    for seed in 0..30 {
        let mut p = problem(seed, seed % 2 == 0);
        if seed % 3 == 0 {
            // A link too slow for some splits, so that the mask has something to forbid.
            p.prices.link_bandwidth = p.job.layers[0].out_bytes * p.job.throughput * 0.5;
            p = Problem::new(p.job.clone(), p.prices.clone()).unwrap();
            slow_links += 1;
        }
        let rows: Vec<(&Problem, bool)> = (0..8).map(|i| (&p, i == 0)).collect();
        let out = rollout(&net, &rows, &mut rng, &device);
        for a in &out.assign {
            assert_eq!(a.len(), p.layers());
            for l in 0..p.layers() {
                let link_ok = l == 0 || p.link_rate(l - 1) >= p.job.throughput * (1.0 - 1e-9);
                let ok = |r: usize| p.time(l, r).is_some() && (l == 0 || r == a[l - 1] || link_ok);
                if !ok(a[l]) {
                    // The mask looks ahead: a draw never walks into a dead end (no type
                    // allowed) unless the chain has no placement at all.
                    assert!(
                        !super::reachable(&p)[0].iter().any(|&x| x),
                        "seed {seed}: layer {l} on {} breaks the mask",
                        a[l]
                    );
                    dead_ends += 1;
                    assert!(p.evaluate(a, "check").is_err());
                    break;
                }
            }
        }
    }
    assert!(slow_links > 0);
    // Chains with no placement at all are rare even with the slow links.
    assert!(dead_ends < 30 * 8 / 4, "{dead_ends} dead ends");
}

#[test]
fn a_plan_meets_the_target_or_the_planner_says_it_cannot() {
    let learned = Learned::new(
        PlannerNet::new(&PlannerConfig::default(), &Device::flex()),
        0,
    );
    for seed in 0..20 {
        let p = problem(seed, true);
        match learned.plan(&p) {
            Ok(plan) => {
                assert!(plan.throughput >= p.job.throughput * (1.0 - 1e-9));
                assert_eq!(p.evaluate(&plan.assign, "check").unwrap().cost, plan.cost);
            }
            Err(e) => assert!(e.to_string().contains("found no plan"), "{e}"),
        }
    }
    let p = problem(1, true);
    let too_much = p.with_target(exact::best_throughput(&p) * 1.5);
    assert!(learned.plan(&too_much).is_err());
}

#[test]
fn the_shipped_planner_loads_and_plans_near_the_optimum_on_development_chains() {
    // The network's draws alone (no local search), so that this judges what it learned; and
    // the planner as it runs, search included, which may only do better.
    let alone = Learned::shipped().unwrap().with_search(false);
    let learned = Learned::shipped().unwrap();
    let (mut sum, mut searched, mut n) = (0.0, 0.0, 0);
    for seed in 0..40 {
        let p = problem(seed, false);
        let best = exact::plan(&p).unwrap().cost;
        let a = alone.plan(&p).map_or(2.0, |plan| plan.cost / best);
        let s = learned.plan(&p).map_or(2.0, |plan| plan.cost / best);
        assert!(s <= a + 1e-12, "seed {seed}: the search made {a} into {s}");
        sum += a;
        searched += s;
        n += 1;
    }
    let mean = sum / f64::from(n);
    assert!(mean <= 1.05, "mean cost {mean}× exact (network alone)");
    let mean = searched / f64::from(n);
    assert!(mean <= 1.01, "mean cost {mean}× exact (with the search)");
}

#[test]
fn training_saves_a_planner_that_loads_and_plans_the_same() {
    let mut t = train::Trainer::new(train::TrainConfig {
        batch: 4,
        ..Default::default()
    });
    for _ in 0..3 {
        t.step();
    }
    let dir = std::env::temp_dir().join(format!("tapfinger-planner-{}", std::process::id()));
    t.save(&dir, "test").unwrap();
    let back = Learned::from_bytes(
        std::fs::read(dir.join("model.bpk")).unwrap(),
        &std::fs::read_to_string(dir.join("train.json")).unwrap(),
        "test",
    )
    .unwrap();
    let here = Learned::new(t.inference_net(), 0);
    let p = problem(7, false);
    assert_eq!(
        here.plan(&p).map(|x| x.assign),
        back.plan(&p).map(|x| x.assign)
    );
    let _ = std::fs::remove_dir_all(dir);
}
