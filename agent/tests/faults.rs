//! The fault harness: five real agent processes, each in a network namespace of its own, joined by
//! a bridge in a namespace the test builds (nothing outside it is touched), running tasks that
//! write their own records. Scenarios: (a) SIGKILL two agents mid-run and restart them; (b) a 2|3
//! partition longer than the peer timeout, shorter than the autonomy time; (c) a 2|3 partition of
//! 30 s, longer than the takeover time; (d) restart agents with their data directories and submit
//! again, then restart them with every task finished and compare their whole task lists with
//! their peers'; (e) restart one with its data directory deleted; (f) SIGKILL two agents and their
//! task supervisors, restart them; (g) the same without a restart; (h) a one-way cut longer than
//! the takeover time.
//!
//! Every verdict comes from the records the tasks write (start, a line every 100 ms, end; with the
//! node and epoch the agent gave them; `gone` from a watcher the task starts outside its process
//! group, when a killed copy's shell has ended), never from the agents' own reports, except
//! agreement and healing, which are about those reports: every task ran to completion at least
//! once, no two copies of a task were ever alive at the same time, no node ran more copies than
//! its capacity, no two copies of a task carried the same epoch, and, where the scenario allows
//! none, no task was started twice; then every agent reports the same outcome for every task.
//! After a cut heals it measures how long until every agent is connected to every other and
//! every agent lists the same tasks in the same states (asserted loosely, [`MESH_BOUND`] and
//! [`AGREE_BOUND`]).
//!
//! It needs root, `ip` (iproute2) and network namespaces; without them it fails (CI has them).
//! It prints its figures per scenario (lost, overlapping, twice-run copies; heal and agreement
//! times).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/evidence.rs"]
mod evidence;
#[path = "support/net.rs"]
mod net;
#[path = "support/process.rs"]
mod process;
use cluster::Cluster;
use evidence::TASK;

const AGENTS: usize = 5;
const CPUS: u64 = 2;
const HEARTBEAT_MS: u64 = 200;
const PEER_TIMEOUT_MS: u64 = 1000;
const AUTONOMY_MS: u64 = 6000;

/// What a scenario allows beyond the shared verdicts.
#[derive(Clone, Copy, PartialEq)]
enum Runs {
    /// No task may start twice.
    Once,
    /// A task may start again after its copy was killed, but completes once.
    CompletedOnce,
    /// A task may complete twice (never at the same time): a partition longer than the
    /// autonomy time, where the cut-off side finished what the other side then ran again.
    Any,
}

/// The verdicts every scenario shares, and what `runs` allows.
fn verdict(name: &str, c: &Cluster, runs: Runs, settled: Duration) {
    let ev = c.evidence();
    let lost: Vec<&String> = c
        .submitted
        .keys()
        .filter(|k| {
            !ev.copies
                .get(*k)
                .is_some_and(|cs| cs.iter().any(|x| x.ended))
        })
        .collect();
    let overlaps = ev.overlaps();
    let peaks = ev.peak_per_node();
    let breaches: Vec<_> = peaks.iter().filter(|(_, p)| **p > CPUS).collect();
    let twice = ev.started_twice();
    let done_twice = ev.completed_twice();
    let (killed, timed) = ev.killed();
    let shared = ev.shared_epochs();
    println!(
        "scenario {name}: {} tasks, {} lost, {} overlapping copies, {} started twice ({} sharing an epoch), {} completed twice, {} capacity breaches (peak copies per node {:?}), {killed} copies killed ({timed} timed by their watcher, the rest counted alive 150 ms past their last line), agreement after {:.1} s",
        c.submitted.len(),
        lost.len(),
        overlaps.len(),
        twice.len(),
        shared.len(),
        done_twice.len(),
        breaches.len(),
        peaks,
        settled.as_secs_f64()
    );
    assert!(lost.is_empty(), "{name}: lost {lost:?}");
    assert!(
        overlaps.is_empty(),
        "{name}: copies overlapped {overlaps:?}"
    );
    assert!(breaches.is_empty(), "{name}: over capacity {breaches:?}");
    assert!(
        shared.is_empty(),
        "{name}: copies of a task shared an epoch {shared:?}"
    );
    if runs != Runs::Any {
        assert!(
            done_twice.is_empty(),
            "{name}: completed twice {done_twice:?}"
        );
    }
    if runs == Runs::Once {
        assert!(twice.is_empty(), "{name}: started twice {twice:?}");
    }
    let ids: BTreeSet<u64> = c.submitted.values().map(|(_, id)| *id).collect();
    assert_eq!(
        ids.len(),
        c.submitted.len(),
        "{name}: an id was given twice"
    );
}

fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

fn scenario_a() {
    let mut c = Cluster::start("a");
    for k in 0..15 {
        c.submit(k % AGENTS, 40);
    }
    sleep_ms(2500);
    c.kill(1);
    c.kill(3);
    // Back well within the autonomy time: they adopt what their supervisors kept running.
    sleep_ms(2500);
    c.spawn(1);
    c.spawn(3);
    let t = c.settle(Duration::from_secs(120));
    verdict("a (SIGKILL 2 of 5, restart)", &c, Runs::Once, t);
}

/// How the harness cuts the network.
#[derive(Clone, Copy, PartialEq)]
enum Cut {
    /// Agents 0 and 1 on a bridge of their own (2|3).
    Split,
    /// Packets from agents 0 and 1 to the other three dropped; the other way still carries.
    OneWay,
}

/// The loose bounds on healing the harness asserts (a loaded 2-core CI machine runs five
/// agents and their tasks); the bench figures in the results document are measured alone.
const MESH_BOUND: Duration = Duration::from_secs(10);
const AGREE_BOUND: Duration = Duration::from_secs(20);

fn partition(name: &str, cut_ms: u64, runs: Runs, how: Cut) {
    let mut c = Cluster::start(name);
    for k in 0..10 {
        c.submit(k % AGENTS, 50);
    }
    sleep_ms(1500);
    let cutting = Instant::now();
    match how {
        Cut::Split => c.net.cut(&[0, 1]),
        Cut::OneWay => c.net.cut_one_way(&[0, 1], &[2, 3, 4]),
    }
    // The cut lasts `cut_ms` from the moment it is in place, whatever the submissions below
    // take: on a loaded machine ten of them took seconds, and a "3 s" cut outlasted the
    // autonomy time (the cut-off side then rightly stopped its copies and ran them again).
    let cut = Instant::now();
    // Work submitted on both sides while they are apart.
    for k in 0..10 {
        c.submit(k % AGENTS, 30);
    }
    std::thread::sleep(Duration::from_millis(cut_ms).saturating_sub(cut.elapsed()));
    // Each agent's count of connected peers at the end of the cut (a cut link is noticed and its
    // connection closed, so the count is what each side can reach).
    let during: Vec<u64> = (0..AGENTS)
        .map(|i| {
            c.json(i, "/v1/node")
                .and_then(|v| v["peers"].as_u64())
                .unwrap_or(99)
        })
        .collect();
    match how {
        Cut::Split => c.net.cut(&[]),
        Cut::OneWay => c.net.mend_one_way(&[0, 1], &[2, 3, 4]),
    }
    let apart = cutting.elapsed();
    let (mesh, agree) = c.heal(Duration::from_secs(60));
    let secs = |d: Option<Duration>| {
        d.map_or("never".to_string(), |d| format!("{:.1} s", d.as_secs_f64()))
    };
    println!(
        "scenario {name}: apart for {:.1} s (the cut took {:.1} s to set up; peers each agent had at its end {during:?}); after the heal the mesh was whole in {}, every agent's view the same in {}",
        apart.as_secs_f64(),
        (cut - cutting).as_secs_f64(),
        secs(mesh),
        secs(agree),
    );
    if runs == Runs::Once {
        // The scenario's premise: shorter than the autonomy time (the lease lapses one peer
        // timeout after the cut, plus the autonomy time). Otherwise it tests something else.
        assert!(
            apart < Duration::from_millis(AUTONOMY_MS),
            "{name}: the harness could not keep the cut under the autonomy time ({apart:?}): \
             the machine is too loaded for this scenario"
        );
    }
    assert!(
        mesh.is_some_and(|d| d <= MESH_BOUND),
        "{name}: mesh whole after {mesh:?}"
    );
    assert!(
        agree.is_some_and(|d| d <= AGREE_BOUND),
        "{name}: views the same after {agree:?}"
    );
    let t = c.settle(Duration::from_secs(150));
    verdict(name, &c, runs, t);
}

