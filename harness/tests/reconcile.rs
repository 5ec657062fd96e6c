//! How the node cores of a cluster come to agree without faults costing questions: lost finish
//! messages made good by heartbeats, a returning peer told each task once, no questions in a
//! cluster without faults, and nodes restarted without their memory relearning every task from
//! their peers (anti-entropy).

// Test helpers may unwrap: a failure there is a test failure with its message.
#![allow(clippy::unwrap_used)]

use tapfinger_core::node::TaskState;
use tapfinger_harness::Cluster;

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
    c.assert_agree();
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
    c.assert_agree();
    let sent = c.nodes[2].stats().sent.clone();
    assert!(
        sent.get("ranges").copied().unwrap_or(0) > 0,
        "it learned through something else: {sent:?}"
    );
    assert_eq!(c.finished.len(), 40);
    assert!(c.finished.values().all(|n| *n == 1), "{:?}", c.finished);
}

/// A node restarted with no memory at all while the tasks it accepted are still pending (none
/// fits any box, so no heartbeat's running list or recent outcomes names them): it says that it
/// knows nothing (empty ranges), and its peer's ids teach it every one of them back.
#[test]
fn a_node_that_knows_nothing_relearns_its_pending_tasks() {
    let mut c = Cluster::new(2, "min");
    for _ in 0..40 {
        c.step();
    }
    for id in 0..5u64 {
        // Origin 0 (the upper half of the id), more cores than any box offers.
        c.submit_with(0, id, 0, 1_000);
        c.step();
    }
    for _ in 0..40 {
        c.step();
    }
    assert_eq!(c.outcomes()[1].len(), 5, "the peer knows them");
    c.forget(0);
    let mut steps = 0;
    while c.outcomes()[0].len() < 5 && steps < 2_000 {
        c.step();
        steps += 1;
    }
    assert_eq!(
        c.outcomes()[0].len(),
        5,
        "relearned {} of 5 pending tasks in {steps} steps",
        c.outcomes()[0].len()
    );
    assert!(
        c.outcomes()[0].values().all(|s| *s == TaskState::Pending),
        "{:?}",
        c.outcomes()[0]
    );
}
