use super::*;
use crate::Scenario;
use tapfinger::NodeId;
use tapfinger::model::DecisionRecord;

/// One box, GPU-hungry tasks only: the better the allocations, the shorter the queue.
const TINY: &str = r#"
name = "tiny"
max_slots = 3000
lambda = 0.7
tasks = 24
window = 4
[[resources]]
name = "cpu"
[[resources]]
name = "gpu"
[[nodes]]
name = "box"
capacity = [4, 8]
[[task_types]]
name = "LM"
min_demand = [1, 1]
speed = { model = "synthetic", w = [0.0, 0.25], b = 0.0 }
"#;

fn greedy_jct(t: &Trainer, seeds: &[u64]) -> f64 {
    let kinds = vec!["cpu".to_string(), "gpu".to_string()];
    let total: f64 = seeds
        .iter()
        .map(|&s| {
            crate::metrics::summarize(&t.sim.run(t.policies(true), s).unwrap(), &kinds).avg_jct
        })
        .sum();
    total / seeds.len() as f64
}

/// A trainer on the tiny scenario with a small network: `width`, 1 layer, 8 units per kind,
/// minibatch 64; `tune` sets the rest.
fn tiny(seed: u64, width: usize, tune: impl FnOnce(&mut TrainConfig)) -> Trainer {
    let sim = Simulator::new(Scenario::from_toml(TINY, "tiny", None).unwrap());
    let mut cfg = TrainConfig::new(sim.dims(), seed);
    cfg.net.width = width;
    cfg.net.layers = 1;
    cfg.net.max_units = 8;
    cfg.minibatch = 64;
    tune(&mut cfg);
    Trainer::new(sim, cfg)
}

/// A tiny trainer whose returns are plain sums of unscaled rewards (γ 1, reward scale 1).
fn monte_carlo() -> Trainer {
    tiny(1, 16, |cfg| {
        cfg.gamma = 1.0;
        cfg.reward_scale = 1.0;
    })
}

/// A decision of agent 0 in `slot` on an empty view (returns and advantages need no more).
fn record_at(slot: u64) -> DecisionRecord {
    let view = tapfinger::view::ClusterView {
        slot,
        ..Default::default()
    };
    DecisionRecord::new(view, NodeId(0), Vec::new(), 0)
}

/// Rewards of slots in which an agent made no decision (possible live) are charged to its
/// previous decision, and the simulator's episodes have a decision in every slot of every agent.
#[test]
fn slots_without_a_decision_still_count() {
    let t = monte_carlo();
    let rec = record_at;
    let mut exp = Experience::default();
    for (slot, r) in [(1, -1.0), (2, -2.0), (3, -4.0), (4, -8.0)] {
        exp.rewards.insert((slot, NodeId(0)), r);
        // Another agent's rewards are not ours.
        exp.rewards.insert((slot, NodeId(1)), -100.0);
    }
    let records = vec![rec(1), rec(3)];
    let asm = tapfinger::model::critic::assemble(&records);
    let s = t.advantages(records, &exp, &[0.0, 0.0], 1.0, &asm);
    assert_eq!((s[0].ret, s[1].ret), (-15.0, -12.0));

    let sim = Simulator::new(Scenario::load("hetero6").unwrap());
    let dims = sim.dims();
    let exp = Trainer::new(sim, TrainConfig::new(dims, 5))
        .sample_experience(5)
        .unwrap();
    let decided: std::collections::BTreeSet<(u64, NodeId)> =
        exp.records.iter().map(|r| (r.view.slot, r.me)).collect();
    assert!(exp.rewards.keys().all(|k| decided.contains(k)));
}

/// A live agent that restarted counts its slots from 0 again, so one batch can hold its
/// decisions with the slots going backwards: the returns are computed (its own slot's reward
/// for the decision before the restart), not a panic.
#[test]
fn an_agent_whose_slots_went_back_after_a_restart_is_no_panic() {
    let t = monte_carlo();
    let mut exp = Experience::default();
    for (slot, r) in [(2, -1.0), (5, -2.0), (6, -4.0)] {
        exp.rewards.insert((slot, NodeId(0)), r);
    }
    let records = vec![record_at(5), record_at(2)];
    let asm = tapfinger::model::critic::assemble(&records);
    let s = t.advantages(records, &exp, &[0.0, 0.0], 1.0, &asm);
    assert_eq!(s[0].ret, -2.0 + s[1].ret);
    assert!(
        s.iter()
            .all(|x| x.ret.is_finite() && x.advantage.is_finite())
    );
}