fn scenario_d() {
    let mut c = Cluster::start("d");
    for k in 0..10 {
        c.submit(k % AGENTS, 30);
    }
    sleep_ms(1500);
    for i in [0, 2] {
        c.kill(i);
        c.spawn(i);
    }
    c.wait_peers();
    // The restarted agents number new tasks after every id they gave before.
    for k in 0..10 {
        c.submit([0, 2][k % 2], 10);
    }
    let t = c.settle(Duration::from_secs(120));
    verdict("d (restart with data, submit again)", &c, Runs::Once, t);
    // Restarted again once every task has finished: each relearns every task its peers list
    // (those it ran for another agent, and those that ran elsewhere, included), each in the
    // same state, within seconds of its restart.
    for i in [0, 2] {
        c.kill(i);
        c.spawn(i);
    }
    let t0 = Instant::now();
    c.wait_peers();
    let mut last = c.same_views();
    while let Err(e) = last {
        assert!(
            t0.elapsed() < AGREE_BOUND,
            "d: a restarted agent's view is not its peers': {e}"
        );
        sleep_ms(100);
        last = c.same_views();
    }
    println!(
        "scenario d: after a restart with every task finished, every agent lists the same {} tasks within {:.1} s",
        c.views().map_or(0, |v| v[0].1.len()),
        t0.elapsed().as_secs_f64()
    );
}

/// Agents 1 and 3 and their task supervisors SIGKILLed at once (an OOM kill, `kill -9` of the
/// agent's processes); `restart`: back 3 s later with their data, else never. The tasks die with
/// their supervisors (their guards kill them), so no copy runs on while another starts: a
/// restarted agent requeues them, or, not restarted, its peers take them over after the
/// takeover time. Started twice, never at once, completed once.
fn scenario_supervisors(restart: bool) {
    let name = if restart {
        "f (SIGKILL 2 agents and their supervisors, restart)"
    } else {
        "g (SIGKILL 2 agents and their supervisors, no restart)"
    };
    let mut c = Cluster::start(name);
    for k in 0..15 {
        c.submit(k % AGENTS, 60);
    }
    sleep_ms(2500);
    let killed = c.kill_with_supervisors(1) + c.kill_with_supervisors(3);
    println!("scenario {name}: {killed} supervisors killed with their agents");
    assert!(
        killed > 0,
        "{name}: no task ran on the killed agents: the scenario tests nothing"
    );
    if restart {
        sleep_ms(3000);
        c.spawn(1);
        c.spawn(3);
        c.wait_peers();
    }
    let t = c.settle(Duration::from_secs(150));
    verdict(name, &c, Runs::CompletedOnce, t);
}

fn scenario_e() {
    let mut c = Cluster::start("e");
    for k in 0..10 {
        c.submit(k % AGENTS, 30);
    }
    sleep_ms(1500);
    c.kill(4);
    c.wipe(4);
    c.spawn(4);
    c.wait_peers();
    for _ in 0..5 {
        c.submit(4, 10);
    }
    let t = c.settle(Duration::from_secs(150));
    // Its running copies die with the lost lease file (their supervisors see no lease of theirs)
    // and run again elsewhere after the takeover time: started twice, never at once, completed
    // once.
    verdict(
        "e (restart with the data directory deleted)",
        &c,
        Runs::CompletedOnce,
        t,
    );
}

