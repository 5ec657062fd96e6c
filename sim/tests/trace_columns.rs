//! A recorded task's own demands and priority in `[trace]` (`min`, `max`, `priority`): replayed
//! as the task's, refused where they leave its type's, and written by a cluster's twin where the
//! tasks of one class asked for different amounts.

use tapfinger_sim::{Scenario, Simulator, policies, twin, workload};

/// A replayed task's minimum, maximum, priority and reachable boxes.
type Replayed = (Vec<u32>, Option<Vec<u32>>, u8, Vec<u32>);

fn scenario(rows: &str) -> Result<Scenario, String> {
    scenario_with(rows, "", "")
}

/// [`scenario`] with `gangs` after the trace's rows (its `[[trace.gangs]]`) and `section`
/// before it (a `[gangs]` section).
fn scenario_with(rows: &str, gangs: &str, section: &str) -> Result<Scenario, String> {
    let text = format!(
        r#"
name = "own-demands"
lambda = 1.0
tasks = 3
reachability = "all"

[[resources]]
name = "cpu"
step = 1.0

[[resources]]
name = "gpu"
step = 1.0

[[nodes]]
name = "small"
capacity = [4, 1]

[[nodes]]
name = "large"
capacity = [8, 2]

[[task_types]]
name = "train"
min_demand = [1, 1]
max_demand = [8, 2]
speed = {{ model = "synthetic", w = [0.5, 1.0], b = 0.5 }}
{section}
[trace]
rows = """
{rows}
"""
{gangs}
"#
    );
    Scenario::from_toml(&text, "own-demands", None).map_err(|e| e.to_string())
}

