//! What the coordinator heard of the cluster's tasks itself, as it happened: the guard judges a
//! task of the boxes' merged workload ([`crate::merge`]) only where this agrees with it.
//!
//! The coordinator is subscribed to the cluster's gossip topic like every agent, so it hears
//! every task announced (its class, priority and minimum demand, and the slot it arrived in,
//! each signed by the box that announced it), every start (which box),
//! which boxes each heartbeat shows it running on, and every end (the finish message, or the outcome a later
//! heartbeat repeats). It notes when it heard each, on its own clock. A pushed task is kept
//! only if it was announced with the same attributes, its arrival and end fall where the
//! coordinator heard them (the cluster's slots put on the coordinator's clock by when each
//! slot's proposals were heard, the median over their senders; within [`crate::merge::SLACK`]
//! slots and [`DELAY_S`] of delivery), and every start it lists was heard from that box when it happened
//! (a re-share only on a box it was heard running on). So boxes that agree among themselves still cannot make a task
//! up, move its arrival or end, or invent its runs: what they report must be what the whole
//! cluster was told at the time.
//!
//! What it cannot check: the progress figures behind the class speeds (the estimator's, from
//! one box's workload), the allocations of its runs (a start re-shared within its first slot is
//! recorded at the later share; a heartbeat may fall in no short stretch of one allocation),
//! and tasks announced before this process started (it never heard them
//! arrive; they are left out until they have aged out of the boxes' windows).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use tapfinger::twin::{TaskRecord, Workload};
use tapfinger::wire::Body;
use tapfinger::{NodeId, Resources, TaskId};

/// Seconds a message may take to reach the coordinator beyond the slot it was sent in (gossip
/// hops, and an end heard only from the next heartbeat that repeats it).
pub const DELAY_S: f64 = 3.0;

/// Tasks remembered at most (the oldest heard are forgotten first): about 100 bytes each.
pub const MAX_TASKS: usize = 100_000;

/// Slots whose proposals' times are remembered at most (the oldest forgotten first): about
/// 150 bytes each.
pub const MAX_SLOTS: usize = 100_000;

/// Senders whose first proposal of a slot is remembered: the slot began at the median of
/// their hearings, so a minority of them cannot move it.
const SLOT_SENDERS: usize = 5;

/// What was heard of one task.
#[derive(Debug, Clone)]
struct Told {
    /// Its class (`Task::ty`).
    class: u16,
    /// Priority.
    priority: u8,
    /// Minimum demand.
    min_demand: Resources,
    /// The slot its announcement says it arrived in.
    arrival: u64,
    /// When its announcement was first heard (coordinator's clock, s).
    announced: f64,
    /// Each start heard: the box that started it, and when.
    starts: Vec<(NodeId, f64)>,
    /// Every box it was heard running on.
    boxes: BTreeSet<NodeId>,
    /// When its end was first heard.
    finished: Option<f64>,
}

/// The tasks heard, by id.
#[derive(Debug, Default)]
pub struct Heard {
    tasks: BTreeMap<TaskId, Told>,
    /// Ids in the order first heard (what is forgotten first).
    order: VecDeque<TaskId>,
    /// For each slot, when its first proposal from each of up to [`SLOT_SENDERS`] boxes was
    /// heard: the cluster's slots on the coordinator's clock. Slots are rounds, which wait for
    /// every member's proposal, so under load they run later than their nominal length; one
    /// offset at nominal length would put later ends and starts outside the slack.
    slots: BTreeMap<u64, Vec<(NodeId, f64)>>,
}

/// What the check kept and dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Checked {
    /// Tasks kept.
    pub kept: usize,
    /// Tasks left out: never heard, heard otherwise, or at other times.
    pub unheard: usize,
}

