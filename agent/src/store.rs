//! The agent's durable task store: an append-only JSON-lines journal (`<data_dir>/tasks.jsonl`).
//!
//! What it records, each line `fsync`ed before the agent acts on it:
//! - `accepted`: a task submitted here, before the API answers that it was accepted;
//! - `run`: a task this node started (any node may have accepted it), with its epoch, allocation,
//!   GPU devices and the supervisor's pid and start time, so that a restarted agent adopts it;
//! - `ended`: a run here ended (finished, stopped or failed to start);
//! - `outcome`: a task accepted here is known finished (who ran it, exit code, epoch) — the
//!   finished history a restarted agent shows.
//!
//! On restart the agent replays the journal: ids continue after the largest one accepted here,
//! unfinished tasks are announced again, runs without an end are adopted (or found finished, or
//! lost), and the history is restored, so an accepted task is never silently dropped nor its id
//! reused. A torn last line (a crash in the middle of a write) is skipped with a warning; every
//! complete line before it is kept. Compaction is not done yet: the journal grows with the tasks.

use crate::exec::Handle;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use tapfinger::spec::TaskSpec;
use tapfinger::{NodeId, Resources, Task, TaskId};

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Record {
    Accepted {
        task: Box<Task>,
        spec: Box<TaskSpec>,
    },
    /// Written by journals before outcomes were recorded: finished, details unknown.
    Finished {
        task: TaskId,
    },
    Outcome {
        task: TaskId,
        node: NodeId,
        code: Option<i32>,
        epoch: u64,
    },
    Run(Box<Run>),
    Ended {
        task: TaskId,
    },
}

/// A task started on this node, as the journal keeps it until it ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// The task.
    pub task: Task,
    /// Its spec.
    pub spec: TaskSpec,
    /// Epoch of this start.
    pub epoch: u64,
    /// Allocation (grid units).
    pub alloc: Resources,
    /// GPU devices handed to it.
    pub gpus: Vec<u32>,
    /// Its supervisor's process, if the executor supervises tasks.
    pub handle: Option<Handle>,
}

/// A finished task accepted here: who ran it, its exit code and the epoch of that copy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Finish {
    /// Node that ran it (or cancelled it).
    pub node: NodeId,
    /// Exit code.
    pub code: Option<i32>,
    /// Epoch of the copy.
    pub epoch: u64,
}

/// The journal.
pub struct Store {
    path: PathBuf,
    file: std::fs::File,
}

/// What a restart recovers.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Every task accepted here, by id.
    pub accepted: BTreeMap<TaskId, (Task, TaskSpec)>,
    /// Outcomes of tasks accepted here (absent: not known finished).
    pub outcomes: BTreeMap<TaskId, Option<Finish>>,
    /// Runs on this node that have no end.
    pub runs: BTreeMap<TaskId, Run>,
    /// Largest task id accepted here (to continue numbering after it).
    pub last_id: Option<TaskId>,
    /// Lines that could not be read (a torn final write).
    pub skipped: usize,
}

impl Recovered {
    /// Tasks accepted here and not known finished (nor running here).
    pub fn unfinished(&self) -> Vec<(Task, TaskSpec)> {
        self.accepted
            .iter()
            .filter(|(id, _)| !self.outcomes.contains_key(id) && !self.runs.contains_key(id))
            .map(|(_, t)| t.clone())
            .collect()
    }
}

