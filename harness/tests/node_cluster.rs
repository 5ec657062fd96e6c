//! The node cores of a cluster under the harness: every task finishes exactly once, no node
//! ever allocates more than its capacity, a node that dies mid-run loses no task, partitions and
//! restarts never run two copies at once, and all nodes agree on every outcome.

// Test helpers may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use tapfinger::baselines;
use tapfinger::node::{Action, NodeCore, TaskEntry, TaskState};
use tapfinger::task::{NodeId, TaskId};
use tapfinger::wire::{Body, Envelope, WIRE_VERSION};
use tapfinger_harness::{Cluster, STEP, spec};

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

fn partition(cut_ms: u64, work_ms: u64) -> Cluster {
    partition_with(cut_ms, work_ms, 0, 30)
}

/// Nodes 0 and 1 cut off from the rest for `cut_ms` while tasks `15..tasks` are submitted round
/// the nodes (15 are under way before), stopped copies taking `stop_ms` to end; then healed and
/// run until every task finished.
fn partition_with(cut_ms: u64, work_ms: u64, stop_ms: u64, tasks: u64) -> Cluster {
    let mut c = Cluster::busy(work_ms);
    c.stop_ms = stop_ms;
    c.side = vec![1, 1, 0, 0, 0];
    // Tasks submitted on both sides during the cut.
    for id in 15..tasks {
        c.submit((id % 5) as usize, id);
    }
    for _ in 0..cut_ms / STEP {
        c.step();
    }
    c.side = vec![0; 5];
    c.run_until_finished(tasks as usize, 30_000);
    for _ in 0..60 {
        c.step();
    }
    c
}

fn assert_agree(c: &Cluster) {
    let o = c.outcomes();
    for (i, m) in o.iter().enumerate() {
        for (id, s) in m {
            assert_eq!(
                Some(s),
                o[0].get(id),
                "node {i} and node 0 disagree on {id}"
            );
        }
        assert_eq!(m.len(), o[0].len(), "node {i} knows other tasks");
    }
}

#[test]
fn a_partition_shorter_than_the_autonomy_time_runs_nothing_twice() {
    // Longer than the peer timeout (300 ms), shorter than the autonomy time (1 s).
    let c = partition(700, 3000);
    assert_eq!(c.finished.len(), 30, "finished {:?}", c.finished.keys());
    assert!(c.overlaps.is_empty(), "copies overlapped: {:?}", c.overlaps);
    assert!(
        c.started.values().all(|n| *n == 1),
        "a task started twice: {:?}",
        c.started
    );
    assert_agree(&c);
}

#[test]
fn a_partition_longer_than_the_autonomy_time_never_overlaps_and_heals_to_one_outcome() {
    // Takeover after 300 + 1000 + 1100 ms; the cut lasts 5 s; tasks run 3 s.
    let c = partition(5000, 3000);
    assert_eq!(c.finished.len(), 30, "finished {:?}", c.finished.keys());
    assert!(c.overlaps.is_empty(), "copies overlapped: {:?}", c.overlaps);
    assert!(
        c.started.values().any(|n| *n > 1),
        "the majority side took nothing over: {:?}",
        c.started
    );
    // The minority nodes (0 and 1) stopped what they ran when their lease lapsed.
    let stops: u64 = c.nodes[..2].iter().map(|n| n.stats().lease_stops).sum();
    assert!(stops > 0, "the cut-off side stopped nothing");
    // Every start carried an epoch no other start of the task carried, including the starts
    // of the two sides, which could not hear of each other's.
    for (id, e) in &c.epochs {
        let unique: BTreeSet<_> = e.iter().collect();
        assert_eq!(unique.len(), e.len(), "{id}: starts shared an epoch: {e:?}");
    }
    assert_agree(&c);
    let o = c.outcomes();
    for (id, s) in &o[0] {
        assert!(
            matches!(s, TaskState::Done { code: Some(0), .. }),
            "{id}: {s:?}"
        );
    }
}

