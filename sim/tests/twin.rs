//! The cluster's twin holds a round trip: an episode run, its workload recorded as its agents
//! observed it (arrivals, runs, outcomes, the estimator's speed figures — never the speed
//! model), written as a scenario, and that scenario run again: under every deployable
//! baseline, the twin's average JCT is within the stated tolerance of the original's on the
//! same arrivals.

// Test code may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

use tapfinger_sim::metrics::summarize;
use tapfinger_sim::{Scenario, Simulator, policies, twin};

/// The twin's average JCT under each baseline against the original's, on `scenario` recorded
/// under `recorded_with`: the worst ratio and the ratios, by baseline.
fn round_trip(scenario: &str, recorded_with: &str, seed: u64) -> Vec<(String, f64, f64)> {
    let sim = Simulator::new(Scenario::load(scenario).unwrap());
    let kinds = sim.scenario().kind_names();
    let (_, w) = twin::observe(&sim, policies::build(&sim, recorded_with).unwrap(), seed).unwrap();
    // The file form is what crosses from the agents: write and read it back.
    let w: tapfinger::twin::Workload =
        serde_json::from_str(&serde_json::to_string(&w).unwrap()).unwrap();
    let toml = twin::scenario_toml(&w, "twin").unwrap();
    let twin_sim = Simulator::new(
        Scenario::from_toml(&toml, "twin", None).unwrap_or_else(|e| panic!("{e}\n{toml}")),
    );
    tapfinger::baselines::Baseline::JUDGED
        .iter()
        .map(|b| b.name())
        .filter(|b| *b != "random")
        .map(|b| {
            let orig = sim.run(policies::build(&sim, b).unwrap(), seed).unwrap();
            let twin = twin_sim
                .run(policies::build(&twin_sim, b).unwrap(), seed)
                .unwrap();
            (
                b.to_string(),
                summarize(&orig, &kinds).avg_jct,
                summarize(&twin, &twin_sim.scenario().kind_names()).avg_jct,
            )
        })
        .collect()
}

/// Tolerance on a scenario whose classes cannot be resized (every policy runs each task at
/// the allocation the estimator saw it at): every baseline's average JCT on the twin within
/// 10 % of the original's (measured: within 0.4 % on the Gavel family, 5.3 % on the base
/// family, whose start-up cost the twin takes as the classes' mean).
const RIGID: f64 = 0.10;

/// Tolerance under the policy whose run the twin was recorded from, on an elastic scenario:
/// the allocations it replays are those the estimator learned from.
const RECORDED: f64 = 0.05;

#[test]
fn the_twin_of_an_episode_replays_it_within_tolerance() {
    for (sc, by) in [
        ("gen-gavel:10001", "tiresias"),
        ("gen:10001", "tiresias-share"),
    ] {
        for (b, orig, twin) in round_trip(sc, by, 100) {
            let r = twin / orig;
            eprintln!(
                "{sc} recorded under {by}: {b} {orig:.2} on the original, {twin:.2} on the twin"
            );
            assert!(
                (r - 1.0).abs() <= RIGID,
                "{sc}: {b} {orig:.2} vs {twin:.2} on the twin"
            );
        }
    }
}

/// On an elastic scenario the twin knows the speeds at the allocations the recorded policy used:
/// replayed under that policy it holds. (Under a policy that allocates where the cluster never
/// ran, the estimator extrapolates: on `hetero6` recorded under `tiresias`, `drf`'s 27.4 slots
/// are 8.1 on the twin; the guard that judges on the twin sees such a policy's own windows once
/// it runs.)
#[test]
fn an_elastic_twin_replays_the_policy_it_was_recorded_under() {
    for by in ["tiresias", "tiresias-share"] {
        let r = round_trip("hetero6", by, 100);
        let (_, orig, twin) = r.iter().find(|(b, _, _)| b == by).unwrap();
        eprintln!("hetero6 under {by}: {orig:.2} on the original, {twin:.2} on the twin");
        assert!((twin / orig - 1.0).abs() <= RECORDED, "{orig} vs {twin}");
    }
}

