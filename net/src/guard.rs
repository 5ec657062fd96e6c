//! The guard's choice as it travels: which policy the whole cluster runs, decided by the
//! coordinator's guard on the twin of the window the cluster just ran, and signed with the
//! coordinator's identity key like a published version, so that every agent runs the same
//! policy and no other peer can make the cluster switch.
//!
//! Agents pull it with the announcement ([`crate::learn::Request::Guard`]) and push the workload
//! they observed since they adopted the choice in force ([`crate::learn::Request::Workload`]).
//! A choice names `tapfinger` (the learned policy: the published version in use) or a
//! deployable baseline; `seq` grows by one per switch, so an agent never goes back to an older
//! choice it is offered again.

use libp2p::PeerId;
use libp2p::identity::Keypair;
use serde::{Deserialize, Serialize};

use crate::refusal::{Refusal, SignError};

/// The name a choice uses for the learned policy.
pub const LEARNED: &str = "tapfinger";

/// The cluster's policy, as the guard chose it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    /// Grows by one per switch (0: nothing decided yet; never signed).
    pub seq: u64,
    /// `tapfinger` or a baseline's name.
    pub policy: String,
    /// Why, for the log and the status: each candidate's average JCT on the twin.
    pub reason: String,
    /// The signer's public key (protobuf encoding).
    pub public_key: Vec<u8>,
    /// Signature over [`Choice::signed_bytes`].
    pub signature: Vec<u8>,
}

impl Choice {
    /// What the signature covers: a domain tag of its own (a choice can never pass for a policy
    /// version), the sequence number, the policy's name and the reason, each length-prefixed:
    /// every field an operator reads is signed.
    pub fn signed_bytes(seq: u64, policy: &str, reason: &str) -> Vec<u8> {
        let mut m = b"tapfinger-guard-2\0".to_vec();
        m.extend_from_slice(&seq.to_be_bytes());
        for field in [policy, reason] {
            m.extend_from_slice(&(field.len() as u64).to_be_bytes());
            m.extend_from_slice(field.as_bytes());
        }
        m
    }

    /// What a choice signed before reasons were signed covers (the sequence number and the
    /// policy); accepted by [`Choice::verified`] with its reason dropped.
    fn signed_bytes_v1(seq: u64, policy: &str) -> Vec<u8> {
        let mut m = b"tapfinger-guard\0".to_vec();
        m.extend_from_slice(&seq.to_be_bytes());
        m.extend_from_slice(&(policy.len() as u64).to_be_bytes());
        m.extend_from_slice(policy.as_bytes());
        m
    }

    /// Sign choice `seq` of `policy`, for `reason`, with `key`.
    pub fn sign(key: &Keypair, seq: u64, policy: &str, reason: &str) -> Result<Self, SignError> {
        let signature = key.sign(&Self::signed_bytes(seq, policy, reason))?;
        Ok(Self {
            seq,
            policy: policy.to_string(),
            reason: reason.to_string(),
            public_key: key.public().encode_protobuf(),
            signature,
        })
    }

    /// Check that `coordinator` signed this choice, reason included.
    pub fn verify(&self, coordinator: &PeerId) -> Result<(), Refusal> {
        crate::refusal::check_signed(
            &self.public_key,
            coordinator,
            &Self::signed_bytes(self.seq, &self.policy, &self.reason),
            &self.signature,
        )
    }

    /// The choice as far as `coordinator` signed it: whole where its signature covers the
    /// reason; a choice signed by a coordinator from before reasons were signed (its signature
    /// covers the number and the policy) with its reason dropped, so that no unsigned text is
    /// ever shown; else the refusal.
    pub fn verified(&self, coordinator: &PeerId) -> Result<Self, Refusal> {
        let whole = self.verify(coordinator);
        if whole.is_ok() {
            return Ok(self.clone());
        }
        let v1 = crate::refusal::check_signed(
            &self.public_key,
            coordinator,
            &Self::signed_bytes_v1(self.seq, &self.policy),
            &self.signature,
        );
        match v1 {
            Ok(()) => Ok(Self {
                reason: String::new(),
                ..self.clone()
            }),
            Err(_) => whole.map(|()| self.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the coordinator's signature over this sequence number and this policy holds: a
    /// choice edited in flight (another policy, another number) or signed by a peer is refused.
    #[test]
    fn only_the_coordinators_choice_as_signed_is_accepted() {
        let key = Keypair::generate_ed25519();
        let me = key.public().to_peer_id();
        let c = Choice::sign(&key, 3, "tiresias", "why").unwrap();
        assert_eq!(c.verify(&me), Ok(()));
        let mut edited = c.clone();
        edited.policy = "random".into();
        assert_eq!(edited.verify(&me), Err(Refusal::BadSignature));
        let mut edited = c.clone();
        edited.seq = 4;
        assert_eq!(edited.verify(&me), Err(Refusal::BadSignature));
        // The reason is signed too: operators read it.
        let mut edited = c.clone();
        edited.reason = "\u{1b}[2Jother".into();
        assert_eq!(edited.verify(&me), Err(Refusal::BadSignature));
        assert_eq!(edited.verified(&me), Err(Refusal::BadSignature));
        assert_eq!(c.verified(&me), Ok(c.clone()));
        // A choice signed before reasons were: accepted for its number and policy, its
        // reason (unsigned) dropped.
        let old = Choice {
            signature: key.sign(&Choice::signed_bytes_v1(3, "tiresias")).unwrap(),
            ..c.clone()
        };
        assert_eq!(old.verify(&me), Err(Refusal::BadSignature));
        let kept = old.verified(&me).unwrap();
        assert_eq!(
            (kept.seq, kept.policy.as_str(), kept.reason.as_str()),
            (3, "tiresias", "")
        );
        let other = Keypair::generate_ed25519();
        let forged = Choice::sign(&other, 3, "tiresias", "why").unwrap();
        assert!(matches!(
            forged.verify(&me),
            Err(Refusal::WrongSigner { .. })
        ));
    }
}
