//! The agent's durable task store: an append-only JSON-lines journal (`<data_dir>/tasks.jsonl`).
//!
//! A task is written (and `fsync`ed) before the API answers that it was accepted; a line records
//! when it is known finished. On restart the agent replays the journal and re-announces every task
//! not finished, so an accepted task is never silently dropped. A torn last line (a crash in the
//! middle of a write) is skipped with a warning; every complete line before it is kept.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use tapfinger::spec::TaskSpec;
use tapfinger::{Task, TaskId};

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Record {
    Accepted {
        task: Box<Task>,
        spec: Box<TaskSpec>,
    },
    Finished {
        task: TaskId,
    },
}

/// The journal.
pub struct Store {
    path: PathBuf,
    file: std::fs::File,
}

/// What a restart recovers.
pub struct Recovered {
    /// Tasks accepted here and not known finished, by id.
    pub unfinished: Vec<(Task, TaskSpec)>,
    /// Largest task id accepted here (to continue numbering after it).
    pub last_id: Option<TaskId>,
    /// Lines that could not be read (a torn final write).
    pub skipped: usize,
}

impl Store {
    /// Open (or create) the journal and replay it.
    pub fn open(path: &Path) -> std::io::Result<(Self, Recovered)> {
        let mut accepted: BTreeMap<TaskId, (Task, TaskSpec)> = BTreeMap::new();
        let mut last_id = None;
        let mut skipped = 0;
        if let Ok(f) = std::fs::File::open(path) {
            for line in std::io::BufReader::new(f).lines() {
                let line = line?;
                if line.trim().is_empty() {
                    continue;
                }
                match serde_json::from_str::<Record>(&line) {
                    Ok(Record::Accepted { task, spec }) => {
                        last_id = last_id.max(Some(task.id));
                        accepted.insert(task.id, (*task, *spec));
                    }
                    Ok(Record::Finished { task }) => {
                        accepted.remove(&task);
                    }
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "skipping an unreadable journal line");
                        skipped += 1;
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
            Recovered {
                unfinished: accepted.into_values().collect(),
                last_id,
                skipped,
            },
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

    /// Record that a task finished (anywhere).
    pub fn finished(&mut self, task: TaskId) -> std::io::Result<()> {
        self.append(&Record::Finished { task })
    }

    /// The journal's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapfinger::{NodeId, Resources, TaskTypeId};

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
            assert!(r.unfinished.is_empty() && r.last_id.is_none());
            for id in 1..=3 {
                s.accepted(&task(id), &spec).unwrap();
            }
            s.finished(TaskId(2)).unwrap();
        }
        // A crash in the middle of a write.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"accepted\": {\"task\"")
            .unwrap();
        let (_, r) = Store::open(&path).unwrap();
        let ids: Vec<u64> = r.unfinished.iter().map(|(t, _)| t.id.0).collect();
        assert_eq!(ids, vec![1, 3]);
        assert_eq!(r.last_id, Some(TaskId(3)));
        assert_eq!(r.skipped, 1);
        assert_eq!(r.unfinished[0].1, spec);
    }
}