#[test]
fn ppo_improves_a_tiny_environment() {
    let mut t = tiny(11, 32, |cfg| {
        cfg.envs = 4;
        cfg.lr = 1e-3;
        cfg.eval_episodes = 0;
    });
    let eval: Vec<u64> = (1000..1004).collect();
    let before = greedy_jct(&t, &eval);
    let mut curve = Vec::new();
    for _ in 0..15 {
        curve.push(t.iterate().unwrap());
    }
    let after = greedy_jct(&t, &eval);
    let first: f64 = curve[..3].iter().map(|p| p.avg_jct).sum::<f64>() / 3.0;
    let last: f64 = curve[12..].iter().map(|p| p.avg_jct).sum::<f64>() / 3.0;
    // (lr 1e-3: at 3e-3 the sampling policy's JCT rose again after iteration 10.)
    eprintln!("{:?}", curve.iter().map(|p| p.avg_jct).collect::<Vec<_>>());
    eprintln!(
        "greedy before {before:.2} after {after:.2}; sampling first {first:.2} last {last:.2}"
    );
    assert!(
        curve
            .iter()
            .all(|p| p.policy_loss.is_finite() && p.value_loss.is_finite())
    );
    assert!(after < before, "greedy JCT {before:.2} → {after:.2}");
    assert!(last < first, "sampling JCT {first:.2} → {last:.2}");

    // A checkpoint resumes with the same weights: the same greedy decisions.
    let scratch = scratch("ckpt");
    let dir = scratch.path().to_path_buf();
    t.save(&dir).unwrap();
    let sim2 = Simulator::new(Scenario::from_toml(TINY, "tiny", None).unwrap());
    let resumed = Trainer::resume(sim2, &dir).unwrap();
    assert_eq!(resumed.iteration, 15);
    assert_eq!(resumed.curve.len(), 15);
    assert_eq!(greedy_jct(&resumed, &eval), after);
    let (_, cfg, _) =
        tapfinger::model::checkpoint::load_path(&dir.join(MODEL_FILE), &t.sim.dims()).unwrap();
    assert_eq!(cfg, t.cfg.net);
    let wrong = Dims::per_preset(3, 1, 4);
    assert!(
        tapfinger::model::checkpoint::load_path(&dir, &wrong)
            .unwrap_err()
            .to_string()
            .contains("trained for 2")
    );
}

#[test]
fn a_general_model_loads_on_every_cluster_and_an_unknown_schema_is_refused_naming_both() {
    let sim = Simulator::new(Scenario::from_toml(TINY, "tiny", None).unwrap());
    let dims = Dims::general(sim.scenario().window);
    let mut cfg = TrainConfig::new(dims.clone(), 5);
    cfg.net = tapfinger::model::net::NetConfig::new(dims);
    cfg.envs = 1;
    cfg.eval_episodes = 0;
    let t = Trainer::new(sim, cfg);
    let scratch = scratch("general");
    let dir = scratch.path().to_path_buf();
    t.save(&dir).unwrap();
    for name in ["hetero6", "edge-synergy", "gen:10001"] {
        let other = Simulator::new(Scenario::load(name).unwrap());
        let ps =
            crate::policies::learned(&other, Some(&dir)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(ps.len(), other.scenario().nodes.len());
    }
    // The same model file with a feature schema from the future, or one this build no longer
    // reads (schemas 2, 4, 6 and 7 were experiments): refused, naming those it reads.
    let json = std::fs::read_to_string(dir.join("train.json")).unwrap();
    for schema in [9, 2, 4, 6, 7] {
        let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
        v["config"]["net"]["dims"]["schema"] = serde_json::json!(schema);
        std::fs::write(dir.join("train.json"), v.to_string()).unwrap();
        let e = tapfinger::model::checkpoint::load_path(&dir, &Dims::general(10))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("feature schema {schema};"))
                && e.contains("1 (per preset)")
                && e.contains("3 (RLPTO)")
                && e.contains("5 (general)")
                && e.contains("8 (general with sizes)"),
            "{e}"
        );
    }
    // A model trained with the crowding mask, which this build no longer has: refused, since
    // it would decide otherwise without it.
    let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v["config"]["net"]["crowding"] = serde_json::json!(2);
    std::fs::write(dir.join("train.json"), v.to_string()).unwrap();
    let e = tapfinger::model::checkpoint::load_path(&dir, &Dims::general(10))
        .unwrap_err()
        .to_string();
    assert!(e.contains("crowding mask (crowding 2)"), "{e}");
    v["config"]["net"]["crowding"] = serde_json::json!(0);
    std::fs::write(dir.join("train.json"), v.to_string()).unwrap();
    assert!(tapfinger::model::checkpoint::load_path(&dir, &Dims::general(10)).is_ok());
    // A per-preset model where a general one is needed: both schemas named.
    let e = tapfinger::model::checkpoint::SHIPPED[0]
        .load(&Dims::general(10))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("feature schema 1 (per preset)") && e.contains("feature schema 5 (general)"),
        "{e}"
    );
}

