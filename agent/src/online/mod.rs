//! The agent's side of online learning: shipping experience to the coordinator and
//! taking new policy versions from it, with rollback.
//!
//! Sans-IO like the node core: the daemon feeds it ticks, connection changes and responses, and
//! sends the requests it returns. Experience is taken from the core after every step, spooled to
//! disk in batches of `batch_decisions` decisions (bounded; oldest dropped and counted when full)
//! and offered one batch at a time while the coordinator is connected; a batch leaves the spool
//! only when acknowledged. Every `poll_ms` the agent asks the coordinator for its announcement;
//! a newer version signed by the configured coordinator is fetched, hash-checked, loaded (refused
//! if its input sizes differ), kept on disk under `policies/v<N>/`, and swapped into the core
//! between rounds. With no coordinator around nothing changes: the agent keeps deciding with the
//! weights it has. The coordinator's guard may have the cluster run a baseline instead
//! ([`guard`]).

pub mod guard;
pub use guard::PUSH_MAX_TASKS;

use crate::learn::{Announcement, Checkpoint, Request, Response, Spool, hex};
use libp2p::PeerId;
use std::path::PathBuf;
use tapfinger::model::checkpoint::{CONFIG_FILE, MODEL_FILE};
use tapfinger::model::{Experience, Recorder};
use tapfinger::node::NodeCore;

/// Settings.
#[derive(Debug, Clone)]
pub struct OnlineConfig {
    /// The only peer whose weights are accepted (and where experience goes).
    pub coordinator: PeerId,
    /// Learning mode: record and ship experience (the policy then samples instead of deciding
    /// greedily).
    pub learning: bool,
    /// Where spooled experience and accepted policies live.
    pub dir: PathBuf,
    /// Most batches kept waiting for the coordinator.
    pub spool_max: usize,
    /// Decisions per batch.
    pub batch_decisions: usize,
    /// How often to ask for the published version (ms).
    pub poll_ms: u64,
    /// Learning mode: explore with the coordinator's latest candidate (a trial) rather than the
    /// published version.
    pub explore_candidates: bool,
    /// The policy's window (input size check of new weights).
    pub window: usize,
    /// The checkpoint the agent started with (version 0): `model.safetensors`, `train.json`, a label.
    pub start: (Vec<u8>, String, String),
    /// How often to push the observed workload to the coordinator's guard (ms; 0: never).
    pub workload_push_ms: u64,
    /// The longest window of workload a push covers (s).
    pub workload_window_s: u64,
}

/// What the status shows of it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct PolicyStatus {
    /// Version in use (0: the model the agent started with).
    pub version: u64,
    /// SHA-256 of the checkpoint in use (hex; empty for version 0).
    pub hash: String,
    /// Versions at or below this are refused (set by a rollback).
    pub floor: u64,
    /// Announcements or checkpoints refused (bad signer, signature, hash or sizes).
    pub refused: u64,
    /// Learning mode on.
    pub learning: bool,
    /// Experience batches acknowledged by the coordinator.
    pub batches_shipped: u64,
    /// Batches waiting in the spool.
    pub batches_waiting: u64,
    /// Batches dropped because the spool was full.
    pub batches_dropped: u64,
    /// Decisions recorded so far.
    pub decisions_recorded: u64,
    /// Connected to the coordinator now.
    pub coordinator_connected: bool,
    /// The coordinator's update whose candidate this agent explores with (0: none; only with
    /// `explore_candidates`).
    pub trial: u64,
    /// The policy the coordinator's guard has the cluster run: `tapfinger` (the learned policy)
    /// or a baseline's name.
    pub guard_policy: String,
    /// The number of that choice (0: none received).
    pub guard_seq: u64,
    /// Why the guard chose it.
    pub guard_reason: String,
}

/// What decides on a box, for `node` and the dashboard: `deciding` (the node core's policy)
/// alone without a coordinator; with one, the learned policy's version, or the baseline the
/// coordinator's guard chose for the cluster and why.
pub fn policy_line(deciding: &str, p: Option<&PolicyStatus>) -> String {
    match p {
        None => deciding.to_string(),
        Some(p) if p.guard_policy.is_empty() || p.guard_policy == tapfinger_net::guard::LEARNED => {
            format!("{deciding}, version {}", p.version)
        }
        Some(p) => format!(
            "{deciding} (the guard's choice {}: {}; learned version {} kept)",
            p.guard_seq, p.guard_reason, p.version
        ),
    }
}

