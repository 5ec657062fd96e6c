//! The learner's thread: it owns the [`Learner`] and runs each job it is given (an update from
//! the agents' batches, a fine-tune on the twin), away from the serving loop so that requests
//! keep being answered, and reports which batches it used and which it set aside.
//!
//! **Nothing an agent sends stops learning.** Each job runs under `catch_unwind`: a job that
//! panics (a batch the trainer cannot use) leaves the learner in an unknown state, so it is
//! opened again from its last checkpoint (written after every update) and the job's batches are
//! set aside (moved out of the inbox, counted and reported with the panic's message), never
//! left in the inbox to fail again at every start. Only a learner that cannot be opened again
//! ends the thread; the serving loop then stops and the process exits non-zero, so that its
//! supervisor restarts it, rather than stay up with learning dead.

use crate::learner::{Batch, Learner};
use crate::state::Shared;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// What the learner's thread is given.
pub(crate) enum Job {
    /// An update from the agents' batches (numbered in the inbox), gated on the twin of the
    /// workload the guard judged last, where there is one.
    Update(Vec<(u64, Batch)>, Option<Box<tapfinger::twin::Workload>>),
    /// A fine-tune on the twin of a judged workload.
    Tune(Box<tapfinger::twin::Workload>),
}

/// What the thread says after a job.
#[derive(Debug, Default)]
pub(crate) struct Done {
    /// Inbox numbers of the batches the job used (to be dropped from the inbox).
    pub used: Vec<u64>,
    /// Inbox numbers of the batches set aside (the job panicked on them).
    pub set_aside: Vec<u64>,
    /// Why they were set aside.
    pub why: Option<String>,
}

/// Run `f`, turning a panic into its message.
pub(crate) fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
        p.downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into())
    })
}

/// Start the thread; it ends when the job channel closes or the learner cannot be opened again.
pub(crate) fn spawn_learner(
    learner: Learner,
    shared: Arc<Mutex<Shared>>,
) -> (mpsc::Sender<Job>, mpsc::Receiver<Done>) {
    let (work_tx, mut work_rx) = mpsc::channel::<Job>(1);
    let (done_tx, done_rx) = mpsc::channel::<Done>(1);
    std::thread::spawn(move || {
        let mut l = learner;
        while let Some(job) = work_rx.blocking_recv() {
            let (done, panicked) = run(&mut l, job);
            if let Some(why) = panicked {
                tracing::error!(panic = %why, set_aside = done.set_aside.len(),
                    "a learning job panicked: its batches are set aside, the learner is opened again from its checkpoint");
                match l.reopen() {
                    Ok(again) => l = again,
                    Err(e) => {
                        tracing::error!(error = %e, "the learner cannot be opened again: learning stops");
                        return;
                    }
                }
            }
            if let Ok(mut s) = shared.lock() {
                s.state = l.state.clone();
                s.published = l
                    .announcement()
                    .and_then(|a| l.checkpoint_of(a.version).map(|c| (a, c)));
                s.trial = l.trial();
            }
            if done_tx.blocking_send(done).is_err() {
                return;
            }
        }
    });
    (work_tx, done_rx)
}

/// One job; the panic's message if it panicked.
fn run(l: &mut Learner, job: Job) -> (Done, Option<String>) {
    match job {
        Job::Update(work, judged) => {
            let ids: Vec<u64> = work.iter().map(|(n, _)| *n).collect();
            let batches = work.into_iter().map(|(_, b)| b).collect();
            match guarded(|| l.update(batches, judged.as_deref())) {
                Ok(Ok(eval)) => tracing::info!(?eval, "update done"),
                Ok(Err(e)) => tracing::warn!(error = %e, "update failed"),
                Err(why) => {
                    let done = Done {
                        used: Vec::new(),
                        set_aside: ids,
                        why: Some(why.clone()),
                    };
                    return (done, Some(why));
                }
            }
            (
                Done {
                    used: ids,
                    ..Done::default()
                },
                None,
            )
        }
        Job::Tune(w) => match guarded(|| l.tune_on(&w)) {
            Ok(Ok(_)) => (Done::default(), None),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "fine-tune on the twin failed");
                (Done::default(), None)
            }
            Err(why) => (Done::default(), Some(why)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_its_message() {
        assert_eq!(guarded(|| 3), Ok(3));
        assert_eq!(
            guarded(|| -> u8 { panic!("range start is greater than range end") }),
            Err("range start is greater than range end".to_string())
        );
        let n = 7;
        assert_eq!(
            guarded(|| -> u8 { panic!("batch {n} bad") }),
            Err("batch 7 bad".to_string())
        );
    }

    /// A batch the trainer cannot use (a decision pointing past the window, with no
    /// allocation) makes the update panic: the job reports its batches set aside, and the
    /// learner opened again goes on learning from good batches.
    #[test]
    fn a_batch_that_panics_the_update_is_set_aside_and_learning_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = crate::config::CoordinatorConfig {
            data_dir: dir.path().to_path_buf(),
            eval_episodes: 1,
            ..Default::default()
        };
        let mut l = Learner::open(cfg, libp2p::identity::Keypair::generate_ed25519()).unwrap();
        let mut bad = l.simulated_batches(7).unwrap();
        for b in &mut bad {
            for r in &mut b.exp.records {
                r.slot = 10_000;
                r.units.clear();
                r.lo.clear();
                r.hi.clear();
            }
        }
        let work: Vec<(u64, Batch)> = bad
            .into_iter()
            .enumerate()
            .map(|(i, b)| (i as u64, b))
            .collect();
        let n = work.len();
        let (done, panicked) = run(&mut l, Job::Update(work, None));
        assert!(
            panicked.is_some(),
            "the bad batch did not panic the update: {done:?}"
        );
        assert_eq!((done.used.len(), done.set_aside.len()), (0, n));
        assert_eq!(done.why, panicked);
        let mut l = l.reopen().unwrap();
        assert_eq!(l.state.updates, 0);
        let good: Vec<(u64, Batch)> = l
            .simulated_batches(8)
            .unwrap()
            .into_iter()
            .map(|b| (0, b))
            .collect();
        let (done, panicked) = run(&mut l, Job::Update(good, None));
        assert!(panicked.is_none() && done.set_aside.is_empty(), "{done:?}");
        assert_eq!(l.state.updates, 1);
    }
}
