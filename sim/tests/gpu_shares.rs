//! Fractions of a GPU in the simulator: a scenario in quarter GPUs runs every policy; the
//! learned policy runs more GPU tasks at once than there are devices (it places fractions);
//! two tasks sharing a device progress at their pair's co-location factor; a share no single
//! device holds goes back to the queue; boxes that pack shares keep a device whole that
//! spreading would not; the agents' rules refuse a bad scenario, naming the field.
#![allow(clippy::unwrap_used)]

use tapfinger_sim::{Scenario, Simulator, policies};

/// Most tasks running at once over an episode (in the system and not waiting).
fn most_running(r: &tapfinger_sim::EpisodeResult) -> u32 {
    r.slots
        .iter()
        .map(|s| s.in_system - s.waiting)
        .max()
        .unwrap_or(0)
}

#[test]
fn every_policy_runs_in_quarter_gpus_and_the_learned_one_places_fractions() {
    let mut sc = Scenario::load("small-gpu-edge").unwrap();
    sc.tasks = 40;
    let sim = Simulator::new(sc);
    let mut names = policies::all_policies();
    names.push(policies::TAPFINGER);
    names.push(policies::RLPTO);
    for name in names {
        let ps = if name == policies::TAPFINGER {
            policies::learned(&sim, None).unwrap()
        } else if name == policies::RLPTO {
            policies::rlpto(&sim).unwrap()
        } else {
            policies::build(&sim, name).unwrap()
        };
        let r = sim.run(ps, 3).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(r.tasks.len(), 40, "{name}: every task finishes");
        if name == policies::TAPFINGER || name == "min" {
            // Four one-GPU boxes, and every task needs a GPU: more than four at once is
            // fractions.
            assert!(most_running(&r) > 4, "{name}: {}", most_running(&r));
        }
    }
}

/// One box with one GPU in quarters and one type, which Gavel measured beside itself on a V100
/// (ResNet-50, batch 16: T = 0.63, so two of them slow each other to 0.63 of their speed); each
/// task takes a quarter and makes a constant tenth of its work per slot alone.
fn pair(colocation: &str, job: &str) -> Scenario {
    let text = format!(
        r#"
name = "pair"
lambda = 5.0
tasks = 2
reachability = "all"
{colocation}

[[resources]]
name = "cpu"

[[resources]]
name = "gpu"
step = 0.25

[[nodes]]
name = "edge"
capacity = [4, 4]

[[task_types]]
name = "a"
min_demand = [1, 1]
max_demand = [1, 1]
speed = {{ model = "synthetic", w = [0.0, 0.0], b = 0.1 }}
{job}
"#
    );
    Scenario::from_toml(&text, "pair", None).unwrap()
}

#[test]
fn tasks_sharing_a_gpu_progress_at_their_pair_s_factor() {
    let run = |sc: Scenario| {
        let sim = Simulator::new(sc);
        sim.run(policies::build(&sim, "first-fit-max").unwrap(), 1)
            .unwrap()
    };
    let ran = |r: &tapfinger_sim::EpisodeResult| -> Vec<u64> {
        r.tasks.iter().map(|t| t.finish - t.start).collect()
    };
    let free = run(pair("", ""));
    let costly = run(pair(
        "colocation = \"gavel-v100\"",
        "gavel_job = \"ResNet-50 (batch size 16)\"",
    ));
    // Alone on a quarter, or beside a task that costs nothing: 10 slots.
    assert!(ran(&free).iter().all(|s| *s == 10), "{:?}", ran(&free));
    let starts = costly.tasks.iter().map(|t| t.start).max().unwrap();
    let ends = costly.tasks.iter().map(|t| t.finish).min().unwrap();
    assert!(starts < ends, "both ran at once: {:?}", costly.tasks);
    // Beside each other at 0.63 of a tenth a slot: 16 slots, or fewer for the one that ran
    // alone for a while.
    assert!(
        ran(&costly).iter().all(|s| *s > 10 && *s <= 16),
        "{:?}",
        ran(&costly)
    );
}

/// A scenario in quarter GPUs only: boxes of `boxes` units, task types of a fixed demand each
/// (units: quarters) that make a tenth of their work a slot, the trace `rows` (`arrival,type`).
fn quarters(name: &str, boxes: &[u32], types: &[(&str, u32)], rows: &str) -> Scenario {
    let mut text = format!(
        "name = \"{name}\"\nlambda = 1.0\ntasks = {}\nreachability = \"all\"\n\n\
         [[resources]]\nname = \"gpu\"\nstep = 0.25\n",
        rows.lines().count()
    );
    for (i, cap) in boxes.iter().enumerate() {
        text += &format!("\n[[nodes]]\nname = \"box{i}\"\ncapacity = [{cap}]\n");
    }
    for (ty, units) in types {
        text += &format!(
            "\n[[task_types]]\nname = \"{ty}\"\nmin_demand = [{units}]\nmax_demand = [{units}]\n\
             speed = {{ model = \"synthetic\", w = [0.0], b = 0.1 }}\n"
        );
    }
    let rows: String = rows.lines().map(|r| format!("{r},1,\n")).collect();
    text += &format!("\n[trace]\nrows = \"\"\"\narrival,type,size,require\n{rows}\"\"\"\n");
    Scenario::from_toml(&text, name, None).unwrap()
}

