//! Preemption on a real agent (`preempt = true`): a batch task (class 2) holding the whole box is
//! given its checkpoint signal (SIGTERM) when an urgent task (class 0) arrives that fits nowhere,
//! ends within its grace, and the urgent task starts once it has; the batch task goes back to the
//! queue and runs again afterwards, told to resume (`TAPFINGER_RESUME=1`: it is resumable).
//! Judged from the records the tasks write themselves (start, the signal, the end), and the
//! agent's account of the work lost, which survives a restart of the agent (its journal).
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;
use tapfinger::spec::TaskSpec;
use tapfinger_tests::{Exec, Local, finished, wait};

/// A task of `class` taking the box's 4 cores (and no GPU: a resumable task given one would be
/// restarted with it) for `steps` tenths of a second, recording its life
/// in `<rec>/<name>.<pid>.log`; it reports a checkpoint every 10 steps, and on SIGTERM it saves
/// one (a `checkpoint=` report) and exits.
fn recorder(rec: &Path, name: &str, class: u8, steps: u32) -> TaskSpec {
    let script = format!(
        r#"f="{rec}/{name}.$$.log"
echo "start $(date +%s%3N)" >> "$f"
echo "resume ${{TAPFINGER_RESUME:-0}}" >> "$f"
c=0
trap 'echo "term $(date +%s%3N)" >> "$f"; echo "TAPFINGER progress=$c checkpoint=$c"; sleep 0.2; echo "saved $(date +%s%3N)" >> "$f"; exit 143' TERM
i=0
while [ "$i" -lt {steps} ]; do
  i=$((i+1))
  p=$(awk "BEGIN {{print $i/{steps}}}")
  if [ $((i % 10)) -eq 0 ]; then c=$p; fi
  echo "TAPFINGER progress=$p checkpoint=$c"
  sleep 0.1
done
echo "end $(date +%s%3N)" >> "$f"
"#,
        rec = rec.display()
    );
    let toml = format!(
        "command = [\"sh\", \"-c\", '''\n{script}''']\nmin_demand = {{ cpu = 4, mem = 1 }}\npriority = {class}\nmax_demand = {{ gpu = 0 }}\ngrace_seconds = 3\nresumable = true\n"
    );
    TaskSpec::from_toml(&toml).unwrap()
}

/// Each run of `name`: its lines, in order, as (word, ms).
fn runs(rec: &Path, name: &str) -> Vec<Vec<(String, u64)>> {
    let mut out: Vec<(u64, Vec<(String, u64)>)> = std::fs::read_dir(rec)
        .unwrap()
        .flatten()
        .filter(|f| {
            f.file_name()
                .to_string_lossy()
                .starts_with(&format!("{name}."))
        })
        .map(|f| {
            let lines: Vec<(String, u64)> = std::fs::read_to_string(f.path())
                .unwrap()
                .lines()
                .filter_map(|l| {
                    let (w, t) = l.split_once(' ')?;
                    Some((w.to_string(), t.trim().parse().ok()?))
                })
                .collect();
            (lines.first().map_or(0, |l| l.1), lines)
        })
        .collect();
    out.sort_by_key(|r| r.0);
    out.into_iter().map(|r| r.1).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_urgent_task_preempts_batch_work_after_its_checkpoint_signal() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let rec = dir.join("rec");
    std::fs::create_dir_all(&rec).unwrap();
    let journal = dir.join("tasks.jsonl");
    let key = libp2p::identity::Keypair::generate_ed25519();
    let local = |logs: &str| {
        let mut l = Local::new("a", Exec::Processes(dir.join(logs)));
        l.preempt = true;
        l.keypair = key.clone();
        l.journal = Some(journal.clone());
        l
    };
    let (mut a, _) = local("logs").start().await;
    let batch = a.submit(recorder(&rec, "batch", 2, 40)).await.unwrap();
    // Let it run past its first checkpoint (step 10 of 40).
    wait(
        &[&a],
        Duration::from_secs(20),
        "batch past a checkpoint",
        |_| {
            runs(&rec, "batch")
                .first()
                .is_some_and(|r| r.first().is_some_and(|s| s.0 == "start"))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let urgent = a.submit(recorder(&rec, "urgent", 0, 5)).await.unwrap();
    wait(&[&a], Duration::from_secs(60), "both tasks", |s| {
        let f = finished(s);
        f.contains(&batch) && f.contains(&urgent)
    })
    .await;
    let b = runs(&rec, "batch");
    let u = runs(&rec, "urgent");
    eprintln!("batch runs: {b:?}\nurgent runs: {u:?}");
    assert_eq!(b.len(), 2, "the batch task ran {} times", b.len());
    assert_eq!(u.len(), 1);
    let first = &b[0];
    let term = first
        .iter()
        .find(|l| l.0 == "term")
        .expect("no checkpoint signal");
    let saved = first
        .iter()
        .find(|l| l.0 == "saved")
        .expect("no checkpoint saved");
    assert!(
        !first.iter().any(|l| l.0 == "end"),
        "the first run was not stopped"
    );
    // The urgent task started after the batch task had saved its checkpoint and ended (both
    // need the whole box), and the batch task ran again only after the urgent one ended.
    let u_start = u[0][0].1;
    let u_end = u[0]
        .iter()
        .find(|l| l.0 == "end")
        .expect("urgent never ended")
        .1;
    assert!(term.1 <= saved.1 && saved.1 <= u_start, "{first:?} {u:?}");
    assert!(
        b[1][0].1 >= u_end,
        "the batch task came back before the urgent one ended"
    );
    assert!(b[1].iter().any(|l| l.0 == "end"));
    // A resumable task's second run is told to resume from its checkpoint; the first is not.
    let resume = |run: &[(String, u64)]| run.iter().find(|l| l.0 == "resume").map(|l| l.1);
    assert_eq!((resume(first), resume(&b[1])), (Some(0), Some(1)));
    // The agent counts one preemption and the work since the last checkpoint (between 0 and a
    // quarter of the run: checkpoints every 10 of 40 steps).
    let st = a.status.borrow().clone();
    let cost = st.preempted.get(&batch).expect("no preemption counted");
    assert_eq!(cost.times, 1);
    assert!(
        cost.work_lost >= 0.0 && cost.work_lost <= 0.25 + 1e-9,
        "{}",
        cost.work_lost
    );
    // The count and the work lost are journaled: the same agent, restarted, still shows them.
    let cost = *cost;
    a.killed().await;
    drop(a);
    let (a2, _) = local("logs2").start().await;
    wait(
        &[&a2],
        Duration::from_secs(20),
        "the preemption recovered",
        |s| s[0].preempted.get(&batch) == Some(&cost),
    )
    .await;
}
