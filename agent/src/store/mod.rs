//! The agent's durable task store: an append-only JSON-lines journal (`<data_dir>/tasks.jsonl`)
//! that compacts itself ([`compact`]).
//!
//! What it records, each line `fsync`ed before the agent acts on it:
//! - `accepted`: a task submitted here, before the API answers that it was accepted;
//! - `run`: a task this node started (any node may have accepted it), with its epoch, allocation,
//!   GPU devices and the supervisor's pid and start time, so that a restarted agent adopts it;
//! - `ended`: a run here ended (finished, stopped or failed to start);
//! - `outcome`: a task accepted here is known finished (who ran it, exit code, epoch) — the
//!   finished history a restarted agent shows;
//! - `ids`: the largest id accepted here (a compacted journal's first line);
//! - `preempted`: a task was preempted here (its count and the work it lost so far, the latest
//!   line wins), so that `show`, `tasks` and `/metrics` keep them across a restart.
//!
//! On restart the agent replays the journal: ids continue after the largest one accepted here,
//! unfinished tasks are announced again, runs without an end are adopted (or found finished, or
//! lost), and the history is restored, so an accepted task is never silently dropped nor its id
//! reused.
//!
//! **Damage.** A torn last line (a crash in the middle of a write: no newline after it) was never
//! acknowledged: it is cut off with a warning and the journal goes on after the last whole line.
//! Any other line that cannot be read makes [`Store::open`] refuse with [`StoreError::Corrupt`],
//! naming the line and the recovery command (`tapfinger-agent repair-journal PATH`,
//! [`compact::repair`]): the agent does not start rather than drop a task silently.
//!
//! **Size.** Once the journal has grown to twice its live records (and at least
//! [`StoreOptions::compact_min_lines`]), it is rewritten as a snapshot of them; finished tasks
//! beyond the [`StoreOptions::keep_finished`] most recent are forgotten then. So its size and the
//! agent's restart time follow the live tasks, not all the tasks it ever saw.

pub mod compact;

use crate::exec::Handle;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
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
    /// Finished, details unknown (journals from before outcomes were recorded).
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
    Ids {
        last: TaskId,
    },
    Preempted {
        task: TaskId,
        times: u32,
        work_lost: f64,
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

/// How the journal keeps itself small.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoreOptions {
    /// Finished tasks accepted here that a compaction keeps (the most recent ones), with their
    /// specs and outcomes: the history a restarted agent shows.
    pub keep_finished: usize,
    /// No compaction below this many lines.
    pub compact_min_lines: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            keep_finished: 10_000,
            compact_min_lines: 4096,
        }
    }
}

/// Why the journal cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Reading or writing it failed.
    #[error("{0}: {1}")]
    Io(PathBuf, #[source] std::io::Error),
    /// A line other than a torn last one cannot be read.
    #[error(
        "{path}: line {line} cannot be read ({error}); the agent will not start rather than drop \
         the tasks it may hold. Stop the agent and run `tapfinger-agent repair-journal {path}` to \
         keep every readable record (the journal as it was is copied beside it first)"
    )]
    Corrupt {
        /// The journal.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What the parser said.
        error: String,
    },
}

/// The journal.
pub struct Store {
    /// The journal file.
    path: PathBuf,
    /// It, open for appending.
    file: std::fs::File,
    /// Sync and compaction settings.
    opts: StoreOptions,
    /// What the journal holds, kept up to date with every record (compaction writes it).
    live: Recovered,
    /// Lines in the journal file.
    lines: u64,
    /// Compactions done since open.
    compactions: u64,
    /// A test's kill point (unit tests only).
    #[cfg(test)]
    crash: Option<compact::Step>,
}

/// What a restart recovers.
#[derive(Debug, Default, Clone)]
pub struct Recovered {
    /// Every task accepted here, by id.
    pub accepted: BTreeMap<TaskId, (Task, TaskSpec)>,
    /// Outcomes of tasks accepted here (absent: not known finished).
    pub outcomes: BTreeMap<TaskId, Option<Finish>>,
    /// Runs on this node that have no end.
    pub runs: BTreeMap<TaskId, Run>,
    /// Largest task id accepted here (to continue numbering after it).
    pub last_id: Option<TaskId>,
    /// Torn last lines cut off (a crash in the middle of a write).
    pub skipped: usize,
    /// Tasks preempted here: times and work lost.
    pub preempted: BTreeMap<TaskId, (u32, f64)>,
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