impl Heard {
    /// Note `body`, sent by `from`, heard at `at` (seconds on the coordinator's clock).
    pub fn hear(&mut self, from: NodeId, body: &Body, at: f64) {
        match body {
            Body::Announce { task, .. } if !self.tasks.contains_key(&task.id) => {
                self.order.push_back(task.id);
                self.tasks.insert(
                    task.id,
                    Told {
                        class: task.ty.0,
                        priority: task.priority,
                        min_demand: task.min_demand.clone(),
                        arrival: task.arrival,
                        announced: at,
                        starts: Vec::new(),
                        boxes: BTreeSet::new(),
                        finished: None,
                    },
                );
                while self.order.len() > MAX_TASKS {
                    if let Some(old) = self.order.pop_front() {
                        self.tasks.remove(&old);
                    }
                }
            }
            Body::Started { task, .. } => {
                if let Some(t) = self.tasks.get_mut(task) {
                    t.starts.push((from, at));
                    t.boxes.insert(from);
                }
            }
            Body::Heartbeat(state) => {
                for r in &state.running {
                    if let Some(t) = self.tasks.get_mut(&r.task) {
                        t.boxes.insert(from);
                    }
                }
                for o in &state.recent {
                    self.ended(o.task, at);
                }
            }
            Body::Protocol(m) => {
                let heard = self.slots.entry(m.round.slot).or_default();
                if heard.len() < SLOT_SENDERS && heard.iter().all(|&(n, _)| n != from) {
                    heard.push((from, at));
                }
                while self.slots.len() > MAX_SLOTS {
                    self.slots.pop_first();
                }
            }
            Body::Finished(o) => self.ended(o.task, at),
            Body::Outcomes(list) => {
                for f in list {
                    self.ended(f.outcome.task, at);
                }
            }
            _ => {}
        }
    }

    fn ended(&mut self, task: TaskId, at: f64) {
        if let Some(t) = self.tasks.get_mut(&task)
            && t.finished.is_none()
        {
            t.finished = Some(at);
        }
    }

    /// Tasks heard.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether nothing was heard.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// `w` with only the tasks that agree with what was heard.
    pub fn check(&self, w: &Workload) -> (Workload, Checked) {
        let slot = w.slot_seconds.max(1e-3);
        // Attributes first: a task never announced, or announced otherwise, is out whatever
        // its times.
        let told: Vec<(&TaskRecord, &Told)> = w
            .tasks
            .iter()
            .filter_map(|t| self.tasks.get(&t.id).map(|h| (t, h)))
            .filter(|(t, h)| {
                t.class == h.class
                    && t.priority == h.priority
                    && t.min_demand == h.min_demand
                    && t.arrival.abs_diff(h.arrival) <= crate::merge::SLACK
            })
            .collect();
        let Some(clock) = self.clock(&told, slot) else {
            let unheard = w.tasks.len();
            let none = Workload {
                tasks: Vec::new(),
                ..w.clone()
            };
            return (none, Checked { kept: 0, unheard });
        };
        // A message sent in slot `s` is heard in it, or up to `DELAY_S` later; the slot's start
        // on this clock may be off by as much again either way (it is a median of such
        // hearings), and the boxes by `SLACK` slots (at least nominal ones).
        let n = crate::merge::SLACK;
        let at = |heard: f64, s: u64| {
            let early = clock
                .start(s.saturating_sub(n))
                .min(clock.start(s) - n as f64 * slot);
            let late = clock
                .start(s + 1 + n)
                .max(clock.start(s + 1) + n as f64 * slot);
            heard >= early - DELAY_S && heard <= late + DELAY_S
        };
        let tasks: Vec<TaskRecord> = told
            .into_iter()
            .filter(|(t, h)| {
                let arrived = at(h.announced, t.arrival);
                // An end the box reports was heard then (`finished` is the slot after the end);
                // an end heard after the box's push is not in it, which is no lie.
                let ended = match (t.finished, h.finished) {
                    (Some(f), Some(e)) => at(e, f.saturating_sub(1)),
                    (Some(_), None) => false,
                    (None, _) => true,
                };
                // A start by the box that announced it, when it did; a re-share on a box the
                // task was heard running on. Allocations are the box's word: a start re-shared
                // within its first slot is recorded at the later share, and a heartbeat may
                // fall in no short stretch of one allocation.
                let ran = t.runs.iter().all(|r| {
                    if r.start {
                        h.starts.iter().any(|&(n, s)| n == r.node && at(s, r.from))
                    } else {
                        h.boxes.contains(&r.node)
                    }
                });
                arrived && ended && ran
            })
            .map(|(t, _)| t.clone())
            .collect();
        let checked = Checked {
            kept: tasks.len(),
            unheard: w.tasks.len() - tasks.len(),
        };
        (Workload { tasks, ..w.clone() }, checked)
    }

