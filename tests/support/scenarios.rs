//! Random scenarios for property tests of the simulator (and of the agents' parity with it).

use proptest::prelude::*;
use std::collections::BTreeMap;
use tapfinger::ResourceKind;
use tapfinger_sim::Scenario;
use tapfinger_sim::scenario::{
    MemoryMode, NodeSpec, Reachability, ScenarioFile, SpeedSpec, TaskTypeSpec,
};

fn kind(name: &str) -> ResourceKind {
    ResourceKind {
        name: name.into(),
        unit: String::new(),
        step: 1.0,
    }
}

/// Random small clusters and workloads: 2–3 kinds, 1–5 nodes, 1–3 task types with synthetic
/// speeds, 5–40 tasks; memory mode `fail` (tasks may need more than they ask) or `stall` when
/// `fail_mode` allows it.
pub(crate) fn scenario_with(fail_mode: bool) -> impl Strategy<Value = Scenario> {
    (
        2usize..=3,
        1usize..=5,
        1usize..=3,
        0.3f64..4.0,
        5i64..40,
        any::<bool>().prop_map(move |f| f && fail_mode),
        any::<bool>(),
        0.5f64..=1.0,
    )
        .prop_flat_map(|(kinds, nodes, types, lambda, tasks, fail, all, sw)| {
            (
                proptest::collection::vec(proptest::collection::vec(1i64..12, kinds), nodes),
                proptest::collection::vec(
                    (
                        proptest::collection::vec(0i64..4, kinds),
                        proptest::collection::vec(0.0f64..0.3, kinds),
                        0.0f64..0.5,
                        proptest::option::of(proptest::collection::vec(0i64..3, kinds)),
                    ),
                    types,
                ),
                Just((lambda, tasks, fail, all, sw)),
            )
        })
        .prop_filter_map(
            "valid scenario",
            |(caps, types, (lambda, tasks, fail, all, sw))| {
                let k = caps[0].len();
                let names = ["cpu", "gpu", "mem"];
                let file = ScenarioFile {
                    name: "prop".into(),
                    description: String::new(),
                    lambda,
                    tasks,
                    window: 3,
                    switch_weight: sw,
                    start_weight: 1.0,
                    slot_seconds: 1.0,
                    memory: if fail {
                        MemoryMode::Fail
                    } else {
                        MemoryMode::Stall
                    },
                    reachability: if all {
                        Reachability::All
                    } else {
                        Reachability::Random
                    },
                    max_slots: 5_000,
                    burst: None,
                    task_size: None,
                    trace: None,
                    colocation: None,
                    gangs: None,
                    priorities: None,
                    shrink: None,
                    reward: None,
                    profile_hints: false,
                    declare_work: false,
                    resources: names[..k].iter().map(|n| kind(n)).collect(),
                    nodes: caps
                        .into_iter()
                        .map(|capacity| NodeSpec {
                            name: "n".into(),
                            capacity,
                            count: 1,
                            labels: Vec::new(),
                            gpu_model: None,
                        })
                        .collect(),
                    task_types: types
                        .into_iter()
                        .enumerate()
                        .map(|(i, (mut min, w, b, extra))| {
                            if min.iter().all(|x| *x == 0) {
                                min[0] = 1;
                            }
                            // In stall mode an under-requested task could wait forever; only fail mode
                            // gets a need above the request.
                            let need = extra
                                .filter(|_| fail)
                                .map(|e| min.iter().zip(e).map(|(m, e)| m + e).collect());
                            TaskTypeSpec {
                                name: format!("T{i}"),
                                weight: 1.0,
                                min_demand: min,
                                max_demand: None,
                                need,
                                priority: 0,
                                curve: None,
                                speed: SpeedSpec::Synthetic { w, b: b + 0.05 },
                                gavel_job: None,
                                gpu_speed: BTreeMap::new(),
                            }
                        })
                        .collect(),
                    published: BTreeMap::new(),
                };
                Scenario::from_file(file, "prop", None).ok()
            },
        )
}
