//! Online-learning benchmark: a live cluster (N agents with the simulated executor, in this
//! process on loopback) before and after training through the coordinator, starting from an
//! untrained actor.
//!
//! 1. *Before*: the agents decide greedily with random weights; M tasks are submitted at a fixed
//!    interval; the average JCT (submission to completion, in slots) is measured.
//! 2. *Training*: the agents run in learning mode (sampling, recording) with the same random
//!    start; the coordinator learns from their experience for the given time and publishes the
//!    candidates its evaluation gate lets through.
//! 3. *After*: fresh agents decide greedily with the coordinator's last published version (or
//!    the random weights again if nothing passed the gate) on the same workload.
//!
//! The cluster: boxes of 4 cores, 1 GPU and 8 GiB (`tapfinger_tests::capacity`); every task needs
//! a core and 1 GiB and can use up to 4 cores, a GPU and 2 GiB; the simulated executor runs it at
//! `tanh(0.06·cores + 0.5·GPUs)·0.8167 + 0.02` progress per slot (the `edge-agent` preset's speed
//! formula averaged over progress): a GPU matters far more than cores, so allocations matter.
//! The evaluation gate judges candidates on the same cluster described as a scenario
//! (`benches/online/cluster.toml`, `--gate` to choose another, e.g. `edge-agent`).
//! `--explore`: the learning agents explore with the coordinator's latest candidate, not only
//! with what the gate published (`explore_candidates` in the agent's config).
//! `--cluster mixed` runs boxes of different sizes, two without a GPU (`benches/online/mixed.toml`,
//! for 4 agents).
//!
//! `cargo bench -p tapfinger-tests --bench online [-- --agents 4 --tasks 120 --train-secs 300
//! --interval-ms 150 --update-decisions 512 --tolerance 0 --cluster uniform|mixed --gate FILE]` (`--tolerance 1e9`
//! publishes every candidate, so the agents learn on-policy)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tapfinger::TaskId;
use tapfinger::node::TaskState;
use tapfinger_agent::daemon::Agent;
use tapfinger_agent::online::OnlineConfig;
use tapfinger_coordinator::config::CoordinatorConfig;
use tapfinger_tests::{Exec, Local, statuses};

struct Args {
    agents: usize,
    tasks: usize,
    train_secs: u64,
    interval_ms: u64,
    update_decisions: usize,
    /// The gate's tolerance in slots (huge: publish every candidate).
    tolerance: f64,
    /// The gate's evaluation scenario (preset or file).
    gate: Option<String>,
    /// Box sizes (cores, GPUs, GiB), agent `i` gets entry `i % len`.
    cluster: Vec<[u32; 3]>,
    /// The scenario file describing `cluster`.
    cluster_file: &'static str,
    /// Learning agents explore with the coordinator's latest candidate (`--explore`).
    explore: bool,
}

const UNIFORM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/online/cluster.toml");
const MIXED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/online/mixed.toml");