/// The agent's online-learning state.
pub struct Online {
    /// The coordinator, batch size, poll period.
    cfg: OnlineConfig,
    /// Batches waiting for the coordinator, on disk (`None`: not learning).
    spool: Option<Spool>,
    /// Where the policy records decisions (`None`: not learning).
    recorder: Option<Recorder>,
    /// Decisions recorded and not yet a full batch.
    pending: Experience,
    /// The batch sent and not yet acknowledged (one at a time).
    in_flight: Option<u64>,
    /// A newer version being fetched (one at a time).
    fetching: Option<Announcement>,
    /// When the coordinator was last asked for its latest version (ms).
    last_poll: u64,
    /// Accepted versions in order (0 = the start model), for rollback.
    history: Vec<u64>,
    /// The slot this agent adopted the guard's choice in force (its pushes start there).
    guard_since_slot: u64,
    /// When the workload was last pushed (ms).
    last_push: u64,
    /// What the API and the dashboard show.
    status: PolicyStatus,
}

impl std::fmt::Debug for Online {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Online")
            .field("status", &self.status)
            .finish()
    }
}

impl Online {
    /// Set up; in learning mode every policy built by `Online::policy` records its decisions into
    /// this agent's recorder, and the core records its lost claims and rewards; `step` joins
    /// them. Restores the last accepted version (and a
    /// rollback floor) from disk, if any: returns it for the daemon to load.
    pub fn open(cfg: OnlineConfig, core: &mut NodeCore) -> anyhow::Result<Self> {
        std::fs::create_dir_all(cfg.dir.join("policies"))?;
        let spool = if cfg.learning {
            Some(Spool::open(&cfg.dir.join("spool"), cfg.spool_max)?)
        } else {
            None
        };
        let recorder = cfg.learning.then(Recorder::default);
        if recorder.is_some() {
            core.learn();
        }
        // Version 0 is the start model, learning or not: what a rollback to it runs, and what
        // the coordinator's guard replays as the learned policy. (Where it was installed only
        // to record, an agent that did not learn decided with its own configured model while
        // the guard judged the start model in its name.) Learning, it samples and records too.
        let (bytes, json, label) = &cfg.start;
        core.set_policy(crate::policy::learned(
            bytes.clone(),
            json,
            label,
            cfg.window,
            recorder.clone(),
        )?);
        let floor = std::fs::read_to_string(cfg.dir.join("policies").join("floor"))
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        let mut me = Self {
            status: PolicyStatus {
                learning: cfg.learning,
                floor,
                guard_policy: tapfinger_net::guard::LEARNED.to_string(),
                ..PolicyStatus::default()
            },
            cfg,
            spool,
            recorder,
            pending: Experience::default(),
            in_flight: None,
            fetching: None,
            last_poll: 0,
            history: vec![0],
            guard_since_slot: 0,
            last_push: 0,
        };
        // The version in use before a restart (kept in `policies/current`), if still intact.
        let current: u64 = std::fs::read_to_string(me.cfg.dir.join("policies").join("current"))
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        if current > 0 {
            match me.read_stored(current).map(|(c, a)| (me.policy(&c), a)) {
                Some((Ok(p), a)) => {
                    core.set_policy(p);
                    me.adopt(&a);
                }
                Some((Err(e), _)) => {
                    tracing::warn!(version = current, error = %e, "stored policy not usable")
                }
                None => tracing::warn!(version = current, "stored policy missing or altered"),
            }
        }
        me.restore_choice(core);
        Ok(me)
    }

    fn read_stored(&self, v: u64) -> Option<(Checkpoint, Announcement)> {
        let dir = self.cfg.dir.join("policies").join(format!("v{v}"));
        let a: Announcement =
            serde_json::from_slice(&std::fs::read(dir.join("announcement.json")).ok()?).ok()?;
        let c = Checkpoint {
            version: v,
            model: std::fs::read(dir.join(MODEL_FILE)).ok()?,
            train_json: std::fs::read_to_string(dir.join(CONFIG_FILE)).ok()?,
        };
        // A file changed on disk is not loaded.
        (a.verify(&self.cfg.coordinator).is_ok() && a.check(&c).is_ok()).then_some((c, a))
    }

