//! The agent's side of the guard: it runs the policy the coordinator's guard chose for the
//! whole cluster (a signed [`Choice`]: the learned policy, or a baseline while the learned one
//! does worse on this cluster's work), and pushes the workload it observed since it adopted that
//! choice, for the guard to judge it on.
//!
//! A choice is taken only from the configured coordinator, only if its signature holds and its
//! number is above the one in force; it is kept on disk (`policies/guard.json`) so a restarted
//! agent runs the same policy before it reaches the coordinator again. While a baseline is in
//! force, a new published version is stored and shown but not swapped in: the learned policy
//! comes back when the guard says so, in the version then in use. A baseline's decisions are not
//! recorded as experience (they are not the learned policy's).

use super::Online;
use crate::learn::{Request, Response};
use libp2p::PeerId;
use tapfinger::node::NodeCore;
use tapfinger::twin::Workload;
use tapfinger_net::guard::{Choice, LEARNED};

/// Most tasks one push carries (the latest arrivals): a window's workload stays well inside the
/// request size limit of the learning protocol.
pub const PUSH_MAX_TASKS: usize = 5000;

/// The choice in force, under `<online dir>/policies`.
const GUARD_FILE: &str = "guard.json";
/// The choice in force before it.
const GUARD_PREVIOUS: &str = "guard.previous.json";

impl Online {
    /// Whether a baseline chosen by the guard is in force (the learned policy does not run).
    pub fn baseline_in_force(&self) -> bool {
        self.status.guard_policy != LEARNED
    }

    /// The learned policy of the version in use (version 0: the start model).
    fn learned_in_use(&self) -> anyhow::Result<Box<dyn tapfinger::Policy>> {
        let v = self.status.version;
        if v == 0 {
            let (bytes, json, label) = &self.cfg.start;
            return crate::policy::learned(
                bytes.clone(),
                json,
                label,
                self.cfg.window,
                self.recorder.clone(),
            );
        }
        let (c, _) = self
            .read_stored(v)
            .ok_or_else(|| anyhow::anyhow!("version {v} is no longer stored intact"))?;
        self.policy(&c)
    }

    /// Run the policy `c` names (already verified).
    fn enforce(&mut self, c: &Choice, core: &mut NodeCore) -> anyhow::Result<()> {
        let policy = if c.policy == LEARNED {
            self.learned_in_use()?
        } else {
            crate::policy::build(&c.policy, None, self.cfg.window)?
        };
        core.set_policy(policy);
        self.status.guard_policy = c.policy.clone();
        self.status.guard_seq = c.seq;
        self.status.guard_reason = c.reason.clone();
        self.guard_since_slot = core.slot();
        Ok(())
    }

    /// A choice from the coordinator: verified, kept on disk, enforced.
    pub(super) fn on_choice(&mut self, c: &Choice, core: &mut NodeCore) -> anyhow::Result<()> {
        let c = c.verified(&self.cfg.coordinator)?;
        self.enforce(&c, core)?;
        let dir = self.cfg.dir.join("policies");
        let p = dir.join(GUARD_FILE);
        // The choice in force until now stays beside it: if the new file is found damaged at
        // the next start, the one verified before it runs, not the learned policy by default.
        if p.exists() {
            let _ = std::fs::copy(&p, dir.join(GUARD_PREVIOUS));
        }
        crate::procs::write_json(&c, &p, "tmp")?;
        tracing::info!(seq = c.seq, policy = %c.policy, reason = ?c.reason, "guard: the cluster's policy in force");
        Ok(())
    }

