//! Why a signed announcement, checkpoint or guard choice from the coordinator was refused, and
//! why one could not be signed: shared by [`crate::learn`] and [`crate::guard`].

/// Why an announcement or checkpoint was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// The key is not a valid public key.
    #[error("the announcement's public key does not decode")]
    BadKey,
    /// Signed by someone other than the configured coordinator.
    #[error("signed by {signer}, not by the configured coordinator {expected}")]
    WrongSigner {
        /// Who signed (peer id, base58).
        signer: String,
        /// Who should have.
        expected: String,
    },
    /// The signature does not verify.
    #[error("the signature does not verify")]
    BadSignature,
    /// The checkpoint's bytes do not match the announced hash.
    #[error("checkpoint hash mismatch for version {version}")]
    HashMismatch {
        /// Version.
        version: u64,
    },
    /// The checkpoint is not of the announced version.
    #[error("asked for version {asked}, got {got}")]
    WrongVersion {
        /// Asked.
        asked: u64,
        /// Received.
        got: u64,
    },
}

/// The key could not sign (a key type that cannot sign).
#[derive(Debug, thiserror::Error)]
#[error("cannot sign the checkpoint: {0}")]
pub struct SignError(#[from] libp2p::identity::SigningError);
