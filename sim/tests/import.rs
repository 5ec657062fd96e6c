//! `tapfinger-sim import` on a small sample of every trace format: what is kept and what is left
//! out (and why, with counts that add up), GPU-model constraints carried to the replay, bad rows
//! named by line and column, the trace's window, load and slot length, and the imported scenario
//! replayed by the simulator with every task finishing.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use tapfinger_sim::Scenario;
use tapfinger_sim::import::{ClusterChoice, ImportError, ImportOptions, Imported, Knobs, import};

fn sample(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/traces")
            .join(name),
    )
    .unwrap()
}

fn opts(format: &str) -> ImportOptions {
    ImportOptions::new(format, &format!("imported-{format}"))
}

/// Every entry read is imported or counted under one reason.
fn adds_up(r: &Imported) {
    let left: usize = r.skipped.iter().map(|(_, n)| n).sum();
    assert_eq!(r.tasks + left, r.entries, "{:?}", r.skipped);
}

/// Import, load the scenario, and replay it with a baseline: every task finishes.
fn replay(format: &str, file: &str) -> (Imported, Scenario) {
    replay_with(file, &opts(format))
}

fn replay_with(file: &str, o: &ImportOptions) -> (Imported, Scenario) {
    let format = o.format.as_str();
    let r = import(&sample(file), o).unwrap();
    adds_up(&r);
    let sc = Scenario::from_toml(&r.toml, format, None).unwrap();
    assert_eq!(sc.tasks as usize, r.tasks);
    let sim = tapfinger_sim::Simulator::new(sc.clone());
    let e = tapfinger_sim::report::run_one_with(&sim, "tiresias", 100, None).unwrap();
    assert_eq!(e.tasks.len(), r.tasks, "{format}: every task finishes");
    (r, sc)
}

fn skipped(r: &Imported, why: &str) -> usize {
    r.skipped
        .iter()
        .find(|(w, _)| w.contains(why))
        .map_or(0, |(_, n)| *n)
}