/// A queue known on both sides when a cut longer than the autonomy time begins: the cut-off
/// side starts the queued tasks it owns while its lease holds, and the other side, which never
/// heard those starts, takes the same tasks over after the takeover time. The two starts of
/// such a task carry different epochs (each side's counter is the same; the node ids differ),
/// so a task's storage fencing on the epoch keeps one of them.
#[test]
fn starts_on_both_sides_of_a_long_cut_carry_different_epochs() {
    let mut c = Cluster::new(5, "min");
    c.work_ms = 800;
    for _ in 0..40 {
        c.step();
    }
    for id in 0..60u64 {
        c.submit((id % 5) as usize, id);
    }
    for _ in 0..10 {
        c.step();
    }
    c.side = vec![1, 1, 0, 0, 0];
    for _ in 0..5000 / STEP {
        c.step();
    }
    c.side = vec![0; 5];
    c.run_until_finished(60, 30_000);
    assert!(c.overlaps.is_empty(), "copies overlapped: {:?}", c.overlaps);
    let twice: Vec<_> = c.epochs.iter().filter(|(_, e)| e.len() > 1).collect();
    assert!(
        !twice.is_empty(),
        "no task started twice: the scenario tests nothing"
    );
    for (id, e) in twice {
        let unique: BTreeSet<_> = e.iter().collect();
        assert_eq!(unique.len(), e.len(), "{id}: starts shared an epoch: {e:?}");
    }
}

/// After a cut longer than the autonomy time, both sides ran some tasks; the heal stops the
/// copies that lost (the cut-off side finished them, the other side took them over). Those
/// copies take 400 ms to die, as a killed process group on a loaded box can, while a queue
/// waits: no box may start new work on their units meanwhile. Judged from the copies alive per
/// box, not from what the nodes count. (The fault harness saw a box run three copies at once on
/// two CPUs when a stop freed the units at once.)
#[test]
fn a_stopped_copy_holds_its_units_until_it_has_ended() {
    let mut seen_stops = 0;
    for (cut_ms, work_ms) in [(3000, 1000), (3000, 1200), (3200, 1100)] {
        let c = partition_with(cut_ms, work_ms, 400, 80);
        assert_eq!(c.finished.len(), 80, "finished {:?}", c.finished.keys());
        assert!(c.overlaps.is_empty(), "copies overlapped: {:?}", c.overlaps);
        assert!(
            c.breaches.is_empty(),
            "copies alive beyond a box's 4 cores (node, cores, ms): {:?}",
            c.breaches
        );
        seen_stops += c
            .nodes
            .iter()
            .map(|n| n.stats().copies_stopped)
            .sum::<u64>();
        assert_agree(&c);
    }
    assert!(
        seen_stops > 0,
        "no copy was stopped: the test tried nothing"
    );
}

#[test]
fn a_node_back_from_a_cut_takes_over_nothing_its_quorum_still_hears() {
    // Nodes 0 and 1 are cut off long enough to lose their lease (300 + 1000 ms), not long
    // enough for a takeover (2.4 s). The heal reaches them from 2 and 3 but not from 4, which
    // keeps its quorum with 2 and 3 and its copies running. To 0 and 1, node 4 has been silent
    // since the cut: that silence, measured while they had no quorum, proves nothing, and 2 and
    // 3 still hear 4, so nothing of node 4's may be taken over. (A fault CI met with real
    // agents: a copy started on the healed side while its first copy still ran.)
    let mut c = Cluster::busy(8000);
    let on4: BTreeSet<TaskId> = c
        .running
        .iter()
        .filter(|(_, n, _)| *n == 4)
        .map(|(_, _, t)| *t)
        .collect();
    assert!(!on4.is_empty(), "node 4 runs nothing");
    c.side = vec![1, 1, 0, 0, 0];
    for _ in 0..2000 / STEP {
        c.step();
    }
    c.side = vec![0; 5];
    c.cut = [(0, 4), (4, 0), (1, 4), (4, 1)].into_iter().collect();
    for _ in 0..3000 / STEP {
        c.step();
    }
    assert!(c.nodes[0].has_quorum(c.now), "node 0 is back in a quorum");
    c.cut.clear();
    c.run_until_finished(15, 20_000);
    assert_eq!(c.finished.len(), 15, "finished {:?}", c.finished.keys());
    assert!(c.overlaps.is_empty(), "copies overlapped: {:?}", c.overlaps);
    for t in &on4 {
        assert_eq!(c.started.get(t), Some(&1), "{t} of node 4 started again");
    }
    for _ in 0..40 {
        c.step();
    }
    assert_agree(&c);
}