impl Store {
    /// Open (or create) the journal and replay it.
    pub fn open(path: &Path) -> std::io::Result<(Self, Recovered)> {
        let mut r = Recovered::default();
        if let Ok(f) = std::fs::File::open(path) {
            for line in std::io::BufReader::new(f).lines() {
                let line = line?;
                if line.trim().is_empty() {
                    continue;
                }
                match serde_json::from_str::<Record>(&line) {
                    Ok(Record::Accepted { task, spec }) => {
                        r.last_id = r.last_id.max(Some(task.id));
                        r.accepted.insert(task.id, (*task, *spec));
                    }
                    Ok(Record::Finished { task }) => {
                        r.outcomes.insert(task, None);
                    }
                    Ok(Record::Outcome {
                        task,
                        node,
                        code,
                        epoch,
                    }) => {
                        r.outcomes.insert(task, Some(Finish { node, code, epoch }));
                    }
                    Ok(Record::Run(run)) => {
                        r.runs.insert(run.task.id, *run);
                    }
                    Ok(Record::Ended { task }) => {
                        r.runs.remove(&task);
                    }
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "skipping an unreadable journal line");
                        r.skipped += 1;
                    }
                }
            }
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok((
            Self {
                path: path.to_path_buf(),
                file,
            },
            r,
        ))
    }

    fn append(&mut self, r: &Record) -> std::io::Result<()> {
        let mut line = serde_json::to_string(r).map_err(std::io::Error::other)?;
        line.push('\n');
        self.file.write_all(line.as_bytes())?;
        self.file.sync_data()
    }

    /// Record an accepted task (durable when this returns).
    pub fn accepted(&mut self, task: &Task, spec: &TaskSpec) -> std::io::Result<()> {
        self.append(&Record::Accepted {
            task: Box::new(task.clone()),
            spec: Box::new(spec.clone()),
        })
    }

    /// Record that a task accepted here finished (anywhere): who ran it, how, which copy.
    pub fn outcome(&mut self, task: TaskId, f: Finish) -> std::io::Result<()> {
        self.append(&Record::Outcome {
            task,
            node: f.node,
            code: f.code,
            epoch: f.epoch,
        })
    }

    /// Record a start on this node (durable before the task is announced as started).
    pub fn run(&mut self, run: &Run) -> std::io::Result<()> {
        self.append(&Record::Run(Box::new(run.clone())))
    }

    /// Record that a run on this node ended.
    pub fn ended(&mut self, task: TaskId) -> std::io::Result<()> {
        self.append(&Record::Ended { task })
    }

    /// The journal's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The members a node counts for its quorum, kept across restarts (`<data_dir>/members.json`);
/// an absent or unreadable file is an empty set (the node learns its peers again).
pub fn load_members(path: &Path) -> BTreeSet<NodeId> {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Save the members (atomically: a crash leaves the old file or the new one).
pub fn save_members(path: &Path, members: &BTreeSet<NodeId>) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(
        &tmp,
        serde_json::to_vec(members).map_err(std::io::Error::other)?,
    )?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapfinger::TaskTypeId;

    fn task(id: u64) -> Task {
        Task {
            id: TaskId(id),
            ty: TaskTypeId(0),
            min_demand: Resources(vec![1, 0, 0]),
            max_demand: None,
            priority: 0,
            reachable: vec![NodeId(1)],
            arrival: 0,
        }
    }

    #[test]
    fn replays_unfinished_tasks_and_survives_a_torn_line() {
        let dir = std::env::temp_dir().join(format!("tf-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tasks.jsonl");
        let _ = std::fs::remove_file(&path);
        let spec = TaskSpec::from_toml("command = [\"x\"]\nmin_demand = { cpu = 1 }\n").unwrap();
        {
            let (mut s, r) = Store::open(&path).unwrap();
            assert!(r.unfinished().is_empty() && r.last_id.is_none());
            for id in 1..=4 {
                s.accepted(&task(id), &spec).unwrap();
            }
            s.outcome(
                TaskId(2),
                Finish {
                    node: NodeId(1),
                    code: Some(0),
                    epoch: 1,
                },
            )
            .unwrap();
            let run = |id| Run {
                task: task(id),
                spec: spec.clone(),
                epoch: 1,
                alloc: Resources(vec![1, 0, 0]),
                gpus: Vec::new(),
                handle: Some(Handle { pid: 7, start: 9 }),
            };
            s.run(&run(4)).unwrap();
            s.run(&run(5)).unwrap();
            s.ended(TaskId(5)).unwrap();
        }
        // A crash in the middle of a write.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"accepted\": {\"task\"")
            .unwrap();
        let (_, r) = Store::open(&path).unwrap();
        let ids: Vec<u64> = r.unfinished().iter().map(|(t, _)| t.id.0).collect();
        assert_eq!(ids, vec![1, 3]);
        assert_eq!(r.last_id, Some(TaskId(4)));
        assert_eq!(r.skipped, 1);
        assert_eq!(r.unfinished()[0].1, spec);
        assert_eq!(r.outcomes[&TaskId(2)].map(|f| f.code), Some(Some(0)));
        assert_eq!(r.runs.keys().copied().collect::<Vec<_>>(), vec![TaskId(4)]);
        assert_eq!(r.runs[&TaskId(4)].handle, Some(Handle { pid: 7, start: 9 }));
    }
}
