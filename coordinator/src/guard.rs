//! The guard in deployment: the coordinator judges, every `guard_every_s`, the workload its
//! agents observed under the policy in force ([`tapfinger_sim::guard::on_workload`]: the twin
//! replayed under the learned policy and every deployable baseline, the same rule the
//! simulator's deployment replay measures), and when another policy wins by the margin it signs
//! a new [`Choice`] that every agent pulls and runs. One decision for the whole cluster, made in
//! one place and signed, so no two boxes run different policies for longer than a poll.
//!
//! A workload counts only if it was observed under the choice in force (agents push the tasks
//! that arrived since they adopted it, with its number), so a judgement never mixes what two
//! policies did. The judgement runs on a thread of its own ([`spawn_judge`]); the time it takes
//! is summed, so the status says what share of a core the guard costs.
//!
//! State on disk: `guard.json` (the choice in force, counters, the last judgement), written
//! before the new choice is served, so a restarted coordinator serves the same choice.

use crate::config::CoordinatorConfig;
use libp2p::identity::Keypair;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tapfinger::twin::Workload;
use tapfinger_net::guard::{Choice, LEARNED};
use tapfinger_sim::guard::{Decision, Learned, on_workload};
use tokio::sync::mpsc;

/// One judgement, as the status shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Judgement {
    /// The policy it judged (the one in force).
    pub current: String,
    /// Tasks in the workload judged, and how many of them finished.
    pub tasks: usize,
    /// Of which finished.
    pub finished: usize,
    /// Each candidate's average JCT on the twin (slots).
    pub twin_jcts: Vec<(String, f64)>,
    /// The average JCT the agents measured of the policy in force (slots).
    #[serde(default)]
    pub measured: f64,
    /// Each candidate's share of its slots on the twin where the twin's speeds are the
    /// estimator's extrapolation (`tapfinger_sim::guard::Judged::unsupported`).
    #[serde(default)]
    pub unsupported: Vec<(String, f64)>,
    /// Each candidate's gain over the policy in force on the twin (1 − its JCT over that of
    /// the policy in force).
    #[serde(default)]
    pub gains: Vec<(String, f64)>,
    /// What each candidate's gain had to clear to replace the policy in force
    /// (`tapfinger_sim::guard::Decision::needed`).
    #[serde(default)]
    pub needed: Vec<(String, f64)>,
    /// What it decided.
    pub policy: String,
    /// Whether that was a switch.
    pub switched: bool,
    /// How long it took (s).
    pub seconds: f64,
    /// Boxes whose workloads were merged into the one judged ([`crate::merge`]).
    #[serde(default)]
    pub boxes: usize,
    /// Tasks of the base box's workload no other box reported alike (left out).
    #[serde(default)]
    pub uncorroborated: usize,
    /// Tasks of the base box's workload that disagree with what the coordinator heard itself
    /// ([`crate::heard`]: never announced, announced otherwise, at other times, or runs it never
    /// heard of), left out.
    #[serde(default)]
    pub unheard: usize,
    /// Why it could not judge, if it could not.
    pub error: Option<String>,
}

/// What survives a restart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GuardState {
    /// The choice in force (None: nothing decided yet, the learned policy runs).
    pub choice: Option<Choice>,
    /// Judgements made.
    pub judged: u64,
    /// Switches made.
    pub switches: u64,
    /// Seconds spent judging, in all.
    pub busy_s: f64,
    /// The last judgement.
    pub last: Option<Judgement>,
}

/// The guard's state in the coordinator.
pub struct Guard {
    cfg: CoordinatorConfig,
    key: Keypair,
    /// Persisted.
    pub state: GuardState,
    /// The latest workload per node observed under the choice in force.
    workloads: BTreeMap<u32, Workload>,
    /// What the coordinator heard of the tasks itself (what the workloads are checked against).
    heard: crate::heard::Heard,
    /// When the last judgement was sent (or the guard started).
    last: Instant,
    /// When this process started (for the busy share).
    started: Instant,
    /// Seconds spent judging since this process started.
    session_busy_s: f64,
    /// The workload judged last (what a fine-tune on the twin learns from).
    judged_workload: Option<Workload>,
    /// The workload judged last, kept: the learner's gate judges candidates on its twin.
    last_judged: Option<Workload>,
    /// When the last fine-tune on the twin was handed out.
    last_tune: Option<Instant>,
    /// A judgement is running.
    pub judging: bool,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard").field("state", &self.state).finish()
    }
}

