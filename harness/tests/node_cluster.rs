//! The node cores of a cluster under the harness: every task finishes exactly once, no node
//! ever allocates more than its capacity, a node that dies mid-run loses no task, restarts never
//! run two copies at once, urgent tasks make room once, and all nodes agree on every outcome.
//! Partitions are in `partitions.rs`, how nodes come to agree after lost messages and restarts
//! in `reconcile.rs`.

// Test helpers may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use tapfinger_core::node::{Action, NodeCore, TaskEntry, TaskState};
use tapfinger_core::task::{NodeId, TaskId};
use tapfinger_core::wire::{Body, Envelope, WIRE_VERSION};
use tapfinger_harness::{Cluster, spec};
use tapfinger_policies::baselines;

#[test]
fn tasks_finish_exactly_once_within_capacity() {
    for policy in ["min", "random", "first-fit-max", "drf"] {
        let mut c = Cluster::new(4, policy);
        for s in 0..40 {
            c.step();
            if s == 39 {
                assert!(
                    c.nodes.iter().all(|n| n.peers().count() == 3),
                    "{:?}",
                    c.nodes
                );
            }
        }
        for id in 0..30u64 {
            c.submit((id % 4) as usize, id);
            c.step();
        }
        let mut steps = 0;
        while c.finished.len() < 30 && steps < 5000 {
            c.step();
            steps += 1;
        }
        assert_eq!(
            c.finished.len(),
            30,
            "{policy}: {} finished",
            c.finished.len()
        );
        assert!(
            c.finished.values().all(|n| *n == 1),
            "{policy}: {:?}",
            c.finished
        );
        // Once the last notices are delivered, every node agrees every task is done.
        for _ in 0..5 {
            c.step();
        }
        for n in &c.nodes {
            let left: Vec<_> = n
                .tasks()
                .iter()
                .filter(|(_, t)| !matches!(t.state, TaskState::Done { .. }))
                .collect();
            assert!(
                left.is_empty(),
                "{policy}: node {} still has {left:?}",
                n.id().0
            );
        }
    }
}

#[test]
fn a_restarted_node_replays_its_tasks_without_running_them_twice() {
    let mut c = Cluster::new(3, "min");
    for _ in 0..30 {
        c.step();
    }
    for id in 0..18u64 {
        c.submit(0, id);
    }
    // Let some tasks finish, then restart node 0 with a blank memory and the journal's replay
    // (every task it accepted, as the store would return the unfinished ones and more).
    while c.finished.len() < 6 {
        c.step();
    }
    c.forget(0);
    for id in 0..18u64 {
        c.submit(0, id);
    }
    let mut steps = 0;
    while c.finished.len() < 18 && steps < 10_000 {
        c.step();
        steps += 1;
    }
    assert_eq!(c.finished.len(), 18);
    assert!(
        c.finished.values().all(|n| *n == 1),
        "a task ran to completion twice: {:?}",
        c.finished
    );
}

#[test]
fn a_cancelled_task_stops_wherever_it_runs() {
    let mut c = Cluster::new(2, "min");
    for _ in 0..30 {
        c.step();
    }
    c.submit(0, 1);
    while c.running.is_empty() {
        c.step();
    }
    let runner = c.running[0].1;
    let other = 1 - runner;
    let acts = c.nodes[other].cancel(TaskId(1)).unwrap();
    c.act(other, acts);
    for _ in 0..20 {
        c.step();
    }
    assert!(
        c.running.is_empty(),
        "the runner did not stop the cancelled task"
    );
    assert!(c.finished.is_empty());
    for n in &c.nodes {
        assert!(matches!(
            n.tasks()[&TaskId(1)].state,
            TaskState::Done { .. }
        ));
    }
    assert!(c.nodes[0].cancel(TaskId(1)).is_none(), "already ended");
}

