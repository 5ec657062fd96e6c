//! Online learning between agents and the coordinator: the request-response messages,
//! signed policy announcements, and the bounded on-disk spool of experience batches.
//!
//! Experience travels agent → coordinator as [`Request::Experience`] batches over libp2p
//! request-response; the coordinator answers [`Response::Ack`] only after it has stored the batch,
//! and the agent deletes its copy only on that ack, so a batch survives a coordinator that is away
//! or restarting. The agent's spool is bounded: when full, the oldest batch is dropped and counted.
//!
//! New weights travel the other way by pull: an agent asks the coordinator it is configured to
//! trust for its [`Announcement`] (version, SHA-256 of the checkpoint, the coordinator's public
//! key and its signature over version and hash), checks that the key is the configured peer id's
//! and that the signature holds, fetches the checkpoint bytes, and checks their hash before it
//! swaps the model in. Anything that fails a check is refused and logged, never loaded.

use libp2p::PeerId;
use libp2p::identity::Keypair;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use tapfinger_core::NodeId;
use tapfinger_core::experience::Experience;

pub use crate::refusal::{Refusal, SignError};

/// Protocol name of the request-response exchange.
pub const PROTOCOL: &str = "/tapfinger/learn/1";
/// Largest request accepted (an experience batch).
pub const MAX_REQUEST: u64 = 16 << 20;
/// Largest response accepted (a checkpoint).
pub const MAX_RESPONSE: u64 = 32 << 20;

/// What an agent asks of the coordinator.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Request {
    /// A batch of experience (numbered per agent, so an ack names it).
    Experience {
        /// The reporting node.
        node: NodeId,
        /// Batch number.
        batch: u64,
        /// The experience.
        exp: Box<Experience>,
    },
    /// Which policy is published?
    Announcement,
    /// The trainer's latest candidate if newer than update `after` (learning agents that explore
    /// with candidates; the checkpoint travels only when it is new to the asker).
    Trial {
        /// The update of the candidate the asker has (0: none).
        after: u64,
    },
    /// The checkpoint of a published version.
    Checkpoint {
        /// Version.
        version: u64,
    },
    /// Which policy does the guard have the cluster run ([`crate::guard::Choice`])?
    Guard,
    /// The workload the asker observed (the cluster's view: every task it knows, its own and
    /// its peers') since it adopted guard choice `seq`, for the guard to judge that choice on.
    Workload {
        /// The reporting node.
        node: NodeId,
        /// The guard choice it ran under (0: none yet).
        seq: u64,
        /// The workload.
        workload: Box<tapfinger_core::twin::Workload>,
    },
    /// A task's logs on the box asked (agent to agent: an agent's API shows the logs of a task
    /// that ran on another box by asking that box). Byte offsets as in the API's
    /// `?stdout_from=&stderr_from=`.
    Logs {
        /// The task.
        task: u64,
        /// Standard output from this byte (`None`: its last MiB).
        stdout_from: Option<u64>,
        /// Standard error from this byte.
        stderr_from: Option<u64>,
    },
}

impl Request {
    /// Its kind, for logs and counters (`experience`, `announcement`, `trial`, `checkpoint`,
    /// `guard`, `workload`).
    pub fn kind(&self) -> &'static str {
        match self {
            Request::Experience { .. } => "experience",
            Request::Announcement => "announcement",
            Request::Trial { .. } => "trial",
            Request::Checkpoint { .. } => "checkpoint",
            Request::Guard => "guard",
            Request::Workload { .. } => "workload",
            Request::Logs { .. } => "logs",
        }
    }
}

/// What the coordinator answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Response {
    /// The batch is stored.
    Ack {
        /// Batch number.
        batch: u64,
    },
    /// The published policy, if any.
    Announcement(Option<Announcement>),
    /// The latest candidate with its checkpoint, if an update has run.
    Trial(Option<Box<(Announcement, Checkpoint)>>),
    /// A checkpoint: `model.safetensors` and `train.json`.
    Checkpoint(Box<Checkpoint>),
    /// The guard's choice in force, if it has made one.
    Guard(Option<Box<crate::guard::Choice>>),
    /// The workload is taken.
    Received,
    /// A task's logs on the box asked.
    Logs {
        /// The task asked about.
        task: u64,
        /// Its logs there (`None`: that box has none of it).
        logs: Option<Box<TaskLogs>>,
    },
    /// The request could not be served.
    Error(String),
}

