//! The agents' wire format: one versioned [`Envelope`] per network message, encoded with bincode,
//! decoded defensively.
//!
//! Everything an agent receives comes from the network, so [`decode`] never trusts it: the frame
//! size is checked before parsing, bincode runs with a byte limit (a forged length prefix cannot
//! make it allocate gigabytes), the version must match, and [`Envelope::validate`] bounds every
//! collection and checks resource vectors against each other. A message that fails any check is a
//! [`WireError`] for the caller to drop (and to count against the sender); nothing here panics on
//! any input (a property test feeds it random and mutated bytes).

use crate::protocol::Message as ProtocolMessage;
use crate::resources::Resources;
use crate::spec::{MAX_ITEMS, MAX_STRING, TaskSpec};
use crate::task::{NodeId, Task, TaskId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the envelope format; a message with another version is refused. (4: broadcasts
/// travel in signed frames checked once per message, no longer in gossipsub's signed messages,
/// so agents of version 3 and 4 cannot hear each other; the gossip topic names the version.
/// 5: heartbeats carry their send time and echo each peer's, see [`NodeState::hears`].
/// 7: proposals may be gang claims and state their sender's free units, see
/// [`crate::protocol::gang`]. 8: a task may be a gang, [`crate::Task::gang`]. 10: a spec may
/// carry profile hints, [`TaskSpec::profile`]. 11: and declared work, [`TaskSpec::work`].
/// 12: nothing new on the wire, but the speed estimator's model changed (Amdahl's term,
/// [`crate::estimate::offsets`]): agents of 11 and 12 would estimate the same samples
/// differently and decide from different views, so they must not form one cluster.
/// 13: the same for the switch cost, which now counts only beyond the slot-to-slot noise,
/// [`crate::estimate::NOISE_Z`]. 14: again the estimator: a run's start-up slot makes no
/// ordinary pair, and progress that reaches 1 makes no sample,
/// [`crate::estimate::Estimator::observe_start`]. 15: the estimator measures a start-up's
/// cost, and a costly one's slot is no sample nor pair, [`crate::estimate::Estimator::start_cost`].
/// 18: a requeue by its runner carries the task's attained service ([`Body::Failed`]), and a
/// heartbeat's capacity is what the box can give now, less the units of copies still ending.
/// 19: a spec names its submitter and recurring job, [`crate::spec::TaskSpec::submitter`].)
pub const WIRE_VERSION: u16 = 19;
/// Largest accepted frame (bytes).
pub const MAX_FRAME: usize = 256 * 1024;
/// Most resource kinds a vector may carry.
pub const MAX_KINDS: usize = 16;

/// A running task in a heartbeat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunningState {
    /// The task.
    pub task: TaskId,
    /// Its allocation.
    pub alloc: Resources,
    /// Progress in [0, 1] (from the task's progress lines; 0 if it prints none).
    pub progress: f64,
    /// Slot in which it started.
    pub started: u64,
    /// Epoch of this copy (a fencing token: a copy with a lower epoch than another is stopped).
    pub epoch: u64,
    /// Its attained service so far (Tiresias's; see [`crate::ledger`]), as its runner counts it
    /// with the shares it really ran with (an elastic runner re-shares every slot).
    pub attained: f64,
    /// What it reports besides progress (loss, accuracy, convergence; bounded by its runner).
    pub report: TaskReport,
}

/// A running task's latest report besides progress, as its runner's heartbeats carry it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskReport {
    /// The latest value of each metric (`loss`, `accuracy`, …).
    pub metrics: BTreeMap<String, f64>,
    /// Its loss (or accuracy) has plateaued.
    pub converging: bool,
}