#[test]
fn a_dead_node_loses_no_task() {
    let mut c = Cluster::new(3, "min");
    for _ in 0..30 {
        c.step();
    }
    for id in 0..24u64 {
        c.submit((id % 3) as usize, id);
    }
    // Run until node 2 runs something, then kill it.
    let mut guard = 0;
    while !c.running.iter().any(|(_, n, _)| *n == 2) && guard < 1000 {
        c.step();
        guard += 1;
    }
    let lost: BTreeSet<TaskId> = c
        .running
        .iter()
        .filter(|(_, n, _)| *n == 2)
        .map(|(_, _, t)| *t)
        .collect();
    assert!(!lost.is_empty());
    c.kill(2);
    let mut steps = 0;
    while c.finished.len() < 24 && steps < 10_000 {
        c.step();
        steps += 1;
    }
    assert_eq!(c.finished.len(), 24, "finished {:?}", c.finished.keys());
    assert!(c.finished.values().all(|n| *n == 1));
    for t in lost {
        let TaskState::Done { node, .. } = &c.nodes[0].tasks()[&t].state else {
            panic!("{t} not done");
        };
        assert_ne!(*node, NodeId(2), "{t} finished on the dead node");
    }
}

#[test]
fn an_id_known_with_another_task_is_refused() {
    let mut c = Cluster::new(2, "min");
    for _ in 0..40 {
        c.step();
    }
    c.submit(0, 5);
    c.step();
    c.step();
    // Node 1 now knows t5; a node that lost its counter announces another task under it.
    let mut other = spec();
    other.command = vec!["other".into()];
    let task = c.nodes[0].tasks()[&TaskId(5)].task.as_ref().clone();
    let e = Envelope {
        version: WIRE_VERSION,
        from: NodeId(0),
        seq: 999,
        body: Body::Announce {
            task,
            spec: other,
            owner: Some(NodeId(0)),
            epoch: 0,
            runs: None,
        },
    };
    let acts = c.nodes[1].on_message(e, c.now);
    assert!(
        matches!(
            &acts[..],
            [Action::Refused {
                task: Some(TaskId(5)),
                ..
            }]
        ),
        "{acts:?}"
    );
    assert_eq!(c.nodes[1].stats().refused_announces, 1);
    assert_eq!(c.nodes[1].tasks()[&TaskId(5)].meta.spec, spec());
}

#[test]
fn a_killed_node_restarted_within_the_autonomy_time_keeps_its_copies() {
    let mut c = Cluster::new(3, "min");
    c.work_ms = 2000;
    for _ in 0..40 {
        c.step();
    }
    for id in 0..6u64 {
        c.submit((id % 3) as usize, id);
    }
    while !c.running.iter().any(|(_, n, _)| *n == 2) {
        c.step();
    }
    // Node 2's agent dies; its task processes live on (adopted on restart, as the agent's
    // supervisor allows). It comes back after 600 ms: beyond the peer timeout, within autonomy.
    let adopted: Vec<(TaskId, TaskEntry)> = c.nodes[2]
        .tasks()
        .iter()
        .filter(|(_, t)| matches!(&t.state, TaskState::Running { node, .. } if *node == NodeId(2)))
        .map(|(id, t)| (id, t.clone()))
        .collect();
    assert!(!adopted.is_empty());
    c.alive[2] = false;
    for _ in 0..60 {
        c.step();
    }
    let mut cfg = c.nodes[2].config().clone();
    cfg.incarnation = 2;
    cfg.known = c.nodes[2].known().clone();
    cfg.lease_age_ms = Some(600);
    let ctx = baselines::BaselineContext {
        num_types: 1,
        cpu_kind: 0,
        gpu_kind: 1,
        profile: Vec::new(),
    };
    let mut fresh = NodeCore::new(cfg, baselines::by_name("min", &ctx).unwrap(), 7);
    for (_, t) in &adopted {
        let acts = fresh.restore(
            (*t.task).clone(),
            t.meta.spec.clone(),
            t.state.clone(),
            t.meta.owner,
            t.meta.epoch,
        );
        assert!(acts.is_empty());
    }
    c.nodes[2] = fresh;
    c.alive[2] = true;
    c.run_until_finished(6, 20_000);
    assert_eq!(c.finished.len(), 6);
    assert!(c.overlaps.is_empty(), "{:?}", c.overlaps);
    assert!(
        c.started.values().all(|n| *n == 1),
        "a task started twice: {:?}",
        c.started
    );
}