#[test]
fn alibaba_2020_keeps_finished_instances_and_their_gpu_models() {
    let (r, sc) = replay("alibaba-2020", "pai_task_table.csv");
    // j1, two instances of j2, j3, j5, j7 and j9; not the running, failed or zero-length ones.
    assert_eq!((r.entries, r.tasks), (10, 7));
    assert_eq!(skipped(&r, "not Terminated"), 2);
    assert_eq!(skipped(&r, "not positive"), 1);
    // The built-in cluster is sized to hold j9 (96 cores, 8 GPUs, 500 GB).
    assert_eq!(skipped(&r, "fits no box"), 0);
    let mut o = opts("alibaba-2020");
    o.cluster = ClusterChoice::BuiltIn(Knobs {
        gpus_per_box: Some(4),
        ..Knobs::default()
    });
    let small = import(&sample("pai_task_table.csv"), &o).unwrap();
    adds_up(&small);
    assert_eq!(skipped(&small, "fits no box"), 1);
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
fn alibaba_2023_reads_phases_gpu_shares_and_alternative_models() {
    let (r, sc) = replay("alibaba-2023", "openb_pod_list.csv");
    assert_eq!((r.entries, r.tasks), (9, 5));
    assert_eq!(skipped(&r, "pod_phase Failed"), 1);
    assert_eq!(skipped(&r, "never scheduled (Pending)"), 1);
    assert_eq!(skipped(&r, "still running when the trace ends"), 2);
    // The built-in cluster holds the 8-GPU pod.
    assert!(
        sc.nodes.iter().any(|n| n.capacity.get(1) == 8),
        "{:?}",
        sc.nodes
    );
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
    // Whole devices by default: half a GPU asks for one.
    let half = tasks.iter().find(|t| t.min_demand.get(0) == 6).unwrap();
    assert_eq!(half.min_demand.get(1), 1);
}

#[test]
fn alibaba_2023_keeps_gpu_fractions_where_the_unit_allows() {
    let mut o = opts("alibaba-2023");
    o.gpu_step = Some(0.25);
    let (r, sc) = replay_with("openb_pod_list.csv", &o);
    assert_eq!(r.tasks, 5);
    let tasks = tapfinger_sim::workload::generate(&sc, 0);
    // Half a GPU is two quarters; eight GPUs are 32 quarters, on boxes of 32.
    let half = tasks.iter().find(|t| t.min_demand.get(0) == 6).unwrap();
    assert_eq!(half.min_demand.get(1), 2);
    assert!(tasks.iter().any(|t| t.min_demand.get(1) == 32));
    assert!(r.toml.contains("step = 0.25"));
    o.gpu_step = Some(0.3);
    let e = import(&sample("openb_pod_list.csv"), &o).unwrap_err();
    assert!(e.to_string().contains("whole number of units"), "{e}");
}

#[test]
fn alibaba_2023_replays_on_the_traces_own_nodes() {
    let mut o = opts("alibaba-2023");
    o.cluster = ClusterChoice::NodeList(sample("openb_node_list_gpu_node.csv"));
    let (r, sc) = replay_with("openb_pod_list.csv", &o);
    assert_eq!(r.tasks, 5);
    // Eight boxes, the two identical P100 boxes and the two G2 boxes each written once with a count.
    assert_eq!(sc.nodes.len(), 8);
    assert_eq!(r.toml.matches("[[nodes]]").count(), 6);
    let g2: Vec<&str> = sc
        .nodes
        .iter()
        .filter(|n| n.labels == ["G2"])
        .map(|n| n.name.as_str())
        .collect();
    assert_eq!(g2.len(), 2);
    // The pod asking for G2 runs only there.
    let trace = sc.trace.as_ref().unwrap();
    let i = trace.iter().position(|t| t.require == ["G2"]).unwrap();
    let tasks = tapfinger_sim::workload::generate(&sc, 0);
    assert!(
        tasks[i]
            .reachable
            .iter()
            .all(|n| sc.nodes[n.0 as usize].labels == ["G2"])
    );
}

#[test]
fn alibaba_2023_files_without_times_are_refused_clearly() {
    let e = import(
        &sample("openb_pod_list_multigpu20.csv"),
        &opts("alibaba-2023"),
    )
    .unwrap_err();
    assert!(e.to_string().contains("no times"), "{e}");
    assert!(e.to_string().contains("openb_pod_list_default.csv"), "{e}");
    // Only the multigpu* lists lack times; the gpushare* and cpu* lists share the default's
    // columns (`openb_pod_list.csv` here) and import.
    assert!(
        e.to_string().contains("only openb_pod_list_multigpu*"),
        "{e}"
    );
    assert!(e.to_string().contains("gpushare* or cpu* list"), "{e}");
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
    // Who submitted each: the file's (hashed) user.
    let who = sc.trace.as_ref().unwrap()[0].identity().unwrap();
    assert_eq!(who.submitter.as_deref(), Some("ad7b3d"));
}

#[test]
fn helios_imports_and_replays() {
    let (r, _) = replay("helios", "cluster_log.csv");
    // a4 ran for no time; a3's 8 GPUs fit the built-in cluster, sized to it.
    assert_eq!((r.entries, r.tasks), (5, 4));
    assert_eq!(skipped(&r, "not positive"), 1);
}

/// The identity columns the published files have come through to the replay: who submitted
/// each task and the job it is, which the simulator's size history keys on as an agent's does.
#[test]
fn importers_keep_who_submitted_each_task() {
    let (_, sc) = replay("helios", "cluster_log.csv");
    let trace = sc.trace.as_ref().unwrap();
    let first = trace[0].identity().unwrap();
    assert_eq!(first.submitter.as_deref(), Some("u1"));
    assert_eq!(first.job.as_deref(), Some("train"));
    let text = "job_id,user,submit_time,duration,num_cpu,num_gpu,group\n\
                1,u1,100,3600,6,1,g7\n2,u\"2,160,60,4,0,\n";
    let r = import(text, &opts("alibaba-2020-sim")).unwrap();
    let sc = Scenario::from_toml(&r.toml, "alibaba-2020-sim", None).unwrap();
    let ids: Vec<_> = sc
        .trace
        .unwrap()
        .iter()
        .map(|t| t.identity().unwrap())
        .collect();
    assert_eq!(ids[0].submitter.as_deref(), Some("u1"));
    assert_eq!(ids[0].job.as_deref(), Some("g7"));
    // A quote in a name does not break the scenario's rows; an empty group says nothing.
    assert_eq!(ids[1].submitter.as_deref(), Some("u_2"));
    assert_eq!(ids[1].job, None);
    // A format whose file names nobody writes no identity columns.
    let r = import(&sample("openb_pod_list.csv"), &opts("alibaba-2023")).unwrap();
    assert!(!r.toml.contains("submitter"), "{}", r.toml);
}

#[test]
fn gavel_reads_both_published_layouts_with_measured_run_times() {
    let table = tapfinger_sim::import::gavel::Throughputs::shipped();
    // The 7-column msr layout: three jobs, run times from V100 figures.
    let (r, sc) = replay("gavel", "gavel_msr.trace");
    assert_eq!((r.entries, r.tasks), (3, 3));
    let rate = table
        .get("v100", "Transformer (batch size 128)", 1)
        .unwrap();
    // The first arrival is the Transformer job of 79561 steps.
    let first = &sc.trace.as_ref().unwrap()[0];
    let tt = &sc.types[first.ty];
    let seconds = tt.speed.isolated(&tt.min_demand, 1.0).unwrap().1;
    assert!(
        (seconds * first.size - 79561.0 / rate).abs() < 1.0,
        "{seconds} vs {}",
        79561.0 / rate
    );
    assert!(sc.nodes.iter().any(|n| n.labels == ["v100"]));
    // The 10-column physical_cluster layout: twenty jobs, two on two GPUs.
    let (r, sc) = replay("gavel", "gavel_physical.trace");
    assert_eq!(r.tasks, 20);
    let tasks = tapfinger_sim::workload::generate(&sc, 0);
    assert_eq!(tasks.iter().filter(|t| t.min_demand.get(1) == 2).count(), 3);
    // The same jobs run longer on K80s.
    let mut o = opts("gavel");
    o.gpu_models = vec!["k80".into()];
    let slow = import(&sample("gavel_msr.trace"), &o).unwrap();
    adds_up(&slow);
    let fast = import(&sample("gavel_msr.trace"), &opts("gavel")).unwrap();
    assert_ne!(slow.toml, fast.toml);
    // A row of another layout is refused with its line.
    let text = format!(
        "{}A3C\tcmd\t--steps\t1000\t0\t1\n",
        sample("gavel_msr.trace")
    );
    let e = import(&text, &opts("gavel")).unwrap_err();
    assert!(e.to_string().starts_with("line 4"), "{e}");
}

#[test]
fn gavel_on_mixed_gpu_types_gives_each_type_its_measured_speed_per_model() {
    let table = tapfinger_sim::import::gavel::Throughputs::shipped();
    let mut o = opts("gavel");
    o.gpu_models = ["v100", "p100", "k80"].map(String::from).to_vec();
    let (r, sc) = replay_with("gavel_physical.trace", &o);
    assert_eq!(r.tasks, 20);
    // The built-in GPU boxes are of the three types in turn, and say so.
    let models: Vec<Option<&str>> = sc.nodes.iter().map(|n| n.gpu_model.as_deref()).collect();
    assert_eq!(
        models.iter().filter(|m| m.is_some()).count(),
        4,
        "{models:?}"
    );
    for m in ["v100", "p100", "k80"] {
        assert!(models.contains(&Some(m)), "{models:?}");
    }
    // Every type runs on the P100 and the K80 at Gavel's measured speed relative to the V100
    // (not always slower: Gavel measured some jobs faster on a P100).
    let trace = sc.trace.as_ref().unwrap();
    for tt in &sc.types {
        let class = tt.name.as_str();
        assert!(trace.iter().any(|t| sc.types[t.ty].name == class));
        let gpus = tt.min_demand.get(1);
        let speeds: Vec<f64> = ["p100", "k80"].iter().map(|m| tt.gpu_speed[*m]).collect();
        assert!(
            speeds.iter().all(|x| x.is_finite() && *x > 0.0),
            "{class}: {speeds:?}"
        );
        // A type's speeds are one of the trace's job types' measured ratios at its GPUs.
        let jobs: Vec<String> = sample("gavel_physical.trace")
            .lines()
            .map(|l| l.split('\t').next().unwrap().to_string())
            .collect();
        let matches = jobs.iter().any(|j| {
            table.get("v100", j, gpus).is_some_and(|v| {
                ["p100", "k80"].iter().zip(&speeds).all(|(m, x)| {
                    table
                        .get(m, j, gpus)
                        .is_some_and(|r| (r / v - x).abs() < 1e-9)
                })
            })
        });
        assert!(matches, "{class} at {gpus} GPU(s): {speeds:?}");
    }
}

#[test]
fn limits_and_windows_are_counted() {
    let mut o = opts("gavel");
    o.limit = 2;
    let r = import(&sample("gavel_physical.trace"), &o).unwrap();
    adds_up(&r);
    assert_eq!((r.tasks, skipped(&r, "beyond --limit 2")), (2, 18));
    // Arrivals at 0, 1511 and 3362 s.
    let mut o = opts("gavel");
    o.from_s = Some(1000.0);
    o.until_s = Some(3000.0);
    let r = import(&sample("gavel_msr.trace"), &o).unwrap();
    adds_up(&r);
    assert_eq!((r.tasks, skipped(&r, "outside --from/--until")), (1, 2));
}

#[test]
fn the_load_is_reported_and_can_be_targeted() {
    let r = import(&sample("cluster_log.csv"), &opts("helios")).unwrap();
    let base = r.load.unwrap().gpu.unwrap();
    assert!(base > 0.0);
    let mut o = opts("helios");
    o.target_load = Some(0.8);
    let r = import(&sample("cluster_log.csv"), &o).unwrap();
    assert!((r.load.unwrap().gpu.unwrap() - 0.8).abs() < 1e-9);
    assert!((r.compress - 0.8 / base).abs() < 1e-9);
    o.compress = Some(2.0);
    assert!(import(&sample("cluster_log.csv"), &o).is_err());
}

/// The 2020 trace's simulator input (`simulator/traces/pai/*.csv`, the layout its `utils.py`
/// reads; hand-written rows): one job per row, fractions of a GPU kept where the unit allows;
/// the same file given as `pai_task_table` is refused with a message naming the right format.
#[test]
fn alibaba_2020_simulator_input_is_read_and_named_when_mistaken() {
    let text =
        "job_id,user,submit_time,duration,num_cpu,num_gpu,num_inst,wait_time,user_dur,group_dur
1,u1,100,3600,6,1,1,0,3000,3500
2,u2,160,0,4,0.5,1,0,10,20
3,u1,200,7200,12,0.5,1,5,7000,7100
4,u3,260,1800,4,,1,0,1700,1800
";
    let mut o = opts("alibaba-2020-sim");
    o.gpu_step = Some(0.25);
    let r = import(text, &o).unwrap();
    adds_up(&r);
    assert_eq!((r.entries, r.tasks), (4, 3));
    assert_eq!(skipped(&r, "not positive"), 1);
    let sc = Scenario::from_toml(&r.toml, "alibaba-2020-sim", None).unwrap();
    assert_eq!(sc.tasks, 3);
    let e = import(text, &opts("alibaba-2020")).unwrap_err().to_string();
    assert!(e.contains("alibaba-2020-sim"), "{e}");
    let e = import("job_id,submit_time,num_gpu\n1,0,1\n", &o)
        .unwrap_err()
        .to_string();
    assert!(e.contains("duration"), "{e}");
}

/// `--target-load` sets the scarcest resource's load (every kind's is reported): pods asking for
/// many cores and a sliver of a GPU load the CPUs first, and it is their load that meets the
/// target, not the GPUs'.
#[test]
fn the_target_load_is_the_scarcest_resources() {
    use tapfinger_sim::import::LoadKind;
    let text = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p0,64000,4096,1,100,,LS,Succeeded,0,3600,0
p1,64000,4096,1,100,,LS,Succeeded,600,4200,600
p2,64000,4096,1,100,,LS,Succeeded,1200,4800,1200
";
    let mut o = opts("alibaba-2023");
    o.gpu_step = Some(0.1);
    o.target_load = Some(0.8);
    let r = import(text, &o).unwrap();
    let l = r.load.unwrap();
    assert_eq!(l.scarcest().0, "cpu", "{l:?}");
    assert!((l.cpu - 0.8).abs() < 1e-9, "{l:?}");
    assert!(l.gpu.unwrap() < 0.8 && l.mem.unwrap() < 0.8, "{l:?}");
    // The GPU's load, where asked for: the CPUs are then offered more than the cluster has.
    o.load_kind = LoadKind::Gpu;
    let l = import(text, &o).unwrap().load.unwrap();
    assert!((l.gpu.unwrap() - 0.8).abs() < 1e-9 && l.cpu > 0.8, "{l:?}");
}

#[test]
fn long_tasks_get_longer_slots_and_short_ones_keep_their_size() {
    // One job of 20 million seconds and two of one second, all of one class.
    let text = "submit_time,gpu_num,cpu_num,node_num,duration\n0,1,4,1,20000000\n10,1,4,1,1\n20,1,4,1,1\n30,1,4,1,20000000\n";
    let r = import(text, &opts("helios")).unwrap();
    assert_eq!(r.slot_seconds, 240.0);
    assert!(r.slot_chosen);
    let sc = Scenario::from_toml(&r.toml, "t", None).unwrap();
    let sizes: Vec<f64> = sc.trace.unwrap().iter().map(|t| t.size).collect();
    assert!((sizes[1] - 1.0 / 20_000_000.0).abs() < 1e-15, "{sizes:?}");
    let mut o = opts("helios");
    o.slot_seconds = Some(60.0);
    let e = import(text, &o).unwrap_err().to_string();
    assert!(e.contains("--slot-seconds 240"), "{e}");
}

#[test]
fn time_compression_packs_the_arrivals() {
    let slow = import(&sample("cluster_log.csv"), &opts("helios")).unwrap();
    let mut o = opts("helios");
    o.compress = Some(10.0);
    let fast = import(&sample("cluster_log.csv"), &o).unwrap();
    let last = |r: &Imported| {
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
        err.contains("read 10 entries: imported 7 tasks")
            && err.contains("left out 2: status is not Terminated"),
        "{err}"
    );
    let o = std::process::Command::new(bin)
        .args(["run", "--policy", "tiresias", "--scenario"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `--declare-work`: a Gavel replay's jobs declare their work (the steps the trace lists);
/// a format whose sizes are recorded durations refuses it, naming why.
#[test]
fn gavel_jobs_may_declare_their_steps_and_other_formats_may_not() {
    let mut o = opts("gavel");
    o.declare_work = true;
    let (_, sc) = replay_with("gavel_msr.trace", &o);
    assert!(sc.declare_work);
    let (_, plain) = replay("gavel", "gavel_msr.trace");
    assert!(!plain.declare_work);
    let mut o = opts("philly");
    o.declare_work = true;
    let e = import(&sample("cluster_job_log.json"), &o).unwrap_err();
    assert!(
        matches!(&e, ImportError::BadOption(m) if m.contains("only Gavel")),
        "{e}"
    );
}