/// A task's logs as one box holds them: its output from the offsets asked, and where each file
/// ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskLogs {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Where `stdout` ends in its file (bytes).
    pub stdout_size: u64,
    /// Where `stderr` ends in its file.
    pub stderr_size: u64,
}

/// A checkpoint as agents load it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Version.
    pub version: u64,
    /// `model.safetensors` (the weights).
    pub model: Vec<u8>,
    /// `train.json`.
    pub train_json: String,
}

impl Checkpoint {
    /// SHA-256 over both files (length-prefixed, so no two splits hash alike).
    pub fn hash(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update((self.model.len() as u64).to_be_bytes());
        h.update(&self.model);
        h.update((self.train_json.len() as u64).to_be_bytes());
        h.update(self.train_json.as_bytes());
        h.finalize().into()
    }
}

/// A published policy version, signed by the coordinator's identity key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Announcement {
    /// Version (grows by one per publication).
    pub version: u64,
    /// [`Checkpoint::hash`] of the checkpoint.
    pub hash: [u8; 32],
    /// The signer's public key (protobuf encoding).
    pub public_key: Vec<u8>,
    /// Signature over [`Announcement::signed_bytes`].
    pub signature: Vec<u8>,
    /// A trial: the trainer's latest candidate, not passed by the evaluation gate, for agents in
    /// learning mode to explore with (`version` is then the update number). Signed under another
    /// domain tag, so a trial can never be taken for a published version, nor the reverse.
    #[serde(default)]
    pub trial: bool,
}

impl Announcement {
    /// What the signature covers: a domain tag (published version or trial), the version and
    /// the hash.
    pub fn signed_bytes(version: u64, hash: &[u8; 32], trial: bool) -> Vec<u8> {
        let mut m = if trial {
            b"tapfinger-trial\0".to_vec()
        } else {
            b"tapfinger-policy\0".to_vec()
        };
        m.extend_from_slice(&version.to_be_bytes());
        m.extend_from_slice(hash);
        m
    }

    /// Sign `checkpoint` as published version `checkpoint.version` with `key`.
    pub fn sign(key: &Keypair, checkpoint: &Checkpoint) -> Result<Self, SignError> {
        Self::sign_as(key, checkpoint, false)
    }

    /// Sign `checkpoint` as a trial (update number `checkpoint.version`) with `key`.
    pub fn sign_trial(key: &Keypair, checkpoint: &Checkpoint) -> Result<Self, SignError> {
        Self::sign_as(key, checkpoint, true)
    }

    fn sign_as(key: &Keypair, checkpoint: &Checkpoint, trial: bool) -> Result<Self, SignError> {
        let hash = checkpoint.hash();
        let signature = key.sign(&Self::signed_bytes(checkpoint.version, &hash, trial))?;
        Ok(Self {
            version: checkpoint.version,
            hash,
            public_key: key.public().encode_protobuf(),
            signature,
            trial,
        })
    }

    /// Check that `coordinator` signed this announcement.
    pub fn verify(&self, coordinator: &PeerId) -> Result<(), Refusal> {
        crate::refusal::check_signed(
            &self.public_key,
            coordinator,
            &Self::signed_bytes(self.version, &self.hash, self.trial),
            &self.signature,
        )
    }

    /// Check a fetched checkpoint against this (already verified) announcement.
    pub fn check(&self, c: &Checkpoint) -> Result<(), Refusal> {
        if c.version != self.version {
            return Err(Refusal::WrongVersion {
                asked: self.version,
                got: c.version,
            });
        }
        if c.hash() != self.hash {
            return Err(Refusal::HashMismatch {
                version: self.version,
            });
        }
        Ok(())
    }
}