/// A node's state, broadcast every heartbeat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeState {
    /// The address gang members on this node are reached at; empty: it hosts none.
    pub addr: String,
    /// Node name (from the configuration).
    pub name: String,
    /// Placement labels.
    pub labels: BTreeMap<String, String>,
    /// Units offered to the cluster.
    pub capacity: Resources,
    /// Each resource kind's grid step in its natural unit (what one unit of `capacity` means:
    /// 0.25 for a GPU shared in quarters); empty where the sender does not say. A peer whose
    /// steps differ from a node's own is not heard by it: their vectors mean different amounts.
    pub steps: Vec<f64>,
    /// Units not allocated.
    pub free: Resources,
    /// Tasks running here.
    pub running: Vec<RunningState>,
    /// Incarnation: increases on every restart, so peers can tell a restart from a delay.
    pub incarnation: u64,
    /// When this heartbeat was sent, on the sender's clock (ms): what its peers echo back.
    pub sent: u64,
    /// The peers this node heard within its peer timeout, each with the `sent` of its latest
    /// heartbeat heard here (on that peer's clock). A peer learns from the echo how long ago,
    /// on its own clock, this node last heard it: the round trip. A peer is in step with a
    /// node, and counts toward its quorum and its rounds, only while that round trip is short,
    /// so a one-way cut is a cut and a node that hears everything late is not in step (it
    /// would decide on old news).
    pub hears: Vec<Heard>,
    /// Whether this node holds its lease (a quorum is in step with it). Only nodes that do
    /// take part in their peers' rounds: one without a lease only passes, and, in step with
    /// some peers and not with others, it made their member sets differ, so that no round was
    /// complete and the tasks it handed back waited for ever.
    pub lease: bool,
    /// The latest outcomes of tasks this node ran (at most [`MAX_RECENT`]), repeated in every
    /// heartbeat so that a lost finish message is made good (anti-entropy).
    pub recent: Vec<Outcome>,
    /// The gangs with members running here: a peer that missed a gang's start learns it, and
    /// does not place the gang again while it runs.
    pub gangs: Vec<GangRun>,
    /// A digest of every task this node knows (anti-entropy: a peer whose own differs for a
    /// while compares [`Body::Ranges`], then [`Body::Ids`]).
    pub digest: Digest,
}

/// A digest of a set of tasks: how many, and the XOR of a hash of each one's id and whether it
/// has finished (the node core's anti-entropy).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Digest {
    /// Tasks in the set.
    pub count: u64,
    /// XOR of their hashes.
    pub hash: u64,
}

/// The digest of a block of the tasks one node numbered: those of `origin` (the upper half of
/// their ids) whose number (the lower half) shifted right by [`BLOCK_BITS`] is `block`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    /// The numbering node.
    pub origin: u32,
    /// The block of numbers.
    pub block: u32,
    /// The digest of the sender's tasks in it.
    pub digest: Digest,
}

/// Tasks numbered in a row fall in one block of 2^BLOCK_BITS numbers ([`Range`]): a
/// difference between two nodes' lists (a task just submitted, the tasks one restart forgot)
/// is then resolved by resending one block's ids, not a node's whole history.
pub const BLOCK_BITS: u32 = 10;

/// The tasks of one block ([`Range`]) a node knows: the lower half of each id, and whether it
/// has finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginIds {
    /// The numbering node.
    pub origin: u32,
    /// (lower half of the id, finished) per task.
    pub ids: Vec<(u32, bool)>,
}

/// Most entries one [`Body::Ranges`] or [`Body::Ids`] carries (longer lists go in several).
pub const MAX_IDS: usize = 8192;

/// A gang running with members on the heartbeat's sender.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GangRun {
    /// The task.
    pub task: TaskId,
    /// The epoch of its start.
    pub epoch: u64,
    /// Every member's node and allocation, in rank order.
    pub members: Vec<(NodeId, Resources)>,
}

/// A peer a node hears, with the echo of that peer's latest heartbeat (see [`NodeState::hears`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heard {
    /// The peer.
    pub node: NodeId,
    /// The incarnation of that heartbeat: a restarted peer's clock starts again, so an echo
    /// from its previous run must not pass for a fresh one.
    pub incarnation: u64,
    /// The `sent` of its latest heartbeat heard here (the peer's clock, ms).
    pub echo: u64,
}

