//! Why a signed announcement, checkpoint or guard choice from the coordinator was refused, and
//! why one could not be signed: shared by [`crate::learn`] and [`crate::guard`], with the one
//! check both make ([`check_signed`]).

use libp2p::PeerId;
use libp2p::identity::PublicKey;

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

/// Check that `signature` over `message` was made with `public_key` (protobuf encoding) and that
/// the key is `coordinator`'s.
pub(crate) fn check_signed(
    public_key: &[u8],
    coordinator: &PeerId,
    message: &[u8],
    signature: &[u8],
) -> Result<(), Refusal> {
    let key = PublicKey::try_decode_protobuf(public_key).map_err(|_| Refusal::BadKey)?;
    let signer = key.to_peer_id();
    if signer != *coordinator {
        return Err(Refusal::WrongSigner {
            signer: signer.to_string(),
            expected: coordinator.to_string(),
        });
    }
    if !key.verify(message, signature) {
        return Err(Refusal::BadSignature);
    }
    Ok(())
}