    fn apply(&mut self, r: Record) {
        match r {
            Record::Accepted { task, spec } => {
                self.last_id = self.last_id.max(Some(task.id));
                self.accepted.insert(task.id, (*task, *spec));
            }
            Record::Finished { task } => {
                self.outcomes.insert(task, None);
            }
            Record::Outcome {
                task,
                node,
                code,
                epoch,
            } => {
                self.outcomes
                    .insert(task, Some(Finish { node, code, epoch }));
            }
            Record::Run(run) => {
                self.runs.insert(run.task.id, *run);
            }
            Record::Ended { task } => {
                self.runs.remove(&task);
            }
            Record::Ids { last } => self.last_id = self.last_id.max(Some(last)),
            Record::Preempted {
                task,
                times,
                work_lost,
            } => {
                self.preempted.insert(task, (times, work_lost));
            }
        }
    }
}

impl Store {
    /// Open (or create) the journal with the default options and replay it.
    pub fn open(path: &Path) -> Result<(Self, Recovered), StoreError> {
        Self::open_with(path, StoreOptions::default())
    }

    /// Open (or create) the journal and replay it (module doc: a torn last line is cut off, any
    /// other unreadable line is refused).
    pub fn open_with(path: &Path, opts: StoreOptions) -> Result<(Self, Recovered), StoreError> {
        let io = |e| StoreError::Io(path.to_path_buf(), e);
        // A snapshot that was never renamed is an unfinished compaction: the journal is whole.
        let _ = std::fs::remove_file(compact::snapshot_path(path));
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io(e)),
        };
        let mut r = Recovered::default();
        let mut lines = 0;
        let mut good_end = 0;
        let mut start = 0;
        let mut number = 0;
        while start < bytes.len() {
            number += 1;
            let (end, whole) = match bytes[start..].iter().position(|b| *b == b'\n') {
                Some(i) => (start + i, true),
                None => (bytes.len(), false),
            };
            let text = &bytes[start..end];
            let next = if whole { end + 1 } else { end };
            if text.iter().all(u8::is_ascii_whitespace) {
                good_end = next;
                start = next;
                continue;
            }
            match serde_json::from_slice::<Record>(text) {
                Ok(rec) => {
                    r.apply(rec);
                    lines += 1;
                    good_end = next;
                }
                Err(e) if !whole => {
                    tracing::warn!(path = %path.display(), line = number, error = %e,
                        "cutting off a torn last line of the journal (a write the agent never acknowledged)");
                    r.skipped += 1;
                }
                Err(e) => {
                    return Err(StoreError::Corrupt {
                        path: path.display().to_string(),
                        line: number,
                        error: e.to_string(),
                    });
                }
            }
            start = next;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        if good_end < bytes.len() {
            // Appending after a torn line would glue the next record onto it.
            file.set_len(good_end as u64).map_err(io)?;
            file.sync_data().map_err(io)?;
        }
        let mut store = Self {
            path: path.to_path_buf(),
            file,
            opts,
            live: r.clone(),
            lines,
            compactions: 0,
            #[cfg(test)]
            crash: None,
        };
        store.maybe_compact();
        Ok((store, r))
    }

    fn append(&mut self, r: Record) -> std::io::Result<()> {
        let mut line = serde_json::to_string(&r).map_err(std::io::Error::other)?;
        line.push('\n');
        self.file.write_all(line.as_bytes())?;
        self.file.sync_data()?;
        self.live.apply(r);
        self.lines += 1;
        self.maybe_compact();
        Ok(())
    }

    /// Record that `task` has now been preempted here `times` times, losing `work_lost` in all.
    pub fn preempted(&mut self, task: TaskId, times: u32, work_lost: f64) -> std::io::Result<()> {
        self.append(Record::Preempted {
            task,
            times,
            work_lost,
        })
    }

    /// Record an accepted task (durable when this returns).
    pub fn accepted(&mut self, task: &Task, spec: &TaskSpec) -> std::io::Result<()> {
        self.append(Record::Accepted {
            task: Box::new(task.clone()),
            spec: Box::new(spec.clone()),
        })
    }

    /// Record that a task accepted here finished (anywhere): who ran it, how, which copy.
    pub fn outcome(&mut self, task: TaskId, f: Finish) -> std::io::Result<()> {
        self.append(Record::Outcome {
            task,
            node: f.node,
            code: f.code,
            epoch: f.epoch,
        })
    }

    /// Record a start on this node (durable before the task is announced as started).
    pub fn run(&mut self, run: &Run) -> std::io::Result<()> {
        self.append(Record::Run(Box::new(run.clone())))
    }

    /// Record that a run on this node ended.
    pub fn ended(&mut self, task: TaskId) -> std::io::Result<()> {
        self.append(Record::Ended { task })
    }

    /// The journal's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Lines in the journal now, and compactions since open.
    pub fn size(&self) -> (u64, u64) {
        (self.lines, self.compactions)
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
    crate::procs::write_json(members, path, "tmp")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: u64) -> Task {
        Task::new(id, [1, 0, 0]).on(&[1])
    }

    fn spec() -> TaskSpec {
        TaskSpec::from_toml("command = [\"x\"]\nmin_demand = { cpu = 1 }\n").unwrap()
    }

    fn done(code: i32) -> Finish {
        Finish {
            node: NodeId(1),
            code: Some(code),
            epoch: 1,
        }
    }

    /// A journal's path in a new folder, removed when the folder is dropped.
    fn fresh(name: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::Builder::new()
            .prefix(&format!("tf-store-{name}-"))
            .tempdir()
            .unwrap();
        let path = dir.path().join("tasks.jsonl");
        (dir, path)
    }

    fn append_raw(path: &Path, bytes: &[u8]) {
        std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .unwrap()
            .write_all(bytes)
            .unwrap();
    }

    /// A spec's profile hints survive a restart (its estimator hints come back with it), and a
    /// journal written before specs had them still reads (the field defaults to none).
    #[test]
    fn profile_hints_survive_the_journal_and_old_records_still_read() {
        let (_dir, path) = fresh("hints");
        let hinted = TaskSpec::from_toml(
            "command = [\"x\"]\nmin_demand = { cpu = 1 }\n\
             [[profile]]\nalloc = { cpu = 2 }\nseconds = 30\n",
        )
        .unwrap();
        {
            let (mut s, _) = Store::open(&path).unwrap();
            s.accepted(&task(1), &hinted).unwrap();
        }
        // A record as an older agent wrote it: the same spec without the field.
        let line = std::fs::read_to_string(&path).unwrap();
        let old = line.replace(
            ",\"profile\":[{\"alloc\":{\"cpu\":2.0},\"seconds\":30.0}]",
            "",
        );
        assert_ne!(old, line, "the record carries no profile: {line}");
        append_raw(&path, old.replace("\"id\":1", "\"id\":2").as_bytes());
        // And as agents wrote hints before amounts were in natural units: whole numbers.
        let ints = line
            .replace("\"cpu\":2.0}", "\"cpu\":2}")
            .replace("\"id\":1", "\"id\":3");
        assert!(ints.contains("\"alloc\":{\"cpu\":2}"), "{ints}");
        append_raw(&path, ints.as_bytes());
        let (_, r) = Store::open(&path).unwrap();
        assert_eq!(r.skipped, 0);
        let specs: BTreeMap<u64, TaskSpec> = r
            .unfinished()
            .iter()
            .map(|(t, s)| (t.id.0, s.clone()))
            .collect();
        assert_eq!(specs[&1], hinted);
        assert!(specs[&2].profile.is_empty());
        assert_eq!(specs[&3].profile, hinted.profile);
    }

    #[test]
    fn replays_unfinished_tasks_and_survives_a_torn_line() {
        let (_dir, path) = fresh("replay");
        let spec = spec();
        {
            let (mut s, r) = Store::open(&path).unwrap();
            assert!(r.unfinished().is_empty() && r.last_id.is_none());
            for id in 1..=4 {
                s.accepted(&task(id), &spec).unwrap();
            }
            s.outcome(TaskId(2), done(0)).unwrap();
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
        append_raw(&path, b"{\"accepted\": {\"task\"");
        let (mut s, r) = Store::open(&path).unwrap();
        let ids: Vec<u64> = r.unfinished().iter().map(|(t, _)| t.id.0).collect();
        assert_eq!(ids, vec![1, 3]);
        assert_eq!(r.last_id, Some(TaskId(4)));
        assert_eq!(r.skipped, 1);
        assert_eq!(r.unfinished()[0].1, spec);
        assert_eq!(r.outcomes[&TaskId(2)].map(|f| f.code), Some(Some(0)));
        assert_eq!(r.runs.keys().copied().collect::<Vec<_>>(), vec![TaskId(4)]);
        assert_eq!(r.runs[&TaskId(4)].handle, Some(Handle { pid: 7, start: 9 }));
        // The torn line was cut off, so the next record is whole and read back.
        s.accepted(&task(6), &spec).unwrap();
        drop(s);
        let (_, r) = Store::open(&path).unwrap();
        assert_eq!(r.skipped, 0);
        assert!(
            r.accepted.contains_key(&TaskId(6)),
            "{:?}",
            r.accepted.keys()
        );
    }

    #[test]
    fn a_damaged_line_is_refused_and_the_repair_keeps_the_rest() {
        let (_dir, path) = fresh("corrupt");
        {
            let (mut s, _) = Store::open(&path).unwrap();
            s.accepted(&task(1), &spec()).unwrap();
            append_raw(&path, b"{\"accepted\": garbage}\n");
            s.accepted(&task(2), &spec()).unwrap();
        }
        let Err(e) = Store::open(&path) else {
            panic!("a damaged journal was opened");
        };
        let msg = e.to_string();
        assert!(matches!(e, StoreError::Corrupt { line: 2, .. }), "{msg}");
        assert!(
            msg.contains("line 2") && msg.contains("tapfinger-agent repair-journal"),
            "{msg}"
        );
        let rep = compact::repair(&path).unwrap();
        assert_eq!(rep.kept, 2);
        assert_eq!(rep.dropped.len(), 1);
        assert_eq!(rep.dropped[0].0, 2);
        assert!(std::fs::read(&rep.backup).unwrap().ends_with(b"\n"));
        let (_, r) = Store::open(&path).unwrap();
        assert_eq!(r.accepted.len(), 2);
    }

    #[test]
    fn preemption_counts_survive_a_restart_and_a_compaction() {
        let (_dir, path) = fresh("preempted");
        let opts = StoreOptions {
            keep_finished: 2,
            compact_min_lines: 4,
        };
        {
            let (mut s, _) = Store::open_with(&path, opts).unwrap();
            s.preempted(TaskId(3), 1, 0.25).unwrap();
            s.preempted(TaskId(3), 2, 0.5).unwrap();
            s.preempted(TaskId(9), 1, 0.0).unwrap();
        }
        let (mut s, r) = Store::open_with(&path, opts).unwrap();
        assert_eq!(r.preempted[&TaskId(3)], (2, 0.5));
        assert_eq!(r.preempted[&TaskId(9)], (1, 0.0));
        // Past keep_finished, the oldest tasks' counts go with a compaction.
        s.preempted(TaskId(12), 1, 0.125).unwrap();
        s.compact().unwrap();
        drop(s);
        let (_, r) = Store::open_with(&path, opts).unwrap();
        let kept: Vec<_> = r.preempted.iter().map(|(k, v)| (k.0, *v)).collect();
        assert_eq!(kept, vec![(9, (1, 0.0)), (12, (1, 0.125))]);
    }

    #[test]
    fn compaction_keeps_the_live_tasks_and_bounds_the_journal() {
        let (_dir, path) = fresh("compact");
        let opts = StoreOptions {
            keep_finished: 50,
            compact_min_lines: 200,
        };
        let (mut s, _) = Store::open_with(&path, opts).unwrap();
        let spec = spec();
        let mut max_lines = 0;
        for id in 1..=3000u64 {
            s.accepted(&task(id), &spec).unwrap();
            // Every task but each hundredth finishes; each tenth of them ran here.
            if id % 100 != 0 {
                if id % 10 == 0 {
                    s.run(&Run {
                        task: task(id),
                        spec: spec.clone(),
                        epoch: 1,
                        alloc: Resources(vec![1, 0, 0]),
                        gpus: Vec::new(),
                        handle: None,
                    })
                    .unwrap();
                    s.ended(TaskId(id)).unwrap();
                }
                s.outcome(TaskId(id), done(0)).unwrap();
            }
            max_lines = max_lines.max(s.size().0);
        }
        assert!(s.size().1 > 5, "compactions: {:?}", s.size());
        // 30 unfinished and 50 finished live: the journal never grew past the threshold's
        // order, whatever the number of tasks.
        assert!(max_lines <= 2 * (30 + 2 * 50 + 2) + 200, "{max_lines}");
        drop(s);
        let (_, r) = Store::open_with(&path, opts).unwrap();
        let unfinished: Vec<u64> = r.unfinished().iter().map(|(t, _)| t.id.0).collect();
        assert_eq!(unfinished, (1..=30).map(|i| i * 100).collect::<Vec<_>>());
        assert_eq!(r.last_id, Some(TaskId(3000)));
        let finished: Vec<u64> = r.outcomes.keys().map(|t| t.0).collect();
        assert!(
            finished.len() >= 50 && finished.len() < 50 + 4 * 82 + 200,
            "{}",
            finished.len()
        );
        assert!(
            finished.contains(&2999),
            "the most recent finished tasks are kept"
        );
    }

    /// Set by the parent test: the child appends, then dies at this compaction step.
    const CRASH_ENV: &str = "TAPFINGER_STORE_CRASH_CHILD";

    fn crash_child(path: &Path, step: compact::Step) {
        let opts = StoreOptions {
            keep_finished: 5,
            compact_min_lines: 1_000_000,
        };
        let (mut s, _) = Store::open_with(path, opts).unwrap();
        for id in 1..=40u64 {
            s.accepted(&task(id), &spec()).unwrap();
            if id % 2 == 0 {
                s.outcome(TaskId(id), done(0)).unwrap();
            }
        }
        s.crash_at(step);
        let _ = s.compact();
        panic!("the child was not killed at {step:?}");
    }

    #[test]
    fn a_kill_at_any_step_of_compaction_loses_no_acknowledged_task() {
        use compact::Step;
        let steps = [
            ("mid", Step::MidSnapshot),
            ("synced", Step::Synced),
            ("renamed", Step::Renamed),
        ];
        if let Ok(which) = std::env::var(CRASH_ENV) {
            let (_, step) = steps.iter().find(|(n, _)| which.ends_with(n)).unwrap();
            return crash_child(Path::new(&which[..which.rfind(':').unwrap()]), *step);
        }
        for (name, _) in steps {
            let (_dir, path) = fresh(&format!("kill-{name}"));
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "store::tests::a_kill_at_any_step_of_compaction_loses_no_acknowledged_task",
                    "--nocapture",
                ])
                .env(CRASH_ENV, format!("{}:{name}", path.display()))
                .output()
                .unwrap();
            // Killed by SIGABRT: no exit code.
            assert_eq!(out.status.code(), None, "{name}: {out:?}");
            let (_, r) = Store::open(&path).unwrap();
            let unfinished: Vec<u64> = r.unfinished().iter().map(|(t, _)| t.id.0).collect();
            assert_eq!(
                unfinished,
                (1..=20).map(|i| 2 * i - 1).collect::<Vec<_>>(),
                "{name}"
            );
            assert_eq!(r.last_id, Some(TaskId(40)), "{name}");
            assert!(r.outcomes.contains_key(&TaskId(40)), "{name}");
            assert!(!compact::snapshot_path(&path).exists(), "{name}");
        }
    }
}
