//! What the dashboard's charts draw: a bounded history of the cluster as this agent sees it, one
//! sample per slot over the last hour (at most [`MAX_SAMPLES`]; the oldest go first). Each
//! sample holds the queue length by priority class, the tasks running, the tasks finished so
//! far and the mean time in system of those finished since the previous sample, and each box's
//! CPU, GPU and memory in use (fractions of its capacity). Beside it, for each task running on
//! this box (the last [`MAX_TASKS`] of them), a point per slot: its progress, its share and the
//! metrics it reported (loss, accuracy, ...). Nothing in it is secret: the page reads it without
//! the API token (`GET /v1/history`, `GET /v1/tasks/{id}/history`).

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use tapfinger::TaskId;

/// Most samples kept (an hour of 1 s slots; with the default 5 s slots, an hour is 720).
pub const MAX_SAMPLES: usize = 3600;
/// Tasks whose own series are kept (those that ran here most recently).
pub const MAX_TASKS: usize = 200;

/// One point of a task's series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskPoint {
    /// When, in milliseconds since the Unix epoch.
    pub t_ms: u64,
    /// Its progress in [0, 1].
    pub progress: f64,
    /// Its share, in grid units per resource kind.
    pub alloc: Vec<u32>,
    /// The metrics of its latest progress line (`loss`, `accuracy`, ...).
    pub metrics: BTreeMap<String, f64>,
}

/// One sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// When, in milliseconds since the Unix epoch.
    pub t_ms: u64,
    /// Tasks waiting, by priority class (0 is the highest).
    pub queue: BTreeMap<u8, u32>,
    /// Tasks running (gangs counted once).
    pub running: u32,
    /// Tasks finished so far (as this agent knows them).
    pub finished: u32,
    /// Mean time in system (s) of the tasks that finished since the previous sample, if any.
    pub jct_s: Option<f64>,
    /// Each box's units in use over its capacity, per resource kind, by box name.
    pub used: BTreeMap<String, Vec<f64>>,
}

/// The history, shared between the event loop that records it and the API that serves it.
#[derive(Debug)]
pub struct History {
    inner: std::sync::Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    samples: VecDeque<Sample>,
    /// Each task's points, and the order tasks were last seen running (oldest first).
    tasks: BTreeMap<TaskId, VecDeque<TaskPoint>>,
    recent: VecDeque<TaskId>,
    cap: usize,
    /// Tasks seen finished (their finish is counted once).
    done: BTreeSet<TaskId>,
}

impl History {
    /// A history of the last hour at slots of `slot_ms`.
    pub fn new(slot_ms: u64) -> Self {
        let cap = (3_600_000 / slot_ms.max(1)).clamp(1, MAX_SAMPLES as u64) as usize;
        Self {
            inner: std::sync::Mutex::new(Inner {
                cap,
                ..Inner::default()
            }),
        }
    }

    /// Record a sample from the status `st`, at `t_ms` (a finished task's time in system is
    /// counted in slots from its arrival to the status's slot).
    pub fn record(&self, st: &crate::status::Status, t_ms: u64) {
        use tapfinger::node::TaskState;
        let Ok(mut h) = self.inner.lock() else {
            return;
        };
        let mut queue: BTreeMap<u8, u32> = BTreeMap::new();
        for q in &st.queue {
            *queue.entry(q.priority).or_default() += 1;
        }
        let (mut running, mut finished, mut jcts) = (0u32, 0u32, Vec::new());
        for (id, t) in &st.tasks {
            match t {
                TaskState::Running {
                    node,
                    alloc,
                    progress,
                    ..
                } if Some(*node) == st.id => {
                    running += 1;
                    let point = TaskPoint {
                        t_ms,
                        progress: *progress,
                        alloc: alloc.0.clone(),
                        metrics: st
                            .reports
                            .get(id)
                            .map(|r| r.last.clone())
                            .unwrap_or_default(),
                    };
                    h.point(*id, point);
                }
                TaskState::Running { .. } | TaskState::Gang { .. } => running += 1,
                TaskState::Done { .. } => {
                    finished += 1;
                    if h.done.insert(*id)
                        && let Some(n) = st.names.get(id)
                    {
                        let slots = st.slot.saturating_sub(n.arrival);
                        jcts.push((slots * st.slot_ms) as f64 / 1000.0);
                    }
                }
                TaskState::Pending => {}
            }
        }
        // Tasks the ledger forgot leave the set too: it stays as large as the ledger.
        let known: BTreeSet<TaskId> = st.tasks.keys().copied().collect();
        h.done.retain(|id| known.contains(id));
        let share = |used: &[u32], cap: &[u32]| -> Vec<f64> {
            used.iter()
                .zip(cap)
                .map(|(u, c)| {
                    if *c == 0 {
                        0.0
                    } else {
                        f64::from(*u) / f64::from(*c)
                    }
                })
                .collect()
        };
        let mut used = BTreeMap::new();
        if let (Some(u), Some(c)) = (&st.used, &st.capacity) {
            used.insert(st.name.clone(), share(&u.0, &c.0));
        }
        for (_, name, cap, free) in &st.peer_table {
            let u: Vec<u32> = cap
                .0
                .iter()
                .zip(&free.0)
                .map(|(c, f)| c - f.min(c))
                .collect();
            used.insert(name.clone(), share(&u, &cap.0));
        }
        let sample = Sample {
            t_ms,
            queue,
            running,
            finished,
            jct_s: (!jcts.is_empty()).then(|| jcts.iter().sum::<f64>() / jcts.len() as f64),
            used,
        };
        h.samples.push_back(sample);
        while h.samples.len() > h.cap {
            h.samples.pop_front();
        }
    }