/// Most outcomes a heartbeat repeats.
pub const MAX_RECENT: usize = 64;
/// Most task ids one [`Body::Want`] asks for.
pub const MAX_WANT: usize = 64;

/// What became of a task, as the node that knows it says (see [`Body::Outcomes`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// The task.
    pub task: TaskId,
    /// The node that ran the copy that finished (or that cancelled it).
    pub node: NodeId,
    /// Epoch of that copy ([`CANCELLED`] for a cancellation, which beats every copy).
    pub epoch: u64,
    /// Exit code, if the process exited normally.
    pub exit_code: Option<i32>,
    /// The runner's count of the copy's work at its end, in slots at the task's minimum demand
    /// of the service kind (`ledger/sizes.rs`), where the runner counted it: peers learn the
    /// task's size from this, not from their own count, which starts and stops when they hear
    /// of the start and the end. `None` in an outcome relayed by a node that did not run the
    /// copy, and in a journal an older agent wrote.
    #[serde(default)]
    pub work: Option<f64>,
}

/// The epoch of a cancellation: above any copy's, so a cancel always wins a reconciliation.
pub const CANCELLED: u64 = u64::MAX;

/// The epoch of a new start of a task by `node`, after the highest epoch known for it, `known`:
/// a pair (counter, node id) in one number, `counter × 2³² + node id`, ordered as numbers are
/// (lexicographically). The counter is one above `known`'s, so the start beats every copy its
/// deciders knew of; the node id makes it unique even against a start they could not know of
/// (two sides of a partition that each start the task with the same counter carry different
/// epochs, and the higher one is the one a task's storage keeps). Never [`CANCELLED`].
pub fn next_epoch(known: u64, node: crate::NodeId) -> u64 {
    let counter = ((known >> 32) + 1).min(u64::from(u32::MAX) - 1);
    (counter << 32) | u64::from(node.0)
}

/// The counter part of an epoch ([`next_epoch`]).
pub fn epoch_counter(epoch: u64) -> u64 {
    epoch >> 32
}

/// A finished task with its outcome, as a (re)joining peer is told of it: with the task and its
/// spec, so that a node that never heard of the task (it was submitted on the other side of a
/// partition) knows it afterwards like every other node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinishedTask {
    /// The task.
    pub task: Task,
    /// Its spec.
    pub spec: TaskSpec,
    /// What became of it.
    pub outcome: Outcome,
}

/// Most outcomes one [`Body::Outcomes`] message carries (longer lists go in several).
pub const MAX_OUTCOMES: usize = 64;

