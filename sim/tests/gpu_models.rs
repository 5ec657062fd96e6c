//! Boxes of mixed GPU models: a task type runs at its `gpu_speed` for the box's model, the
//! best isolated time is the fastest box's, and a scenario that gets the models wrong is
//! refused naming the field.

use tapfinger_sim::{Scenario, Simulator, policies};

/// Two one-GPU boxes, a K80 and a V100, and one type of 10 slots alone on a V100 (a constant
/// tenth of its work per slot) that runs at a quarter of that on a K80.
fn scenario(extra: &str) -> Result<Scenario, String> {
    let text = format!(
        r#"
name = "mixed"
lambda = 0.5
tasks = 12
reachability = "all"

[[resources]]
name = "cpu"
unit = "core"

[[resources]]
name = "gpu"
unit = "GPU"

[[nodes]]
name = "old"
capacity = [4, 1]
gpu_model = "k80"

[[nodes]]
name = "new"
capacity = [4, 1]
gpu_model = "v100"

[[task_types]]
name = "resnet"
min_demand = [1, 1]
max_demand = [1, 1]
speed = {{ model = "synthetic", w = [0.0, 0.0], b = 0.1 }}
{extra}
"#
    );
    Scenario::from_toml(&text, "mixed", None).map_err(|e| e.to_string())
}

#[test]
fn a_task_runs_at_its_type_s_speed_for_the_box_s_gpu_model() {
    let sc = scenario("gpu_speed = { k80 = 0.25 }").unwrap();
    assert_eq!(sc.nodes[0].gpu_model.as_deref(), Some("k80"));
    let run = |sc: Scenario| {
        let sim = Simulator::new(sc);
        sim.run(policies::build(&sim, "tiresias").unwrap(), 3)
            .unwrap()
    };
    let r = run(sc);
    // Where both boxes are V100-fast: the same best isolated times.
    let even = run(scenario("").unwrap());
    let bound = even.tasks[0].lower_bound;
    assert!(even.tasks.iter().all(|t| t.finish - t.start == 10));
    assert_eq!(r.tasks.len(), 12);
    let mut seen = [false; 2];
    for t in &r.tasks {
        let ran = t.finish - t.start;
        // 10 slots on the V100 (node 1), 40 on the K80 (node 0).
        let want = if t.node == 0 { 40 } else { 10 };
        assert_eq!(ran, want, "task {} on node {}", t.id, t.node);
        assert_eq!(t.lower_bound, bound, "the fastest box's time alone");
        seen[t.node as usize] = true;
    }
    assert!(seen[0] && seen[1], "both boxes ran tasks: {seen:?}");
}

#[test]
fn gpu_speeds_that_name_no_box_s_model_or_are_not_positive_are_refused() {
    let e = scenario("gpu_speed = { a100 = 2.0 }").unwrap_err();
    assert!(
        e.contains("gpu_speed.a100") && e.contains("no node has this gpu_model"),
        "{e}"
    );
    let e = scenario("gpu_speed = { k80 = 0.0 }").unwrap_err();
    assert!(e.contains("gpu_speed.k80") && e.contains("> 0"), "{e}");
}