/// The twin knows only what was observed: two clusters that differ in nothing the episode could
/// observe — only in the speed model of a task type no task is of — give the same twin. (A twin
/// that copied the scenario's speed models would carry the unused type's, and differ.)
#[test]
fn the_twin_carries_no_speed_model_the_episode_did_not_observe() {
    let sim = Simulator::new(Scenario::load("gen:10001").unwrap());
    let (_, w) = twin::observe(&sim, policies::build(&sim, "tiresias").unwrap(), 100).unwrap();
    let replay = twin::scenario_toml(&w, "twin").unwrap();
    let with_unused = |seconds: f64| {
        let kinds: Vec<&str> = w.kinds.iter().map(|k| k.name.as_str()).collect();
        // A demand some box holds: the first observed class's.
        let min = w.classes[0].min_demand.0.clone();
        let row: Vec<String> = min.iter().map(u32::to_string).collect();
        let toml = format!(
            "{replay}\n[[task_types]]\nname = \"unused\"\nweight = 0.001\nmin_demand = {min:?}\nmax_demand = {min:?}\nspeed = {{ model = \"table\", rows = \"type,{},seconds\\nunused,{},{seconds}\\n\" }}\n",
            kinds.join(","),
            row.join(",")
        );
        // `[trace]` must stay the last table: move it after the added type.
        let (head, trace) = toml.split_once("\n[trace]").unwrap();
        let (trace, added) = trace.split_once("\"\"\"\n\n[[task_types]]").unwrap();
        let toml = format!("{head}\n[[task_types]]{added}\n[trace]{trace}\"\"\"\n");
        let sim = Simulator::new(
            Scenario::from_toml(&toml, "twin", None).unwrap_or_else(|e| panic!("{e}\n{toml}")),
        );
        twin::observe(&sim, policies::build(&sim, "tiresias").unwrap(), 100)
            .unwrap()
            .1
    };
    let (a, b) = (with_unused(1.0), with_unused(1000.0));
    assert!(!a.tasks.is_empty());
    assert_eq!(a, b);
}

/// The twin credits no class with a speed-up beyond the most units its tasks ran with: on
/// `hetero6` recorded under `min` (every task at its minimum demand), every class takes as
/// long at its maximum demand on the twin as at its minimum, whatever the estimator's prior
/// says of the units it never saw.
#[test]
fn the_twin_credits_no_units_beyond_what_ran() {
    let sim = Simulator::new(Scenario::load("hetero6").unwrap());
    let (_, w) = twin::observe(&sim, policies::build(&sim, "min").unwrap(), 100).unwrap();
    let sc = Scenario::from_toml(&twin::scenario_toml(&w, "twin").unwrap(), "twin", None).unwrap();
    for (c, t) in w.classes.iter().zip(&sc.types) {
        // The estimator's own figures do credit more units (its prior's shape).
        let rows = &c.speeds[0].rows;
        assert!(
            rows.last().unwrap().1 < rows[0].1 * 0.9,
            "{}: {rows:?}",
            c.name
        );
        let max = t.max_demand.clone().unwrap();
        let at = |a| t.speed.isolated(a, sc.slot_seconds).unwrap().1;
        let (lo, hi) = (at(&t.min_demand), at(&max));
        assert!((hi / lo - 1.0).abs() < 1e-9, "{}: {lo} vs {hi}", t.name);
    }
}

/// A deployment's agents keep their speed estimator from one stretch of work to the next; the
/// twin's agents start from what the cluster's had learned (`twin::warm_estimator`), so the
/// twin replays the policy it was recorded under as it ran. (On this workload, started knowing
/// nothing, the learned policy places `gen-gavel:30002`'s rigid jobs otherwise: 310.8 slots on
/// the twin against 289.8 measured.)
#[test]
fn a_warm_twin_replays_a_warm_cluster() {
    let sim = Simulator::new(Scenario::load("gen-gavel:30002").unwrap());
    let kinds = sim.scenario().kind_names();
    let learned = || policies::learned(&sim, None).unwrap();
    let (_, _, before) = twin::observe_warm(&sim, learned(), 154, None).unwrap();
    let (r, w, _) = twin::observe_warm(&sim, learned(), 104, Some(&before)).unwrap();
    let measured = summarize(&r, &kinds).avg_jct;
    let tw = Simulator::new(
        Scenario::from_toml(&twin::scenario_toml(&w, "twin").unwrap(), "twin", None).unwrap(),
    );
    let warm = twin::warm_estimator(&w, &tw);
    let ps = policies::learned(&tw, None).unwrap();
    let (replayed, _, _) = twin::observe_warm(&tw, ps, 104, Some(&warm)).unwrap();
    let replayed = summarize(&replayed, &tw.scenario().kind_names()).avg_jct;
    eprintln!("gen-gavel:30002 warm: {measured:.2} measured, {replayed:.2} on the warm twin");
    assert!(
        (replayed / measured - 1.0).abs() <= RECORDED,
        "{measured} vs {replayed}"
    );
}