/// What a message says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Body {
    /// Periodic state.
    Heartbeat(NodeState),
    /// A new (or re-queued) task, with the spec its runner needs.
    Announce {
        /// The task as the scheduler sees it.
        task: Task,
        /// The submitted spec (command, environment).
        spec: TaskSpec,
        /// Who may start it during a partition: the node that accepted it, or `None` (handed
        /// back or taken over: any node whose side holds a quorum).
        owner: Option<NodeId>,
        /// Highest epoch of any start of it so far (0: never started).
        epoch: u64,
        /// The sender runs the copy of `epoch`, with this allocation (told to a peer that joins,
        /// which may never have heard of the task); `None`: the task is pending.
        runs: Option<Resources>,
    },
    /// A decision-protocol message (claims and passes of a round).
    Protocol(ProtocolMessage),
    /// The sender started a task it won.
    Started {
        /// Task.
        task: TaskId,
        /// Allocation.
        alloc: Resources,
        /// Epoch of this start: above every epoch the sender knew for the task.
        epoch: u64,
    },
    /// A task finished (run by the sender, or by `outcome.node` as the sender knows).
    Finished(Outcome),
    /// What the sender knows finished, sent to a peer that (re)joins so that both sides of a
    /// healed partition agree in one exchange (at most [`MAX_OUTCOMES`] per message).
    Outcomes(Vec<FinishedTask>),
    /// The sender's digest per origin, sent while its heartbeats' digest differs from a peer's:
    /// a receiver whose own differs for an origin answers with its [`Body::Ids`] of it.
    Ranges(Vec<Range>),
    /// The tasks of one origin the sender knows: a receiver asks ([`Body::Want`]) for those it
    /// lacks, or knows as unfinished where the sender says finished.
    Ids(OriginIds),
    /// The sender lacks these tasks (ids in a peer's heartbeat it never heard of, or a copy it
    /// believes runs on a peer that does not list it): whoever can speak for a task answers
    /// with its announcement or its outcome. Repeated every heartbeat until answered.
    Want(Vec<TaskId>),
    /// The sender's task failed or was handed back; `requeue` says whether it should run again.
    Failed {
        /// Task.
        task: TaskId,
        /// Why.
        reason: String,
        /// Re-queue it (a box shutting down) or not (the command failed).
        requeue: bool,
        /// With `requeue`, the task's attained service as its runner counts it when it stops
        /// (a peer that ended the slot before it heard of the stop counted one slot more).
        attained: Option<f64>,
    },
    /// The sender stops on purpose and runs nothing any more (its copies ended and were handed
    /// back): it leaves its peers' members, for the rounds and the quorum, until an incarnation
    /// after this one is heard. (Last of the variants, so that agents of version 18 without it
    /// still decode every other message: they drop this one as malformed, and count the box
    /// for the quorum until it is back or forgotten, as before.)
    Leaving {
        /// The incarnation that leaves.
        incarnation: u64,
    },
    /// What preemption has cost a task on the sender's box (its count so far), told after each
    /// preemption there so that every box shows it. (After `Leaving`, for the same reason.)
    Preempted {
        /// Task.
        task: TaskId,
        /// Times it was preempted on the sender's box.
        times: u32,
        /// Work it lost there (progress since its last checkpoint, summed; 1: a whole run).
        work_lost: f64,
    },
}

/// One network message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Must equal [`WIRE_VERSION`].
    pub version: u16,
    /// Sender.
    pub from: NodeId,
    /// Sender's sequence number (per incarnation), for de-duplication.
    pub seq: u64,
    /// Content.
    pub body: Body,
}

/// Why a frame was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WireError {
    /// Larger than [`MAX_FRAME`].
    #[error("frame of {0} bytes exceeds the limit of {MAX_FRAME}")]
    TooLarge(usize),
    /// Not a valid encoding (truncated, garbled, trailing bytes).
    #[error("malformed frame: {0}")]
    Malformed(String),
    /// Another format version.
    #[error("wire version {0}, expected {WIRE_VERSION}")]
    Version(u16),
    /// Well-formed but inconsistent content.
    #[error("invalid message: {0}")]
    Invalid(String),
}

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_FRAME>()
}

/// Encode a message (validating it first, so that an agent never sends what peers would refuse).
pub fn encode(e: &Envelope) -> Result<Vec<u8>, WireError> {
    e.validate()?;
    let bytes = bincode::serde::encode_to_vec(e, config())
        .map_err(|err| WireError::Malformed(err.to_string()))?;
    if bytes.len() > MAX_FRAME {
        return Err(WireError::TooLarge(bytes.len()));
    }
    Ok(bytes)
}

/// Decode and validate a frame received from the network.
pub fn decode(bytes: &[u8]) -> Result<Envelope, WireError> {
    if bytes.len() > MAX_FRAME {
        return Err(WireError::TooLarge(bytes.len()));
    }
    let (e, used): (Envelope, usize) = bincode::serde::decode_from_slice(bytes, config())
        .map_err(|err| WireError::Malformed(err.to_string()))?;
    if used != bytes.len() {
        return Err(WireError::Malformed(format!(
            "{} trailing byte(s)",
            bytes.len() - used
        )));
    }
    if e.version != WIRE_VERSION {
        return Err(WireError::Version(e.version));
    }
    e.validate()?;
    Ok(e)
}

