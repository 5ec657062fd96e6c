//! What a policy sees reads nothing of the simulator's true speed model: swap the speed model
//! and every view is the same until progress has been observed; after that, the speed estimates
//! in the views differ (the estimator learned from what ran), and nothing else reveals speed
//! (RLPTO's features included: classes, convergence and the arrival forecast). Profile hints
//! (`--profile-hints`, off by default) are the exception by design: the views then carry, before
//! any progress, what profiling runs measured, as a submitter's spec would.
//! Also: one batched forward pass per simulated step decides as one pass per agent.

// Test code may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

use tapfinger::view::ClusterView;
use tapfinger_sim::env::Observer;
use tapfinger_sim::speed::SpeedModel;
use tapfinger_sim::{Scenario, Simulator, policies};

#[derive(Default)]
struct Views(Vec<ClusterView>);

impl Observer for Views {
    fn wants_views(&self) -> bool {
        true
    }
    fn decision_view(&mut self, v: &ClusterView) {
        self.0.push(v.clone());
    }
}

fn views(sc: &Scenario) -> Vec<ClusterView> {
    let sim = Simulator::new(sc.clone());
    let mut v = Views::default();
    sim.run_observed(policies::build(&sim, "tiresias-np").unwrap(), 3, &mut v)
        .unwrap();
    v.0
}

#[test]
fn swapping_the_true_speed_model_changes_nothing_a_policy_sees_before_progress_is_observed() {
    for preset in [
        "synthetic3",
        "hetero6",
        "edge-synergy",
        "gen:10003",
        "rlpto-edge",
    ] {
        let mut a = Scenario::load(preset).unwrap();
        if preset == "rlpto-edge" {
            // RLPTO's features too: classes, convergence and the arrival forecast.
            a.forecast_interval_slots = Some(2);
        }
        let mut b = a.clone();
        for t in &mut b.types {
            // Twice as fast at every allocation (and a different shape for formulas).
            t.speed = match &t.speed {
                SpeedModel::Synthetic { w, b } => SpeedModel::Synthetic {
                    w: w.iter().rev().map(|x| x * 2.0).collect(),
                    b: b * 2.0,
                },
                SpeedModel::Table(_) => SpeedModel::Synthetic {
                    w: vec![0.05; a.space.len()],
                    b: 0.1,
                },
            };
        }
        let (va, vb) = (views(&a), views(&b));
        // Every decision before the first slot has run: nothing observed yet.
        let first: Vec<&ClusterView> = va.iter().take_while(|v| v.slot == 0).collect();
        assert!(!first.is_empty(), "{preset}: no decision in slot 0");
        for (x, y) in first.iter().zip(&vb) {
            assert_eq!(*x, y, "{preset}: a view differs before any progress");
        }
        assert!(
            first
                .iter()
                .flat_map(|v| &v.pending)
                .all(|p| p.est.samples == 0),
            "{preset}: samples before any slot ran"
        );
        if preset == "rlpto-edge" {
            assert!(first.iter().all(|v| v.forecast.len() == 3 && v.classes));
        }
        // Later, the estimates have learned something, and differently for the two models.
        let learned = |vs: &[ClusterView]| -> Vec<f64> {
            vs.iter()
                .flat_map(|v| v.pending.iter().map(|p| p.est.at_min))
                .collect()
        };
        assert_ne!(
            learned(&va),
            learned(&vb),
            "{preset}: the estimator learned nothing"
        );
        assert!(
            va.iter()
                .flat_map(|v| &v.pending)
                .any(|p| p.est.samples > 0),
            "{preset}: no samples"
        );
    }
}