/// Two GPUs in quarters on one box, two three-quarter tasks and a half one arriving together:
/// 3 + 3 + 2 quarters fit the box's 8 units but not its devices, so the half task, when placed
/// beside both, goes back to the queue (it is not lost) and runs once a device has room. Judged
/// from the tasks' records: never all three running in one slot.
#[test]
fn a_share_no_single_device_holds_waits() {
    let sc = quarters(
        "fragments",
        &[8],
        &[("three-quarters", 3), ("half", 2)],
        "0,three-quarters\n0,three-quarters\n0,half",
    );
    for policy in ["first-fit-max", "min", "random", "tiresias"] {
        let sim = Simulator::new(sc.clone());
        let r = sim.run(policies::build(&sim, policy).unwrap(), 1).unwrap();
        assert_eq!(r.tasks.len(), 3, "{policy}: every task finishes");
        let last = r.tasks.iter().map(|t| t.finish).max().unwrap();
        for slot in 0..last {
            let at_once = r
                .tasks
                .iter()
                .filter(|t| t.start <= slot && slot < t.finish)
                .count();
            assert!(
                at_once <= 2,
                "{policy}: three at once in slot {slot}: {:?}",
                r.tasks
            );
        }
        assert!(
            r.tasks.iter().all(|t| t.finish - t.start == 10),
            "{policy}: each runs its 10 slots once started: {:?}",
            r.tasks
        );
    }
}

/// Two boxes of one GPU in quarters; two half-GPU tasks arrive, then a whole-GPU one. Boxes
/// that pack shares (`--pack-shares`) put the second half beside the first, where it leaves no
/// device part-used, so the whole-GPU task starts on arrival; boxes that state their headroom
/// spread the halves, and the whole-GPU task waits for one of them to end. Judged from the
/// tasks' records.
#[test]
fn boxes_that_pack_shares_keep_a_device_whole_for_a_whole_gpu_task() {
    let sc = quarters(
        "pack",
        &[4, 4],
        &[("half", 2), ("whole", 4)],
        "0,half\n1,half\n3,whole",
    );
    let run = |sim: Simulator| {
        let mut r = sim
            .run(policies::build(&sim, "first-fit-max").unwrap(), 1)
            .unwrap();
        r.tasks.sort_by_key(|t| t.id);
        r.tasks
    };
    let packed = run(Simulator::new(sc.clone()).pack_shares());
    assert_eq!(packed[0].node, packed[1].node, "{packed:?}");
    assert_eq!(packed[2].start, packed[2].arrival, "{packed:?}");
    let spread = run(Simulator::new(sc));
    assert_ne!(spread[0].node, spread[1].node, "{spread:?}");
    assert!(spread[2].start >= spread[0].finish, "{spread:?}");
}

#[test]
fn the_agents_rules_refuse_a_bad_scenario_naming_the_field() {
    let bad = |cap: &str, min: &str, max: &str, extra: &str| {
        let text = format!(
            r#"
name = "bad"
lambda = 1.0
tasks = 1
{extra}

[[resources]]
name = "gpu"
step = 0.25

[[nodes]]
name = "edge"
capacity = [{cap}]

[[task_types]]
name = "t"
min_demand = [{min}]
{max}
speed = {{ model = "synthetic", w = [0.0], b = 0.1 }}
"#
        );
        Scenario::from_toml(&text, "bad", None)
            .unwrap_err()
            .to_string()
    };
    let e = bad("6", "1", "", "");
    assert!(e.contains("nodes[0].capacity"), "{e}");
    let e = bad("8", "1", "max_demand = [8]", "");
    assert!(e.contains("max_demand") && e.contains("one device"), "{e}");
    let e = bad("8", "1", "max_demand = [5]", "");
    assert!(e.contains("max_demand") && e.contains("one device"), "{e}");
    let e = bad("8", "6", "", "");
    assert!(e.contains("min_demand") && e.contains("whole"), "{e}");
    let e = bad("8", "4", "max_demand = [8]", "");
    assert!(e.contains("max_demand") && e.contains("count"), "{e}");
    let e = bad("8", "1", "gavel_job = \"A3C\"", "");
    assert!(e.contains("gavel_job") && e.contains("colocation"), "{e}");
    let e = bad(
        "8",
        "1",
        "gavel_job = \"No such job\"",
        "colocation = \"gavel-v100\"",
    );
    assert!(e.contains("No such job"), "{e}");
    let e = bad("8", "1", "", "colocation = \"gavel-k80\"");
    assert!(e.contains("colocation"), "{e}");
}