    /// Task `id`'s points, oldest first (empty: it has not run here lately).
    pub fn task(&self, id: TaskId) -> Vec<TaskPoint> {
        self.inner
            .lock()
            .map(|h| h.tasks.get(&id).map(|p| p.iter().cloned().collect()))
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// The samples, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        self.inner
            .lock()
            .map(|h| h.samples.iter().cloned().collect())
            .unwrap_or_default()
    }
}

impl Inner {
    /// Add a point to task `id`'s series: the series keeps the last hour, and only the
    /// [`MAX_TASKS`] tasks seen running most recently keep theirs.
    fn point(&mut self, id: TaskId, p: TaskPoint) {
        let cap = self.cap;
        let series = self.tasks.entry(id).or_default();
        series.push_back(p);
        while series.len() > cap {
            series.pop_front();
        }
        self.recent.retain(|t| *t != id);
        self.recent.push_back(id);
        while self.recent.len() > MAX_TASKS {
            if let Some(old) = self.recent.pop_front() {
                self.tasks.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{Queued, Status};
    use tapfinger::node::TaskState;
    use tapfinger::{NodeId, Resources};

    /// Samples hold the queue by class, what runs and finishes (each finish once, with its time
    /// in system) and each box's use; the oldest go past the hour.
    #[test]
    fn a_sample_per_call_and_the_last_hour_kept() {
        let h = History::new(1_200_000); // 20-minute slots: three samples an hour
        let mut st = Status {
            id: Some(NodeId(1)),
            name: "box-a".into(),
            slot_ms: 1000,
            slot: 10,
            used: Some(Resources(vec![2, 1])),
            capacity: Some(Resources(vec![4, 1])),
            peer_table: vec![(
                NodeId(2),
                "box-b".into(),
                Resources(vec![8, 0]),
                Resources(vec![6, 0]),
            )],
            ..Status::default()
        };
        let q = |id, priority| Queued {
            id: TaskId(id),
            priority,
            arrival: 0,
            min_demand: Resources(vec![1, 0]),
        };
        st.queue = vec![q(1, 0), q(2, 2), q(3, 2)];
        st.tasks.insert(TaskId(4), TaskState::Pending);
        let done = TaskState::Done {
            node: NodeId(2),
            code: Some(0),
            epoch: 1,
        };
        st.tasks.insert(TaskId(5), done);
        st.names.insert(
            TaskId(5),
            crate::status::TaskNames {
                arrival: 4,
                ..Default::default()
            },
        );
        st.tasks.insert(
            TaskId(6),
            TaskState::Running {
                node: NodeId(1),
                alloc: Resources(vec![2, 1]),
                progress: 0.5,
                started: 0,
            },
        );
        h.record(&st, 1000);
        h.record(&st, 2000);
        let p = h.task(TaskId(6));
        assert_eq!(p.len(), 2, "a point per sample for a task running here");
        assert_eq!((p[0].progress, p[0].alloc.clone()), (0.5, vec![2, 1]));
        assert!(h.task(TaskId(5)).is_empty());
        let s = h.samples();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].queue, [(0, 1), (2, 2)].into());
        assert_eq!((s[0].finished, s[0].jct_s), (1, Some(6.0)));
        assert_eq!(s[1].jct_s, None, "a finish counts once");
        assert_eq!(s[0].used["box-a"], vec![0.5, 1.0]);
        assert_eq!(s[0].used["box-b"], vec![0.25, 0.0]);
        h.record(&st, 3000);
        h.record(&st, 4000);
        let s = h.samples();
        assert_eq!(s.len(), 3, "an hour of 20-minute slots");
        assert_eq!(s[0].t_ms, 2000);
    }
}