fn invalid(m: impl Into<String>) -> WireError {
    WireError::Invalid(m.into())
}

fn check_vec(what: &str, r: &Resources, kinds: Option<usize>) -> Result<(), WireError> {
    if r.len() > MAX_KINDS {
        return Err(invalid(format!(
            "{what}: {} kinds (max {MAX_KINDS})",
            r.len()
        )));
    }
    if let Some(k) = kinds
        && r.len() != k
    {
        return Err(invalid(format!("{what}: {} kinds, expected {k}", r.len())));
    }
    Ok(())
}

fn check_str(what: &str, s: &str) -> Result<(), WireError> {
    if s.len() > MAX_STRING {
        return Err(invalid(format!("{what}: longer than {MAX_STRING} bytes")));
    }
    Ok(())
}

/// Bounds of an announced task and its spec (the API's limits: [`crate::spec`]).
fn check_task(task: &Task, spec: &TaskSpec) -> Result<(), WireError> {
    check_vec("min_demand", &task.min_demand, None)?;
    if let Some(m) = &task.max_demand {
        check_vec("max_demand", m, Some(task.min_demand.len()))?;
    }
    if task.reachable.is_empty() || task.reachable.len() > 4 * MAX_ITEMS {
        return Err(invalid("announce: reachable must list 1 to 1024 nodes"));
    }
    if spec.command.is_empty() || spec.command.len() > MAX_ITEMS {
        return Err(invalid("announce: command must have 1 to 256 entries"));
    }
    if spec.env.len() > MAX_ITEMS
        || spec.require_labels.len() > MAX_ITEMS
        || spec.nodes.len() > MAX_ITEMS
        || spec.min_demand.len() > MAX_KINDS
        || spec.max_demand.len() > MAX_KINDS
        || spec.profile.len() > crate::spec::MAX_PROFILE
        || spec.profile.iter().any(|h| h.alloc.len() > MAX_KINDS)
    {
        return Err(invalid("announce: too many entries in the spec"));
    }
    if spec.check_work().is_err() {
        return Err(invalid("announce: declared work out of range"));
    }
    for s in spec
        .command
        .iter()
        .chain(spec.env.keys())
        .chain(spec.env.values())
        .chain(std::iter::once(&spec.name))
    {
        check_str("spec", s)?;
    }
    Ok(())
}