    /// The cluster's slots on the coordinator's clock: where each slot began as its proposals
    /// were heard (the median over their senders), between those linear, beyond them at the
    /// nominal `slot` length. With no proposal heard (a coordinator that joined after the
    /// rounds it judges), slot 0 is the median of what the arrivals of `told` say, at nominal
    /// length; with neither, there is no clock.
    fn clock(&self, told: &[(&TaskRecord, &Told)], slot: f64) -> Option<Clock> {
        let mut starts: Vec<(u64, f64)> = self
            .slots
            .iter()
            .map(|(&s, heard)| {
                let mut t: Vec<f64> = heard.iter().map(|&(_, t)| t).collect();
                t.sort_by(f64::total_cmp);
                (s, t[t.len() / 2])
            })
            .collect();
        // Later slots never begin earlier (a median moved by a lying box cannot run back).
        for i in 1..starts.len() {
            starts[i].1 = starts[i].1.max(starts[i - 1].1);
        }
        if starts.is_empty() {
            let mut offsets: Vec<f64> = told
                .iter()
                .map(|(_, h)| h.announced - h.arrival as f64 * slot)
                .collect();
            offsets.sort_by(f64::total_cmp);
            starts.push((0, *offsets.get(offsets.len() / 2)?));
        }
        Some(Clock { starts, slot })
    }
}

/// Slot starts on the coordinator's clock ([`Heard::clock`]).
struct Clock {
    /// Slots heard and when each began, by slot.
    starts: Vec<(u64, f64)>,
    /// Nominal slot length (s), beyond the slots heard.
    slot: f64,
}

