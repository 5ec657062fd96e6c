//! Cluster benchmark: N agents (default 16) with the simulated executor, in this process on
//! loopback (all on one multi-threaded runtime; `--runtime per-agent`: each on a thread of its
//! own with a single-threaded runtime, as the agent binary runs), schedule M tasks (default 500) submitted round-robin at every agent. It fails (exit
//! code 1) on any duplicate or lost task, and on any capacity breach or task running on two
//! nodes at once in any sample (every 50 ms, each runner judged by its own record of the
//! allocations in force), and prints the negotiation
//! figures: round latency p50/p99 (from this node's proposal to the round's decision, estimated
//! from the agents' histograms as Prometheus would), messages per round, conflicts.
//!
//! `cargo bench -p tapfinger-tests --bench cluster [-- --agents 16 --tasks 500 --slot-ms 1000
//! --round-ms 300 --heartbeat-ms 250 --policy tapfinger --mesh full --runtime shared]`

use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use tapfinger::TaskId;
use tapfinger::node::NodeStats;
use tapfinger::node::TaskState;
use tapfinger_agent::daemon::Status;
use tapfinger_tests::{Exec, Local, finished, spec, statuses, wait};

struct Args {
    agents: usize,
    tasks: usize,
    slot_ms: u64,
    round_ms: u64,
    heartbeat_ms: u64,
    policy: String,
    /// Every agent dials every other (as when an operator lists every box), or only three
    /// (the first, its predecessor and the one at half its index), so that gossip must relay.
    full_mesh: bool,
    /// Each agent on a thread of its own with a single-threaded runtime, as the agent binary
    /// runs on a box, or all agents on one shared multi-threaded runtime (the default).
    own_threads: bool,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        agents: 16,
        tasks: 500,
        slot_ms: 1000,
        round_ms: 300,
        heartbeat_ms: 250,
        policy: "tapfinger".into(),
        full_mesh: true,
        own_threads: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--bench" {
            continue; // added by `cargo bench`
        }
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let num = |v: String| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--agents" => a.agents = num(value()?)? as usize,
            "--tasks" => a.tasks = num(value()?)? as usize,
            "--slot-ms" => a.slot_ms = num(value()?)?,
            "--round-ms" => a.round_ms = num(value()?)?,
            "--heartbeat-ms" => a.heartbeat_ms = num(value()?)?,
            "--policy" => a.policy = value()?,
            "--mesh" => {
                a.full_mesh = match value()?.as_str() {
                    "full" => true,
                    "sparse" => false,
                    other => return Err(format!("--mesh: {other}: expected full or sparse")),
                }
            }
            "--runtime" => {
                a.own_threads = match value()?.as_str() {
                    "per-agent" => true,
                    "shared" => false,
                    other => {
                        return Err(format!("--runtime: {other}: expected per-agent or shared"));
                    }
                }
            }
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    if a.agents < 2 || a.tasks == 0 {
        return Err("need at least 2 agents and 1 task".into());
    }
    // Refused here, with the known names, rather than by the first agent to start.
    tapfinger_agent::policy::build(&a.policy, None, 10).map_err(|e| format!("--policy: {e}"))?;
    Ok(a)
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("cluster bench: {e}");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Runtime::new().expect("a tokio runtime");
    rt.block_on(run(a));
}

