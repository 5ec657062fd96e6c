//! The command line: bad input gets a clear message and a non-zero exit; the JSON of
//! `compare --json` keeps the names scripts rely on.

// Test helpers may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

mod common;
use common::{BASE, Scratch, fails_with, sim};

#[test]
fn bad_input_is_a_clear_error() {
    let scratch = Scratch::new();
    fails_with(&["run", "--scenario", "nope"], "unknown scenario \"nope\"");
    fails_with(
        &["run", "--scenario", "synthetic3", "--policy", "magic"],
        "unknown policy \"magic\"",
    );
    fails_with(
        &[
            "compare",
            "--scenario",
            "synthetic3",
            "--policies",
            "random,magic",
        ],
        "unknown policy \"magic\"",
    );
    let cases = [
        (
            "neg.toml",
            BASE.replace("capacity = [16, 16]", "capacity = [-1, 16]"),
            "nodes[0].capacity: cpu is -1",
        ),
        (
            "big.toml",
            BASE.replacen("min_demand = [2, 1]", "min_demand = [99, 1]", 1),
            "larger than every node",
        ),
        (
            "lambda.toml",
            BASE.replace("lambda = 2.0", "lambda = 0"),
            "lambda",
        ),
        (
            "syntax.toml",
            BASE.replace("lambda = 2.0", "lambda = = 2"),
            "line",
        ),
        (
            "empty.toml",
            format!(
                "nodes = []\n{}{}",
                &BASE[..BASE.find("[[nodes]]").unwrap()],
                &BASE[BASE.find("[[task_types]]").unwrap()..]
            ),
            "cluster is empty",
        ),
    ];
    for (file, text, needle) in cases {
        let p = scratch.write(file, &text);
        fails_with(&["run", "--scenario", p.to_str().unwrap()], needle);
    }
    // A table scenario whose CSV misses a configuration.
    scratch.write("t.csv", "type,cpu,gpu,seconds\nA,1,1,10\nA,2,2,5\n");
    let toml = r#"
name = "t"
lambda = 1.0
tasks = 5
[[resources]]
name = "cpu"
[[resources]]
name = "gpu"
[[nodes]]
name = "n"
capacity = [2, 2]
[[task_types]]
name = "A"
min_demand = [1, 1]
speed = { model = "table", csv = "t.csv" }
"#;
    let p = scratch.write("table.toml", toml);
    fails_with(
        &["run", "--scenario", p.to_str().unwrap()],
        "configuration(s) missing",
    );
    fails_with(&["compare", "--seeds", "0"], "at least 1");
}

#[test]
fn a_table_scenario_runs_from_a_file() {
    let scratch = Scratch::new();
    scratch.write(
        "full.csv",
        "type,cpu,gpu,seconds\nA,1,1,10\nA,1,2,6\nA,2,1,7\nA,2,2,4\n",
    );
    let toml = r#"
name = "t"
lambda = 1.0
tasks = 20
slot_seconds = 2.0
[[resources]]
name = "cpu"
[[resources]]
name = "gpu"
[[nodes]]
name = "n"
capacity = [4, 4]
count = 2
[[task_types]]
name = "A"
min_demand = [1, 1]
speed = { model = "table", csv = "full.csv", startup_seconds = 1.0 }
"#;
    let p = scratch.write("full.toml", toml);
    let (ok, out, err) = sim(&[
        "run",
        "--scenario",
        p.to_str().unwrap(),
        "--policy",
        "first-fit-max",
        "--csv",
    ]);
    assert!(ok, "{err}");
    // 20 tasks, and with (2,2) a task needs (4 + 1) s / 2 s per slot → 3 slots at best.
    assert_eq!(out.lines().count(), 21, "{out}");
    assert!(
        out.lines()
            .skip(1)
            .all(|l| l.split(',').nth(7) == Some("3")),
        "{out}"
    );
}