/// The probe, at the scale an operator would try (run on demand: `TAPFINGER_FAULTS_ONLY=probe`;
/// about three minutes): agents with the default autonomy time (120 s), 200 tasks of 2 s; two
/// agents and their task supervisors SIGKILLed mid-run and restarted 3 s later; then a 2|3 split
/// of 30 s (within the autonomy time: nothing runs twice for it), healed; every agent's whole
/// task list compared.
fn probe() {
    let mut c = Cluster::start_with("probe", 120_000);
    let t0 = Instant::now();
    for k in 0..200 {
        c.submit(k % AGENTS, 20);
    }
    let submitting = t0.elapsed();
    // Mid-run: once both agents run tasks.
    let t0 = Instant::now();
    while [1, 3]
        .iter()
        .any(|i| c.net.pids_running(*i, "supervise").is_empty())
    {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "probe: agents 1 and 3 ran nothing"
        );
        sleep_ms(100);
    }
    let killed = c.kill_with_supervisors(1) + c.kill_with_supervisors(3);
    println!(
        "scenario probe: 200 submissions took {:.1} s; {killed} supervisors killed with agents 1 and 3",
        submitting.as_secs_f64()
    );
    sleep_ms(3000);
    c.spawn(1);
    c.spawn(3);
    c.wait_peers();
    let t0 = Instant::now();
    while let Err(e) = c.same_views() {
        assert!(t0.elapsed() < AGREE_BOUND, "probe: after the restart: {e}");
        sleep_ms(100);
    }
    let restart_views = t0.elapsed();
    sleep_ms(2000);
    c.net.cut(&[0, 1]);
    sleep_ms(30_000);
    c.net.cut(&[]);
    let (mesh, agree) = c.heal(Duration::from_secs(60));
    println!(
        "scenario probe: after the restart of agents 1 and 3 every agent listed the same tasks within {:.1} s of them answering; after the 30 s split the mesh was whole in {mesh:?}, every agent's view the same in {agree:?}",
        restart_views.as_secs_f64()
    );
    let t = c.settle(Duration::from_secs(300));
    verdict(
        "probe (200 tasks, kills, a 30 s split)",
        &c,
        Runs::CompletedOnce,
        t,
    );
    assert!(
        mesh.is_some_and(|d| d <= MESH_BOUND),
        "probe: mesh whole after {mesh:?}"
    );
    assert!(
        agree.is_some_and(|d| d <= AGREE_BOUND),
        "probe: views the same after {agree:?}"
    );
}

#[test]
fn the_cluster_never_loses_nor_overlaps_a_task_under_crashes_and_partitions() {
    if std::env::var_os("TAPFINGER_FAULTS_ONLY").is_some_and(|s| !s.is_empty()) {
        // A single scenario, for debugging: TAPFINGER_FAULTS_ONLY=c.
        let which = std::env::var("TAPFINGER_FAULTS_ONLY").unwrap_or_default();
        match which.as_str() {
            "a" => scenario_a(),
            "b" => partition("b (partition 2|3, 3 s)", 3000, Runs::Once, Cut::Split),
            "c" => partition("c (partition 2|3, 30 s)", 30_000, Runs::Any, Cut::Split),
            "d" => scenario_d(),
            "f" => scenario_supervisors(true),
            "g" => scenario_supervisors(false),
            "probe" => probe(),
            "h" => partition("h (one-way cut 2->3, 14 s)", 14_000, Runs::Any, Cut::OneWay),
            _ => scenario_e(),
        }
        return;
    }
    scenario_a();
    // Longer than the peer timeout (1 s), shorter than the autonomy time (6 s).
    partition("b (partition 2|3, 3 s)", 3000, Runs::Once, Cut::Split);
    // Longer than the takeover time (1 + 6 + 1.4 s), as long as an outage that took the mesh
    // half a minute to mend.
    partition("c (partition 2|3, 30 s)", 30_000, Runs::Any, Cut::Split);
    scenario_d();
    scenario_e();
    scenario_supervisors(true);
    scenario_supervisors(false);
    // A one-way cut longer than the takeover time.
    partition("h (one-way cut 2->3, 14 s)", 14_000, Runs::Any, Cut::OneWay);
}
