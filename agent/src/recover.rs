//! What a (re)started agent does with its data directory before it decides anything: replay the
//! journal into the node core (adopting the tasks whose supervisors still run), pick where task
//! numbering continues, and the housekeeping of files that would otherwise grow forever (task
//! logs and exit records past their retention).
//!
//! Restart policy: **adopt**. A task the previous run started and whose supervisor still runs is
//! adopted (no work lost); one that ended while the agent was away is reported with its exit code;
//! one that ended without an outcome (stopped or handed back by a graceful stop, its lease lapsed)
//! or left no trace (the box rebooted) goes back to pending with its epoch, never as a failure,
//! so its next start fences any copy that might still exist. A gang's members are the exception: they are stopped,
//! and the gang goes back to pending (its other members cannot wait for this box).

use crate::exec::{Adopted, Executor};
use crate::store::{Recovered, Store};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, SystemTime};
use tapfinger::node::{Action, NodeCore, TaskState};
use tapfinger::{NodeId, TaskId};

/// The tasks the replay left running here: their GPU devices and GPU grid units (for the
/// daemon's pool: fewer units than a device are a share of the one device listed).
pub type Held = Vec<(TaskId, Vec<u32>, u32)>;

/// Replay `r` into `core`; returns the actions to carry out (announcements, finishes) and the
/// GPU devices held by adopted tasks. Runs that ended are journaled as ended.
pub fn replay(
    core: &mut NodeCore,
    executor: &mut dyn Executor,
    store: &mut Option<Store>,
    r: Recovered,
) -> (Vec<Action>, Held) {
    let me = core.id();
    let mut actions = Vec::new();
    let mut held = Vec::new();
    for (id, (times, work_lost)) in &r.preempted {
        core.restore_preempted(
            *id,
            tapfinger::node::preempt::Preempted {
                times: *times,
                work_lost: *work_lost,
            },
        );
    }
    for (id, run) in r.runs {
        let adopted = match &run.handle {
            Some(h) => executor.adopt(id, h),
            None => Adopted::Lost,
        };
        tracing::info!(task = %id, ?adopted, "a task this node ran before the restart");
        if run.task.gang.is_some() {
            // A gang's members are not adopted: the gang cannot go on without the members this
            // box ran, and its peers have put it back in the queue (a member failed, or this box
            // went silent). What still runs is stopped; the gang waits to be placed again.
            if adopted == Adopted::Running {
                executor.stop(id);
            }
            actions.extend(core.restore(run.task, run.spec, TaskState::Pending, None, run.epoch));
            journal_end(store, id);
            continue;
        }
        let running = TaskState::Running {
            node: me,
            alloc: run.alloc.clone(),
            progress: 0.0,
            started: 0,
        };
        match adopted {
            Adopted::Running => {
                actions.extend(core.restore(run.task, run.spec, running, Some(me), run.epoch));
                // The agent's GPU kind is its second (`crate::config::space`).
                let units = run.alloc.get(1);
                held.push((id, run.gpus, units));
            }
            Adopted::Exited(code) => {
                actions.extend(core.restore(run.task, run.spec, running, Some(me), run.epoch));
                actions.extend(core.on_exit(id, code, false));
                journal_end(store, id);
            }
            // Ended without an outcome (stopped, handed back, its lease lapsed) or without a
            // trace: it goes back to the queue with its epoch, never as a failure.
            Adopted::Stopped | Adopted::Lost => {
                actions.extend(core.restore(
                    run.task,
                    run.spec,
                    TaskState::Pending,
                    Some(me),
                    run.epoch,
                ));
                journal_end(store, id);
            }
        }
    }
    for (id, (task, spec)) in r.accepted {
        let state = match r.outcomes.get(&id) {
            Some(Some(f)) => TaskState::Done {
                node: f.node,
                code: f.code,
                epoch: f.epoch,
            },
            // Finished before outcomes were journaled: who ran it is not known here.
            Some(None) => TaskState::Done {
                node: me,
                code: None,
                epoch: 0,
            },
            None => TaskState::Pending,
        };
        if state == TaskState::Pending {
            tracing::info!(task = %id, "re-announcing an unfinished task from the journal");
        }
        actions.extend(core.restore(task, spec, state, Some(me), 0));
    }
    (actions, held)
}

fn journal_end(store: &mut Option<Store>, id: TaskId) {
    if let Some(s) = store
        && let Err(e) = s.ended(id)
    {
        tracing::warn!(task = %id, error = %e, "cannot journal the end of a run");
    }
}

/// Where numbering of this node's task ids continues: after the largest id accepted here, and
/// never below the incarnation's start time in seconds, so that a node whose journal was lost
/// (but not its identity) does not reuse the ids of its earlier runs unless those ran ahead of
/// the clock (more than one task a second on average); peers refuse an id they know with another
/// spec in any case.
pub fn next_local(me: NodeId, last: Option<TaskId>, incarnation: u64) -> u32 {
    let after = last
        .filter(|id| id.0 >> 32 == u64::from(me.0))
        .map_or(0, |id| (id.0 & 0xFFFF_FFFF) as u32 + 1);
    after.max(incarnation.min(u64::from(u32::MAX)) as u32)
}

/// Delete task logs and exit records that have not changed for `retention`, except those of the
/// tasks in `keep` (running here). Returns how many files were deleted.
pub fn sweep(dirs: &[&Path], retention: Duration, keep: &BTreeSet<TaskId>) -> usize {
    let now = SystemTime::now();
    let mut deleted = 0;
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            // `<task>.stdout`, `<task>.exit`, `<task>.share.json`: the id before the first dot.
            let task = path
                .file_name()
                .and_then(|s| s.to_str())
                .and_then(|s| s.split('.').next())
                .and_then(|s| s.parse::<u64>().ok())
                .map(TaskId);
            let Some(task) = task else { continue };
            if keep.contains(&task) {
                continue;
            }
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .is_some_and(|age| age > retention);
            if old && std::fs::remove_file(&path).is_ok() {
                deleted += 1;
            }
        }
    }
    deleted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbering_continues_after_the_journal_and_the_clock() {
        let me = NodeId(5);
        let mine = |n: u64| Some(TaskId((5 << 32) | n));
        assert_eq!(next_local(me, None, 0), 0);
        assert_eq!(next_local(me, mine(41), 0), 42);
        assert_eq!(next_local(me, mine(41), 1_000), 1_000);
        assert_eq!(next_local(me, mine(5_000), 1_000), 5_001);
        // Another node's id (a journal copied from elsewhere) does not count.
        assert_eq!(next_local(me, Some(TaskId((6 << 32) | 9)), 3), 3);
    }

    #[test]
    fn old_logs_go_and_running_tasks_keep_theirs() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        for name in [
            "1.stdout",
            "1.share.json",
            "2.stdout",
            "2.stderr",
            "notes.txt",
        ] {
            std::fs::write(dir.join(name), "x").unwrap();
        }
        let keep: BTreeSet<TaskId> = [TaskId(2)].into();
        assert_eq!(sweep(&[&dir], Duration::from_secs(3600), &keep), 0);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(sweep(&[&dir], Duration::from_millis(1), &keep), 2);
        assert!(!dir.join("1.stdout").exists() && !dir.join("1.share.json").exists());
        assert!(dir.join("2.stdout").exists() && dir.join("notes.txt").exists());
    }
}