/// With profile hints, the estimates before any progress are the profiling runs', not the
/// prior's: close to the measured time at the task's minimum demand, from samples.
#[test]
fn with_profile_hints_the_first_views_show_the_profiled_times() {
    for preset in ["hetero6", "gen:10003"] {
        let mut sc = Scenario::load(preset).unwrap();
        sc.profile_hints = true;
        let runs = policies::profile(&sc);
        let first: Vec<ClusterView> = views(&sc).into_iter().take_while(|v| v.slot == 0).collect();
        assert!(!first.is_empty(), "{preset}: no decision in slot 0");
        let mut checked = 0;
        for p in first.iter().flat_map(|v| &v.pending) {
            assert!(p.est.samples > 0, "{preset}: no hints before progress");
            let at_min = runs
                .iter()
                .find(|r| r.ty == p.task.ty && r.alloc == p.task.min_demand)
                .map(|r| r.slots);
            if let Some(t) = at_min {
                let err = (p.est.at_min - t).abs() / t;
                assert!(
                    err < 0.25,
                    "{preset}: estimated {} against profiled {t}",
                    p.est.at_min
                );
                checked += 1;
            }
        }
        assert!(checked > 0, "{preset}: no profiled run at a minimum demand");
    }
}

#[test]
fn one_set_of_general_weights_decides_on_every_preset_and_generated_scenario() {
    use tapfinger::model::TapfingerPolicy;
    use tapfinger::model::batch::Dims;
    use tapfinger::model::net::NetConfig;
    // The general schema, with sizes, and RLPTO's.
    for dims in [Dims::general(10), Dims::sized(10), Dims::rlpto(10)] {
        let cfg = NetConfig::new(dims);
        let net = tapfinger::model::net::Net::new(&cfg, &burn::tensor::Device::flex());
        for name in [
            "hetero6",
            "synthetic3",
            "edge-synergy",
            "edge-agent",
            "gen:3",
            "gen:10004",
        ] {
            let mut sc = Scenario::load(name).unwrap();
            // Short episodes: an untrained network is slow to finish long ones.
            sc.tasks = sc.tasks.min(40);
            let sim = Simulator::new(sc);
            let ps: Vec<Box<dyn tapfinger::Policy>> = (0..sim.scenario().nodes.len())
                .map(|_| {
                    Box::new(TapfingerPolicy::from_net(&net, cfg.clone()).greedy(true))
                        as Box<dyn tapfinger::Policy>
                })
                .collect();
            // The simulator refuses any illegal claim (over capacity, below a minimum, a kind the
            // cluster lacks): finishing is the check.
            let r = sim.run(ps, 1).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(r.tasks.len(), sim.scenario().tasks as usize, "{name}");
        }
    }
}

/// Swap the true sizes of a recurring workload (each job's runs drawn with another spread; the
/// same arrivals, classes, jobs and users): what a policy sees is the same before any progress,
/// and no view predicts a size before a task has finished: the size book (what the size
/// features of schema 8 read) learns from finished tasks' measured work alone.
#[test]
fn swapping_the_true_sizes_changes_nothing_a_policy_sees_before_a_task_finishes() {
    let a = Scenario::load("gen-recur:3").unwrap();
    let mut b = a.clone();
    let ts = b.task_size.as_mut().unwrap();
    ts.recurring.as_mut().unwrap().spread = [0.05, 0.1];
    let sizes = |sc: &Scenario| {
        tapfinger_sim::workload::recurring::draw(sc, 3, sc.tasks as usize)
            .unwrap()
            .size
    };
    assert_ne!(sizes(&a), sizes(&b), "the swap changed no size");
    let run = |sc: &Scenario| {
        let sim = Simulator::new(sc.clone());
        let mut v = Views::default();
        let r = sim
            .run_observed(policies::build(&sim, "tiresias-np").unwrap(), 3, &mut v)
            .unwrap();
        let first_end = r.tasks.iter().map(|t| t.finish).min().unwrap();
        (v.0, first_end)
    };
    let ((va, end_a), (vb, end_b)) = (run(&a), run(&b));
    let first: Vec<&ClusterView> = va.iter().take_while(|v| v.slot == 0).collect();
    assert!(!first.is_empty(), "no decision in slot 0");
    for (x, y) in first.iter().zip(&vb) {
        assert_eq!(*x, y, "a view differs before any progress");
    }
    let predicted = |v: &ClusterView| {
        v.pending.iter().filter(|p| p.size.is_some()).count()
            + v.running.iter().filter(|r| r.size.is_some()).count()
    };
    for (vs, end) in [(&va, end_a), (&vb, end_b)] {
        // `finish` is the end of the slot a task finished in: no view before it knows a size.
        assert!(
            vs.iter()
                .filter(|v| v.slot + 1 < end)
                .all(|v| predicted(v) == 0)
        );
        assert!(vs.iter().any(|v| predicted(v) > 0), "no size was learned");
    }
}