    /// A policy from a checkpoint, recording in learning mode.
    fn policy(&self, c: &Checkpoint) -> anyhow::Result<Box<dyn tapfinger::Policy>> {
        crate::policy::learned(
            c.model.clone(),
            &c.train_json,
            &format!("policy version {}", c.version),
            self.cfg.window,
            self.recorder.clone(),
        )
    }

    fn remember_current(&self) {
        let p = self.cfg.dir.join("policies").join("current");
        if let Err(e) = std::fs::write(&p, self.status.version.to_string()) {
            tracing::warn!(error = %e, "cannot record the policy version in use");
        }
    }

    fn adopt(&mut self, a: &Announcement) {
        self.status.version = a.version;
        self.status.hash = hex(&a.hash);
        if self.history.last() != Some(&a.version) {
            self.history.push(a.version);
        }
    }

    /// The coordinator connected or left.
    pub fn connection(&mut self, peer: PeerId, up: bool) {
        if peer == self.cfg.coordinator {
            self.status.coordinator_connected = up;
            if !up {
                self.in_flight = None;
                self.fetching = None;
            }
        }
    }

    /// After every step: collect experience, spool full batches, and say what to send.
    pub fn step(&mut self, core: &mut NodeCore, now_ms: u64) -> Vec<(PeerId, Request)> {
        let mut out = Vec::new();
        if let Some(spool) = &mut self.spool {
            let records = self
                .recorder
                .as_ref()
                .and_then(|r| r.lock().ok().map(|mut r| std::mem::take(&mut *r)))
                .unwrap_or_default();
            let exp = core.take_outcomes().join(records);
            self.status.decisions_recorded += exp.records.len() as u64;
            self.pending.extend(exp);
            if self.pending.records.len() >= self.cfg.batch_decisions.max(1) {
                let mut batch = std::mem::take(&mut self.pending);
                // The agent goes on deciding after this batch.
                batch.truncated = true;
                if let Err(e) = spool.push(&batch) {
                    tracing::warn!(error = %e, "cannot spool experience");
                }
            }
            self.status.batches_dropped = spool.dropped;
            let waiting = spool.waiting().unwrap_or_default();
            self.status.batches_waiting = waiting.len() as u64;
            if self.status.coordinator_connected
                && self.in_flight.is_none()
                && let Some(&n) = waiting.first()
                && let Ok(Some(exp)) = spool.read(n)
            {
                self.in_flight = Some(n);
                out.push((
                    self.cfg.coordinator,
                    Request::Experience {
                        node: core.id(),
                        batch: n,
                        exp: Box::new(exp),
                    },
                ));
            }
        }
        if self.status.coordinator_connected
            && self.fetching.is_none()
            && now_ms >= self.last_poll + self.cfg.poll_ms
        {
            self.last_poll = now_ms;
            out.push((self.cfg.coordinator, Request::Announcement));
            out.push((self.cfg.coordinator, Request::Guard));
            if self.cfg.explore_candidates {
                out.push((
                    self.cfg.coordinator,
                    Request::Trial {
                        after: self.status.trial,
                    },
                ));
            }
        }
        out
    }

