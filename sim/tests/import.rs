//! `tapfinger-sim import` on a small sample of every trace format: what is kept and what is left
//! out (and why), GPU-model constraints carried to the replay, bad rows named by line and column,
//! and the imported scenario replayed by the simulator with every task finishing.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use tapfinger_sim::Scenario;
use tapfinger_sim::import::{ImportError, ImportOptions, import};

fn sample(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/traces")
            .join(name),
    )
    .unwrap()
}

fn opts(format: &str) -> ImportOptions {
    ImportOptions {
        format: format.into(),
        slot_seconds: 60.0,
        compress: 1.0,
        limit: 2000,
        steps_per_second: 10.0,
        cluster: None,
        name: format!("imported-{format}"),
    }
}

/// Import, load the scenario, and replay it with a baseline: every task finishes.
fn replay(format: &str, file: &str) -> (tapfinger_sim::import::Imported, Scenario) {
    let r = import(&sample(file), &opts(format)).unwrap();
    let sc = Scenario::from_toml(&r.toml, format, None).unwrap();
    assert_eq!(sc.tasks as usize, r.tasks);
    let sim = tapfinger_sim::Simulator::new(sc.clone());
    let e = tapfinger_sim::report::run_one_with(&sim, "tiresias", 100, None).unwrap();
    assert_eq!(e.tasks.len(), r.tasks, "{format}: every task finishes");
    (r, sc)
}

fn skipped(r: &tapfinger_sim::import::Imported, why: &str) -> usize {
    r.skipped
        .iter()
        .find(|(w, _)| w.contains(why))
        .map_or(0, |(_, n)| *n)
}

#[test]
fn alibaba_2020_keeps_finished_instances_and_their_gpu_models() {
    let (r, sc) = replay("alibaba-2020", "pai_task_table.csv");
    // j1, two instances of j2, j3, j5 and j7; not the running, failed, zero-length or huge ones.
    assert_eq!(r.tasks, 6);
    assert_eq!(skipped(&r, "not Terminated"), 2);
    assert_eq!(skipped(&r, "not positive"), 1);
    assert_eq!(skipped(&r, "fits no box"), 1);
    // GPU boxes carry the trace's models, most frequent first.
    let labels: Vec<Vec<String>> = sc.nodes.iter().map(|n| n.labels.clone()).collect();
    assert_eq!(
        labels[4..],
        [
            vec!["V100".to_string()],
            vec!["T4".into()],
            vec!["V100".into()],
            vec!["T4".into()]
        ]
    );
    // A task asking for a T4 may only run on T4 boxes; a CPU task anywhere.
    let trace = sc.trace.as_ref().unwrap();
    let t4 = trace.iter().position(|t| t.require == ["T4"]).unwrap();
    let tasks = tapfinger_sim::workload::generate(&sc, 0);
    let names: Vec<&str> = tasks[t4]
        .reachable
        .iter()
        .map(|n| sc.nodes[n.0 as usize].name.as_str())
        .collect();
    assert_eq!(names, ["gpu-1", "gpu-3"]);
    // Half a GPU asks for a whole one (GPU shares are whole devices), 600% of a core for 6.
    assert_eq!(tasks[t4].min_demand.0, vec![6, 1, 30]);
    // j1 ran 3600 s at slot 0 (the first arrival); sizes are durations over their class median.
    assert_eq!(tasks[0].arrival, 0);
    assert!(trace.iter().all(|t| t.size > 0.0));
}

#[test]
fn alibaba_2023_reads_gpu_shares_and_alternative_models() {
    let (r, sc) = replay("alibaba-2023", "openb_pod_list.csv");
    assert_eq!(r.tasks, 4);
    assert_eq!(skipped(&r, "never scheduled or never deleted"), 1);
    let trace = sc.trace.as_ref().unwrap();
    assert!(trace.iter().any(|t| t.require == ["V100M16", "V100M32"]));
    let tasks = tapfinger_sim::workload::generate(&sc, 0);
    let i = trace.iter().position(|t| t.require.len() == 2).unwrap();
    let on: Vec<&[String]> = tasks[i]
        .reachable
        .iter()
        .map(|n| &sc.nodes[n.0 as usize].labels[..])
        .collect();
    assert!(
        !on.is_empty() && on.iter().all(|l| l[0].starts_with("V100")),
        "{on:?}"
    );
}