async fn run(a: Args) {
    let t0 = Instant::now();
    let agents = start_agents(&a).await;
    let all: Vec<_> = agents.iter().collect();
    let n = a.agents;
    wait(
        &all,
        Duration::from_secs(120),
        "every agent to see every other",
        |s| s.iter().all(|st| st.peers.len() == n - 1),
    )
    .await;
    let joined = t0.elapsed();
    let before: Vec<NodeStats> = statuses(&all)
        .into_iter()
        .map(|s| s.stats.clone())
        .collect();
    let before_latency: Vec<Histogram> = all
        .iter()
        .map(|a| Histogram::parse(&a.metrics.render()))
        .collect();
    let t1 = Instant::now();
    let (ids, mut breaches, samples) = schedule(&a, &all).await;
    let elapsed = t1.elapsed();
    tokio::time::sleep(Duration::from_millis(3 * a.heartbeat_ms)).await;
    let after = statuses(&all);
    breaches.extend(breaches_in(&after));
    let f = finished(&after);
    let unique: BTreeSet<_> = f.iter().copied().collect();
    let duplicates = f.len() - unique.len();
    let lost = ids.difference(&unique).count();
    // Round latency from every agent's /metrics histogram, less what it held after joining.
    let mut latency = Histogram::default();
    for (agent, b) in all.iter().zip(&before_latency) {
        latency.add(&Histogram::parse(&agent.metrics.render()), 1.0);
        latency.add(b, -1.0);
    }
    let cluster = scheduling_phase(&after, &before);
    println!(
        "cluster bench: {n} agents ({} mesh, {} runtime), {} tasks, policy {}, slot {} ms, round deadline {} ms, heartbeat {} ms",
        if a.full_mesh { "full" } else { "sparse" },
        if a.own_threads { "per-agent" } else { "shared" },
        a.tasks,
        a.policy,
        a.slot_ms,
        a.round_ms,
        a.heartbeat_ms
    );
    println!(
        "  joined in {:.1} s; all tasks finished {:.1} s after the first submission",
        joined.as_secs_f64(),
        elapsed.as_secs_f64()
    );
    println!(
        "  duplicates {duplicates}, lost {lost}, finished {} distinct of {} submitted",
        unique.len(),
        ids.len()
    );
    print_rounds(&cluster, n, elapsed, &latency);
    println!(
        "  capacity and overlap checked at {} samples of every agent: {} breach(es)",
        samples + 1,
        breaches.len()
    );
    for b in breaches.iter().take(10) {
        eprintln!("  breach: {b}");
    }
    if duplicates > 0 || lost > 0 || !breaches.is_empty() {
        eprintln!(
            "FAILED: {duplicates} duplicate(s), {lost} lost task(s), {} capacity or overlap breach(es)",
            breaches.len()
        );
        std::process::exit(1);
    }
}

/// Start the agents, each bootstrapped as `--full-mesh` says.
async fn start_agents(a: &Args) -> Vec<tapfinger_agent::daemon::Agent> {
    let mut agents = Vec::new();
    let mut addrs: Vec<libp2p::Multiaddr> = Vec::new();
    for i in 0..a.agents {
        // Full: each dials every agent before it. Sparse: the first agent and two predecessors
        // (a connected graph, not a star).
        let mut boot: Vec<_> = if a.full_mesh {
            addrs.clone()
        } else {
            [0, i.saturating_sub(1), i / 2]
                .into_iter()
                .filter(|j| *j < i)
                .map(|j| addrs[j].clone())
                .collect()
        };
        boot.dedup();
        let mut l = Local::new(&format!("n{i}"), Exec::Simulated(0.01)).bootstrap(boot);
        l.policy = a.policy.clone();
        l.slot_ms = a.slot_ms;
        l.round_ms = a.round_ms;
        l.heartbeat_ms = a.heartbeat_ms;
        // The product's autonomy time, not the test helper's 1 s (which lets a briefly slow
        // agent lose its lease and stop its tasks).
        l.autonomy_ms = tapfinger::node::DEFAULT_AUTONOMY_MS;
        let (agent, addr) = if a.own_threads {
            start_on_own_thread(l).await
        } else {
            l.start().await
        };
        agents.push(agent);
        addrs.push(addr);
    }
    agents
}