/// Hex of a hash, for status lines.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Errors of the spool.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// A file operation failed.
    #[error("spool {path}: {reason}")]
    Io {
        /// Path.
        path: String,
        /// Cause.
        reason: String,
    },
}

/// A bounded on-disk queue of numbered batches (one file each, `NNNNNNNNNNNNNNNNNNNN.json`):
/// written before they are offered, deleted when acknowledged. When `max` batches are waiting,
/// pushing one more drops the oldest and counts it. The agent spools its experience; the
/// coordinator spools what it received until an update has used it.
#[derive(Debug)]
pub struct Spool<T = Experience> {
    /// Where the batches are files.
    dir: PathBuf,
    /// Most batches kept; pushing one more drops the oldest.
    max: usize,
    /// Number of the next batch.
    next: u64,
    /// Batches dropped because the spool was full.
    pub dropped: u64,
    /// What the batches hold (the agent's experience, or what the coordinator received).
    _t: std::marker::PhantomData<T>,
}

impl<T: Serialize + serde::de::DeserializeOwned> Spool<T> {
    /// Open (or create) a spool in `dir`, holding at most `max` batches.
    pub fn open(dir: &Path, max: usize) -> Result<Self, SpoolError> {
        std::fs::create_dir_all(dir).map_err(|e| SpoolError::Io {
            path: dir.display().to_string(),
            reason: e.to_string(),
        })?;
        let mut s = Self {
            dir: dir.to_path_buf(),
            max: max.max(1),
            next: 0,
            dropped: 0,
            _t: std::marker::PhantomData,
        };
        s.next = s.waiting()?.last().map_or(0, |n| n + 1);
        Ok(s)
    }

    fn path(&self, n: u64) -> PathBuf {
        self.dir.join(format!("{n:020}.json"))
    }

    fn io(&self, p: &Path, e: std::io::Error) -> SpoolError {
        SpoolError::Io {
            path: p.display().to_string(),
            reason: e.to_string(),
        }
    }