#[test]
fn philly_takes_the_last_attempt() {
    let (r, sc) = replay("philly", "cluster_job_log.json");
    assert_eq!(r.tasks, 2);
    assert_eq!(skipped(&r, "no attempt"), 1);
    assert_eq!(skipped(&r, "without start or end"), 1);
    let tasks = tapfinger_sim::workload::generate(&sc, 0);
    // The second job's last attempt held 1 + 3 GPUs on two machines.
    assert_eq!(tasks[1].min_demand.get(1), 4);
    // Submitted 281 s after the first (slots of 60 s).
    assert_eq!(tasks[1].arrival, 4);
}

#[test]
fn helios_and_gavel_import_and_replay() {
    let (r, _) = replay("helios", "cluster_log.csv");
    assert_eq!(r.tasks, 3);
    assert_eq!(skipped(&r, "fits no box"), 1);
    let (r, sc) = replay("gavel", "gavel_jobs.tsv");
    assert_eq!(r.tasks, 4);
    // Two ResNet-18 jobs share a class; 36000 and 72000 steps: sizes in ratio 1:2.
    let trace = sc.trace.as_ref().unwrap();
    assert_eq!(trace[0].ty, trace[2].ty);
    assert!((trace[2].size / trace[0].size - 2.0).abs() < 1e-3);
}

#[test]
fn time_compression_packs_the_arrivals() {
    let slow = import(&sample("cluster_log.csv"), &opts("helios")).unwrap();
    let mut o = opts("helios");
    o.compress = 10.0;
    let fast = import(&sample("cluster_log.csv"), &o).unwrap();
    let last = |r: &tapfinger_sim::import::Imported| {
        let sc = Scenario::from_toml(&r.toml, "t", None).unwrap();
        sc.trace.unwrap().last().unwrap().arrival
    };
    assert_eq!(last(&slow), 29);
    assert_eq!(last(&fast), 2);
}

#[test]
fn a_bad_row_is_named_by_line_and_column() {
    let text = sample("cluster_log.csv").replace(",1200,60", ",twenty,60");
    let e = import(&text, &opts("helios")).unwrap_err();
    assert!(
        matches!(&e, ImportError::Row { line: 6, column, .. } if column == "duration"),
        "{e}"
    );
    assert!(e.to_string().starts_with("line 6, column duration:"), "{e}");
    let text = sample("pai_task_table.csv").replace("1000,4600", "1000,x");
    let e = import(&text, &opts("alibaba-2020")).unwrap_err();
    assert_eq!(
        e.to_string().split(':').next(),
        Some("line 2, column end_time")
    );
    let text = sample("cluster_job_log.json").replace("2017-10-03 02:40:00", "yesterday");
    let e = import(&text, &opts("philly")).unwrap_err();
    assert!(
        e.to_string().starts_with("job 2, field submitted_time"),
        "{e}"
    );
    let e = import("{", &opts("philly")).unwrap_err();
    assert!(e.to_string().starts_with("line 1, column"), "{e}");
    assert!(matches!(
        import("", &opts("slurm")),
        Err(ImportError::Format(_))
    ));
    // A scenario's trace row is checked too, with its line and column.
    let r = import(&sample("cluster_log.csv"), &opts("helios")).unwrap();
    let bad = r.toml.replacen(",c0,", ",nope,", 1);
    let e = Scenario::from_toml(&bad, "t", None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("column type") && e.contains("nope"), "{e}");
}

#[test]
fn the_cli_writes_a_scenario_that_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pai.toml");
    let bin = env!("CARGO_BIN_EXE_tapfinger-sim");
    let trace = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/traces/pai_task_table.csv");
    let o = std::process::Command::new(bin)
        .args(["import", "--format", "alibaba-2020", "--out"])
        .arg(&out)
        .arg(&trace)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("imported 6 tasks") && err.contains("left out 2: status is not Terminated"),
        "{err}"
    );
    let o = std::process::Command::new(bin)
        .args(["run", "--policy", "tiresias", "--scenario"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