#[test]
fn compare_json_has_the_documented_shape() {
    let (ok, out, err) = sim(&[
        "compare",
        "--scenario",
        "synthetic3",
        "--policies",
        "tiresias,min",
        "--seeds",
        "2",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["scenario"], "synthetic3");
    // Unseen seeds by default (those below 100 are for development).
    assert_eq!(v["seeds"], serde_json::json!([100, 101]));
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for r in results {
        for key in [
            "policy",
            "avg_jct",
            "median_jct",
            "p95_jct",
            "p99_jct",
            "makespan",
            "lower_bound_jct",
        ] {
            assert!(r.get(key).is_some(), "missing {key} in {r}");
        }
        assert!(r["utilization"]["cpu"].as_f64().unwrap() > 0.0);
        assert!(r["avg_jct"].as_f64().unwrap() >= r["lower_bound_jct"].as_f64().unwrap());
    }
    assert_eq!(results[0]["policy"], "tiresias");
    assert_eq!(results[0]["published_avg_jct"], 14.66);
}

#[test]
fn plots_and_listing() {
    let (ok, out, _) = sim(&["scenarios"]);
    assert!(ok);
    for p in [
        "synthetic3",
        "synthetic6-l2",
        "synthetic6-l3",
        "synthetic6-l4",
        "hetero6",
        "multitask3",
        "edge-synergy",
    ] {
        assert!(out.contains(p), "{p} not listed");
    }
    let scratch = Scratch::new();
    let dir = scratch.path().join("plots");
    let (ok, _, err) = sim(&[
        "compare",
        "--scenario",
        "synthetic3",
        "--policies",
        "random",
        "--seeds",
        "1",
        "--plot",
        dir.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    for f in [
        "jct_cdf.svg",
        "tasks_in_system.svg",
        "utilization_cpu.svg",
        "utilization_gpu.svg",
    ] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        assert!(text.starts_with("<svg") && text.contains("random"), "{f}");
    }
}

#[test]
fn the_shipped_model_is_the_default_and_beats_the_baselines_on_hetero6() {
    let scratch = Scratch::new();
    // `compare` with no --policies puts the learned policy first where a model ships.
    let (ok, out, err) = sim(&["compare", "--scenario", "hetero6", "--seeds", "1", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["results"][0]["policy"], "tapfinger");
    // The shipped hetero6 model against the two strongest baselines over the README's 5 seeds
    // (deterministic: this pins the shipped weights' quality, it is not a timing).
    let (ok, out, err) = sim(&[
        "compare",
        "--scenario",
        "hetero6",
        "--policies",
        "tapfinger,optimus,tiresias",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let jct = |i: usize| v["results"][i]["avg_jct"].as_f64().unwrap();
    assert!(jct(0) <= 4.5, "TapFinger on hetero6: {}", jct(0));
    assert!(jct(0) < jct(1) && jct(0) < jct(2), "{out}");
    // Generalization: the hetero6 model on a 3-agent cluster still beats the baselines there.
    let model = format!("{}/../shared/models/hetero6", env!("CARGO_MANIFEST_DIR"));
    let (ok, out, err) = sim(&[
        "compare",
        "--scenario",
        "hetero3",
        "--policies",
        "tapfinger,optimus,tiresias",
        "--model",
        &model,
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let jct = |i: usize| v["results"][i]["avg_jct"].as_f64().unwrap();
    assert!(jct(0) < jct(1) && jct(0) < jct(2), "{out}");
    // A `LABEL=PATH` policy whose model is missing names the path.
    let (ok, _, err) = sim(&[
        "run",
        "--scenario",
        "synthetic3",
        "--policy",
        "mine=/no/such/model",
    ]);
    assert!(!ok && err.contains("/no/such/model"), "{err}");
    let toml = r#"
name = "custom"
lambda = 1.0
tasks = 5
[[resources]]
name = "gpu"
[[nodes]]
name = "n"
capacity = [4]
[[task_types]]
name = "A"
min_demand = [1]
speed = { model = "synthetic", w = [0.25], b = 0.0 }
"#;
    let p = scratch.write("custom.toml", toml);
    // A scenario without a model of its own gets the shipped general model, also by default.
    let (ok, out, err) = sim(&["run", "--scenario", p.to_str().unwrap(), "--json"]);
    assert!(ok, "{err}");
    assert!(out.contains("\"policy\": \"tapfinger\""), "{out}");
}

#[test]
fn a_generated_scenario_prints_saves_and_runs() {
    let scratch = Scratch::new();
    let (ok, text, err) = sim(&["generate", "--seed", "10007"]);
    assert!(ok, "{err}");
    assert!(text.contains("name = \"gen:10007\""), "{text}");
    assert!(text.contains("Held out"), "seeds from 10000 up say so");
    // The printed TOML is a scenario file like any other, and `gen:N` names the same scenario.
    let path = scratch.write("generated.toml", &text);
    let from_file = sim(&[
        "run",
        "--scenario",
        path.to_str().unwrap(),
        "--policy",
        "tiresias",
    ]);
    let by_name = sim(&["run", "--scenario", "gen:10007", "--policy", "tiresias"]);
    assert!(from_file.0 && by_name.0, "{} {}", from_file.2, by_name.2);
    assert_eq!(from_file.1, by_name.1);
    fails_with(&["run", "--scenario", "gen:twelve"], "gen:SEED");
    // The wide family: its own name, the same way to print, save and run.
    let (ok, wide, err) = sim(&["generate", "--family", "wide", "--seed", "10007"]);
    assert!(ok, "{err}");
    assert!(wide.contains("name = \"gen-wide:10007\""), "{wide}");
    assert_ne!(wide, text);
    let by_name = sim(&[
        "run",
        "--scenario",
        "gen-wide:10007",
        "--policy",
        "tiresias",
    ]);
    assert!(by_name.0, "{}", by_name.2);
    fails_with(&["generate", "--family", "huge", "--seed", "1"], "huge");
}

#[test]
fn suite_json_has_the_documented_shape_and_judges_against_the_best_baseline() {
    // The suite of Random on generator seeds `seeds` of `family`, one workload each, as JSON.
    let suite = |seeds: &str, family: &str| -> serde_json::Value {
        let (ok, text, err) = sim(&[
            "suite",
            "--generator-seeds",
            seeds,
            "--family",
            family,
            "--seeds",
            "1",
            "--candidate",
            "random",
            "--json",
        ]);
        assert!(ok, "{err}");
        serde_json::from_str(&text).unwrap()
    };
    let v = suite("3..6", "base");
    let scenarios = v["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 3);
    for s in scenarios {
        for key in ["generator_seed", "nodes", "classes", "load", "results"] {
            assert!(!s[key].is_null(), "{key} missing in {s}");
        }
        let results = s["results"].as_array().unwrap();
        assert_eq!(results[0]["policy"], "random", "the candidate comes first");
        // The ratio is to the best non-clairvoyant policy other than the candidate.
        let best = results[1..]
            .iter()
            .filter(|r| r["clairvoyant"] == false)
            .map(|r| r["avg_jct"].as_f64().unwrap())
            .fold(f64::INFINITY, f64::min);
        let ratio = s["ratio"].as_f64().unwrap();
        let want = results[0]["avg_jct"].as_f64().unwrap() / best;
        assert!((ratio - want).abs() < 1e-9, "{ratio} vs {want}");
        assert!(results.iter().any(|r| r["clairvoyant"] == true));
        // The floor is a lower bound: no policy (the clairvoyant reference included) beats it.
        let bound = s["lower_bound_jct"].as_f64().unwrap();
        assert!(bound > 0.0);
        assert!((s["bound_ratio"].as_f64().unwrap() - bound / best).abs() < 1e-9);
        // The pooled floor counts the queue too: never below the isolated one, and no policy
        // beats it either.
        let pooled = s["pooled_bound_jct"].as_f64().unwrap();
        assert!(pooled >= bound - 1e-9, "{pooled} below {bound}");
        assert!((s["pooled_ratio"].as_f64().unwrap() - pooled / best).abs() < 1e-9);
        for r in results {
            assert!(
                r["avg_jct"].as_f64().unwrap() >= pooled - 1e-9,
                "{r} below {pooled}"
            );
        }
    }
    let sum = &v["summary"];
    assert_eq!(sum["family"], "base");
    assert!(sum["mean_bound_ratio"].as_f64().unwrap() > 0.0);
    assert!(
        sum["mean_pooled_ratio"].as_f64().unwrap()
            >= sum["mean_bound_ratio"].as_f64().unwrap() - 1e-9
    );
    assert_eq!(sum["scenarios"], 3);
    assert!(sum["wins"].as_u64().unwrap() <= 3);
    assert!(sum["mean_ratio_to_best_baseline"].as_f64().unwrap() > 0.0);
    assert_eq!(suite("3..4", "wide")["summary"]["family"], "wide");
    // The table's first column names the family its seeds are of.
    let (ok, table, err) = sim(&[
        "suite",
        "--generator-seeds",
        "3..4",
        "--family",
        "wide",
        "--seeds",
        "1",
        "--candidate",
        "random",
    ]);
    assert!(ok, "{err}");
    assert!(table.trim_start().starts_with("gen-wide "), "{table}");
    fails_with(
        &["suite", "--generator-seeds", "5..5"],
        "the range is empty",
    );
    fails_with(&["suite", "--generator-seeds", "ten"], "expected A..B");
    fails_with(
        &["suite", "--generator-seeds", "0..1", "--candidate", "magic"],
        "unknown policy \"magic\"",
    );
    // The failing scenario is named with its family.
    fails_with(
        &[
            "suite",
            "--family",
            "wide",
            "--generator-seeds",
            "3..4",
            "--candidate",
            "magic",
        ],
        "scenario gen-wide:3",
    );
    // A folder of scenario files: each one a scenario, named by its file, with the spread.
    let scratch = Scratch::new();
    let dir = scratch.path().join("suite-files");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, seed) in [("a", "3"), ("b", "4")] {
        let (ok, text, err) = sim(&["generate", "--seed", seed]);
        assert!(ok, "{err}");
        std::fs::write(dir.join(format!("{name}.toml")), text).unwrap();
    }
    std::fs::write(dir.join("notes.txt"), "not a scenario").unwrap();
    let (ok, text, err) = sim(&[
        "suite",
        "--scenarios",
        dir.to_str().unwrap(),
        "--seeds",
        "2",
        "--candidate",
        "random",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let scenarios = v["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 2);
    assert!(
        scenarios[0]["scenario"]
            .as_str()
            .unwrap()
            .ends_with("a.toml")
    );
    assert!(scenarios[0]["generator_seed"].is_null());
    assert_eq!(scenarios[0]["ratio_by_seed"].as_array().unwrap().len(), 2);
    assert_eq!(
        v["summary"]["mean_ratio_by_seed"].as_array().unwrap().len(),
        2
    );
    assert!(v["summary"]["family"].is_null());
    // The like-for-like baseline is among those judged.
    let results = scenarios[0]["results"].as_array().unwrap();
    assert!(results.iter().any(|r| r["policy"] == "tiresias-share"));
    fails_with(
        &["suite", "--scenarios", "/nonexistent-dir"],
        "cannot read the folder",
    );
}

#[test]
fn priority_classes_show_a_column_each_and_the_blind_run_and_a_baseline_placing_gangs_are_handled()
{
    let run = |blind: bool| {
        let mut args = vec![
            "run",
            "--scenario",
            "priority-edge",
            "--policy",
            "first-fit-max",
            "--seed",
            "100",
            "--json",
        ];
        if blind {
            args.push("--priority-blind");
        }
        let (ok, out, err) = sim(&args);
        assert!(ok, "{err}");
        out
    };
    let out = run(false);
    assert!(out.contains("\"class_avg_jct\""), "{out}");
    let class0 = |out: &str| -> f64 {
        let v: serde_json::Value = serde_json::from_str(out).unwrap();
        v["summary"]["class_avg_jct"]["0"].as_f64().unwrap()
    };
    let blind = run(true);
    assert!(class0(&blind) > 2.0 * class0(&out), "{out}\n{blind}");
    // A placer name that is none of the placers is no policy either.
    let (ok, _, err) = sim(&[
        "compare",
        "--scenario",
        "gang-edge",
        "--seeds",
        "1",
        "--policies",
        "optimus+policy",
    ]);
    assert!(!ok);
    assert!(err.contains("optimus+policy"), "{err}");
}

/// `--start-weight` slows every run's first slot in the scenarios run (a preset's and the
/// generated ones'), is stated in the suite's summary, and is refused outside (0, 1].
#[test]
fn start_weight_slows_first_slots_everywhere_and_is_checked() {
    let jct = |extra: &[&str]| -> f64 {
        let mut args = vec![
            "compare",
            "--scenario",
            "synthetic3",
            "--seeds",
            "2",
            "--policies",
            "first-fit-max",
            "--json",
        ];
        args.extend_from_slice(extra);
        let (ok, text, err) = sim(&args);
        assert!(ok, "{err}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["results"][0]["avg_jct"].as_f64().unwrap()
    };
    assert!(jct(&["--start-weight", "0.3"]) > jct(&[]));
    let suite = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "suite",
            "--generator-seeds",
            "3..5",
            "--seeds",
            "1",
            "--candidate",
            "tiresias",
            "--json",
        ];
        args.extend_from_slice(extra);
        let (ok, text, err) = sim(&args);
        assert!(ok, "{err}");
        serde_json::from_str(&text).unwrap()
    };
    let (plain, slowed) = (suite(&[]), suite(&["--start-weight", "0.3"]));
    assert!(plain["summary"]["start_weight"].is_null());
    assert_eq!(slowed["summary"]["start_weight"], 0.3);
    let first =
        |v: &serde_json::Value| v["scenarios"][0]["results"][0]["avg_jct"].as_f64().unwrap();
    assert!(first(&slowed) > first(&plain));
    for bad in ["0", "1.5", "x"] {
        fails_with(
            &["run", "--scenario", "synthetic3", "--start-weight", bad],
            "--start-weight",
        );
    }
}

/// `run --json` ends with what the speed estimator held of each class, in the fields an
/// agent's `GET /v1/classes` gives.
#[test]
fn run_json_shows_the_estimator_s_classes() {
    let (ok, text, err) = sim(&[
        "run",
        "--scenario",
        "synthetic3",
        "--policy",
        "tiresias",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let classes = v["estimates"].as_array().unwrap();
    assert!(!classes.is_empty(), "{}", v["estimates"]);
    for c in classes {
        for key in [
            "class",
            "samples",
            "hints",
            "min",
            "fitted",
            "slots_at_min",
            "slots_at_double",
            "switch_cost",
            "start_cost",
        ] {
            assert!(!c[key].is_null(), "{key} missing in {c}");
        }
        assert!(
            c["fitted"] == true && c["samples"].as_u64().unwrap() > 0,
            "{c}"
        );
        assert!(
            c["slots_at_double"].as_f64() <= c["slots_at_min"].as_f64(),
            "{c}"
        );
    }
}
