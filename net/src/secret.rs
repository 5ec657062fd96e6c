//! The cluster's secrets on disk: the swarm key that closes the peer-to-peer network to boxes
//! without it, and the bearer tokens of the local HTTP APIs. Making them (`keygen`), reading them
//! with clear refusals, and comparing a token in constant time.
//!
//! Every secret is written with mode 0600 and never over an existing file, so that a second
//! `keygen` cannot silently cut a box off its cluster. It must not log or print a secret.

use libp2p::pnet::PreSharedKey;
use std::io::Write;
use std::path::{Path, PathBuf};
use subtle::ConstantTimeEq;

/// Shortest bearer token accepted (bytes, after trimming whitespace): shorter ones are guessable.
pub const MIN_TOKEN_BYTES: usize = 16;

/// A secret file that cannot be made or used.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// It could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// It could not be written (an existing file is never overwritten).
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A token file that holds no usable token.
    #[error(
        "{path}: the token is {len} bytes; at least {MIN_TOKEN_BYTES} are required (make one with `tapfinger-agent keygen --token {path}`)"
    )]
    ShortToken {
        /// The file.
        path: PathBuf,
        /// Its length after trimming.
        len: usize,
    },
    /// A swarm key file that is not one.
    #[error("{path}: {reason}")]
    BadKey {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// No randomness from the operating system.
    #[error("no randomness from the operating system: {0}")]
    Random(String),
}

fn random<const N: usize>() -> Result<[u8; N], SecretError> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| SecretError::Random(e.to_string()))?;
    Ok(b)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Write `text` to a new file `path` with mode 0600 (its folder is created). Refuses an existing
/// file.
pub fn write_private(path: &Path, text: &str) -> Result<(), SecretError> {
    let err = |source| SecretError::Write {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path).map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)?;
    f.sync_all().map_err(err)
}

/// A new swarm key in the `swarm.key` format (the lines `/key/swarm/psk/1.0.0/`, `/base16/` and
/// 64 hex digits), as [`crate::swarm::parse_psk`] reads it.
pub fn new_swarm_key() -> Result<String, SecretError> {
    Ok(format!(
        "/key/swarm/psk/1.0.0/\n/base16/\n{}\n",
        hex(&random::<32>()?)
    ))
}

/// A new bearer token: 32 random bytes in hex.
pub fn new_token() -> Result<String, SecretError> {
    Ok(format!("{}\n", hex(&random::<32>()?)))
}

/// Read the swarm key file `path`.
pub fn read_swarm_key(path: &Path) -> Result<PreSharedKey, SecretError> {
    let text = std::fs::read_to_string(path).map_err(|source| SecretError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    warn_if_readable_by_others(path);
    crate::swarm::parse_psk(&text).map_err(|e| SecretError::BadKey {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Read a bearer token file: its content with surrounding whitespace trimmed, refused when
/// shorter than [`MIN_TOKEN_BYTES`] (an empty file would otherwise mean "the empty token").
pub fn read_token(path: &Path) -> Result<String, SecretError> {
    let text = std::fs::read_to_string(path).map_err(|source| SecretError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let token = text.trim();
    if token.len() < MIN_TOKEN_BYTES {
        return Err(SecretError::ShortToken {
            path: path.to_path_buf(),
            len: token.len(),
        });
    }
    warn_if_readable_by_others(path);
    Ok(token.to_string())
}

/// Whether a listen address reaches this host only: its first part is a loopback IP (a DNS
/// name or an unspecified address may be reached from elsewhere).
pub fn is_loopback(addr: &libp2p::Multiaddr) -> bool {
    use libp2p::multiaddr::Protocol;
    match addr.iter().next() {
        Some(Protocol::Ip4(ip)) => ip.is_loopback(),
        Some(Protocol::Ip6(ip)) => ip.is_loopback(),
        _ => false,
    }
}

/// The addresses of `listen` that others than this host may reach (not loopback), as text: a
/// daemon listening on any of them without the cluster key runs an open cluster.
pub fn exposed(listen: &[libp2p::Multiaddr]) -> Vec<String> {
    listen
        .iter()
        .filter(|a| !is_loopback(a))
        .map(ToString::to_string)
        .collect()
}

/// Whether the `Authorization` header value `given` carries the bearer token `expected`. The
/// comparison takes the same time wherever the first difference is, so that timing does not
/// tell an attacker how much of a guess was right.
pub fn bearer_matches(expected: &str, given: Option<&str>) -> bool {
    let Some(given) = given.and_then(|v| v.strip_prefix("Bearer ")) else {
        return false;
    };
    // `ct_eq` on slices of different lengths is false without comparing; the length of the
    // configured token is not the secret.
    bool::from(expected.as_bytes().ct_eq(given.as_bytes()))
}

/// A secret that others than its owner can read is still used (refusing would stop a running
/// cluster at its next restart), but said once at start.
fn warn_if_readable_by_others(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(m) = std::fs::metadata(path)
            && m.permissions().mode() & 0o077 != 0
        {
            tracing::warn!(
                path = %path.display(),
                mode = format!("{:o}", m.permissions().mode() & 0o777),
                "a secret file is readable by others than its owner: chmod 600 it"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_new_swarm_key_parses_and_two_differ() {
        let (a, b) = (new_swarm_key().unwrap(), new_swarm_key().unwrap());
        assert_ne!(a, b);
        crate::swarm::parse_psk(&a).unwrap();
    }

    #[test]
    fn secrets_are_private_and_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/swarm.key");
        write_private(&p, &new_swarm_key().unwrap()).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        let before = std::fs::read_to_string(&p).unwrap();
        let e = write_private(&p, "other").unwrap_err();
        assert!(e.to_string().contains("swarm.key"), "{e}");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), before);
        read_swarm_key(&p).unwrap();
    }

    #[test]
    fn empty_and_short_tokens_are_refused_with_the_path() {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in [("empty", ""), ("blank", " \n"), ("short", "abc123\n")] {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            let e = read_token(&p).unwrap_err();
            assert!(
                matches!(e, SecretError::ShortToken { .. }) && e.to_string().contains(name),
                "{e}"
            );
        }
        let p = dir.path().join("good");
        write_private(&p, &new_token().unwrap()).unwrap();
        assert_eq!(read_token(&p).unwrap().len(), 64);
        let e = read_token(&dir.path().join("missing")).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
    }

    #[test]
    fn a_bearer_token_matches_only_itself() {
        let t = "0123456789abcdef0123";
        assert!(bearer_matches(t, Some("Bearer 0123456789abcdef0123")));
        for given in [
            None,
            Some(""),
            Some("Bearer "),
            Some("0123456789abcdef0123"),
            Some("Bearer 0123456789abcdef012"),
            Some("Bearer 0123456789abcdef01234"),
            Some("Bearer 0123456789abcdef0124"),
            Some("bearer 0123456789abcdef0123"),
        ] {
            assert!(!bearer_matches(t, given), "{given:?}");
        }
    }
}