/// The shipped general model widened to the size features (zero weights for them,
/// `widen_to_sized`: the warm start of `train --from general --sizes`) schedules every task as
/// the shipped model does, where sizes are learned and where they are declared.
#[test]
fn the_general_model_widened_to_the_size_features_decides_as_before() {
    use tapfinger::model::checkpoint::{CONFIG_FILE, GENERAL, MODEL_FILE, widen_to_sized};
    let (bytes, json) = widen_to_sized(GENERAL.model, GENERAL.config, "general").unwrap();
    assert!(json.contains("\"schema\":8"), "{json}");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(MODEL_FILE), bytes).unwrap();
    std::fs::write(dir.path().join(CONFIG_FILE), json).unwrap();
    for name in ["gen-recur:3", "gen-declared:3"] {
        let mut sc = Scenario::load(name).unwrap();
        sc.tasks = sc.tasks.min(80);
        let sim = Simulator::new(sc);
        let shipped = sim
            .run(policies::learned(&sim, None).unwrap(), 100)
            .unwrap();
        let widened = sim
            .run(policies::learned(&sim, Some(dir.path())).unwrap(), 100)
            .unwrap();
        assert_eq!(shipped.tasks, widened.tasks, "{name}");
    }
    // Only a general model widens.
    let preset = tapfinger::model::checkpoint::SHIPPED
        .iter()
        .find(|m| m.scenario == "hetero6")
        .unwrap();
    let err = widen_to_sized(preset.model, preset.config, "hetero6").unwrap_err();
    assert!(err.to_string().contains("only a general model"), "{err}");
}

#[test]
fn no_task_beats_its_lower_bound_with_heavy_tailed_sizes() {
    // gen:13 draws heavy-tailed sizes: the bound must scale with each task's size.
    let sc = Scenario::load("gen:13").unwrap();
    assert!(
        sc.task_size.is_some(),
        "gen:13 should have heavy-tailed sizes"
    );
    let sim = Simulator::new(sc);
    for policy in ["tiresias", "optimus-np", "first-fit-max"] {
        let r = sim
            .run(policies::build(&sim, policy).unwrap(), 100)
            .unwrap();
        for t in &r.tasks {
            assert!(
                t.jct >= t.lower_bound,
                "{policy}: task {} took {} slots, bound {}",
                t.id,
                t.jct,
                t.lower_bound
            );
        }
        // The sizes are heavy-tailed: some bound is several times the smallest.
        let least = r.tasks.iter().map(|t| t.lower_bound).min().unwrap();
        assert!(
            r.tasks.iter().any(|t| t.lower_bound >= 4 * least),
            "{policy}: no heavy tail in the bounds (least {least})"
        );
    }
}

/// The shipped general model with a bounded focus, written where the simulator can load it;
/// without floors, or with two-point floors whose larger point is favoured (an offset of +4
/// where it was trained with −2, whose greedy floors are almost always the minimum), so that
/// the allocation heads' choices change the schedule.
fn general_focused(k: usize, floors: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    tapfinger::model::checkpoint::GENERAL
        .write_to(dir.path(), |j| {
            j["config"]["net"]["focus"] = serde_json::json!(k);
            j["config"]["net"]["floors"] = serde_json::json!(floors);
            j["config"]["net"]["two_point"] = if floors {
                serde_json::json!(4.0)
            } else {
                serde_json::Value::Null
            };
        })
        .unwrap();
    dir
}