    /// Numbers of the batches waiting, oldest first.
    pub fn waiting(&self) -> Result<Vec<u64>, SpoolError> {
        let rd = std::fs::read_dir(&self.dir).map_err(|e| self.io(&self.dir, e))?;
        let mut v: Vec<u64> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.strip_suffix(".json")?.parse().ok()
            })
            .collect();
        v.sort_unstable();
        Ok(v)
    }

    /// Store a batch durably (written, then renamed into place); returns its number.
    pub fn push(&mut self, exp: &T) -> Result<u64, SpoolError> {
        let mut waiting = self.waiting()?;
        while waiting.len() >= self.max {
            let oldest = waiting.remove(0);
            let p = self.path(oldest);
            std::fs::remove_file(&p).map_err(|e| self.io(&p, e))?;
            self.dropped += 1;
            tracing::warn!(
                batch = oldest,
                "experience spool full: dropped the oldest batch"
            );
        }
        let n = self.next;
        self.next += 1;
        let p = self.path(n);
        let tmp = p.with_extension("tmp");
        let text = serde_json::to_vec(exp).map_err(|e| SpoolError::Io {
            path: p.display().to_string(),
            reason: e.to_string(),
        })?;
        std::fs::write(&tmp, text).map_err(|e| self.io(&tmp, e))?;
        std::fs::rename(&tmp, &p).map_err(|e| self.io(&p, e))?;
        Ok(n)
    }

    /// Read a waiting batch (`None` if it is gone).
    pub fn read(&self, n: u64) -> Result<Option<T>, SpoolError> {
        let p = self.path(n);
        match std::fs::read(&p) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| SpoolError::Io {
                    path: p.display().to_string(),
                    reason: e.to_string(),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.io(&p, e)),
        }
    }

    /// Move a waiting batch out of the spool into its `set-aside` folder (one it cannot use:
    /// kept for a person to look at, never offered again); where it went.
    pub fn set_aside(&mut self, n: u64) -> Result<PathBuf, SpoolError> {
        let aside = self.dir.join("set-aside");
        std::fs::create_dir_all(&aside).map_err(|e| self.io(&aside, e))?;
        let p = self.path(n);
        let to = aside.join(p.file_name().unwrap_or_default());
        std::fs::rename(&p, &to).map_err(|e| self.io(&p, e))?;
        Ok(to)
    }

    /// Forget an acknowledged batch.
    pub fn ack(&mut self, n: u64) -> Result<(), SpoolError> {
        let p = self.path(n);
        match std::fs::remove_file(&p) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.io(&p, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint(version: u64) -> Checkpoint {
        Checkpoint {
            version,
            model: vec![1, 2, 3, version as u8],
            train_json: "{}".into(),
        }
    }

    /// A trial's signature does not make it a published version (and the reverse): flipping the
    /// flag breaks the signature.
    #[test]
    fn a_trial_cannot_pass_for_a_published_version() {
        let key = Keypair::generate_ed25519();
        let me = key.public().to_peer_id();
        let c = checkpoint(5);
        let t = Announcement::sign_trial(&key, &c).unwrap();
        assert!(t.trial);
        assert_eq!(t.verify(&me), Ok(()));
        let forged = Announcement {
            trial: false,
            ..t.clone()
        };
        assert_eq!(forged.verify(&me), Err(Refusal::BadSignature));
        let p = Announcement::sign(&key, &c).unwrap();
        let forged = Announcement { trial: true, ..p };
        assert_eq!(forged.verify(&me), Err(Refusal::BadSignature));
    }

    #[test]
    fn only_the_configured_coordinators_signature_over_the_right_bytes_is_accepted() {
        let key = Keypair::generate_ed25519();
        let me = key.public().to_peer_id();
        let c = checkpoint(3);
        let a = Announcement::sign(&key, &c).unwrap();
        assert_eq!(a.verify(&me), Ok(()));
        assert_eq!(a.check(&c), Ok(()));
        // Signed by another key.
        let other = Keypair::generate_ed25519();
        let b = Announcement::sign(&other, &c).unwrap();
        assert!(matches!(b.verify(&me), Err(Refusal::WrongSigner { .. })));
        // Another key claimed, but our coordinator's signature kept: the signature fails.
        let mut forged = b.clone();
        forged.public_key = key.public().encode_protobuf();
        assert_eq!(forged.verify(&me), Err(Refusal::BadSignature));
        // A version bumped after signing.
        let mut bumped = a.clone();
        bumped.version = 4;
        assert_eq!(bumped.verify(&me), Err(Refusal::BadSignature));
        // Bytes that do not match the hash.
        let mut tampered = c.clone();
        tampered.model[0] ^= 1;
        assert_eq!(
            a.check(&tampered),
            Err(Refusal::HashMismatch { version: 3 })
        );
        assert!(matches!(
            a.check(&checkpoint(2)),
            Err(Refusal::WrongVersion { .. })
        ));
        // Garbage key.
        let mut garbage = a;
        garbage.public_key = vec![0; 5];
        assert_eq!(garbage.verify(&me), Err(Refusal::BadKey));
    }

    #[test]
    fn the_spool_keeps_batches_until_acked_and_drops_the_oldest_when_full() {
        let dir = std::env::temp_dir().join(format!("tapfinger-spool-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut s: Spool = Spool::open(&dir, 3).unwrap();
        let mut exp = Experience::default();
        exp.rewards.insert((1, NodeId(2)), -1.5);
        for _ in 0..5 {
            s.push(&exp).unwrap();
        }
        assert_eq!(s.waiting().unwrap(), vec![2, 3, 4]);
        assert_eq!(s.dropped, 2);
        assert_eq!(s.read(3).unwrap(), Some(exp.clone()));
        s.ack(3).unwrap();
        assert_eq!(s.read(3).unwrap(), None);
        // Reopened (a restart): what was waiting is still there, numbering continues.
        let mut s: Spool = Spool::open(&dir, 3).unwrap();
        assert_eq!(s.waiting().unwrap(), vec![2, 4]);
        assert_eq!(s.push(&exp).unwrap(), 5);
        std::fs::remove_dir_all(&dir).ok();
    }
}
