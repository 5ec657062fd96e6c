//! The command line of planning: `plan` on the documented example, what it refuses, and the
//! planning and placement benches.
// Test helpers may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

mod common;
use common::{Scratch, fails_with, sim};

/// The documented example job and price list (docs/PLANNING.md).
const PLAN_JOB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/plan/job.toml");
const PLAN_PRICES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/plan/prices.toml");

#[test]
fn plan_prints_the_least_cost_plan_and_refuses_what_no_plan_meets() {
    let scratch = Scratch::new();
    let (ok, out, err) = sim(&["plan", "--job", PLAN_JOB, "--prices", PLAN_PRICES]);
    assert!(ok, "{err}");
    assert!(out.contains("exact plan: throughput"), "{out}");
    assert!(
        out.contains("greedy"),
        "the other planners are shown: {out}"
    );
    let (ok, out, err) = sim(&["plan", "--job", PLAN_JOB, "--prices", PLAN_PRICES, "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["throughput"].as_f64().unwrap() >= 400.0 * (1.0 - 1e-9),
        "{v}"
    );
    assert!(v["cost"].as_f64().unwrap() > 0.0);
    assert!(v["alternatives"]["greedy"].is_object());
    assert!(v["alternatives"]["cpu-only"].is_object());
    // Another planner by name; on the example only the exact planner meets the unit limits,
    // and one that does not says what its plan misses and exits non-zero.
    fails_with(
        &[
            "plan",
            "--job",
            PLAN_JOB,
            "--prices",
            PLAN_PRICES,
            "--planner",
            "greedy",
        ],
        "the greedy plan needs 8 units of \"t4\", 4 on offer",
    );
    // The removed learned planner is named with its replacement, not reported as unknown.
    fails_with(
        &[
            "plan",
            "--job",
            PLAN_JOB,
            "--prices",
            PLAN_PRICES,
            "--planner",
            "learned",
        ],
        "use exact, the default",
    );

    let job = std::fs::read_to_string(PLAN_JOB).unwrap();
    let too_fast = scratch.write(
        "plan-too-fast.toml",
        &job.replace("throughput = 400.0", "throughput = 5000.0"),
    );
    fails_with(
        &[
            "plan",
            "--job",
            too_fast.to_str().unwrap(),
            "--prices",
            PLAN_PRICES,
        ],
        "no plan reaches 5000 batches/s",
    );
    let unknown = scratch.write(
        "plan-unknown.toml",
        &job.replace("cpu = 0.004 }", "cpu = 0.004, tpu = 0.001 }"),
    );
    fails_with(
        &[
            "plan",
            "--job",
            unknown.to_str().unwrap(),
            "--prices",
            PLAN_PRICES,
        ],
        "layer 2 (\"feature-cross\"): time names \"tpu\"",
    );
    let misspelt = scratch.write("plan-misspelt.toml", &job.replace("out_bytes", "outbytes"));
    fails_with(
        &[
            "plan",
            "--job",
            misspelt.to_str().unwrap(),
            "--prices",
            PLAN_PRICES,
        ],
        "unknown field `outbytes`",
    );
}

#[test]
fn the_planning_and_placement_benches_run_and_print_every_placer() {
    let (ok, out, err) = sim(&["plan-bench", "--chains", "3"]);
    assert!(ok, "{err}");
    for name in [
        "exact",
        "greedy",
        "cpu-only",
        "gpu-only",
        "greedy + search",
        "varied",
    ] {
        assert!(out.contains(name), "{name} missing from {out}");
    }
    let (ok, out, err) = sim(&[
        "place-bench",
        "--instances",
        "4",
        "--workloads",
        "1",
        "--jobs",
        "6",
        "--boxes",
        "3",
    ]);
    assert!(ok, "{err}");
    for name in ["lp-rounding", "pack-first", "spread", "edge", "rack"] {
        assert!(out.contains(name), "{name} missing from {out}");
    }
}