/// What the judging thread is given.
pub struct Work {
    /// The workload.
    pub workload: Workload,
    /// The policy in force.
    pub current: String,
    /// The learned policy's checkpoint (`model.safetensors`, `train.json`): the published version, or
    /// the start model before the first.
    pub model: (Vec<u8>, String),
    /// The margin.
    pub margin: f64,
    /// How the boxes' workloads were merged.
    pub merge: crate::merge::Merge,
}

impl Guard {
    fn file(cfg: &CoordinatorConfig) -> PathBuf {
        cfg.data_dir.join("guard.json")
    }

    /// Open, resuming the choice in force from `guard.json` (an unreadable file is an error:
    /// serving no choice would silently put the cluster back on the learned policy).
    pub fn open(cfg: CoordinatorConfig, key: Keypair) -> anyhow::Result<Self> {
        let p = Self::file(&cfg);
        let state = match std::fs::read(&p) {
            Ok(b) => {
                serde_json::from_slice(&b).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => GuardState::default(),
            Err(e) => return Err(anyhow::anyhow!("{}: {e}", p.display())),
        };
        let state = Self::checked(&p, state, &key)?;
        Ok(Self {
            cfg,
            key,
            state,
            workloads: BTreeMap::new(),
            heard: crate::heard::Heard::default(),
            last: Instant::now(),
            started: Instant::now(),
            session_busy_s: 0.0,
            judged_workload: None,
            last_judged: None,
            last_tune: None,
            judging: false,
        })
    }

    /// The stored choice as this coordinator signed it, or, where it does not verify (edited:
    /// another policy, number or reason; or signed by another key), a new choice signed now:
    /// the learned policy, numbered above the stored one so that every agent takes it. It is
    /// written before it is served, and the refusal is logged with what was found. Never is a
    /// choice served that agents would refuse: the cluster would stay split between the
    /// policy each agent last verified.
    fn checked(
        path: &std::path::Path,
        mut state: GuardState,
        key: &Keypair,
    ) -> anyhow::Result<GuardState> {
        let me = key.public().to_peer_id();
        let Some(c) = &state.choice else {
            return Ok(state);
        };
        let fresh = match c.verified(&me) {
            Ok(v) if v == *c => return Ok(state),
            // Signed before reasons were: the same choice, signed again with a reason of its own
            // (the stored reason was never signed, so it is not carried over).
            Ok(v) => {
                tracing::info!(seq = v.seq, policy = %v.policy, "guard: the choice in force is signed again, its reason with it");
                Choice::sign(key, v.seq, &v.policy, "the choice in force, signed again with its reason")
            }
            Err(refusal) => {
                let reason = format!(
                    "the stored choice {} ({:?}) did not verify: {refusal}; the learned policy until the next judgement",
                    c.seq, c.policy
                );
                tracing::error!(path = %path.display(), seq = c.seq, policy = ?c.policy, %refusal,
                    "guard: the stored choice does not verify; a new one is signed");
                Choice::sign(key, c.seq + 1, LEARNED, &reason)
            }
        }
        .map_err(|e| anyhow::anyhow!("signing the guard's choice: {e}"))?;
        state.choice = Some(fresh);
        persist(path, &state)?;
        Ok(state)
    }

    /// The number of the choice in force (0: none yet).
    pub fn seq(&self) -> u64 {
        self.state.choice.as_ref().map_or(0, |c| c.seq)
    }

    /// The policy in force.
    pub fn current(&self) -> String {
        self.state
            .choice
            .as_ref()
            .map_or(LEARNED.to_string(), |c| c.policy.clone())
    }

    /// A node's workload observed under choice `seq`: kept if that is the choice in force.
    pub fn offer(&mut self, node: u32, seq: u64, w: Workload) -> Result<(), String> {
        if seq != self.seq() {
            return Err(format!(
                "observed under guard choice {seq}, not the one in force ({})",
                self.seq()
            ));
        }
        w.check()?;
        self.workloads.insert(node, w);
        Ok(())
    }

    /// Note a message of the cluster's gossip, from `from`, heard now.
    pub fn hear(&mut self, from: tapfinger::NodeId, body: &tapfinger::wire::Body) {
        let at = self.started.elapsed().as_secs_f64();
        self.heard.hear(from, body, at);
    }

    /// How long to wait after the judgement sent last: `guard_every_s`, or longer where the
    /// last judgement took so long that judging at that pace would use more than
    /// `guard_max_share` of a core (a large window on a large cluster).
    pub fn interval(&self) -> Duration {
        let last = self.state.last.as_ref().map_or(0.0, |j| j.seconds);
        let share = self.cfg.guard_max_share.clamp(1e-3, 1.0);
        Duration::from_secs(self.cfg.guard_every_s).max(Duration::from_secs_f64(last / share))
    }

    /// The workload to judge now, if one is due: [`Guard::interval`] since the last, not
    /// judging, and the cluster's workload merged from at least `guard_min_boxes` boxes'
    /// ([`crate::merge`]: only tasks another box reports alike), each box's first checked
    /// against what the coordinator heard itself ([`crate::heard`]), with at least
    /// `guard_min_tasks` finished tasks.
    pub fn due(&mut self, model: (Vec<u8>, String)) -> Option<Work> {
        if !self.cfg.guard || self.judging || self.last.elapsed() < self.interval() {
            return None;
        }
        let checked: BTreeMap<u32, (Workload, crate::heard::Checked)> = self
            .workloads
            .iter()
            .map(|(n, w)| (*n, self.heard.check(w)))
            .collect();
        let told: BTreeMap<u32, Workload> =
            checked.iter().map(|(n, (w, _))| (*n, w.clone())).collect();
        let (workload, mut merge) = crate::merge::merged(&told, self.cfg.guard_min_boxes)?;
        merge.unheard = checked.get(&merge.base).map_or(0, |(_, c)| c.unheard);
        let finished = workload
            .tasks
            .iter()
            .filter(|t| t.finished.is_some())
            .count();
        if finished < self.cfg.guard_min_tasks.max(1) {
            return None;
        }
        self.workloads.clear();
        self.judged_workload = Some(workload.clone());
        self.last_judged = Some(workload.clone());
        self.judging = true;
        self.last = Instant::now();
        Some(Work {
            workload,
            current: self.current(),
            model,
            margin: self.cfg.guard_margin,
            merge,
        })
    }

    /// A judgement came back: on a switch, sign and persist the new choice (before it is
    /// served) and drop the workloads observed under the old one.
    pub fn apply(&mut self, j: Judgement) -> anyhow::Result<()> {
        self.judging = false;
        self.session_busy_s += j.seconds;
        // The next state is built aside and on disk before it is this guard's: a choice that
        // could not be persisted is never served (a restart would forget it while agents
        // already ran it).
        let mut next = self.state.clone();
        next.judged += 1;
        next.busy_s += j.seconds;
        let switch = j.switched && j.error.is_none();
        if switch {
            let seq = self.seq() + 1;
            let reason = j
                .twin_jcts
                .iter()
                .map(|(n, v)| format!("{n} {v:.2}"))
                .collect::<Vec<_>>()
                .join(", ");
            let reason = format!(
                "{} replaced {} (average JCT on the twin of {} tasks: {reason})",
                j.policy, j.current, j.tasks
            );
            let c = Choice::sign(&self.key, seq, &j.policy, &reason)
                .map_err(|e| anyhow::anyhow!("signing the guard's choice: {e}"))?;
            tracing::info!(seq, policy = %j.policy, from = %j.current, %reason, "guard: the cluster switches policy");
            next.choice = Some(c);
            next.switches += 1;
        } else if let Some(e) = &j.error {
            tracing::warn!(error = %e, "guard: the workload could not be judged");
        } else {
            tracing::info!(policy = %j.current, "guard: the policy in force stays");
        }
        next.last = Some(j);
        persist(&Self::file(&self.cfg), &next)?;
        self.state = next;
        if switch {
            self.workloads.clear();
        }
        Ok(())
    }

    /// The workload judged last, if a fine-tune on the twin is due (`tune_iterations` above 0,
    /// `tune_every_s` since the last one).
    pub fn tune_due(&mut self) -> Option<Workload> {
        if self.cfg.tune_iterations == 0
            || self
                .last_tune
                .is_some_and(|t| t.elapsed() < Duration::from_secs(self.cfg.tune_every_s))
        {
            return None;
        }
        let w = self.judged_workload.take()?;
        self.last_tune = Some(Instant::now());
        Some(w)
    }

    /// The workload the guard judged last (none yet after a start).
    pub fn judged(&self) -> Option<&Workload> {
        self.last_judged.as_ref()
    }

    /// The share of one core the guard used since this process started.
    pub fn busy_share(&self) -> f64 {
        self.session_busy_s / self.started.elapsed().as_secs_f64().max(1e-9)
    }
}

/// Judge `work` (the simulator on its twin; seconds of CPU on this thread).
pub fn judge(work: &Work) -> Judgement {
    let t0 = Instant::now();
    let learned = Learned::Checkpoint {
        model: &work.model.0,
        train_json: &work.model.1,
    };
    let r = on_workload(&work.workload, &work.current, learned, work.margin, 0);
    let tasks = work.workload.tasks.len();
    let finished = work
        .workload
        .tasks
        .iter()
        .filter(|t| t.finished.is_some())
        .count();
    let seconds = t0.elapsed().as_secs_f64();
    match r {
        Ok(Decision {
            policy,
            switched,
            twin_jcts,
            measured,
            unsupported,
            gains,
            needed,
            ..
        }) => Judgement {
            current: work.current.clone(),
            tasks,
            finished,
            twin_jcts,
            measured,
            unsupported,
            gains,
            needed,
            policy,
            switched,
            seconds,
            error: None,
            boxes: work.merge.boxes,
            uncorroborated: work.merge.uncorroborated,
            unheard: work.merge.unheard,
        },
        Err(e) => Judgement {
            current: work.current.clone(),
            tasks,
            finished,
            policy: work.current.clone(),
            seconds,
            error: Some(e.to_string()),
            boxes: work.merge.boxes,
            uncorroborated: work.merge.uncorroborated,
            unheard: work.merge.unheard,
            ..Judgement::default()
        },
    }
}

/// The judging thread: takes work from the returned sender (one at a time), answers on the
/// returned receiver.
pub fn spawn_judge() -> (mpsc::Sender<Work>, mpsc::Receiver<Judgement>) {
    let (work_tx, mut work_rx) = mpsc::channel::<Work>(1);
    let (done_tx, done_rx) = mpsc::channel::<Judgement>(1);
    std::thread::spawn(move || {
        while let Some(w) = work_rx.blocking_recv() {
            if done_tx.blocking_send(judge(&w)).is_err() {
                return;
            }
        }
    });
    (work_tx, done_rx)
}

/// Write `state` to `path` whole: a temporary file, synced, renamed over it, the folder synced,
/// so a crash leaves either the old state or the new one.
fn persist(path: &std::path::Path, state: &GuardState) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut f, &serde_json::to_vec_pretty(state)?)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    };
    write().with_context(|| format!("writing the guard's state {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh(name: &str) -> CoordinatorConfig {
        let dir =
            std::env::temp_dir().join(format!("tapfinger-guard-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        CoordinatorConfig {
            data_dir: dir,
            guard_every_s: 0,
            guard_min_tasks: 1,
            ..CoordinatorConfig::default()
        }
    }

    fn judged(current: &str, policy: &str) -> Judgement {
        Judgement {
            current: current.into(),
            tasks: 10,
            finished: 10,
            twin_jcts: vec![(current.into(), 10.0), (policy.into(), 8.0)],
            measured: 10.0,
            policy: policy.into(),
            switched: current != policy,
            seconds: 0.5,
            ..Judgement::default()
        }
    }

    /// An edited `guard.json` (another policy, a higher number, the old signature; or an
    /// edited reason) is never served: the coordinator signs a new choice of the learned
    /// policy, numbered above what was stored, writes it, and serves that.
    #[test]
    fn an_edited_stored_choice_is_replaced_by_a_new_signed_one() {
        let key = Keypair::generate_ed25519();
        let me = key.public().to_peer_id();
        for (what, edit) in [
            (
                "policy and number",
                (|c: &mut Choice| {
                    c.policy = "random".into();
                    c.seq = 9;
                }) as fn(&mut Choice),
            ),
            ("reason", |c: &mut Choice| {
                c.reason = "\u{1b}[2Jall good".into()
            }),
        ] {
            let cfg = fresh(&format!("edited-{}", what.len()));
            let mut g = Guard::open(cfg.clone(), key.clone()).unwrap();
            g.apply(judged(LEARNED, "tiresias")).unwrap();
            let mut state = g.state.clone();
            edit(state.choice.as_mut().unwrap());
            let stored = state.choice.clone().unwrap();
            persist(&cfg.data_dir.join("guard.json"), &state).unwrap();
            let again = Guard::open(cfg.clone(), key.clone()).unwrap();
            let c = again.state.choice.clone().unwrap();
            assert_eq!(c.verify(&me), Ok(()), "{what}");
            assert_eq!(
                (c.seq, c.policy.as_str()),
                (stored.seq + 1, LEARNED),
                "{what}"
            );
            assert!(c.reason.contains("did not verify"), "{what}: {}", c.reason);
            // What is on disk is what is served.
            let on_disk = Guard::open(cfg.clone(), key.clone()).unwrap();
            assert_eq!(on_disk.state.choice, Some(c), "{what}");
        }
    }

    /// A switch that cannot be written is not served: the choice in force stays the one on
    /// disk, and the same judgement applies once the disk takes it.
    #[test]
    fn a_switch_is_on_disk_before_it_is_in_force() {
        let cfg = fresh("persist");
        let key = Keypair::generate_ed25519();
        let mut g = Guard::open(cfg.clone(), key).unwrap();
        // A folder where guard.json goes: the rename over it fails.
        let blocker = cfg.data_dir.join("guard.json");
        std::fs::create_dir_all(blocker.join("x")).unwrap();
        let e = g.apply(judged(LEARNED, "tiresias")).unwrap_err();
        assert!(format!("{e:#}").contains("guard.json"), "{e:#}");
        assert_eq!((g.seq(), g.current().as_str()), (0, LEARNED));
        assert_eq!((g.state.judged, g.state.switches), (0, 0));
        std::fs::remove_dir_all(&blocker).unwrap();
        g.apply(judged(LEARNED, "tiresias")).unwrap();
        assert_eq!((g.seq(), g.current().as_str()), (1, "tiresias"));
    }

    /// A switch signs the next choice with the coordinator's key and survives a restart; the
    /// way back is another choice, numbered on; a workload observed under an older choice is
    /// not judged.
    #[test]
    fn switches_are_signed_numbered_kept_and_reversible() {
        let cfg = fresh("switch");
        let key = Keypair::generate_ed25519();
        let me = key.public().to_peer_id();
        let mut g = Guard::open(cfg.clone(), key.clone()).unwrap();
        assert_eq!((g.seq(), g.current().as_str()), (0, LEARNED));
        g.apply(judged(LEARNED, LEARNED)).unwrap();
        assert_eq!(g.seq(), 0, "no switch, no choice");
        g.apply(judged(LEARNED, "tiresias")).unwrap();
        let c = g.state.choice.clone().unwrap();
        assert_eq!((c.seq, c.policy.as_str()), (1, "tiresias"));
        assert_eq!(c.verify(&me), Ok(()));
        assert!(
            c.reason.contains("tiresias replaced tapfinger"),
            "{}",
            c.reason
        );
        let again = Guard::open(cfg.clone(), key.clone()).unwrap();
        assert_eq!(again.state, g.state, "kept on disk");
        g.apply(judged("tiresias", LEARNED)).unwrap();
        assert_eq!((g.seq(), g.current().as_str()), (2, LEARNED));
        assert_eq!((g.state.judged, g.state.switches), (3, 2));
        assert!((g.state.busy_s - 1.5).abs() < 1e-9);
        // A judgement of 0.5 s at most 5 % of a core: the next waits 10 s, whatever
        // guard_every_s says.
        assert_eq!(g.interval(), Duration::from_secs(10));
        // Workloads: only under the choice in force, and only with enough finished tasks.
        let w = Workload {
            sizes: None,
            format: tapfinger::twin::FORMAT.into(),
            slot_seconds: 1.0,
            from_slot: 0,
            to_slot: 0,
            kinds: Vec::new(),
            nodes: vec![tapfinger::twin::NodeRecord {
                id: tapfinger::NodeId(0),
                name: "a".into(),
                capacity: tapfinger::Resources(Vec::new()),
                gpu_model: None,
            }],
            classes: Vec::new(),
            tasks: Vec::new(),
            links: None,
        };
        assert!(
            g.offer(1, 1, w.clone())
                .unwrap_err()
                .contains("not the one in force")
        );
        let mut bad = w.clone();
        bad.format = "other".into();
        assert!(
            g.offer(1, 2, bad).is_err(),
            "a workload that cannot be replayed"
        );
        g.offer(1, 2, w).unwrap();
        assert!(
            g.due((Vec::new(), String::new())).is_none(),
            "no finished task"
        );
        std::fs::remove_dir_all(&cfg.data_dir).ok();
    }

    /// A judgement that failed is counted and keeps the policy in force.
    #[test]
    fn a_failed_judgement_keeps_the_policy_in_force() {
        let cfg = fresh("failed");
        let mut g = Guard::open(cfg.clone(), Keypair::generate_ed25519()).unwrap();
        let mut j = judged(LEARNED, "drf");
        j.error = Some("the twin: no task".into());
        g.apply(j).unwrap();
        assert_eq!((g.seq(), g.state.judged), (0, 1));
        std::fs::remove_dir_all(&cfg.data_dir).ok();
    }
}