impl Envelope {
    /// Bounds and consistency of the content (see the module docs).
    pub fn validate(&self) -> Result<(), WireError> {
        if self.version != WIRE_VERSION {
            return Err(WireError::Version(self.version));
        }
        match &self.body {
            Body::Heartbeat(s) => {
                check_str("name", &s.name)?;
                if s.labels.len() > MAX_ITEMS
                    || s.running.len() > 4 * MAX_ITEMS
                    || s.hears.len() > 4 * MAX_ITEMS
                    || s.recent.len() > MAX_RECENT
                {
                    return Err(invalid("heartbeat: too many labels or running tasks"));
                }
                for (k, v) in &s.labels {
                    check_str("label", k)?;
                    check_str("label", v)?;
                }
                check_vec("capacity", &s.capacity, None)?;
                if !s.steps.is_empty()
                    && (s.steps.len() != s.capacity.len()
                        || s.steps.iter().any(|x| !(x.is_finite() && *x > 0.0)))
                {
                    return Err(invalid("heartbeat: a step per kind, each positive"));
                }
                check_vec("free", &s.free, Some(s.capacity.len()))?;
                if !s.free.fits_in(&s.capacity) {
                    return Err(invalid("heartbeat: free exceeds capacity"));
                }
                let mut used = Resources::zeros(s.capacity.len());
                for r in &s.running {
                    check_vec("running alloc", &r.alloc, Some(s.capacity.len()))?;
                    if !(0.0..=1.0).contains(&r.progress) {
                        return Err(invalid(format!("progress {} outside [0, 1]", r.progress)));
                    }
                    used = used
                        .checked_add(&r.alloc)
                        .map_err(|e| invalid(e.to_string()))?;
                }
                if !used.fits_in(&s.capacity) {
                    return Err(invalid(format!(
                        "heartbeat: running tasks use {used}, more than the capacity {}",
                        s.capacity
                    )));
                }
            }
            Body::Announce {
                task, spec, runs, ..
            } => {
                check_task(task, spec)?;
                if let Some(a) = runs {
                    check_vec("runs", a, Some(task.min_demand.len()))?;
                }
            }
            Body::Protocol(m) => {
                if m.members.len() > 4 * MAX_ITEMS {
                    return Err(invalid("proposal: too many members"));
                }
                if let crate::protocol::Proposal::Claim(c) = &m.proposal {
                    check_vec("claim alloc", &c.alloc, None)?;
                    crate::protocol::check_bayes(c.prob, c.headroom)
                        .map_err(|e| invalid(format!("claim: {e}")))?;
                }
                if let crate::protocol::Proposal::Gang(g) = &m.proposal {
                    if g.members.len() > crate::protocol::gang::MAX_MEMBERS {
                        return Err(invalid("gang claim: too many members"));
                    }
                    for (_, a) in &g.members {
                        check_vec("gang member alloc", a, None)?;
                    }
                    crate::protocol::check_bayes(g.prob, g.headroom)
                        .map_err(|e| invalid(format!("gang claim: {e}")))?;
                }
                check_vec("proposal free", &m.free, None)?;
            }
            Body::Started { alloc, .. } => check_vec("alloc", alloc, None)?,
            Body::Finished(_) => {}
            Body::Want(ids) => {
                if ids.len() > MAX_WANT {
                    return Err(invalid(format!("want: {} ids (max {MAX_WANT})", ids.len())));
                }
            }
            Body::Outcomes(o) => {
                if o.len() > MAX_OUTCOMES {
                    return Err(invalid(format!(
                        "outcomes: {} entries (max {MAX_OUTCOMES})",
                        o.len()
                    )));
                }
                for f in o {
                    check_task(&f.task, &f.spec)?;
                    if f.task.id != f.outcome.task {
                        return Err(invalid("outcomes: the outcome names another task"));
                    }
                }
            }
            Body::Failed { reason, .. } => check_str("reason", reason)?,
            Body::Leaving { .. } => {}
            Body::Preempted { work_lost, .. } => {
                if !work_lost.is_finite() || *work_lost < 0.0 {
                    return Err(invalid("preempted: work lost must be a finite number >= 0"));
                }
            }
            Body::Ranges(r) if r.len() > MAX_IDS => {
                return Err(invalid(format!(
                    "ranges: {} entries (max {MAX_IDS})",
                    r.len()
                )));
            }
            Body::Ids(i) if i.ids.len() > MAX_IDS => {
                return Err(invalid(format!(
                    "ids: {} entries (max {MAX_IDS})",
                    i.ids.len()
                )));
            }
            Body::Ranges(_) | Body::Ids(_) => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Claim, PROTOCOL_VERSION, Proposal, Round};
    use crate::task::TaskTypeId;
    use proptest::prelude::*;

    fn sample_task() -> Task {
        Task {
            id: TaskId(9),
            ty: TaskTypeId(1),
            min_demand: Resources(vec![2, 1]),
            max_demand: Some(Resources(vec![16, 16])),
            priority: 0,
            reachable: vec![NodeId(0), NodeId(2)],
            arrival: 4,
            gang: None,
        }
    }

    fn sample_spec() -> TaskSpec {
        TaskSpec {
            name: "mlp".into(),
            command: vec!["demo".into(), "--epochs".into(), "3".into()],
            env: BTreeMap::new(),
            task_type: "LM".into(),
            min_demand: [("cpu".to_string(), 2.0)].into(),
            max_demand: BTreeMap::new(),
            require_labels: BTreeMap::new(),
            nodes: Vec::new(),
            priority: 0,
            resumable: true,
            grace_seconds: 30,
            gang: Some(Box::new(crate::spec::GangSpec {
                workers: crate::spec::WorkerCount(2, 4),
                ps: 1,
                worker_demand: [("cpu".to_string(), 2.0)].into(),
                ps_demand: [("cpu".to_string(), 1.0)].into(),
                compute_seconds: 0.5,
                gradient_mb: 100.0,
                restarts: 3,
            })),
            pipeline: None,
            profile: vec![crate::spec::ProfileHint {
                alloc: [("cpu".to_string(), 4.0)].into(),
                seconds: 90.0,
            }],
            work: Some(30.0),
            submitter: "ada".into(),
            job: "nightly-mlp".into(),
        }
    }

    fn sample_heartbeat() -> Body {
        Body::Heartbeat(NodeState {
            addr: "10.0.0.7".into(),
            gangs: vec![GangRun {
                task: TaskId(9),
                epoch: 2,
                members: vec![(NodeId(1), Resources(vec![1, 0]))],
            }],
            name: "box-1".into(),
            labels: [("site".to_string(), "plant-3".to_string())].into(),
            capacity: Resources(vec![8, 1]),
            steps: vec![1.0, 0.25],
            free: Resources(vec![4, 0]),
            running: vec![RunningState {
                task: TaskId(3),
                alloc: Resources(vec![4, 1]),
                progress: 0.4,
                started: 2,
                epoch: 1,
                attained: 3.0,
                report: TaskReport {
                    metrics: [("loss".to_string(), 0.7)].into(),
                    converging: true,
                },
            }],
            incarnation: 2,
            sent: 1234,
            hears: vec![
                Heard {
                    node: NodeId(0),
                    incarnation: 1,
                    echo: 17,
                },
                Heard {
                    node: NodeId(2),
                    incarnation: 3,
                    echo: 99,
                },
            ],
            lease: true,
            recent: vec![Outcome {
                task: TaskId(2),
                node: NodeId(1),
                epoch: 1,
                exit_code: Some(0),
                work: None,
            }],
            digest: Digest {
                count: 7,
                hash: 0xdead_beef,
            },
        })
    }

    fn sample_proposals() -> [Body; 2] {
        [
            Body::Protocol(ProtocolMessage {
                version: PROTOCOL_VERSION,
                round: Round { slot: 3, step: 1 },
                from: NodeId(1),
                proposal: Proposal::Claim(Claim {
                    task: TaskId(9),
                    alloc: Resources(vec![4, 1]),
                    prob: 0.7,
                    headroom: 2.0,
                }),
                members: vec![NodeId(1), NodeId(4)],
                free: Resources(vec![8, 2]),
            }),
            Body::Protocol(ProtocolMessage {
                version: PROTOCOL_VERSION,
                round: Round { slot: 3, step: 2 },
                from: NodeId(4),
                proposal: Proposal::Gang(crate::protocol::GangClaim {
                    task: TaskId(10),
                    members: vec![
                        (NodeId(1), Resources(vec![2, 1])),
                        (NodeId(4), Resources(vec![2, 0])),
                    ],
                    prob: 0.5,
                    headroom: 1.5,
                }),
                members: vec![NodeId(1), NodeId(4)],
                free: Resources::default(),
            }),
        ]
    }

    fn samples() -> Vec<Envelope> {
        let task = sample_task();
        let spec = sample_spec();
        let [claim, gang] = sample_proposals();
        let body = [
            sample_heartbeat(),
            Body::Want(vec![TaskId(3)]),
            Body::Ranges(vec![Range {
                origin: 5,
                block: 1,
                digest: Digest { count: 2, hash: 9 },
            }]),
            Body::Ids(OriginIds {
                origin: 5,
                ids: vec![(1, true), (2, false)],
            }),
            Body::Announce {
                task: task.clone(),
                spec: spec.clone(),
                owner: Some(NodeId(1)),
                epoch: 0,
                runs: None,
            },
            claim,
            gang,
            Body::Started {
                task: TaskId(9),
                alloc: Resources(vec![4, 1]),
                epoch: 2,
            },
            Body::Finished(Outcome {
                task: TaskId(9),
                node: NodeId(1),
                epoch: 2,
                exit_code: Some(0),
                work: None,
            }),
            Body::Outcomes(vec![FinishedTask {
                task: Task {
                    id: TaskId(8),
                    ..task.clone()
                },
                spec: spec.clone(),
                outcome: Outcome {
                    task: TaskId(8),
                    node: NodeId(2),
                    epoch: CANCELLED,
                    exit_code: None,
                    work: None,
                },
            }]),
            Body::Failed {
                task: TaskId(9),
                reason: "box shutting down".into(),
                requeue: true,
                attained: Some(3.0),
            },
            Body::Leaving { incarnation: 7 },
            Body::Preempted {
                task: TaskId(9),
                times: 2,
                work_lost: 0.25,
            },
        ];
        body.into_iter()
            .enumerate()
            .map(|(i, body)| Envelope {
                version: WIRE_VERSION,
                from: NodeId(1),
                seq: i as u64,
                body,
            })
            .collect()
    }

    #[test]
    fn every_message_round_trips() {
        for e in samples() {
            let bytes = encode(&e).unwrap();
            assert_eq!(decode(&bytes).unwrap(), e);
        }
    }

    #[test]
    fn refuses_bad_frames() {
        let good = encode(&samples()[0]).unwrap();
        assert!(matches!(
            decode(&vec![0; MAX_FRAME + 1]),
            Err(WireError::TooLarge(_))
        ));
        assert!(matches!(
            decode(&good[..good.len() - 1]),
            Err(WireError::Malformed(_))
        ));
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(matches!(decode(&trailing), Err(WireError::Malformed(_))));
        let mut old = samples()[0].clone();
        old.version = 0;
        let bytes = bincode::serde::encode_to_vec(&old, config()).unwrap();
        assert_eq!(decode(&bytes), Err(WireError::Version(0)));
        // Well-formed but lying: running tasks use more than the capacity.
        let mut lie = samples()[0].clone();
        if let Body::Heartbeat(s) = &mut lie.body {
            s.running[0].alloc = Resources(vec![9, 1]);
        }
        let bytes = bincode::serde::encode_to_vec(&lie, config()).unwrap();
        assert!(matches!(decode(&bytes), Err(WireError::Invalid(_))));
        assert!(
            encode(&lie).is_err(),
            "an agent never sends what peers refuse"
        );
        // A huge announced length must not allocate: the limit refuses it.
        let mut huge = good[..4].to_vec();
        huge.extend([0xFF; 12]);
        assert!(decode(&huge).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// Random bytes never panic the decoder.
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = decode(&bytes);
        }

        /// Valid frames with bytes flipped, cut or extended either decode to a valid message
        /// or are refused — never a panic, never an invalid message accepted.
        #[test]
        fn mutated_frames_are_refused_or_valid(
            which in 0usize..6,
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut bytes = encode(&samples()[which]).unwrap();
            for (i, b) in &flips {
                let i = i.index(bytes.len());
                bytes[i] ^= b;
            }
            let n = bytes.len();
            let cut_bytes = &bytes[..cut.index(n + 1)];
            for frame in [&bytes[..], cut_bytes] {
                if let Ok(e) = decode(frame) {
                    prop_assert!(e.validate().is_ok());
                }
            }
        }
    }
}