/// The centralized critic's assembly: in the simulator every agent of a round decides on the
/// same snapshot, so the rounds of a multi-agent episode need no merge (one forward pass);
/// once one agent's view of its peers goes stale, its rounds are merged.
#[test]
fn simulated_rounds_need_no_merge_and_stale_views_do() {
    let sim = Simulator::new(Scenario::load("hetero6").unwrap());
    let dims = sim.dims();
    let t = Trainer::new(sim, TrainConfig::new(dims, 5));
    let mut exp = t.sample_experience(5).unwrap();
    let asm = tapfinger::model::critic::assemble(&exp.records);
    assert!(asm.reports_per_round() > 1.5, "{}", asm.reports_per_round());
    assert_eq!(asm.merged, 0);
    // Agent 0 has not heard node 1's last heartbeat: it still sees node 1 with all its
    // capacity free.
    let stale = exp
        .records
        .iter()
        .position(|r| {
            r.me == NodeId(0) && r.view.nodes.get(1).is_some_and(|n| n.free != n.capacity)
        })
        .expect("a round in which node 1 runs something");
    let n1 = &mut exp.records[stale].view.nodes[1];
    n1.free = n1.capacity.clone();
    let round = (exp.records[stale].view.slot, exp.records[stale].view.step);
    let asm = tapfinger::model::critic::assemble(&exp.records);
    assert_eq!(asm.merged, 1);
    let g = asm.rounds[&round].as_ref().unwrap();
    // Node 1's own report wins.
    let own = exp
        .records
        .iter()
        .find(|r| r.me == NodeId(1) && (r.view.slot, r.view.step) == round)
        .unwrap();
    assert_eq!(g.nodes[1].free, own.view.nodes[1].free);
    assert_ne!(g.nodes[1].free, g.nodes[1].capacity);
}

#[test]
fn imitation_learns_from_the_teacher_then_hands_over_to_ppo() {
    let mut t = tiny(11, 32, |cfg| {
        cfg.envs = 4;
        cfg.lr = 3e-3;
        cfg.imitate = 4;
        cfg.eval_episodes = 2;
    });
    let eval: Vec<u64> = (2000..2004).collect();
    let before = greedy_jct(&t, &eval);
    let teacher: f64 = {
        let kinds = vec!["cpu".to_string(), "gpu".to_string()];
        eval.iter()
            .map(|&s| {
                let ps = crate::policies::build(&t.sim, &t.cfg.teacher).unwrap();
                crate::metrics::summarize(&t.sim.run(ps, s).unwrap(), &kinds).avg_jct
            })
            .sum::<f64>()
            / eval.len() as f64
    };
    let curve: Vec<CurvePoint> = (0..5).map(|_| t.iterate().unwrap()).collect();
    let after = greedy_jct(&t, &eval);
    eprintln!("greedy before {before:.2}, after imitation {after:.2}, teacher {teacher:.2}");
    let phases: Vec<&str> = curve.iter().map(|p| p.phase.as_str()).collect();
    assert_eq!(phases, ["imitate", "imitate", "imitate", "imitate", "ppo"]);
    assert!(curve.iter().all(|p| p.eval_jct.is_finite()));
    // The cross-entropy to the teacher's labels falls, and the student closes most of the gap
    // between the untrained network and the teacher.
    assert!(curve[3].policy_loss < curve[0].policy_loss, "{curve:?}");
    assert!(
        after < before && after - teacher < 0.5 * (before - teacher),
        "before {before:.2}, after {after:.2}, teacher {teacher:.2}"
    );
}

