//! Who a node is: its persistent libp2p key, and the protocol's node id derived from its peer id
//! (a hash, so every agent derives the same id for a peer).

use libp2p::PeerId;
use libp2p::identity::Keypair;
use std::path::{Path, PathBuf};
use tapfinger::NodeId;

/// The node id of a peer: a hash of its peer id, so every agent derives the same one.
pub fn node_id(peer: &PeerId) -> NodeId {
    // FNV-1a over the peer id's bytes.
    let mut h: u32 = 0x811c_9dc5;
    for b in peer.to_bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    NodeId(h)
}

/// The identity key could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The file is not an identity key.
    #[error("{path} is not an identity key: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// It could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// The persistent identity key in `dir` (`identity.key`), created on first use.
pub fn identity(dir: &Path) -> Result<Keypair, IdentityError> {
    let path = dir.join("identity.key");
    if let Ok(bytes) = std::fs::read(&path) {
        return Keypair::from_protobuf_encoding(&bytes).map_err(|e| IdentityError::Invalid {
            path,
            reason: e.to_string(),
        });
    }
    let key = Keypair::generate_ed25519();
    let bytes = key
        .to_protobuf_encoding()
        .map_err(|e| IdentityError::Invalid {
            path: path.clone(),
            reason: e.to_string(),
        })?;
    // Private to its owner: whoever reads it can speak as this box.
    write_private_bytes(&path, &bytes).map_err(|source| IdentityError::Write { path, source })?;
    Ok(key)
}

/// Write a new file readable by its owner only.
fn write_private_bytes(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}