/// A long job measured mostly on a slow GPU model still replays: the twin's table is the
/// fastest model's it has samples on (a Gavel job can take 194,000 slots on a K80, beyond the
/// simulator's horizon, and 8,300 on a V100).
#[test]
fn a_job_too_long_for_its_slowest_model_still_replays() {
    let sim = Simulator::new(Scenario::load("gen-gavel:30002").unwrap());
    let (_, mut w) = twin::observe(&sim, policies::build(&sim, "tiresias").unwrap(), 100).unwrap();
    let c = w
        .classes
        .iter_mut()
        .find(|c| {
            c.speeds
                .iter()
                .filter(|m| m.samples > 0 && m.gpu_model.is_some())
                .count()
                >= 2
        })
        .expect("a class seen on two GPU models");
    // The model it was seen most on, made far slower than the horizon allows.
    let first = c.speeds[0].rows[0].1;
    for r in &mut c.speeds[0].rows {
        r.1 *= 300_000.0 / first;
    }
    let toml = twin::scenario_toml(&w, "twin").unwrap();
    Scenario::from_toml(&toml, "twin", None).unwrap_or_else(|e| panic!("{e}"));
}

/// A long job measured on one slow GPU model only (a Gavel job seen on K80s alone: 102,000
/// slots there, beyond the simulator's horizon) still replays: the twin's table is expressed at
/// the fastest model the estimator has figures for, and the speed it gives on every model is
/// still the estimator's figure for that model.
#[test]
fn a_job_seen_only_on_a_slow_model_replays_at_each_models_figures() {
    let sim = Simulator::new(Scenario::load("gen-gavel:30002").unwrap());
    let (_, mut w) = twin::observe(&sim, policies::build(&sim, "tiresias").unwrap(), 100).unwrap();
    let at = w
        .classes
        .iter()
        .position(|c| c.speeds.iter().filter(|m| m.gpu_model.is_some()).count() >= 2)
        .expect("a class with figures on two GPU models");
    let c = &mut w.classes[at];
    let slow = c.speeds.iter().position(|m| m.gpu_model.is_some()).unwrap();
    for (i, m) in c.speeds.iter_mut().enumerate() {
        if i == slow {
            m.samples = m.samples.max(1);
            let first = m.rows[0].1;
            for r in &mut m.rows {
                r.1 *= 300_000.0 / first;
            }
        } else {
            m.samples = 0;
            // The estimator's guess elsewhere: over three times as fast as the model it saw.
            for r in &mut m.rows {
                r.1 = 90_000.0;
            }
        }
    }
    let figures: Vec<(String, f64)> = c
        .speeds
        .iter()
        .filter_map(|m| Some((m.gpu_model.clone()?, m.rows[0].1)))
        .collect();
    let name = format!("{}-{at}", c.name);
    let toml = twin::scenario_toml(&w, "twin").unwrap();
    let sc = Scenario::from_toml(&toml, "twin", None).unwrap_or_else(|e| panic!("{e}"));
    let ty = sc.types.iter().find(|t| t.name == name).unwrap();
    for (model, slots) in figures {
        let node = sc
            .nodes
            .iter()
            .find(|n| n.gpu_model.as_deref() == Some(model.as_str()))
            .unwrap();
        let got = ty
            .speed
            .isolated_sized(&ty.min_demand, sc.slot_seconds, 1.0 / ty.pace(node))
            .map(|x| x.1);
        if slots <= 100_000.0 {
            let got = got.unwrap_or_else(|| panic!("{model}: beyond the horizon"));
            assert!(
                (got / slots - 1.0).abs() < 1e-3,
                "{model}: {got} vs {slots}"
            );
        } else {
            assert_eq!(got, None, "{model}: {slots} slots is beyond the horizon");
        }
    }
}