    /// A response from `from`.
    pub fn on_response(
        &mut self,
        from: PeerId,
        r: Response,
        core: &mut NodeCore,
    ) -> Vec<(PeerId, Request)> {
        if from != self.cfg.coordinator {
            return Vec::new();
        }
        if let Some(out) = self.on_guard_response(&r, core) {
            return out;
        }
        match r {
            Response::Ack { batch } => {
                if let Some(spool) = &mut self.spool {
                    if let Err(e) = spool.ack(batch) {
                        tracing::warn!(error = %e, "cannot drop an acknowledged batch");
                    }
                    self.status.batches_shipped += 1;
                }
                if self.in_flight == Some(batch) {
                    self.in_flight = None;
                }
                Vec::new()
            }
            Response::Announcement(Some(a)) => {
                if a.version <= self.status.version || a.version <= self.status.floor {
                    return Vec::new();
                }
                match a.verify(&self.cfg.coordinator) {
                    Ok(()) => {
                        let version = a.version;
                        self.fetching = Some(a);
                        vec![(self.cfg.coordinator, Request::Checkpoint { version })]
                    }
                    Err(e) => {
                        self.status.refused += 1;
                        tracing::warn!(version = a.version, error = %e, "policy announcement refused");
                        Vec::new()
                    }
                }
            }
            Response::Announcement(None)
            | Response::Trial(None)
            | Response::Guard(_)
            | Response::Received
            | Response::Logs { .. } => Vec::new(),
            Response::Trial(Some(t)) => {
                let (a, c) = *t;
                if self.cfg.explore_candidates
                    && a.version > self.status.trial
                    && let Err(e) = self.explore(&a, &c, core)
                {
                    self.status.refused += 1;
                    tracing::warn!(update = a.version, error = %e, "candidate refused");
                }
                Vec::new()
            }
            Response::Checkpoint(c) => {
                let Some(a) = self.fetching.take() else {
                    return Vec::new();
                };
                if let Err(e) = self.accept(&a, &c, core) {
                    self.status.refused += 1;
                    tracing::warn!(version = a.version, error = %e, "policy checkpoint refused");
                }
                Vec::new()
            }
            Response::Error(e) => {
                tracing::warn!(error = %e, "the coordinator refused a request");
                self.fetching = None;
                self.in_flight = None;
                Vec::new()
            }
        }
    }

    /// A request to the coordinator failed: retry later.
    pub fn on_failure(&mut self, to: PeerId) {
        if to == self.cfg.coordinator {
            self.in_flight = None;
            self.fetching = None;
        }
    }

    /// Explore with a candidate (a trial): checked like a published version, but neither stored
    /// nor adopted as the version in use; a later published version is stored and shown but
    /// does not replace the candidate in the core.
    fn explore(
        &mut self,
        a: &Announcement,
        c: &Checkpoint,
        core: &mut NodeCore,
    ) -> anyhow::Result<()> {
        anyhow::ensure!(a.trial, "a published version was offered as a candidate");
        a.verify(&self.cfg.coordinator)?;
        a.check(c)?;
        let policy = self.policy(c)?;
        // A baseline the guard put in force keeps running; the candidate runs once it goes.
        if !self.baseline_in_force() {
            core.set_policy(policy);
        }
        self.status.trial = a.version;
        tracing::info!(
            update = a.version,
            "exploring with the coordinator's latest candidate"
        );
        Ok(())
    }

