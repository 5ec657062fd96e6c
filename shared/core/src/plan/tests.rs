use super::*;

fn brute_force(p: &Problem) -> Option<f64> {
    let (n, r) = (p.layers(), p.types());
    let mut assign = vec![0usize; n];
    let mut best: Option<f64> = None;
    loop {
        if let Ok(plan) = p.evaluate(&assign, "brute") {
            best = Some(best.map_or(plan.cost, |b: f64| b.min(plan.cost)));
        }
        // Next assignment in base r.
        let mut i = 0;
        loop {
            if i == n {
                return best;
            }
            assign[i] += 1;
            if assign[i] < r {
                break;
            }
            assign[i] = 0;
            i += 1;
        }
    }
}

fn small(seed: u64, limited: bool) -> Problem {
    let (mut job, prices) = random::chain(seed, limited);
    job.layers.truncate(7);
    Problem::new(job, prices).expect("a valid random chain")
}

#[test]
fn provisioning_gives_the_fewest_units_that_reach_the_target() {
    let (job, prices) = random::chain(1, false);
    let p = Problem::new(job, prices).expect("valid");
    for r in 0..p.types() {
        for t in [0.001, 0.01, 0.05, 0.2] {
            let sigma = p.prices.resources[r].scaling;
            match p.provision(t, r) {
                Some(k) => {
                    assert!(p.meets(stage_rate(t, k, sigma)));
                    assert!(k == 1 || !p.meets(stage_rate(t, k - 1, sigma)));
                }
                // No number of units: the rate's ceiling 1/(tσ) is below the target.
                None => assert!(1.0 / (t * sigma) < p.job.throughput * 1.0001),
            }
        }
    }
}

#[test]
fn the_exact_planner_matches_brute_force_with_and_without_limits() {
    let mut reached = [0, 0];
    for seed in 0..80 {
        for limited in [false, true] {
            let p = small(seed, limited);
            let exact = exact::plan(&p);
            match brute_force(&p) {
                Some(best) => {
                    let plan = exact.expect("exact finds a plan when one exists");
                    assert!(
                        (plan.cost - best).abs() <= 1e-9 * best.max(1.0),
                        "seed {seed} limited {limited}: exact {} vs brute force {best}",
                        plan.cost
                    );
                    assert!(p.meets(plan.throughput));
                    reached[usize::from(limited)] += 1;
                }
                None => assert!(
                    matches!(exact, Err(PlanError::Unreachable { .. })),
                    "seed {seed}: no plan exists but exact says {exact:?}"
                ),
            }
        }
    }
    // The check must cover plans, not only refusals, in both settings.
    assert!(
        reached[0] > 40 && reached[1] > 20,
        "plans found: {reached:?}"
    );
}

#[test]
fn the_exact_plan_costs_no_more_than_any_simple_plan() {
    for seed in 0..60 {
        for limited in [false, true] {
            let (job, prices) = random::chain(seed, limited);
            let p = Problem::new(job, prices).expect("valid");
            let Ok(best) = exact::plan(&p) else { continue };
            for other in [
                simple::cpu_only(&p),
                simple::gpu_only(&p),
                simple::greedy(&p),
            ]
            .into_iter()
            .flatten()
            {
                assert!(
                    best.cost <= other.cost * (1.0 + 1e-9),
                    "{} beats exact",
                    other.planner
                );
            }
        }
    }
}

#[test]
fn an_unreachable_target_is_refused_with_the_best_throughput_any_plan_reaches() {
    let (job, prices) = random::chain(3, true);
    let p = Problem::new(job, prices).expect("valid");
    let best = exact::best_throughput(&p);
    assert!(best > 0.0);
    let too_much = p.with_target(best * 1.01);
    match exact::plan(&too_much) {
        Err(PlanError::Unreachable { target, best: b }) => {
            assert_eq!(target, best * 1.01);
            assert!((b - best).abs() <= best * 1e-6);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(exact::plan(&p.with_target(best * 0.99)).is_ok());
}

#[test]
fn a_link_too_slow_for_a_split_keeps_the_chain_on_one_type() {
    let (mut job, mut prices) = random::chain(5, false);
    for l in &mut job.layers {
        l.out_bytes = 1e9;
    }
    prices.link_bandwidth = 1e9;
    job.throughput = 5.0;
    let p = Problem::new(job, prices).expect("valid");
    if let Ok(plan) = exact::plan(&p) {
        assert_eq!(plan.stages.len(), 1, "{plan:?}");
    }
    let mut split = vec![0; p.layers()];
    split[p.layers() - 1] = 1;
    let err = p
        .evaluate(&split, "test")
        .expect_err("the split cannot pass the link");
    assert!(err.to_string().contains("splits after layer"), "{err}");
}

#[test]
fn bad_input_names_what_is_wrong() {
    let (job, prices) = random::chain(2, false);
    let mut j = job.clone();
    j.layers[1].time.insert("tpu".into(), 0.01);
    let e = Problem::new(j, prices.clone()).expect_err("unknown type");
    assert!(
        e.to_string().contains("layer 2") && e.to_string().contains("\"tpu\""),
        "{e}"
    );
    let mut j = job.clone();
    j.throughput = -1.0;
    let e = Problem::new(j, prices.clone()).expect_err("negative target");
    assert!(e.to_string().contains("throughput"), "{e}");
    let mut pr = prices.clone();
    pr.resources[0].scaling = 1.5;
    let e = Problem::new(job, pr).expect_err("scaling out of range");
    assert!(e.to_string().contains("scaling"), "{e}");
    let e = toml::from_str::<Job>("batches = 1\nthroughput = 1\nlayers = []\n")
        .expect_err("a misspelt table is refused");
    assert!(e.to_string().contains("unknown field"), "{e}");
}

#[test]
fn the_exact_planner_matches_brute_force_on_the_wider_family() {
    let mut reached = 0;
    for seed in 0..60 {
        let (mut job, prices) = random::varied(seed);
        job.layers.truncate(7);
        let p = Problem::new(job, prices).expect("a valid varied chain");
        match (exact::plan(&p), brute_force(&p)) {
            (Ok(plan), Some(best)) => {
                assert!(
                    (plan.cost - best).abs() <= 1e-9 * best.max(1.0),
                    "seed {seed}"
                );
                reached += 1;
            }
            (Err(PlanError::Unreachable { .. }), None) => {}
            (e, b) => panic!("seed {seed}: exact {e:?}, brute force {b:?}"),
        }
    }
    assert!(reached > 20, "plans found: {reached}");
}