#[test]
fn results_do_not_depend_on_the_number_of_threads() {
    let run = |threads: usize| {
        let mut t = tiny(21, 16, |cfg| {
            // The default minibatch (256) is what this test always used.
            cfg.minibatch = 256;
            cfg.envs = 3;
            cfg.imitate = 1;
            cfg.eval_episodes = 3;
        });
        t.threads = threads;
        (t.iterate().unwrap(), t.iterate().unwrap())
    };
    assert_eq!(run(1), run(2));
}

#[test]
fn a_resumed_run_continues_exactly_where_the_checkpoint_stopped() {
    let make = || {
        tiny(5, 16, |cfg| {
            cfg.envs = 2;
            cfg.imitate = 1;
            cfg.eval_episodes = 0;
        })
    };
    // Three iterations in one go ...
    let mut straight = make();
    let straight_curve: Vec<CurvePoint> = (0..3).map(|_| straight.iterate().unwrap()).collect();
    // ... against two, a checkpoint, a fresh process's resume, and the third.
    let mut first = make();
    first.iterate().unwrap();
    first.iterate().unwrap();
    let scratch = scratch("resume");
    let dir = scratch.path().to_path_buf();
    first.save(&dir).unwrap();
    assert!(dir.join(OPTIM_FILE).exists(), "Adam's moments are saved");
    let sim = Simulator::new(Scenario::from_toml(TINY, "tiny", None).unwrap());
    let mut resumed = Trainer::resume(sim, &dir).unwrap();
    let third = resumed.iterate().unwrap();
    // The losses of the third iteration depend on the weights, the optimizer's moments and
    // the minibatch order: all three must have survived the checkpoint.
    // (`eval_jct` is NaN with evaluation off, and NaN != NaN: compare the rest.)
    let no_eval = |p: &CurvePoint| CurvePoint {
        eval_jct: 0.0,
        ..p.clone()
    };
    assert_eq!(no_eval(&third), no_eval(&straight_curve[2]));
    let eval = [900, 901];
    assert_eq!(greedy_jct(&resumed, &eval), greedy_jct(&straight, &eval));
}

#[test]
fn ablations_train_without_error() {
    for variant in ["nohan", "nopointer", "vanilla"] {
        let sim = Simulator::new(Scenario::from_toml(TINY, "tiny", None).unwrap());
        let mut cfg = TrainConfig::new(sim.dims(), 3);
        cfg.net = NetConfig::variant(sim.dims(), variant).unwrap();
        cfg.net.width = 16;
        cfg.net.max_units = 8;
        cfg.envs = 2;
        let mut t = Trainer::new(sim, cfg);
        let p = t.iterate().unwrap();
        assert!(
            p.policy_loss.is_finite() && p.value_loss.is_finite(),
            "{variant}: {p:?}"
        );
        if variant != "nohan" {
            assert_eq!(
                p.entropy, 0.0,
                "{variant}: a fixed selection rule has no pointer entropy"
            );
        }
    }
}

#[test]
fn the_value_head_learns_returns_over_their_running_scale() {
    let run = |normalize: bool| {
        let mut t = tiny(31, 16, |cfg| {
            cfg.envs = 2;
            cfg.eval_episodes = 0;
            cfg.normalize_returns = normalize;
        });
        let p = t.iterate().unwrap();
        (t.ret_scale, p.value_loss)
    };
    let (raw_scale, raw_loss) = run(false);
    let (scale, loss) = run(true);
    assert_eq!(raw_scale, 1.0, "without normalization the scale stays 1");
    // Returns here are tens of (scaled) slots: the scale is their RMS, and the value loss,
    // measured in scaled units, is far smaller than on raw returns.
    assert!(scale > 2.0, "scale {scale}");
    assert!(loss < raw_loss / 4.0, "value loss {loss} vs raw {raw_loss}");
}

#[test]
fn the_entropy_weight_decays_over_ppo_iterations_only() {
    let mut cfg = TrainConfig::new(Dims::general(10), 0);
    cfg.imitate = 10;
    cfg.entropy_coef = 0.01;
    cfg.entropy_final = 0.002;
    cfg.entropy_decay_iterations = 100;
    assert_eq!(cfg.entropy_at(0), 0.01);
    assert_eq!(cfg.entropy_at(10), 0.01);
    assert!((cfg.entropy_at(60) - 0.006).abs() < 1e-6);
    assert!((cfg.entropy_at(500) - 0.002).abs() < 1e-9);
    cfg.entropy_decay_iterations = 0;
    assert_eq!(cfg.entropy_at(500), 0.01, "no decay: constant");
}