fn args() -> Result<Args, String> {
    let mut a = Args {
        agents: 4,
        tasks: 120,
        train_secs: 300,
        interval_ms: 150,
        update_decisions: 512,
        tolerance: 0.0,
        gate: None,
        cluster: vec![[4, 1, 8]],
        cluster_file: UNIFORM,
        explore: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--bench" {
            continue;
        }
        if flag == "--gate" {
            a.gate = Some(it.next().ok_or("--gate needs a scenario")?);
            continue;
        }
        if flag == "--explore" {
            a.explore = true;
            continue;
        }
        if flag == "--cluster" {
            match it.next().as_deref() {
                Some("uniform") => (a.cluster, a.cluster_file) = (vec![[4, 1, 8]], UNIFORM),
                Some("mixed") => {
                    a.cluster = vec![[4, 1, 8], [8, 0, 16], [4, 0, 8], [8, 1, 16]];
                    a.cluster_file = MIXED;
                }
                other => return Err(format!("--cluster: uniform or mixed, not {other:?}")),
            }
            continue;
        }
        if flag == "--tolerance" {
            a.tolerance = it
                .next()
                .ok_or("--tolerance needs a value")?
                .parse()
                .map_err(|e| format!("--tolerance: {e}"))?;
            continue;
        }
        let v = it
            .next()
            .ok_or(format!("{flag} needs a value"))?
            .parse::<u64>()
            .map_err(|e| format!("{flag}: {e}"))?;
        match flag.as_str() {
            "--agents" => a.agents = v as usize,
            "--tasks" => a.tasks = v as usize,
            "--train-secs" => a.train_secs = v,
            "--interval-ms" => a.interval_ms = v,
            "--update-decisions" => a.update_decisions = v as usize,
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    Ok(a)
}

/// A task that needs a core and 1 GiB and can use up to 4 cores, a GPU and 2 GiB.
fn task() -> tapfinger::spec::TaskSpec {
    tapfinger::spec::TaskSpec::from_toml(
        "command = [\"train\"]\nmin_demand = { cpu = 1, mem = 1 }\nmax_demand = { cpu = 4, gpu = 1, mem = 2 }\n",
    )
    .expect("a valid spec")
}

/// Progress per 20 ms tick of the simulated executor: the `edge-agent` speed formula per slot
/// (`tanh(0.06·cores + 0.5·GPUs)`, times 0.8167, the mean of its `sqrt(1.2 − p)` factor over
/// progress, plus 0.02), scaled from a slot to a tick. `benches/online/cluster.csv` holds the
/// same speeds as seconds alone.
fn edge_speed(slot_ms: u64) -> tapfinger_agent::exec::SpeedFn {
    std::sync::Arc::new(
        move |_: &tapfinger::spec::TaskSpec, a: &tapfinger_agent::exec::Allocation| {
            let gpus = a.gpus.len() as f64;
            let per_slot = (0.06 * a.cpus + 0.5 * gpus).tanh() * 0.8167 + 0.02;
            per_slot * 20.0 / slot_ms as f64
        },
    )
}

/// The coordinator's `untrained` start model (the shipped network, random seeded weights), as a
/// checkpoint directory the agents load.
fn untrained(dir: &Path) -> PathBuf {
    let (bytes, json, _) =
        tapfinger_coordinator::learner::start_checkpoint("untrained").expect("untrained model");
    std::fs::create_dir_all(dir).expect("dir");
    std::fs::write(dir.join("model.safetensors"), bytes).expect("model.safetensors");
    std::fs::write(dir.join("train.json"), json).expect("train.json");
    dir.to_path_buf()
}

async fn cluster(
    n: usize,
    sizes: &[[u32; 3]],
    model: &Path,
    online: Option<(&OnlineConfig, &libp2p::Multiaddr)>,
) -> Vec<Agent> {
    let mut agents = Vec::new();
    let mut addrs: Vec<libp2p::Multiaddr> = online.iter().map(|(_, a)| (*a).clone()).collect();
    for i in 0..n {
        let slot_ms = Local::new("x", Exec::Simulated(0.0)).slot_ms;
        let mut l =
            Local::new(&format!("n{i}"), Exec::Speed(edge_speed(slot_ms))).bootstrap(addrs.clone());
        l.model = Some(model.to_path_buf());
        l.capacity = tapfinger::Resources(sizes[i % sizes.len()].to_vec());
        if let Some((cfg, _)) = online {
            let mut c = cfg.clone();
            c.dir = cfg.dir.join(format!("agent{i}"));
            l.online = Some(c);
        }
        let (agent, addr) = l.start().await;
        agents.push(agent);
        addrs.push(addr);
    }
    let all: Vec<&Agent> = agents.iter().collect();
    tapfinger_tests::wait(&all, Duration::from_secs(60), "agents to meet", |s| {
        s.iter().all(|st| st.peers.len() == n - 1)
    })
    .await;
    agents
}

/// Submit `m` tasks, one every `interval`, round-robin; return the average JCT in slots.
async fn workload(agents: &[Agent], m: usize, interval: Duration, slot_ms: u64) -> f64 {
    let all: Vec<&Agent> = agents.iter().collect();
    let mut submitted: BTreeMap<TaskId, Instant> = BTreeMap::new();
    let mut done: BTreeMap<TaskId, Instant> = BTreeMap::new();
    let mut next = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(1800);
    while done.len() < m {
        if submitted.len() < m && Instant::now() >= next {
            let id = all[submitted.len() % all.len()]
                .submit(task())
                .await
                .expect("accepted");
            submitted.insert(id, Instant::now());
            next += interval;
        }
        for st in statuses(&all) {
            for (id, s) in &st.tasks {
                if matches!(s, TaskState::Done { .. }) && submitted.contains_key(id) {
                    done.entry(*id).or_insert_with(Instant::now);
                }
            }
        }
        assert!(Instant::now() < deadline, "workload did not finish");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let total: f64 = done
        .iter()
        .map(|(id, t)| t.duration_since(submitted[id]).as_secs_f64())
        .sum();
    total / m as f64 * 1000.0 / slot_ms as f64
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("online bench: {e}");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(run(a));
}

async fn run(a: Args) {
    if a.gate.is_none() && a.agents != 4 {
        eprintln!(
            "note: {} describes 4 boxes; with {} agents the gate judges another cluster than the live one (--gate FILE)",
            a.cluster_file, a.agents
        );
    }
    let root = std::env::temp_dir().join(format!("tapfinger-online-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let start = untrained(&root.join("untrained"));
    let slot_ms = Local::new("x", Exec::Simulated(0.0)).slot_ms;
    let interval = Duration::from_millis(a.interval_ms);

    // 1. Before.
    let agents = cluster(a.agents, &a.cluster, &start, None).await;
    let before = workload(&agents, a.tasks, interval, slot_ms).await;
    agents.iter().for_each(Agent::kill);
    println!(
        "before (untrained actor, greedy): average JCT {before:.2} slots over {} tasks",
        a.tasks
    );

    // 2. Training through the coordinator.
    let key = libp2p::identity::Keypair::generate_ed25519();
    let (net, coord_addr) = tapfinger_tests::start_member(key.clone()).await;
    let ccfg = CoordinatorConfig {
        data_dir: root.join("coordinator"),
        start: start.display().to_string(),
        update_decisions: a.update_decisions,
        eval_episodes: 4,
        tolerance: a.tolerance,
        scenario: a.gate.clone().unwrap_or_else(|| a.cluster_file.to_string()),
        ..CoordinatorConfig::default()
    };
    let coordinator =
        tapfinger_coordinator::serve::spawn(ccfg, key.clone(), net).expect("coordinator");
    let online = OnlineConfig {
        coordinator: key.public().to_peer_id(),
        learning: true,
        dir: root.join("agents"),
        spool_max: 10_000,
        batch_decisions: 64,
        poll_ms: 500,
        explore_candidates: a.explore,
        window: 10,
        start: (
            std::fs::read(start.join("model.safetensors")).expect("model"),
            std::fs::read_to_string(start.join("train.json")).expect("json"),
            "untrained".into(),
        ),
        // This bench measures learning; the guard would swap the policy it learns with.
        workload_push_ms: 0,
        workload_window_s: 3600,
    };
    let agents = cluster(a.agents, &a.cluster, &start, Some((&online, &coord_addr))).await;
    let t0 = Instant::now();
    let mut trained_tasks = 0;
    while t0.elapsed() < Duration::from_secs(a.train_secs) {
        trained_tasks += a.tasks / 4;
        workload(&agents, a.tasks / 4, interval, slot_ms).await;
    }
    // Let an update in progress finish.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let c = coordinator.snapshot();
    let all: Vec<&Agent> = agents.iter().collect();
    for (i, st) in statuses(&all).iter().enumerate() {
        if let Some(p) = &st.policy {
            println!(
                "agent {i}: {} decisions recorded, batches shipped {} / waiting {} / dropped {}, version {}, exploring with update {}",
                p.decisions_recorded,
                p.batches_shipped,
                p.batches_waiting,
                p.batches_dropped,
                p.version,
                p.trial
            );
        }
    }
    println!(
        "coordinator: decisions received per agent {:?}; critic: {} rounds assembled, {} merged, {:.2} reports per round",
        c.received_live, c.state.rounds_assembled, c.state.rounds_merged, c.state.reports_per_round
    );
    agents.iter().for_each(Agent::kill);
    coordinator.kill();
    println!(
        "training: {:.0} s, {trained_tasks} tasks, {} decisions received, {} updates, {} refused by the gate, published version {} (validation JCT {:.2}; evaluations {:?})",
        t0.elapsed().as_secs_f64(),
        c.received_live.values().sum::<u64>(),
        c.state.updates,
        c.state.refused,
        c.state.version,
        c.state.published_jct,
        c.state.last_evaluation
    );

    // 3. After.
    let after_model = if c.state.version > 0 {
        root.join("coordinator")
            .join("published")
            .join(format!("v{}", c.state.version))
    } else {
        start.clone()
    };
    let agents = cluster(a.agents, &a.cluster, &after_model, None).await;
    let after = workload(&agents, a.tasks, interval, slot_ms).await;
    agents.iter().for_each(Agent::kill);
    println!(
        "after (version {}, greedy): average JCT {after:.2} slots over {} tasks",
        c.state.version, a.tasks
    );
    std::fs::remove_dir_all(&root).ok();
}