    /// At start: the last choice in force that still verifies (the stored one, else the one
    /// before it), so a damaged or edited file does not put this box on another policy than
    /// its peers.
    pub(super) fn restore_choice(&mut self, core: &mut NodeCore) {
        let dir = self.cfg.dir.join("policies");
        for name in [GUARD_FILE, GUARD_PREVIOUS] {
            let p = dir.join(name);
            let Ok(bytes) = std::fs::read(&p) else {
                continue;
            };
            let restored = serde_json::from_slice::<Choice>(&bytes)
                .map_err(anyhow::Error::from)
                .and_then(|c| {
                    let c = c.verified(&self.cfg.coordinator)?;
                    self.enforce(&c, core)
                });
            match restored {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(path = %p.display(), error = %e, "a stored guard choice does not verify: trying the one before it")
                }
            }
        }
    }

    /// The guard's messages among the coordinator's responses; `None` for the others.
    pub(super) fn on_guard_response(
        &mut self,
        r: &Response,
        core: &mut NodeCore,
    ) -> Option<Vec<(PeerId, Request)>> {
        match r {
            Response::Guard(Some(c)) => {
                if c.seq > self.status.guard_seq
                    && let Err(e) = self.on_choice(c, core)
                {
                    self.status.refused += 1;
                    tracing::warn!(seq = c.seq, error = %e, "guard choice refused");
                }
                Some(Vec::new())
            }
            Response::Guard(None) | Response::Received => Some(Vec::new()),
            _ => None,
        }
    }

    /// How many slots of workload to push now, if a push is due (every `workload_push_ms` while
    /// the coordinator is connected): those since this agent adopted the choice in force, at
    /// most `workload_window_s`.
    pub fn workload_due(&mut self, core: &NodeCore, now_ms: u64) -> Option<u64> {
        if self.cfg.workload_push_ms == 0
            || !self.status.coordinator_connected
            || now_ms < self.last_push + self.cfg.workload_push_ms
        {
            return None;
        }
        self.last_push = now_ms;
        let slot_ms = core.config().slot_ms.max(1);
        let window = self.cfg.workload_window_s.saturating_mul(1000) / slot_ms;
        Some(window.min(core.slot().saturating_sub(self.guard_since_slot)))
    }

    /// The push of workload `w` (at most [`PUSH_MAX_TASKS`], the latest arrivals).
    pub fn workload_request(&self, core: &NodeCore, mut w: Workload) -> (PeerId, Request) {
        if w.tasks.len() > PUSH_MAX_TASKS {
            w.tasks.sort_by_key(|t| t.arrival);
            w.tasks.drain(..w.tasks.len() - PUSH_MAX_TASKS);
        }
        (
            self.cfg.coordinator,
            Request::Workload {
                node: core.id(),
                seq: self.status.guard_seq,
                workload: Box::new(w),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::learn::{Announcement, Checkpoint};
    use crate::online::OnlineConfig;
    use libp2p::identity::Keypair;

    /// The coordinator's choice moves the core to the baseline it names and back; another
    /// signer's or an older one is not taken; a version published meanwhile waits; a restarted
    /// agent resumes the choice from disk.
    #[test]
    fn agents_run_the_coordinators_choice_only_and_keep_it() {
        let dir =
            std::env::temp_dir().join(format!("tapfinger-online-guard-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let coordinator = Keypair::generate_ed25519();
        let cid = coordinator.public().to_peer_id();
        let start = crate::policy::initial_checkpoint(None).unwrap();
        let cfg = OnlineConfig {
            workload_push_ms: 1000,
            ..crate::online::tests::config(cid, &dir)
        };
        let mut core = crate::online::tests::core();
        let mut o = Online::open(cfg.clone(), &mut core).unwrap();
        o.connection(cid, true);
        let choice = |seq, policy: &str| {
            Response::Guard(Some(Box::new(
                Choice::sign(&coordinator, seq, policy, "test").unwrap(),
            )))
        };
        // Polled with the announcement.
        let asked = o.step(&mut core, 1000);
        assert!(asked.iter().any(|(_, r)| matches!(r, Request::Guard)));
        let forged = Response::Guard(Some(Box::new(
            Choice::sign(&Keypair::generate_ed25519(), 1, "drf", "x").unwrap(),
        )));
        o.on_response(cid, forged, &mut core);
        assert_eq!((core.policy_name(), o.status.refused), ("tapfinger", 1));
        o.on_response(cid, choice(1, "tiresias"), &mut core);
        assert_eq!(core.policy_name(), "tiresias");
        assert!(o.baseline_in_force());
        // An older or the same choice again changes nothing.
        o.on_response(cid, choice(1, "drf"), &mut core);
        assert_eq!(core.policy_name(), "tiresias");
        // A version published while the baseline is in force is kept, not swapped in.
        let c = Checkpoint {
            version: 1,
            model: start.0.clone(),
            train_json: start.1.clone(),
        };
        let a = Announcement::sign(&coordinator, &c).unwrap();
        o.accept(&a, &c, &mut core).unwrap();
        assert_eq!((core.policy_name(), o.status.version), ("tiresias", 1));
        // Workload pushes carry the choice they ran under.
        let slots = o.workload_due(&core, 5000).unwrap();
        assert_eq!(slots, 0, "adopted this slot");
        assert!(o.workload_due(&core, 5500).is_none(), "not due again yet");
        // A restart resumes the choice before the coordinator is reached.
        let mut core2 = crate::online::tests::core();
        let o2 = Online::open(cfg.clone(), &mut core2).unwrap();
        assert_eq!((core2.policy_name(), o2.status.guard_seq), ("tiresias", 1));
        // And back to the learned policy, in the version in use.
        o.on_response(cid, choice(2, LEARNED), &mut core);
        assert_eq!(core.policy_name(), "tapfinger");
        assert!(!o.baseline_in_force());
        // The stored choice edited (a reason changed): refused at the next start, and the one
        // verified before it runs, not the learned policy by default.
        o.on_response(cid, choice(3, "drf"), &mut core);
        let stored = dir.join("policies").join(GUARD_FILE);
        let mut edited: Choice = serde_json::from_slice(&std::fs::read(&stored).unwrap()).unwrap();
        edited.reason = "edited".into();
        std::fs::write(&stored, serde_json::to_vec(&edited).unwrap()).unwrap();
        let mut core3 = crate::online::tests::core();
        let o3 = Online::open(cfg.clone(), &mut core3).unwrap();
        assert_eq!((core3.policy_name(), o3.status.guard_seq), ("tapfinger", 2));
        std::fs::remove_dir_all(&dir).ok();
    }
}