#[test]
fn one_batched_pass_per_step_decides_as_one_pass_per_agent() {
    // The shipped general model without floors, and with floors leaning to the larger point
    // (the allocation heads then run in the batch too).
    let mut episodes = std::collections::BTreeMap::new();
    for (floors, g) in [(false, 3), (false, 6), (true, 3), (true, 6)] {
        let tmp = general_focused(4, floors);
        let dir = tmp.path();
        let sim = Simulator::new(Scenario::load(&format!("gen:{g}")).unwrap());
        let alone = sim
            .run(policies::learned(&sim, Some(dir)).unwrap(), 100)
            .unwrap();
        episodes.insert((floors, g), alone.tasks.clone());
        let step = tapfinger::model::step_batch::SharedStep::default();
        let ps = policies::learned_sharing(&sim, Some(dir), Some(step.clone())).unwrap();
        let batched = sim.run(ps, 100).unwrap();
        assert_eq!(alone, batched, "gen:{g}");
        // It did batch: several agents' decisions per pass.
        let (passes, graphs) = step.lock().unwrap().passes();
        assert!(
            passes > 0 && graphs > passes,
            "gen:{g}: {passes} passes, {graphs} graphs"
        );
    }
    // The floors were drawn (the same weights scheduled otherwise with them).
    assert!(
        [3, 6]
            .iter()
            .any(|g| episodes[&(false, *g)] != episodes[&(true, *g)]),
        "floors changed nothing"
    );
}

/// The decision pass (`tapfinger::model::net::infer`, which the policy decides with) gives the
/// shipped general model's logits as burn's forward pass does, on the views of real episodes
/// (presets and generated scenarios; every node's decision, alone and in one step's batch).
#[test]
fn the_shipped_model_s_decision_pass_matches_burn_on_real_views() {
    use tapfinger::model::batch::batch;
    let device = burn::tensor::Device::flex();
    let mut graphs = 0;
    for name in ["hetero6", "edge-synergy", "gen:3", "gen:9028"] {
        let mut sc = Scenario::load(name).unwrap();
        sc.tasks = sc.tasks.min(60);
        let sim = Simulator::new(sc);
        // burn's reading of the shipped file against the decision pass's own.
        let (net, cfg) = tapfinger::model::checkpoint::GENERAL
            .load_net(&sim.dims())
            .unwrap();
        let (fast, _) = tapfinger::model::checkpoint::GENERAL
            .load(&sim.dims())
            .unwrap();
        let all = views(sim.scenario());
        // Every fifth view, each node's graph alone, then all of them in one batch.
        for v in all.iter().step_by(5) {
            let ids: Vec<_> = v.nodes.iter().map(|n| n.id).collect();
            let items: Vec<(&ClusterView, tapfinger::NodeId)> =
                ids.iter().map(|id| (v, *id)).collect();
            for one in 0..=items.len() {
                let part = if one < items.len() {
                    &items[one..=one]
                } else {
                    &items[..]
                };
                let b = batch(part, &cfg.dims);
                let blocked = vec![false; b.graphs * cfg.dims.window];
                let pass = vec![false; b.graphs];
                let want = net
                    .pointer_logits(&net.encode(&b, &device), &b, &blocked, &pass, &device)
                    .into_data()
                    .try_to_vec::<f32>()
                    .unwrap();
                let got = fast.pointer_logits(&fast.encode_decision(&b), &b, &blocked, &pass);
                assert_eq!(want.len(), got.len());
                for (x, y) in want.iter().zip(&got) {
                    assert!(
                        (x - y).abs() <= 1e-4 * (1.0 + x.abs()),
                        "{name} slot {}: burn {x} vs decision pass {y}",
                        v.slot
                    );
                }
                graphs += b.graphs;
            }
        }
    }
    assert!(graphs > 100, "{graphs} graphs compared");
}