    /// Check, load, store and swap in a fetched checkpoint.
    pub fn accept(
        &mut self,
        a: &Announcement,
        c: &Checkpoint,
        core: &mut NodeCore,
    ) -> anyhow::Result<()> {
        anyhow::ensure!(!a.trial, "a candidate was offered as a published version");
        a.verify(&self.cfg.coordinator)?;
        a.check(c)?;
        let policy = self.policy(c)?;
        let dir = self
            .cfg
            .dir
            .join("policies")
            .join(format!("v{}", a.version));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(MODEL_FILE), &c.model)?;
        std::fs::write(dir.join(CONFIG_FILE), &c.train_json)?;
        std::fs::write(dir.join("announcement.json"), serde_json::to_vec(a)?)?;
        // While exploring with a candidate, the core keeps it (the published version is kept for
        // a restart and shown in the status); so does a baseline the guard put in force.
        if self.status.trial == 0 && !self.baseline_in_force() {
            core.set_policy(policy);
        }
        self.adopt(a);
        self.remember_current();
        tracing::info!(version = a.version, hash = %self.status.hash, "new policy version in use");
        Ok(())
    }

    /// Go back to the version before the current one (version 0: the start model, `start`), and
    /// refuse the current and older versions from now on (a newer one is taken again).
    pub fn rollback(&mut self, core: &mut NodeCore) -> anyhow::Result<u64> {
        let current = self.status.version;
        anyhow::ensure!(
            current > 0,
            "nothing to roll back: version 0 (the start model) is in use"
        );
        let previous = self
            .history
            .iter()
            .rev()
            .copied()
            .find(|v| *v < current)
            .unwrap_or(0);
        let policy = if previous == 0 {
            let (bytes, json, label) = &self.cfg.start;
            crate::policy::learned(
                bytes.clone(),
                json,
                label,
                self.cfg.window,
                self.recorder.clone(),
            )?
        } else {
            let (c, _) = self
                .read_stored(previous)
                .ok_or_else(|| anyhow::anyhow!("version {previous} is no longer stored intact"))?;
            self.policy(&c)?
        };
        if !self.baseline_in_force() {
            core.set_policy(policy);
        }
        self.status.floor = current;
        std::fs::write(
            self.cfg.dir.join("policies").join("floor"),
            current.to_string(),
        )?;
        self.history.retain(|v| *v <= previous);
        self.status.version = previous;
        self.status.hash = if previous == 0 {
            String::new()
        } else {
            self.read_stored(previous)
                .map(|(_, a)| hex(&a.hash))
                .unwrap_or_default()
        };
        self.remember_current();
        tracing::info!(from = current, to = previous, "policy rolled back");
        Ok(previous)
    }

    /// For the status.
    pub fn status(&self) -> &PolicyStatus {
        &self.status
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libp2p::identity::Keypair;
    use tapfinger::node::NodeConfig;
    use tapfinger::{NodeId, Resources};

    /// A node core on the shipped learned policy.
    pub(super) fn core() -> NodeCore {
        let cfg = NodeConfig {
            me: NodeId(1),
            name: "n1".into(),
            capacity: Resources(vec![4, 1, 8]),
            kind_names: vec!["cpu".into(), "gpu".into(), "mem".into()],
            steps: Vec::new(),
            labels: Default::default(),
            incarnation: 1,
            num_types: 1,
            window: 10,
            service_kind: 1,
            slot_ms: 100,
            round_ms: 100,
            heartbeat_ms: 100,
            peer_timeout_ms: 500,
            autonomy_ms: 1000,
            forget_ms: tapfinger::node::DEFAULT_FORGET_MS,
            known: Default::default(),
            lease_age_ms: None,
            addr: "127.0.0.1".into(),
            priorities: Default::default(),
            shrink_kind: None,
            preempt: false,
        };
        NodeCore::new(cfg, crate::policy::build("tapfinger", None, 10).unwrap(), 1)
    }

    /// Settings for a test: `coordinator`'s peer id, `dir`, the shipped model as the start, no
    /// workload pushes (tests that need them set them).
    pub(super) fn config(coordinator: PeerId, dir: &std::path::Path) -> OnlineConfig {
        OnlineConfig {
            coordinator,
            learning: false,
            dir: dir.to_path_buf(),
            spool_max: 10,
            batch_decisions: 4,
            poll_ms: 100,
            explore_candidates: false,
            window: 10,
            start: crate::policy::initial_checkpoint(None).unwrap(),
            workload_push_ms: 0,
            workload_window_s: 3600,
        }
    }

    #[test]
    fn agents_refuse_other_signers_and_wrong_hashes_accept_the_coordinator_and_roll_back() {
        let dir = std::env::temp_dir().join(format!("tapfinger-online-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let coordinator = Keypair::generate_ed25519();
        let cid = coordinator.public().to_peer_id();
        let start = crate::policy::initial_checkpoint(None).unwrap();
        let mut core = core();
        let mut o = Online::open(config(cid, &dir), &mut core).unwrap();
        o.connection(cid, true);
        let good = Checkpoint {
            version: 1,
            model: start.0.clone(),
            train_json: start.1.clone(),
        };
        // Signed by another key (even if relayed by the coordinator's peer id): refused.
        let stranger = Announcement::sign(&Keypair::generate_ed25519(), &good).unwrap();
        let asks = o.on_response(cid, Response::Announcement(Some(stranger)), &mut core);
        assert!(asks.is_empty());
        assert_eq!((o.status().refused, o.status().version), (1, 0));
        // The coordinator's announcement, but bytes that do not match its hash: refused.
        let a = Announcement::sign(&coordinator, &good).unwrap();
        let asks = o.on_response(cid, Response::Announcement(Some(a.clone())), &mut core);
        assert!(matches!(asks.as_slice(), [(p, Request::Checkpoint { version: 1 })] if *p == cid));
        let mut tampered = good.clone();
        tampered.model[100] ^= 0xFF;
        o.on_response(cid, Response::Checkpoint(Box::new(tampered)), &mut core);
        assert_eq!((o.status().refused, o.status().version), (2, 0));
        // The real thing: accepted, stored, in use.
        o.on_response(cid, Response::Announcement(Some(a.clone())), &mut core);
        o.on_response(cid, Response::Checkpoint(Box::new(good)), &mut core);
        assert_eq!((o.status().refused, o.status().version), (2, 1));
        assert_eq!(o.status().hash, hex(&a.hash));
        // Rollback: back to the start model, and version 1 is not taken again.
        assert_eq!(o.rollback(&mut core).unwrap(), 0);
        assert_eq!((o.status().version, o.status().floor), (0, 1));
        let asks = o.on_response(cid, Response::Announcement(Some(a)), &mut core);
        assert!(asks.is_empty());
        assert!(o.rollback(&mut core).is_err(), "nothing left to roll back");
        // A restart keeps the rollback.
        let o = Online::open(o.cfg.clone(), &mut core).unwrap();
        assert_eq!((o.status().version, o.status().floor), (0, 1));
        std::fs::remove_dir_all(&dir).ok();
    }
    /// Exploring with candidates: only the coordinator's trials are taken, never as a published
    /// version, and a published version is never taken as a trial.
    #[test]
    fn learning_agents_explore_with_signed_trials_only() {
        let dir = std::env::temp_dir().join(format!("tapfinger-trial-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let coordinator = Keypair::generate_ed25519();
        let cid = coordinator.public().to_peer_id();
        let start = crate::policy::initial_checkpoint(None).unwrap();
        let mut core = core();
        let cfg = OnlineConfig {
            learning: true,
            explore_candidates: true,
            ..config(cid, &dir)
        };
        let mut o = Online::open(cfg.clone(), &mut core).unwrap();
        o.connection(cid, true);
        let asks = o.step(&mut core, 1_000);
        assert!(
            asks.iter()
                .any(|(_, r)| matches!(r, Request::Trial { after: 0 }))
        );
        let c = |version| Checkpoint {
            version,
            model: start.0.clone(),
            train_json: start.1.clone(),
        };
        let trial = |key: &Keypair, v| {
            Response::Trial(Some(Box::new((
                Announcement::sign_trial(key, &c(v)).unwrap(),
                c(v),
            ))))
        };
        // Another signer's trial: refused.
        o.on_response(cid, trial(&Keypair::generate_ed25519(), 3), &mut core);
        assert_eq!((o.status().refused, o.status().trial), (1, 0));
        // A published version offered as a trial: refused.
        let published = Announcement::sign(&coordinator, &c(3)).unwrap();
        o.on_response(
            cid,
            Response::Trial(Some(Box::new((published, c(3))))),
            &mut core,
        );
        assert_eq!((o.status().refused, o.status().trial), (2, 0));
        // The coordinator's trial: explored with, not adopted as a version.
        o.on_response(cid, trial(&coordinator, 3), &mut core);
        assert_eq!(
            (o.status().refused, o.status().trial, o.status().version),
            (2, 3, 0)
        );
        // From now on the checkpoint is asked for only when newer.
        let asks = o.step(&mut core, 2_000);
        assert!(
            asks.iter()
                .any(|(_, r)| matches!(r, Request::Trial { after: 3 }))
        );
        // An older one is ignored.
        o.on_response(cid, trial(&Keypair::generate_ed25519(), 2), &mut core);
        assert_eq!((o.status().refused, o.status().trial), (2, 3));
        // A trial announced as the published version passes its signature check but is refused
        // when its checkpoint arrives.
        let t = Announcement::sign_trial(&coordinator, &c(4)).unwrap();
        o.on_response(cid, Response::Announcement(Some(t)), &mut core);
        o.on_response(cid, Response::Checkpoint(Box::new(c(4))), &mut core);
        assert_eq!((o.status().refused, o.status().version), (3, 0));
        // Without `explore_candidates` trials are ignored.
        let mut plain = Online::open(
            OnlineConfig {
                explore_candidates: false,
                dir: dir.join("plain"),
                ..cfg
            },
            &mut core,
        )
        .unwrap();
        plain.connection(cid, true);
        assert!(
            !plain
                .step(&mut core, 1_000)
                .iter()
                .any(|(_, r)| matches!(r, Request::Trial { .. }))
        );
        plain.on_response(cid, trial(&coordinator, 5), &mut core);
        assert_eq!(plain.status().trial, 0);
        std::fs::remove_dir_all(&dir).ok();
    }
}
