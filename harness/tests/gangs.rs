//! Gangs through the node cores under the harness: the owner proposes a gang, every box decides
//! the same members and starts its own, with ranks and rendezvous that add up; a box that dies
//! puts the gang back in the queue everywhere (its units freed, the other members stopped), and
//! it runs again on the boxes left; so does a member box that restarts and no longer lists it.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use tapfinger_core::node::TaskState;
use tapfinger_core::placement::gang::GangShape;
use tapfinger_core::resources::Resources;
use tapfinger_core::spec::TaskSpec;
use tapfinger_core::task::{NodeId, Task, TaskId};
use tapfinger_harness::Cluster;

/// A PS of 1 core and three workers of 3 cores on boxes of 4: the host holds the PS and one
/// worker, two more boxes one worker each.
fn gang(c: &mut Cluster, at: usize, id: u64) {
    let shape = GangShape {
        workers: (3, 3),
        ps: 1,
        worker_demand: Resources(vec![3, 0]),
        ps_demand: Resources(vec![1, 0]),
        compute_seconds: 0.5,
        gradient_bytes: 1e6,
        restarts: 0,
        stages: Vec::new(),
    };
    let task = Task {
        id: TaskId(id),
        ty: tapfinger_core::TaskTypeId(0),
        min_demand: shape.worker_demand.clone(),
        max_demand: None,
        priority: 0,
        reachable: (0..c.nodes.len() as u32).map(NodeId).collect(),
        arrival: 0,
        gang: Some(Box::new(shape)),
    };
    let spec = TaskSpec::from_toml(
        "command = [\"x\"]\n[gang]\nworkers = 3\nworker_demand = { cpu = 3 }\nps_demand = { cpu = 1 }\n",
    )
    .unwrap();
    let acts = c.nodes[at].submit(task, spec);
    c.act(at, acts);
}

/// Each live node's state of task `id`.
fn states(c: &Cluster, id: u64) -> Vec<TaskState> {
    (0..c.nodes.len())
        .filter(|i| c.alive[*i])
        .map(|i| c.nodes[i].tasks()[&TaskId(id)].state.clone())
        .collect()
}

/// Four boxes with gang 7 (a minute of work) submitted at box 0 and started.
fn started_gang() -> Cluster {
    let mut c = Cluster::new(4, "min");
    c.work_ms = 60_000;
    for _ in 0..60 {
        c.step();
    }
    gang(&mut c, 0, 7);
    for _ in 0..40 {
        c.step();
        if c.started.get(&TaskId(7)).is_some_and(|n| *n >= 3) {
            break;
        }
    }
    c
}

#[test]
fn every_box_starts_its_members_of_one_gang_and_a_dead_box_puts_it_back() {
    let mut c = started_gang();
    let s = states(&c, 7);
    let TaskState::Gang { members, .. } = &s[0] else {
        panic!("not started: {s:?}");
    };
    assert!(s.iter().all(|x| x == &s[0]), "the boxes disagree: {s:?}");
    assert_eq!(members.len(), 4);
    let boxes: BTreeSet<NodeId> = members.iter().map(|(n, _)| *n).collect();
    assert_eq!(boxes.len(), 3, "{members:?}");
    // One run per member box, at once.
    assert_eq!(c.started[&TaskId(7)], 3);
    let runners: BTreeSet<usize> = c
        .running
        .iter()
        .filter(|(_, _, t)| *t == TaskId(7))
        .map(|(_, n, _)| *n)
        .collect();
    assert_eq!(runners, boxes.iter().map(|n| n.0 as usize).collect());
    for (i, n) in c.nodes.iter().enumerate() {
        let mine: Resources = members
            .iter()
            .filter(|(m, _)| m.0 as usize == i)
            .fold(Resources(vec![0, 0]), |a, (_, r)| a.checked_add(r).unwrap());
        assert_eq!(n.tasks().held(NodeId(i as u32)), mine, "node {i}");
    }

    // A worker's box dies: the others stop their members and requeue the gang, then it runs
    // again on the three boxes left.
    let host = members[0].0.0 as usize;
    let victim = *boxes.iter().find(|n| n.0 as usize != host).unwrap();
    c.kill(victim.0 as usize);
    let mut requeued = false;
    for _ in 0..200 {
        c.step();
        if states(&c, 7).iter().all(|x| *x == TaskState::Pending) {
            requeued = true;
            assert!(
                c.running.iter().all(|(_, _, t)| *t != TaskId(7)),
                "a member still runs"
            );
            for i in (0..4).filter(|i| c.alive[*i]) {
                assert_eq!(
                    c.nodes[i].tasks().held(NodeId(i as u32)),
                    Resources(vec![0, 0])
                );
            }
        }
        if requeued && c.started[&TaskId(7)] > 3 {
            break;
        }
    }
    assert!(requeued, "never requeued: {:?}", states(&c, 7));
    assert_eq!(c.started[&TaskId(7)], 6, "not placed again on three boxes");
    let s = states(&c, 7);
    let TaskState::Gang { members, .. } = &s[0] else {
        panic!("not restarted: {s:?}");
    };
    assert!(members.iter().all(|(n, _)| *n != victim));
}