/// The input-dependent baseline: a decision's advantage is the cluster's return from its slot on
/// less the mean over the iteration's episodes of the cluster's return from that slot.
#[test]
fn the_input_dependent_baseline_centres_each_slots_return_over_the_episodes() {
    let t = monte_carlo();
    let rec = record_at;
    let mut a = Experience::default();
    for slot in 0..3 {
        a.rewards.insert((slot, NodeId(0)), -1.0);
    }
    a.records = vec![rec(0), rec(2)];
    let mut b = Experience::default();
    // The cluster's reward: agent 1's counts for agent 0's decisions too.
    b.rewards.insert((0, NodeId(0)), -1.0);
    b.rewards.insert((0, NodeId(1)), -2.0);
    b.records = vec![rec(0)];
    let asm = tapfinger::model::critic::assemble(a.records.iter().chain(&b.records));
    let s = t.input_baseline_samples(vec![a, b], &asm);
    let got: Vec<(f32, f32)> = s.iter().map(|x| (x.ret, x.advantage)).collect();
    // Returns from slot 0: -3 in both (baseline -3); from slot 2: -1 in a, 0 in b (-0.5).
    assert_eq!(got, vec![(-3.0, 0.0), (-1.0, -0.5), (-3.0, 0.0)]);
}

/// With the baseline on, a PPO iteration's episodes run one workload and differ in their
/// decisions; off, each has its own workload.
#[test]
fn an_iterations_episodes_share_one_workload_only_under_the_input_baseline() {
    let arrivals = |e: &super::collect::Episode| e.workload;
    let t = tiny(3, 16, |cfg| cfg.envs = 3);
    let (eps, _, _) = t.collect(None).unwrap();
    assert!(eps.iter().all(|e| arrivals(e) == arrivals(&eps[0])));
    let decisions = |e: &super::collect::Episode| {
        e.exp
            .records
            .iter()
            .map(|r| (r.view.slot, r.slot))
            .collect::<Vec<_>>()
    };
    assert!(
        eps.iter().any(|e| decisions(e) != decisions(&eps[0])),
        "the agents' sampling differs between the episodes"
    );
    // The workload seed alone fixes the arrivals and sizes; the policy seed only the sampling.
    let run = |p: u64| {
        let mut obs = crate::env::NoObserver;
        t.sim
            .run_split(t.policies(false), 42, p, &mut obs)
            .unwrap()
            .tasks
    };
    let (x, y) = (run(1), run(2));
    let key = |r: &crate::env::TaskRecord| (r.id, r.ty, r.arrival, r.lower_bound);
    assert_eq!(
        x.iter().map(key).collect::<Vec<_>>(),
        y.iter().map(key).collect::<Vec<_>>()
    );
    assert_ne!(x, y, "different sampling, different schedules");
    let t = tiny(3, 16, |cfg| {
        cfg.envs = 3;
        cfg.input_baseline = false;
    });
    let (eps, _, _) = t.collect(None).unwrap();
    assert!(arrivals(&eps[0]) != arrivals(&eps[1]) && arrivals(&eps[1]) != arrivals(&eps[2]));
}

/// A development judgement averages over every validation workload of every judge: a second
/// workload whose reference is huge adds a term near 0, halving the score of one workload.
#[test]
fn a_judgement_averages_every_workload_of_every_scenario() {
    let t = tiny(5, 16, |_| {});
    let net = t.inference_net();
    let judge = |references: Vec<f64>| DevJudge {
        sim: Simulator::new(Scenario::from_toml(TINY, "tiny", None).unwrap()),
        references,
    };
    let one = t.judge_on(&net, &[judge(vec![1.0])]).unwrap();
    assert!(one > 0.0 && one.is_finite(), "{one}");
    let two = t.judge_on(&net, &[judge(vec![1.0, 1e12])]).unwrap();
    assert!((two - one / 2.0).abs() < 1e-6 * one, "{one} {two}");
    let twice = t
        .judge_on(&net, &[judge(vec![1.0]), judge(vec![1.0])])
        .unwrap();
    assert!((twice - one).abs() < 1e-9 * one, "{one} {twice}");
}

/// A folder of the test's own (`tapfinger-TAG-…`), removed when the test ends, passed or failed.
fn scratch(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("tapfinger-{tag}-"))
        .tempdir()
        .unwrap()
}