/// Submit the tasks and wait for all of them to finish, sampling every agent's status all the
/// while: the ids submitted, the capacity and overlap breaches seen, and the samples taken.
async fn schedule(
    a: &Args,
    all: &[&tapfinger_agent::daemon::Agent],
) -> (BTreeSet<TaskId>, Vec<String>, u64) {
    let n = a.agents;
    // Submissions and samples run side by side: the capacity and overlap checks cover the
    // whole run, not only what is left once every task is in (at 32 agents the submissions
    // alone took most of the run).
    let ids = std::cell::RefCell::new(BTreeSet::new());
    let submitting = std::cell::Cell::new(true);
    let started = Instant::now();
    let submit = async {
        for i in 0..a.tasks {
            let id = all[i % n].submit(spec()).await.expect("accepted");
            assert!(ids.borrow_mut().insert(id), "duplicate id {id}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        submitting.set(false);
    };
    // Wait for every task, but report a stall rather than hang: if no task finishes for
    // `STALL`, print where every unfinished task stands at every agent and fail.
    const STALL: Duration = Duration::from_secs(60);
    let (mut done, mut last_change, mut last_report) = (0, Instant::now(), Instant::now());
    let mut samples = 0u64;
    let mut breaches: Vec<String> = Vec::new();
    let sample = async {
        loop {
            let s = statuses(all);
            samples += 1;
            breaches.extend(breaches_in(&s));
            // Distinct tasks: a task finished twice must not stand in for one not yet finished.
            let now_done = finished(&s).into_iter().collect::<BTreeSet<_>>().len();
            if now_done >= a.tasks && !submitting.get() {
                break;
            }
            if last_report.elapsed() > Duration::from_secs(10) {
                // A slow run shows where it stands instead of staying silent until the end.
                last_report = Instant::now();
                let heard: Vec<usize> = s.iter().map(|st| st.peers.len()).collect();
                let mut sent = NodeStats::default();
                for st in &s {
                    sent.merge(&st.stats);
                }
                eprintln!(
                    "  after {:.0} s: {now_done} of {} finished; peers heard {}..{}; rounds {} ({} held back, {} proposals missing); protocol messages refused {:?}; sent {:?}",
                    started.elapsed().as_secs_f64(),
                    a.tasks,
                    heard.iter().min().unwrap_or(&0),
                    heard.iter().max().unwrap_or(&0),
                    sent.rounds,
                    sent.rounds_held_back,
                    sent.missing,
                    sent.protocol_refused,
                    sent.sent
                );
            }
            if now_done != done {
                (done, last_change) = (now_done, Instant::now());
            } else if last_change.elapsed() > STALL {
                report_stall(&s, &ids.borrow());
                std::process::exit(3);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::join!(submit, sample);
    (ids.into_inner(), breaches, samples)
}

/// The cluster's counters over the scheduling phase: what the agents counted while joining
/// taken away.
fn scheduling_phase(after: &[std::sync::Arc<Status>], before: &[NodeStats]) -> NodeStats {
    let mut cluster = NodeStats::default();
    for (st, b) in after.iter().zip(before) {
        let mut d = st.stats.clone();
        d.rounds -= b.rounds;
        d.claims -= b.claims;
        d.claims_lost -= b.claims_lost;
        d.conflicts -= b.conflicts;
        d.missing -= b.missing;
        d.received -= b.received;
        for (k, v) in &b.sent {
            *d.sent.get_mut(k).expect("counters only grow") -= v;
        }
        cluster.merge(&d);
    }
    cluster
}

/// The rounds' figures: their rate and latency, messages per round, claims and conflicts,
/// copies stopped.
fn print_rounds(cluster: &NodeStats, n: usize, elapsed: Duration, latency: &Histogram) {
    // Every agent decides every round, so cluster rounds are the per-agent mean.
    let rounds = cluster.rounds as f64 / n as f64;
    let per_round = |v: u64| v as f64 / rounds.max(1.0);
    let protocol = cluster.sent.get("protocol").copied().unwrap_or(0);
    println!(
        "  rounds {rounds:.0} ({:.1} per second)",
        rounds / elapsed.as_secs_f64()
    );
    println!(
        "  round latency p50 {:.1} ms, p99 {:.1} ms, mean {:.1} ms (proposal to decision, per agent)",
        latency.quantile(0.5),
        latency.quantile(0.99),
        latency.sum / latency.count.max(1) as f64
    );
    println!(
        "  messages per round: {:.1} broadcast in all ({:.1} protocol = claims and passes), {:.1} received in all",
        per_round(cluster.sent_total()),
        per_round(protocol),
        per_round(cluster.received)
    );
    println!(
        "  claims {} ({} lost), conflicts {} ({:.3} per round), proposals missing at a deadline {}",
        cluster.claims,
        cluster.claims_lost,
        cluster.conflicts,
        per_round(cluster.conflicts),
        cluster.missing
    );
    // Copies stopped because another copy of the task won (two nodes started it), stopped when
    // a lease lapsed, and handed back: each means a start that did not run to its end.
    println!(
        "  copies stopped as losers {}, stopped for a lapsed lease {}, handed back {}",
        cluster.copies_stopped, cluster.lease_stops, cluster.handed_back
    );
    println!("  messages by kind: {:?}", cluster.sent);
}

/// Start an agent on a thread of its own, in a single-threaded runtime that lives as long as the
/// process, as the agent binary runs on a box. (On 2 cores, 16 such threads took longer to
/// decide rounds than one shared runtime.)
async fn start_on_own_thread(l: Local) -> (tapfinger_agent::daemon::Agent, libp2p::Multiaddr) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let name = l.name.clone();
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime");
            rt.block_on(async move {
                let _ = tx.send(l.start().await);
                std::future::pending::<()>().await
            });
        })
        .expect("a thread for the agent");
    rx.await.expect("the agent starts")
}

/// What is wrong in one sample of every agent's status, each runner judged by its own record of
/// what it runs: the allocations in force on a node add up to more than its capacity, or a task
/// runs on two nodes at once.
fn breaches_in(s: &[std::sync::Arc<Status>]) -> Vec<String> {
    let mut out = Vec::new();
    let mut runner: std::collections::BTreeMap<TaskId, tapfinger::NodeId> = Default::default();
    for st in s {
        let (Some(me), Some(cap)) = (st.id, st.capacity.as_ref()) else {
            continue;
        };
        let mut total = tapfinger::Resources::zeros(cap.len());
        for (id, t) in &st.tasks {
            if let TaskState::Running { node, alloc, .. } = t
                && *node == me
            {
                for k in 0..cap.len() {
                    total.0[k] += alloc.get(k);
                }
                if let Some(other) = runner.insert(*id, me) {
                    out.push(format!("task {id:?} runs on {other:?} and {me:?}"));
                }
            }
        }
        if !total.fits_in(cap) {
            out.push(format!("{me:?} runs {total} on a capacity of {cap}"));
        }
    }
    out
}

/// What a stalled run looks like: every unfinished task with its state at each agent, and each
/// agent's round counter, used units and live peers.
fn report_stall(s: &[std::sync::Arc<Status>], ids: &BTreeSet<TaskId>) {
    let done: BTreeSet<TaskId> = finished(s).into_iter().collect();
    let open: Vec<&TaskId> = ids.difference(&done).collect();
    eprintln!(
        "STALLED: no task finished for 60 s; {} of {} unfinished",
        open.len(),
        ids.len()
    );
    for st in s {
        eprintln!(
            "  agent {:?}: rounds {}, used {:?} of {:?}, {} peers",
            st.id,
            st.stats.rounds,
            st.used.as_ref().map(|r| r.to_string()),
            st.capacity.as_ref().map(|r| r.to_string()),
            st.peers.len()
        );
    }
    for id in open.iter().take(20) {
        let states: Vec<String> = s
            .iter()
            .map(|st| match st.tasks.get(id) {
                None => "-".into(),
                Some(TaskState::Pending) => "pending".into(),
                Some(TaskState::Running { node, progress, .. }) => {
                    format!("running@{}:{progress:.2}", node.0)
                }
                Some(TaskState::Gang { members, .. }) => format!("gang of {}", members.len()),
                Some(TaskState::Done { node, .. }) => format!("done@{}", node.0),
            })
            .collect();
        eprintln!("  task {id:?}: {}", states.join(" "));
    }
}

/// The round-latency histogram as an agent's `/metrics` renders it (cumulative buckets).
#[derive(Default)]
struct Histogram {
    /// (upper bound, cumulative count), by bound; the last is +Inf.
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn parse(text: &str) -> Self {
        let mut h = Histogram::default();
        let name = tapfinger_agent::metrics::ROUND_LATENCY;
        for line in text.lines() {
            let Some((key, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let v: f64 = value.parse().unwrap_or(0.0);
            if let Some(rest) = key.strip_prefix(&format!("{name}_bucket{{le=\"")) {
                let le = rest.trim_end_matches("\"}");
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap_or(f64::NAN)
                };
                h.buckets.push((le, v));
            } else if key == format!("{name}_sum") {
                h.sum = v;
            } else if key == format!("{name}_count") {
                h.count = v as u64;
            }
        }
        h.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        h
    }

    fn add(&mut self, o: &Histogram, sign: f64) {
        for (le, c) in &o.buckets {
            match self.buckets.iter_mut().find(|(l, _)| l == le) {
                Some((_, x)) => *x += sign * c,
                None => self.buckets.push((*le, sign * c)),
            }
        }
        self.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        self.sum += sign * o.sum;
        self.count = (self.count as f64 + sign * o.count as f64).max(0.0) as u64;
    }

    /// The `q`-quantile, interpolated inside its bucket as Prometheus' `histogram_quantile`
    /// does (the +Inf bucket reports its lower bound).
    fn quantile(&self, q: f64) -> f64 {
        let Some(&(_, total)) = self.buckets.last() else {
            return f64::NAN;
        };
        let rank = q * total;
        let mut prev = (0.0, 0.0);
        for &(le, c) in &self.buckets {
            if c >= rank && c > prev.1 {
                if le.is_infinite() {
                    return prev.0;
                }
                return prev.0 + (le - prev.0) * (rank - prev.1) / (c - prev.1);
            }
            prev = (le, c);
        }
        f64::NAN
    }
}
