//! Journal benchmark: an agent's task journal through N finished tasks (default 100,000), each
//! accepted, run, ended and given its outcome as the daemon records them (every record
//! `fsync`ed), with a few tasks always unfinished. At every tenth of the way it prints the
//! journal's size on disk and the time to open (replay) it as a restarting agent does, so that
//! both can be seen to stay flat. It fails (exit code 1) if a reopened journal lacks an
//! unfinished task, the last id, or the most recent finished one.
//!
//! `cargo bench -p tapfinger-tests --bench journal [-- --tasks 100000 --keep 10000]`

use std::time::Instant;
use tapfinger::spec::TaskSpec;
use tapfinger::{NodeId, Resources, Task, TaskId, TaskTypeId};
use tapfinger_agent::store::{Finish, Run, Store, StoreOptions};

fn main() {
    let mut tasks: u64 = 100_000;
    let mut keep: usize = StoreOptions::default().keep_finished;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut num = || it.next().and_then(|v| v.parse::<u64>().ok());
        match flag.as_str() {
            "--bench" => {}
            "--tasks" => tasks = num().expect("--tasks N"),
            "--keep" => keep = num().expect("--keep N") as usize,
            other => {
                eprintln!("journal bench: unknown argument {other}");
                std::process::exit(2);
            }
        }
    }
    let dir = std::env::temp_dir().join(format!("tf-journal-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let path = dir.join("tasks.jsonl");
    let opts = StoreOptions {
        keep_finished: keep,
        ..Default::default()
    };
    let spec = TaskSpec::from_toml(
        "command = [\"python\", \"train.py\", \"--epochs\", \"10\"]\nmin_demand = { cpu = 2, mem = 4 }\ntype = \"resnet\"\n",
    )
    .expect("a spec");
    let me = NodeId(3);
    let task = |n: u64| Task {
        id: TaskId((u64::from(me.0) << 32) | n),
        ty: TaskTypeId(0),
        min_demand: Resources(vec![2, 0, 4]),
        max_demand: None,
        priority: 0,
        reachable: vec![me],
        arrival: n,
        gang: None,
    };
    let (mut store, _) = Store::open_with(&path, opts).expect("the journal opens");
    println!("journal bench: {tasks} tasks finished through one journal, keep_finished {keep}");
    println!(
        "{:>10} {:>12} {:>10} {:>12} {:>12}",
        "finished", "bytes", "lines", "open (ms)", "compactions"
    );
    let t0 = Instant::now();
    // Every 97th task stays unfinished: the live set grows slowly, as a real backlog would.
    let mut unfinished = Vec::new();
    for n in 1..=tasks {
        let t = task(n);
        store.accepted(&t, &spec).expect("accepted");
        if n % 97 == 0 {
            unfinished.push(t.id);
        } else {
            let run = Run {
                task: t.clone(),
                spec: spec.clone(),
                epoch: 1,
                alloc: Resources(vec![2, 0, 4]),
                gpus: Vec::new(),
                handle: None,
            };
            store.run(&run).expect("run");
            store.ended(t.id).expect("ended");
            let f = Finish {
                node: me,
                code: Some(0),
                epoch: 1,
            };
            store.outcome(t.id, f).expect("outcome");
        }
        if n % (tasks / 10).max(1) == 0 {
            let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
            let (lines, compactions) = store.size();
            let t1 = Instant::now();
            let (_, r) = Store::open_with(&path, opts).expect("the journal reopens");
            let open_ms = t1.elapsed().as_secs_f64() * 1e3;
            println!("{n:>10} {bytes:>12} {lines:>10} {open_ms:>12.1} {compactions:>12}");
            let missing = unfinished
                .iter()
                .filter(|id| !r.accepted.contains_key(id))
                .count();
            let last = if n % 97 == 0 { n - 1 } else { n };
            if missing > 0
                || r.last_id != Some(task(n).id)
                || !r.outcomes.contains_key(&task(last).id)
            {
                eprintln!(
                    "FAILED: {missing} unfinished task(s) missing, last id {:?}",
                    r.last_id
                );
                std::process::exit(1);
            }
        }
    }
    println!(
        "{} records written in {:.1} s",
        1 + 3 * tasks,
        t0.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