/// A class whose long tasks ran on the fast GPU model and short ones on the slow one: from
/// progress alone the estimator takes the sizes for speeds (the slow model looks the faster),
/// and so does a twin built on its figures. Where the tasks declare their work the estimator
/// measures per unit of work, the twin's speed on each model is the true one, and the twin's
/// tasks declare theirs too.
#[test]
fn declared_work_keeps_a_models_speed_apart_from_the_sizes_that_ran_there() {
    let scenario = |declare: bool| {
        let mut rows = String::new();
        for i in 0..6 {
            // Eight mean tasks' work on the V100 box, one on the K80 box (a quarter as fast).
            rows += &format!("{},job,8,v100\n{},job,1,k80\n", i * 3, i * 3 + 1);
        }
        format!(
            r#"name = "confound"
lambda = 0.5
tasks = 12
slot_seconds = 60
max_slots = 100000
declare_work = {declare}
resources = [{{ name = "cpu", unit = "cores" }}, {{ name = "gpu", unit = "GPUs" }}, {{ name = "mem", unit = "GiB" }}]

[[nodes]]
name = "fast"
capacity = [8, 1, 64]
gpu_model = "v100"
labels = ["v100"]

[[nodes]]
name = "slow"
capacity = [8, 1, 64]
gpu_model = "k80"
labels = ["k80"]

[[task_types]]
name = "job"
min_demand = [1, 1, 1]
max_demand = [1, 1, 1]
speed = {{ model = "table", rows = "type,cpu,gpu,mem,seconds\njob,1,1,1,600\n" }}
gpu_speed = {{ "k80" = 0.25 }}

[trace]
rows = """
arrival,type,size,require
{rows}"""
"#
        )
    };
    // The twin's speed on the K80 box relative to the V100 box's, and the twin's scenario.
    let k80_over_v100 = |declare: bool| {
        let sc = Scenario::from_toml(&scenario(declare), "confound", None).unwrap();
        let sim = Simulator::new(sc);
        let (_, w) = twin::observe(&sim, policies::build(&sim, "tiresias").unwrap(), 100).unwrap();
        assert_eq!(w.tasks.iter().all(|t| t.work.is_some()), declare);
        let toml = twin::scenario_toml(&w, "twin").unwrap();
        let sc = Scenario::from_toml(&toml, "twin", None).unwrap_or_else(|e| panic!("{e}"));
        let ty = &sc.types[0];
        let pace = |model: &str| {
            let node = sc
                .nodes
                .iter()
                .find(|n| n.gpu_model.as_deref() == Some(model));
            ty.pace(node.unwrap())
        };
        (pace("k80") / pace("v100"), sc.declare_work)
    };
    let (undeclared, twin_declares) = k80_over_v100(false);
    assert!(!twin_declares);
    assert!(
        undeclared > 1.0,
        "from progress alone the slow model should look the faster here: {undeclared}"
    );
    let (declared, twin_declares) = k80_over_v100(true);
    assert!(twin_declares, "the twin's tasks declare their work too");
    assert!(
        (declared / 0.25 - 1.0).abs() < 0.02,
        "the K80's speed over the V100's on the twin: {declared}, truly 0.25"
    );
}