/// Each task replays its own minimum, maximum and priority; empty fields take its type's; a
/// task whose minimum only the large box holds may run only there.
#[test]
fn a_recorded_task_keeps_its_own_demands_and_priority() {
    let sc = scenario(
        "arrival,type,size,require,min,max,priority\n0,train,1,,,,\n0,train,1,,6 2,,1\n1,train,1,,2 1,4 1,2",
    )
    .unwrap();
    let tasks = workload::generate(&sc, 0);
    let got: Vec<Replayed> = tasks
        .iter()
        .map(|t| {
            (
                t.min_demand.0.clone(),
                t.max_demand.as_ref().map(|m| m.0.clone()),
                t.priority,
                t.reachable.iter().map(|n| n.0).collect(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (vec![1, 1], Some(vec![8, 2]), 0, vec![0, 1]),
            (vec![6, 2], Some(vec![8, 2]), 1, vec![1]),
            (vec![2, 1], Some(vec![4, 1]), 2, vec![0, 1]),
        ]
    );
    // And the episode runs every task at no less than its own minimum.
    let sim = Simulator::new(sc);
    let r = sim
        .run(policies::build(&sim, "tiresias").unwrap(), 0)
        .unwrap();
    assert_eq!(r.tasks.len(), 3);
}

/// The columns' errors name the line and column: demands outside the type's, a count of
/// amounts that is not the scenario's kinds, a maximum below the minimum, a column twice or
/// unknown.
#[test]
fn demands_outside_the_type_or_malformed_are_refused() {
    for (rows, says) in [
        (
            "arrival,type,size,require,min\n0,train,1,,0 1",
            "outside its type's demands",
        ),
        (
            "arrival,type,size,require,max\n0,train,1,,9 2",
            "outside its type's demands",
        ),
        (
            "arrival,type,size,require,min\n0,train,1,,2",
            "2 resource kinds",
        ),
        (
            "arrival,type,size,require,min,max\n0,train,1,,4 2,2 2",
            "below the minimum",
        ),
        (
            "arrival,type,size,require,min,min\n0,train,1,,1 1,1 1",
            "twice",
        ),
        (
            "arrival,type,size,require,gpus\n0,train,1,,1",
            "optionally followed by",
        ),
        (
            "arrival,type,size,require,priority\n0,train,1,,high",
            "column priority",
        ),
    ] {
        let e = scenario(rows).expect_err(rows);
        assert!(e.contains(says), "{rows}: {e}");
    }
}

/// A twin whose class's tasks asked for different amounts replays each at its own: the
/// class's table starts at the least minimum, and the task that asked for more gets more.
#[test]
fn a_twin_replays_each_tasks_own_demand() {
    let sc = Scenario::load("hetero6").unwrap();
    let sim = Simulator::new(sc);
    let ps = tapfinger_sim::report::instances_for_seed(&sim, "tiresias", None, 100).unwrap();
    let (_, mut w) = twin::observe(&sim, ps, 100).unwrap();
    // Plain classes write the plain trace.
    let plain = twin::scenario_toml(&w, "twin").unwrap();
    assert!(plain.contains("arrival,type,size,require\n"), "{plain}");
    // One task asks for one more unit of its first kind, within its class's maximum, and runs
    // at another priority.
    let at = w
        .tasks
        .iter()
        .position(|t| {
            let c = w.classes.iter().find(|c| c.id == t.class).unwrap();
            c.max_demand
                .as_ref()
                .is_none_or(|m| t.min_demand.get(0) < m.get(0))
        })
        .expect("a task with room above its minimum");
    w.tasks[at].min_demand.0[0] += 1;
    w.tasks[at].priority = 1;
    let want = w.tasks[at].min_demand.clone();
    let toml = twin::scenario_toml(&w, "twin").unwrap();
    assert!(toml.contains("arrival,type,size,require,min,max,priority\n"));
    let replay = Scenario::from_toml(&toml, "twin", None).unwrap();
    let tasks = workload::generate(&replay, 0);
    assert_eq!(tasks.len(), w.tasks.len());
    // The twin writes tasks in the workload's order (by arrival), as the episode numbers them.
    assert_eq!(tasks[at].min_demand, want);
    assert_eq!(tasks[at].priority, 1);
    let others = tasks
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != at)
        .all(|(i, t)| t.min_demand == w.tasks[i].min_demand && t.priority == 0);
    assert!(others, "every other task keeps its recorded demand");
}

/// A row named by `[[trace.gangs]]` replays as that gang: its shape, its members' demand, every
/// box; without a `[gangs]` section (its links), with a row the trace lacks, or with a gang
/// that could never fit, the scenario is refused with why.
#[test]
fn a_trace_gang_replays_as_its_shape_and_is_refused_where_it_cannot_run() {
    let rows = "arrival,type,size,require\n0,train,1,\n0,train,1,\n1,train,1,";
    let gang = |row: usize, lo: u32, hi: u32| {
        format!(
            "\n[[trace.gangs]]\nrow = {row}\niterations = 100.0\nshape = {{ workers = [{lo}, {hi}], ps = 1, worker_demand = [1, 0], ps_demand = [1, 0], compute_seconds = 0.5, gradient_bytes = 1e6, restarts = 0, stages = [] }}\n"
        )
    };
    let section = "\n[gangs]\nshare = 0.0\nexternal = 1.25e8\nmax_workers = 4\nworker_demand = { cpu = [1, 1] }\nps_demand = { cpu = 1 }\nwork_slots = [1.0, 1.0]\n";
    let sc = scenario_with(rows, &gang(2, 1, 3), section).unwrap();
    let tasks = workload::generate(&sc, 0);
    let shape = tasks[1].gang.as_ref().expect("row 2 is a gang");
    assert_eq!(shape.workers, (1, 3));
    assert_eq!(tasks[1].min_demand.0, vec![1, 0]);
    assert_eq!(tasks[1].reachable.len(), 2);
    assert!(tasks[0].gang.is_none() && tasks[2].gang.is_none());
    let err = scenario_with(rows, &gang(2, 1, 3), "").unwrap_err();
    assert!(err.contains("needs a `[gangs]` section"), "{err}");
    let err = scenario_with(rows, &gang(9, 1, 3), section).unwrap_err();
    assert!(err.contains("rows 1 to 3"), "{err}");
    let err = scenario_with(rows, &gang(1, 20, 20), section).unwrap_err();
    assert!(err.contains("can never run"), "{err}");
}