/// A member box restarts while its gang runs. As the agent's journal replay does
/// (`agent/src/recover.rs`), it stops its members and takes the gang back as pending with the
/// epoch of the run, so it does not list the run any more: the other boxes put the gang back
/// in the queue after a peer timeout, stop their members, and it is placed again. Before that
/// rule they kept their members of a run that had lost one (a real gang then failed only at
/// its rendezvous timeout; the harness's members never fail, and it ran to "success").
#[test]
fn a_restarted_member_box_makes_the_others_requeue_the_gang() {
    let mut c = started_gang();
    let entry = c.nodes[0].tasks()[&TaskId(7)].clone();
    let TaskState::Gang { members, .. } = &entry.state else {
        panic!("not started");
    };
    let host = members[0].0.0 as usize;
    let restarted = members
        .iter()
        .map(|(n, _)| n.0 as usize)
        .find(|n| *n != host && *n != 0)
        .unwrap();
    let mut cfg = c.nodes[restarted].config().clone();
    cfg.incarnation += 1;
    let ctx = tapfinger_policies::baselines::BaselineContext {
        num_types: 1,
        cpu_kind: 0,
        gpu_kind: 1,
        profile: Vec::new(),
    };
    c.nodes[restarted] = tapfinger_core::node::NodeCore::new(
        cfg,
        tapfinger_policies::baselines::by_name("min", &ctx).unwrap(),
        99,
    );
    c.running.retain(|(_, n, _)| *n != restarted);
    c.cores.retain(|(n, _), _| *n != restarted);
    let acts = c.nodes[restarted].restore(
        (*entry.task).clone(),
        entry.meta.spec.clone(),
        TaskState::Pending,
        None,
        entry.meta.epoch,
    );
    c.act(restarted, acts);
    let mut requeued = false;
    for _ in 0..300 {
        c.step();
        if (0..4).all(|i| c.nodes[i].tasks()[&TaskId(7)].state == TaskState::Pending) {
            requeued = true;
            assert!(
                c.running.iter().all(|(_, _, t)| *t != TaskId(7)),
                "a member of the broken run still runs"
            );
            break;
        }
    }
    assert!(requeued, "never requeued: {:?}", states(&c, 7));
    assert!(
        !c.finished.contains_key(&TaskId(7)),
        "the broken run was taken as finished"
    );
    // And it runs again, whole.
    for _ in 0..300 {
        c.step();
        if c.started[&TaskId(7)] >= 6 {
            break;
        }
    }
    assert!(
        c.started[&TaskId(7)] >= 6,
        "not placed again: {:?}",
        states(&c, 7)
    );
}