impl Clock {
    /// When slot `s` began.
    fn start(&self, s: u64) -> f64 {
        let i = self.starts.partition_point(|&(k, _)| k <= s);
        let at = |(k, t): (u64, f64)| t + (s as f64 - k as f64) * self.slot;
        match (i.checked_sub(1).map(|j| self.starts[j]), self.starts.get(i)) {
            (Some((k, t)), _) if k == s => t,
            (Some((a, ta)), Some(&(b, tb))) => ta + (tb - ta) * (s - a) as f64 / (b - a) as f64,
            (Some(before), None) => at(before),
            (None, Some(&after)) => at(after),
            (None, None) => 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapfinger::spec::TaskSpec;
    use tapfinger::twin::RunRecord;
    use tapfinger::wire::Outcome;
    use tapfinger::{Task, TaskTypeId};

    fn cpu(n: u32) -> Resources {
        Resources(vec![n, 0, 0])
    }

    fn task(id: u64, arrival: u64) -> Task {
        Task {
            id: TaskId(id),
            ty: TaskTypeId(0),
            min_demand: cpu(1),
            max_demand: None,
            priority: 0,
            reachable: Vec::new(),
            arrival,
            gang: None,
        }
    }

    fn announce(t: Task) -> Body {
        Body::Announce {
            task: t,
            spec: TaskSpec::from_toml("command = [\"train\"]").unwrap(),
            owner: None,
            epoch: 0,
            runs: None,
        }
    }

    fn finished(id: u64) -> Body {
        Body::Finished(Outcome {
            task: TaskId(id),
            node: NodeId(1),
            epoch: 1,
            exit_code: Some(0),
            work: None,
        })
    }

    /// A task as a box reports it: arrived in `arrival`, ran on box 1 at one core from the
    /// next slot, ended in slot `end - 1`.
    fn record(id: u64, arrival: u64, end: u64) -> TaskRecord {
        TaskRecord {
            identity: None,
            id: TaskId(id),
            class: 0,
            arrival,
            priority: 0,
            min_demand: cpu(1),
            max_demand: None,
            reachable: Vec::new(),
            runs: vec![RunRecord {
                node: NodeId(1),
                alloc: cpu(1),
                from: arrival + 1,
                to: end,
                progress_from: 0.0,
                progress_to: 1.0,
                start: true,
                est_slots: 4.0,
                members: Vec::new(),
            }],
            finished: Some(end),
            code: Some(0),
            work: None,
            gang: None,
        }
    }

    fn workload(tasks: Vec<TaskRecord>) -> Workload {
        crate::merge::tests::workload_of(tasks, 2.0)
    }

    /// Task `i` heard announced by box 2 in slot `i`, started on box 1 in slot `i + 1` and
    /// ended there in slot `i + 4`, slot `s` heard at `at(s)`.
    fn heard_run(h: &mut Heard, i: u64, at: impl Fn(u64) -> f64) {
        h.hear(NodeId(2), &announce(task(i, i)), at(i));
        let started = Body::Started {
            task: TaskId(i),
            alloc: cpu(1),
            epoch: 1,
        };
        h.hear(NodeId(1), &started, at(i + 1));
        h.hear(NodeId(1), &finished(i), at(i + 4));
    }

    /// Ten tasks the coordinator heard as they happened (slots of 2 s, slot 0 at 50 s on its
    /// clock): task `i` announced in slot `i`, started on box 1 in slot `i + 1`, ended in slot
    /// `i + 4`, each heard 0.3 s into its slot.
    fn ten() -> Heard {
        let mut h = Heard::default();
        let at = |slot: u64| 50.0 + slot as f64 * 2.0 + 0.3;
        for i in 1..=10u64 {
            heard_run(&mut h, i, at);
            // Repeated later by heartbeats and the anti-entropy: the first hearing counts.
            h.hear(NodeId(1), &finished(i), at(i + 20));
        }
        h
    }

    #[test]
    fn what_the_cluster_was_told_is_kept() {
        let h = ten();
        let honest: Vec<TaskRecord> = (1..=10).map(|i| record(i, i, i + 5)).collect();
        let mut honest = honest;
        // A re-share on the box that started it, too short for a heartbeat to show.
        let mut reshare = honest[0].runs[0].clone();
        (reshare.alloc, reshare.start) = (cpu(2), false);
        honest[0].runs.push(reshare);
        let (w, c) = h.check(&workload(honest.clone()));
        assert_eq!(
            c,
            Checked {
                kept: 10,
                unheard: 0
            }
        );
        assert_eq!(w.tasks, honest);
        // A box that saw it all a slot later, and one whose push came before the ends.
        let later: Vec<TaskRecord> = (1..=10).map(|i| record(i, i, i + 6)).collect();
        assert_eq!(h.check(&workload(later)).1.unheard, 0);
        let open: Vec<TaskRecord> = (1..=10)
            .map(|i| TaskRecord {
                finished: None,
                ..record(i, i, i + 5)
            })
            .collect();
        assert_eq!(h.check(&workload(open)).1.unheard, 0);
    }

    #[test]
    fn what_the_cluster_was_never_told_is_left_out() {
        let h = ten();
        let mut w: Vec<TaskRecord> = (1..=10).map(|i| record(i, i, i + 5)).collect();
        // Made up: fifty short tasks no box ever announced.
        w.extend((100..150).map(|i| record(i, 1, 3)));
        // Stretched: task 1 said to end 30 slots later than it was heard to.
        w[0].finished = Some(36);
        // Another class, priority, or minimum demand than announced.
        w[1].class = 1;
        w[2].priority = 3;
        w[3].min_demand = cpu(4);
        // Said to have arrived ten slots before it was announced.
        w[4].arrival = 0;
        // Its run on another box; a second start no box announced.
        w[5].runs[0].node = NodeId(7);
        let mut again = w[6].runs[0].clone();
        again.from += 8;
        w[6].runs.push(again);
        // Started long after the start that was heard.
        w[7].runs[0].from += 10;
        // Re-shared onto a box it was never heard running on.
        let mut moved = w[8].runs[0].clone();
        (moved.node, moved.start) = (NodeId(7), false);
        w[8].runs.push(moved);
        let (kept, c) = h.check(&workload(w));
        assert_eq!(
            c,
            Checked {
                kept: 1,
                unheard: 59
            }
        );
        let ids: Vec<u64> = kept.tasks.iter().map(|t| t.id.0).collect();
        assert_eq!(ids, [10]);
    }

    #[test]
    fn an_end_never_heard_or_a_back_dated_announcement_is_left_out() {
        let mut h = ten();
        // Task 11 announced and started but never heard to end; task 12's announcement says it
        // arrived in slot 1, but it was heard in slot 30.
        h.hear(NodeId(2), &announce(task(11, 11)), 50.0 + 22.3);
        let started = Body::Started {
            task: TaskId(11),
            alloc: cpu(1),
            epoch: 1,
        };
        h.hear(NodeId(1), &started, 50.0 + 24.3);
        h.hear(NodeId(2), &announce(task(12, 1)), 50.0 + 60.3);
        let mut w: Vec<TaskRecord> = (1..=10).map(|i| record(i, i, i + 5)).collect();
        w.push(record(11, 11, 16));
        // Waiting still, as its announcement says it has been since slot 1.
        w.push(TaskRecord {
            runs: Vec::new(),
            finished: None,
            ..record(12, 1, 6)
        });
        let mut open = w.clone();
        open[10].finished = None;
        open[10].runs[0].to = 30;
        open.pop();
        // Reported running, not ended: kept.
        assert_eq!(
            h.check(&workload(open)).1,
            Checked {
                kept: 11,
                unheard: 0
            }
        );
        let (kept, c) = h.check(&workload(w));
        assert_eq!(
            c,
            Checked {
                kept: 10,
                unheard: 2
            }
        );
        assert!(kept.tasks.iter().all(|t| t.id.0 <= 10));
    }

    /// Box `from`'s proposal for slot `s`.
    fn proposal(s: u64, from: u32) -> Body {
        use tapfinger::protocol::{Message, Proposal, Round};
        Body::Protocol(Message::new(
            Round { slot: s, step: 0 },
            NodeId(from),
            Proposal::Pass,
        ))
    }

    /// Slots that ran late: nominally 2 s, each took 3 s (rounds wait for every member).
    /// Forty tasks, task `i` announced in slot `i`, started in `i + 1`, ended in `i + 4`; the
    /// rounds' proposals from boxes 1 and 2 heard too, if `rounds`.
    fn late(rounds: bool) -> Heard {
        let mut h = Heard::default();
        let at = |slot: u64| 50.0 + slot as f64 * 3.0 + 0.3;
        for s in 0..50u64 {
            for (from, lag) in [(1, 0.0), (2, 0.2)] {
                if rounds {
                    h.hear(NodeId(from), &proposal(s, from), at(s) - 0.2 + lag);
                }
            }
        }
        for i in 1..=40u64 {
            heard_run(&mut h, i, at);
        }
        h
    }

    #[test]
    fn slots_that_run_late_are_followed_by_the_rounds_heard() {
        let honest = workload((1..=40).map(|i| record(i, i, i + 5)).collect());
        assert_eq!(
            late(true).check(&honest).1,
            Checked {
                kept: 40,
                unheard: 0
            }
        );
        // At nominal length from one offset, the later tasks' times drift out of the slack.
        assert!(late(false).check(&honest).1.unheard > 10);
        // A box's proposal for a slot far ahead (a lie, or a clock of its own) moves nothing:
        // the slot's start is the median of its senders.
        let mut h = late(true);
        for from in [7, 8] {
            h.hear(NodeId(from), &proposal(30, from), 50.0);
        }
        assert_eq!(h.check(&honest).1.unheard, 0);
        // Stretched ends are still left out on the late clock.
        let mut w = honest.clone();
        w.tasks[35].finished = Some(60);
        assert_eq!(h.check(&w).1.unheard, 1);
    }

    #[test]
    fn nothing_heard_judges_nothing_and_memory_is_bounded() {
        let (w, c) = Heard::default().check(&workload(vec![record(1, 1, 5)]));
        assert!(w.tasks.is_empty());
        assert_eq!(
            c,
            Checked {
                kept: 0,
                unheard: 1
            }
        );
        let mut h = Heard::default();
        for i in 0..(MAX_TASKS as u64 + 10) {
            h.hear(NodeId(1), &announce(task(i, 0)), 0.0);
        }
        assert_eq!(h.len(), MAX_TASKS);
        assert!(!h.tasks.contains_key(&TaskId(0)), "the oldest is forgotten");
        for s in 0..(MAX_SLOTS as u64 + 10) {
            for from in 0..9 {
                h.hear(NodeId(from), &proposal(s, from), s as f64);
            }
        }
        assert_eq!(h.slots.len(), MAX_SLOTS);
        assert!(h.slots.values().all(|v| v.len() == SLOT_SENDERS));
        assert!(!h.slots.contains_key(&0), "the oldest slot is forgotten");
    }
}