/// Gangs are in the twin: each observed gang is a gang of the twin's trace, with its shape and
/// the work its runs measured, on the cluster's links; replayed under the policy it was
/// recorded under, every gang runs and the gangs' average JCT on the twin holds within
/// [`RECORDED`] of the original's (measured at 4× the preset's arrivals: 4.50 and 4.58 slots).
/// Not asserted: under another policy the single tasks beside them (elastic jobs) carry the
/// elastic twin's error (`drf`: 2.53 slots on the original, 4.13 on the twin with no gangs at
/// all, the twin crediting no units beyond what ran), and the gangs wait behind them.
#[test]
fn the_twin_replays_the_gangs_it_observed() {
    // Four times the preset's arrivals: gangs wait for room, so their placement varies.
    let text = include_str!("../presets/gang-edge.toml").replace("lambda = 1.0", "lambda = 4.0");
    let sim = Simulator::new(Scenario::from_toml(&text, "gang-edge", None).unwrap());
    let (_, w) = twin::observe(&sim, policies::build(&sim, "tiresias").unwrap(), 100).unwrap();
    let w: tapfinger::twin::Workload =
        serde_json::from_str(&serde_json::to_string(&w).unwrap()).unwrap();
    let gangs = w.tasks.iter().filter(|t| t.gang.is_some()).count();
    assert!(gangs >= 10, "{gangs} gangs observed of {}", w.tasks.len());
    assert!(w.links.is_some());
    let toml = twin::scenario_toml(&w, "twin").unwrap();
    let twin_sim = Simulator::new(
        Scenario::from_toml(&toml, "twin", None).unwrap_or_else(|e| panic!("{e}\n{toml}")),
    );
    let trace = twin_sim.scenario().trace.as_ref().unwrap();
    assert_eq!(trace.iter().filter(|t| t.gang.is_some()).count(), gangs);
    // The twin recorded under tiresias, replayed under it: the episode's own run of it is `orig`.
    let orig = sim
        .run(policies::build(&sim, "tiresias").unwrap(), 100)
        .unwrap();
    let again = twin_sim
        .run(policies::build(&twin_sim, "tiresias").unwrap(), 100)
        .unwrap();
    let gang_jcts = |r: &tapfinger_sim::EpisodeResult| -> Vec<f64> {
        r.tasks
            .iter()
            .filter(|t| t.members > 0)
            .map(|t| t.jct as f64)
            .collect()
    };
    let (go, gt) = (gang_jcts(&orig), gang_jcts(&again));
    assert_eq!(go.len(), gt.len(), "gangs that ran");
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let kinds = sim.scenario().kind_names();
    eprintln!(
        "gang-edge under tiresias: {:.2} on the original, {:.2} on the twin; gangs {:.2} and {:.2}",
        summarize(&orig, &kinds).avg_jct,
        summarize(&again, &kinds).avg_jct,
        mean(&go),
        mean(&gt)
    );
    assert!(
        (mean(&gt) / mean(&go) - 1.0).abs() <= RECORDED,
        "gangs {go:?} vs {gt:?}"
    );
}

/// A twin of recurring jobs carries who submitted each task and its job (`submitter`, `job`
/// in its trace) and starts its agents from the size book the cluster exported
/// (`twin::warm_sizes`), so that a size-aware policy judged on it reads the job histories the
/// cluster's agents had; without the book it starts from nothing. The size-aware baselines
/// then schedule the twin otherwise.
#[test]
fn the_twin_carries_identities_and_the_size_history() {
    use tapfinger::sizes::Level;
    let sim = Simulator::new(Scenario::load("gen-recur:10001").unwrap());
    let (_, w) =
        twin::observe(&sim, policies::build(&sim, "tiresias-share").unwrap(), 100).unwrap();
    let w: tapfinger::twin::Workload =
        serde_json::from_str(&serde_json::to_string(&w).unwrap()).unwrap();
    assert!(
        w.tasks.iter().all(|t| t.identity.is_some()),
        "a task lost its identity"
    );
    let book = w
        .sizes
        .as_ref()
        .expect("the workload carries the size book");
    assert!(book.keys(Level::Job) > 0);
    let toml = twin::scenario_toml(&w, "twin").unwrap();
    assert!(toml.contains(",submitter,job"), "{toml}");
    let sc = Scenario::from_toml(&toml, "twin", None).unwrap();
    let cold = Simulator::new(sc.clone());
    let warm = Simulator::new(sc).with_sizes(twin::warm_sizes(&w).unwrap());
    // The first decision views: the warm twin predicts from the jobs' histories, the cold one
    // knows no size yet.
    #[derive(Default)]
    struct First(Vec<tapfinger::view::ClusterView>);
    impl tapfinger_sim::env::Observer for First {
        fn wants_views(&self) -> bool {
            true
        }
        fn decision_view(&mut self, v: &tapfinger::view::ClusterView) {
            if v.slot == 0 {
                self.0.push(v.clone());
            }
        }
    }
    let levels = |s: &Simulator| {
        let mut f = First::default();
        s.run_observed(policies::build(s, "tiresias-share").unwrap(), 100, &mut f)
            .unwrap();
        assert!(!f.0.is_empty());
        f.0.iter()
            .flat_map(|v| &v.pending)
            .map(|p| p.size.as_ref().map(|p| p.level))
            .collect::<Vec<_>>()
    };
    assert!(levels(&cold).iter().all(Option::is_none));
    let warm_levels = levels(&warm);
    assert!(warm_levels.contains(&Some(Level::Job)), "{warm_levels:?}");
    let jct = |s: &Simulator| {
        let r = s
            .run(policies::build(s, "shortest-predicted").unwrap(), 100)
            .unwrap();
        summarize(&r, &s.scenario().kind_names()).avg_jct
    };
    assert_ne!(jct(&cold), jct(&warm), "the history changed no schedule");
}
