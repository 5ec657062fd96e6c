//! Who a node is: its persistent libp2p key, and the protocol's node id derived from its peer id
//! (a hash, so every agent derives the same id for a peer).

use libp2p::PeerId;
use libp2p::identity::Keypair;
use std::path::{Path, PathBuf};
use tapfinger_core::NodeId;

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
    /// It exists but cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
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
    match std::fs::read(&path) {
        Ok(bytes) => return decode(path, &bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(IdentityError::Read { path, source }),
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

/// What to do about a key file that is not one: it is this box's identity (its node id, and
/// the upper half of every task id it hands out), so it is never replaced silently.
const KEY_ADVICE: &str = "restore it from a backup, or delete it to start as a new node (its \
    peers then see a new box, and the tasks the old one accepted are no longer its own)";

fn decode(path: PathBuf, bytes: &[u8]) -> Result<Keypair, IdentityError> {
    if bytes.is_empty() {
        return Err(IdentityError::Invalid {
            path,
            reason: format!("the file is empty; {KEY_ADVICE}"),
        });
    }
    // libp2p's own message for bytes that are no key can name a cargo feature (`rsa`), which
    // says nothing to an operator.
    Keypair::from_protobuf_encoding(bytes).map_err(|_| IdentityError::Invalid {
        path,
        reason: format!(
            "{} bytes that are not a protobuf-encoded Ed25519 key; {KEY_ADVICE}",
            bytes.len()
        ),
    })
}

/// Write a new file readable by its owner only, whole or not at all: a crash leaves no key file
/// or a complete one (an empty key file would stop the agent from starting).
fn write_private_bytes(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("key-tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    // A hard link fails where the key appeared meanwhile (another process made one): never
    // replace a key.
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    linked?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_made_once_and_a_damaged_one_is_refused_saying_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let made = identity(dir.path()).unwrap();
        let again = identity(dir.path()).unwrap();
        assert_eq!(made.public(), again.public());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("identity.key"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(!dir.path().join("identity.key-tmp").exists());
        for (bytes, says) in [(&b""[..], "empty"), (&b"\x00\x01garbage"[..], "9 bytes")] {
            std::fs::write(dir.path().join("identity.key"), bytes).unwrap();
            let msg = identity(dir.path()).unwrap_err().to_string();
            assert!(
                msg.contains(says) && msg.contains("delete it") && !msg.contains("rsa"),
                "{msg}"
            );
        }
    }
}