#[test]
fn a_node_without_a_quorum_starts_nothing_once_its_lease_lapsed() {
    let mut c = Cluster::new(3, "min");
    for _ in 0..40 {
        c.step();
    }
    // Node 0 alone on its side: no quorum (1 of 3).
    c.side = vec![1, 0, 0];
    for _ in 0..200 {
        c.step();
    }
    assert!(!c.nodes[0].has_quorum(c.now));
    assert!(!c.nodes[0].lease_held(c.now));
    assert!(c.nodes[1].has_quorum(c.now));
    c.submit(0, 7);
    for _ in 0..100 {
        c.step();
    }
    assert!(
        c.started.is_empty(),
        "a node without a lease started a task"
    );
    c.side = vec![0; 3];
    c.run_until_finished(1, 5000);
    assert_eq!(c.started.get(&TaskId(7)), Some(&1));
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
                task: TaskId(5),
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

#[test]
fn lost_finish_messages_are_made_good_by_heartbeats() {
    let mut c = Cluster::new(3, "min");
    c.lose_finishes = true;
    for _ in 0..40 {
        c.step();
    }
    for id in 0..9u64 {
        c.submit((id % 3) as usize, id);
    }
    c.run_until_finished(9, 10_000);
    for _ in 0..20 {
        c.step();
    }
    assert_eq!(c.finished.len(), 9);
    assert!(c.finished.values().all(|n| *n == 1), "{:?}", c.finished);
    assert_agree(&c);
    for (id, s) in &c.outcomes()[0] {
        assert!(s.succeeded(), "{id}: {s:?}");
    }
}

/// Anti-entropy is bounded: when a peer comes back after the peer timeout, each task is told by
/// one node (its owner, or the node running it), not by every node that knows it. Before, every
/// node announced every pending task to every (re)joining peer, which under load made the
/// cluster's traffic grow with nodes × tasks at every rejoin.
#[test]
fn a_returning_peer_is_told_each_task_once() {
    let mut c = Cluster::new(6, "min");
    // Long tasks, more than fit: some run, the rest wait, and every node knows all of them.
    c.work_ms = 1_000_000;
    for _ in 0..40 {
        c.step();
    }
    for id in 0..60u64 {
        c.submit((id % 6) as usize, id);
    }
    for _ in 0..100 {
        c.step();
    }
    let announced = |c: &Cluster| -> u64 {
        c.nodes
            .iter()
            .map(|n| n.stats().sent.get("announce").copied().unwrap_or(0))
            .sum()
    };
    let pending = |c: &Cluster| {
        c.nodes[0]
            .tasks()
            .iter()
            .filter(|(_, t)| t.state == TaskState::Pending)
            .count()
    };
    assert!(pending(&c) > 20, "tasks wait (else the test shows nothing)");
    let before = announced(&c);
    // Node 5 is cut off for longer than the peer timeout (300 ms), less than the takeover.
    c.side[5] = 1;
    for _ in 0..50 {
        c.step();
    }
    assert_eq!(c.nodes[0].peers().count(), 4, "node 5 timed out");
    c.side[5] = 0;
    for _ in 0..100 {
        c.step();
    }
    assert_eq!(c.nodes[0].peers().count(), 5, "node 5 is back");
    let told = announced(&c) - before;
    assert!(told > 0, "the returning peer was greeted");
    assert!(
        told <= 60,
        "{told} announcements for 60 tasks: some task was told by more than one node"
    );
}

/// Without faults nobody asks about anything: a copy started in the round just decided is often
/// not yet in its runner's heartbeat, and is asked about only if it stays unlisted for a peer
/// timeout. (Asking at once drew a question from nearly every node for every start.)
#[test]
fn a_cluster_without_faults_sends_no_want() {
    let mut c = Cluster::new(6, "min");
    c.work_ms = 400;
    // Node 5 hears everything 40 ms late, so it decides each round after the others, and its
    // heartbeats often predate the starts they have just decided.
    c.inbound_delay[5] = 40;
    for _ in 0..40 {
        c.step();
    }
    for id in 0..60u64 {
        c.submit((id % 6) as usize, id);
        c.step();
    }
    c.run_until_finished(60, 10_000);
    assert_eq!(c.finished.len(), 60);
    let wants: u64 = c
        .nodes
        .iter()
        .map(|n| n.stats().sent.get("want").copied().unwrap_or(0))
        .sum();
    assert_eq!(wants, 0, "questions in a cluster without faults");
    let exchanges: u64 = c
        .nodes
        .iter()
        .flat_map(|n| ["ranges", "ids"].map(|k| n.stats().sent.get(k).copied().unwrap_or(0)))
        .sum();
    // A task submitted every 10 ms reaches the nodes at different times, so heartbeats' digests
    // differ now and then and an exchange follows: at most a ranges message a node per 5
    // heartbeats, and the ids of the blocks that differed; never a question.
    let heartbeats: u64 = c
        .nodes
        .iter()
        .map(|n| n.stats().sent.get("heartbeat").copied().unwrap_or(0))
        .sum();
    let ranges: u64 = c
        .nodes
        .iter()
        .map(|n| n.stats().sent.get("ranges").copied().unwrap_or(0))
        .sum();
    println!("{exchanges} anti-entropy messages ({ranges} ranges) for {heartbeats} heartbeats");
    assert!(
        5 * ranges <= heartbeats,
        "{ranges} ranges for {heartbeats} heartbeats"
    );
}

/// Two nodes restarted with no memory at all once every task has finished (they forgot the
/// tasks they ran for others, and the others' greets are long past): node 2, which ran some, and
/// node 0, the lowest id, which answers for a runner that is asking itself. The digests in the
/// heartbeats differ, and the ranges, ids and questions that follow teach both every task and
/// outcome their peers know, within a few heartbeats; the questions that the designated node
/// cannot answer (it forgot too) are answered by every node that knows when asked again.
#[test]
fn nodes_restarted_without_their_memory_relearn_every_task_from_their_peers() {
    let mut c = Cluster::new(4, "min");
    c.work_ms = 300;
    for _ in 0..40 {
        c.step();
    }
    for id in 0..40u64 {
        c.submit((id % 4) as usize, id);
        c.step();
    }
    c.run_until_finished(40, 10_000);
    for _ in 0..40 {
        c.step();
    }
    for i in [0, 2] {
        c.forget(i);
        assert!(c.outcomes()[i].is_empty());
    }
    let mut steps = 0;
    while (c.outcomes()[0].len() < 40 || c.outcomes()[2].len() < 40) && steps < 2_000 {
        c.step();
        steps += 1;
    }
    // Heartbeats every 100 ms (10 steps): well within 30 heartbeats.
    assert!(
        steps < 300,
        "relearned {} and {} of 40 tasks in {steps} steps",
        c.outcomes()[0].len(),
        c.outcomes()[2].len()
    );
    for _ in 0..50 {
        c.step();
    }
    assert_agree(&c);
    let sent = c.nodes[2].stats().sent.clone();
    assert!(
        sent.get("ranges").copied().unwrap_or(0) > 0,
        "it learned through something else: {sent:?}"
    );
    assert_eq!(c.finished.len(), 40);
    assert!(c.finished.values().all(|n| *n == 1), "{:?}", c.finished);
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