/// Preemption across nodes that each decide from their own ledger: three boxes full of batch
/// work (class 2, a core each), then three urgent tasks (class 0) each needing a whole box.
/// Every urgent task gets a box — the boxes' plans agree, so no box stops more than one urgent
/// task needs (4 victims each, 12 in all) — no box ever runs more cores than it has while the
/// victims take 200 ms to die, and every task still runs to completion exactly once.
#[test]
fn lower_classes_make_room_for_urgent_tasks_once_and_within_capacity() {
    let mut c = Cluster::with(3, "min", |cfg| cfg.preempt = true);
    c.work_ms = 6000;
    c.stop_ms = 200;
    for _ in 0..60 {
        c.step();
    }
    for id in 0..12u64 {
        c.submit_with((id % 3) as usize, id, 2, 1);
        c.step();
    }
    for _ in 0..60 {
        c.step();
    }
    assert_eq!(
        c.running.len(),
        12,
        "the batch work does not fill the boxes"
    );
    for id in 100..103u64 {
        c.submit_with((id % 3) as usize, id, 0, 4);
    }
    // Urgent tasks start once their victims are gone (each 6000 ms / 4 cores = 1.5 s).
    let mut steps = 0;
    while !(100..103).all(|id| c.started.contains_key(&TaskId(id))) && steps < 500 {
        c.step();
        steps += 1;
    }
    for id in 100..103u64 {
        assert_eq!(
            c.started.get(&TaskId(id)),
            Some(&1),
            "urgent t{id} did not start once"
        );
    }
    let preempted: u64 = c.nodes.iter().map(|n| n.stats().preempted).sum();
    assert_eq!(
        preempted, 12,
        "boxes stopped {preempted} tasks for 3 urgent ones of 4 cores"
    );
    c.run_until_finished(15, 5000);
    assert_eq!(c.finished.len(), 15, "{:?}", c.finished);
    assert!(c.finished.values().all(|n| *n == 1), "{:?}", c.finished);
    assert!(c.overlaps.is_empty(), "{:?}", c.overlaps);
    assert!(c.breaches.is_empty(), "{:?}", c.breaches);
    // Each victim was counted with the work it lost, on the box that stopped it.
    let counted: u32 = c
        .nodes
        .iter()
        .flat_map(|n| n.preempted().values())
        .map(|p| p.times)
        .sum();
    assert_eq!(counted, 12);
}

/// A node whose resource steps differ from its peers' (a box sharing GPUs in quarters among
/// boxes counting whole devices) is not heard: its peers refuse it once, saying why, never
/// count it a peer, and place nothing there; the others go on among themselves.
#[test]
fn a_node_with_other_resource_steps_is_not_heard() {
    let mut c = Cluster::with(3, "min", |cfg| {
        cfg.steps = if cfg.me == NodeId(2) {
            vec![1.0, 0.25]
        } else {
            vec![1.0, 1.0]
        };
    });
    let mut odd = None;
    for _ in 0..40 {
        c.step();
        odd = odd.or_else(|| {
            c.bus
                .iter()
                .find(|(_, _, e)| e.from == NodeId(2) && matches!(e.body, Body::Heartbeat(_)))
                .map(|(_, _, e)| e.clone())
        });
    }
    for n in 0..2 {
        assert_eq!(
            c.nodes[n].peers().count(),
            1,
            "node {n} hears only its like"
        );
        assert!(!c.nodes[n].peers().any(|p| p == NodeId(2)));
    }
    // What a node says when the odd node's heartbeats reach it: one refusal, saying why.
    let odd = odd.expect("node 2 sends heartbeats");
    let mut fresh = Cluster::with(1, "min", |cfg| cfg.steps = vec![1.0, 1.0]);
    let mut refusals = fresh.nodes[0].on_message(odd.clone(), 0);
    refusals.extend(fresh.nodes[0].on_message(odd, 10));
    assert!(
        matches!(&refusals[..], [Action::Refused { task: None, reason, .. }] if reason.contains("gpu 0.25")),
        "refused once, saying why: {refusals:?}"
    );
    for id in 0..6u64 {
        c.submit((id % 2) as usize, id);
    }
    let mut steps = 0;
    while c.finished.len() < 6 && steps < 5000 {
        c.step();
        assert!(
            c.running.iter().all(|(_, node, _)| *node != 2),
            "nothing runs on the node not heard"
        );
        steps += 1;
    }
    assert_eq!(c.finished.len(), 6);
}
