//! Signed gossip frames: every broadcast carries its author's public key and an ed25519
//! signature over the payload, checked once per message by each receiver.
//!
//! Why not gossipsub's own signing (`MessageAuthenticity::Signed`)? Gossipsub verifies the
//! signature of *every copy* it receives while decoding, before it can tell a copy from a new
//! message; in a 16-agent cluster most copies are duplicates relayed by mesh peers, and ed25519
//! with SHA-512 took 43 % of all CPU in the cluster benchmark (docs/DECISIONS.md). Here gossip
//! runs anonymously, deduplicates by the frame's signature (its message id: two frames with the
//! same signature are the same message), and the receiver verifies each message once, before
//! gossipsub forwards it (validation mode), so a relay can neither forge an author nor spread a
//! forged frame.
//!
//! A frame that comes straight from its author on a direct stream ([`crate::direct`]) is not
//! checked again: the connection's handshake already proved who sent it ([`open_from`]).
//!
//! Layout: `[1: FRAME_VERSION][2: key length, big endian][key: protobuf-encoded public key]
//! [64: signature][payload]`.

use libp2p::PeerId;
use libp2p::identity::{Keypair, PublicKey};

/// Version of this layout.
pub const FRAME_VERSION: u8 = 1;
const SIG: usize = 64;

/// Why a frame was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FrameError {
    /// Too short, another version, or a key that does not decode.
    #[error("malformed signed frame: {0}")]
    Malformed(&'static str),
    /// The signature does not match the key and payload.
    #[error("bad signature")]
    BadSignature,
    /// A frame on a direct stream that names another author than the stream's peer.
    #[error("a direct frame from another author than its sender")]
    NotTheSender,
}

/// Sign `payload` as `key`.
pub fn sign(key: &Keypair, payload: &[u8]) -> Vec<u8> {
    let public = key.public().encode_protobuf();
    // An ed25519 key always signs; a failure (another key type in the future) yields an empty
    // signature, which every receiver refuses.
    let sig = key.sign(payload).unwrap_or_default();
    let mut out = Vec::with_capacity(3 + public.len() + SIG + payload.len());
    out.push(FRAME_VERSION);
    out.extend_from_slice(&(public.len() as u16).to_be_bytes());
    out.extend_from_slice(&public);
    out.extend_from_slice(&sig);
    out.resize(3 + public.len() + SIG, 0);
    out.extend_from_slice(payload);
    out
}

/// The frame's signature bytes (its gossip message id), if the frame is long enough to hold one.
pub fn signature(frame: &[u8]) -> Option<&[u8]> {
    let (&v, rest) = frame.split_first()?;
    if v != FRAME_VERSION || rest.len() < 2 {
        return None;
    }
    let n = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
    rest.get(2 + n..2 + n + SIG)
}

/// The frame's identity: its author's key and its signature, if the frame is long enough to
/// hold both. Unlike the signature alone, an author cannot claim another author's message id.
pub fn id(frame: &[u8]) -> Option<&[u8]> {
    let (&v, rest) = frame.split_first()?;
    if v != FRAME_VERSION || rest.len() < 2 {
        return None;
    }
    let n = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
    rest.get(2..2 + n + SIG)
}

/// Check a frame: its author and payload.
pub fn open(frame: &[u8]) -> Result<(PeerId, &[u8]), FrameError> {
    let (public, sig, payload) = parse(frame)?;
    if !public.verify(payload, sig) {
        return Err(FrameError::BadSignature);
    }
    Ok((public.to_peer_id(), payload))
}

/// The author a frame names, without checking its signature (for a frame whose id was already
/// verified once, see [`id`]).
pub fn author(frame: &[u8]) -> Option<PeerId> {
    parse(frame).ok().map(|(public, _, _)| public.to_peer_id())
}

/// Open a frame that `peer` sent on a direct stream: the connection's handshake (noise) has
/// already proved who `peer` is, so a frame that names `peer` as its author is taken without
/// checking its signature (which saves every receiver one ed25519 verification per message).
/// A frame that names another author is refused: a direct stream carries only its peer's own
/// messages, never relayed ones.
pub fn open_from<'a>(frame: &'a [u8], peer: &PeerId) -> Result<&'a [u8], FrameError> {
    let (key, _, payload) = split(frame)?;
    // An ed25519 peer id embeds its encoded public key (an identity multihash): comparing bytes
    // spares decoding the key, a curve point decompression, for every frame.
    let multihash = peer.as_ref();
    if multihash.code() == IDENTITY && multihash.digest() == key {
        return Ok(payload);
    }
    let public =
        PublicKey::try_decode_protobuf(key).map_err(|_| FrameError::Malformed("bad key"))?;
    if public.to_peer_id() != *peer {
        return Err(FrameError::NotTheSender);
    }
    Ok(payload)
}

/// The multihash code of the identity hash.
const IDENTITY: u64 = 0;

/// Split a frame into its author's key, its signature and its payload.
fn parse(frame: &[u8]) -> Result<(PublicKey, &[u8], &[u8]), FrameError> {
    let (key, sig, payload) = split(frame)?;
    let public =
        PublicKey::try_decode_protobuf(key).map_err(|_| FrameError::Malformed("bad key"))?;
    Ok((public, sig, payload))
}

/// A frame's parts: its author's encoded key, its signature and its payload.
type Parts<'a> = (&'a [u8], &'a [u8], &'a [u8]);

/// Split a frame into its [`Parts`].
fn split(frame: &[u8]) -> Result<Parts<'_>, FrameError> {
    let (&v, rest) = frame.split_first().ok_or(FrameError::Malformed("empty"))?;
    if v != FRAME_VERSION {
        return Err(FrameError::Malformed("unknown frame version"));
    }
    if rest.len() < 2 {
        return Err(FrameError::Malformed("no key length"));
    }
    let n = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
    let key = rest
        .get(2..2 + n)
        .ok_or(FrameError::Malformed("truncated key"))?;
    let sig = rest
        .get(2 + n..2 + n + SIG)
        .ok_or(FrameError::Malformed("truncated signature"))?;
    let payload = &rest[2 + n + SIG..];
    Ok((key, sig, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_proves_its_author_and_refuses_tampering() {
        let k = Keypair::generate_ed25519();
        let f = sign(&k, b"hello");
        assert_eq!(open(&f), Ok((k.public().to_peer_id(), &b"hello"[..])));
        assert_eq!(signature(&f).map(<[u8]>::len), Some(64));
        // A changed payload, signature or key fails.
        let mut bad = f.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(open(&bad), Err(FrameError::BadSignature));
        let mut bad = f.clone();
        let n = bad.len() - 5 - 1;
        bad[n] ^= 1;
        assert_eq!(open(&bad), Err(FrameError::BadSignature));
        // Another author's key over this signature.
        let other = Keypair::generate_ed25519().public().encode_protobuf();
        let mine = k.public().encode_protobuf();
        assert_eq!(other.len(), mine.len());
        let mut forged = f.clone();
        forged[3..3 + other.len()].copy_from_slice(&other);
        assert_eq!(open(&forged), Err(FrameError::BadSignature));
        // Garbage of every length up to the whole frame is refused, never a panic.
        for n in 0..f.len() {
            assert!(open(&f[..n]).is_err(), "{n}");
        }
        assert!(open(&[9, 0, 0]).is_err());
    }

    #[test]
    fn a_direct_frame_must_name_its_sender() {
        let k = Keypair::generate_ed25519();
        let f = sign(&k, b"hello");
        let me = k.public().to_peer_id();
        assert_eq!(open_from(&f, &me), Ok(&b"hello"[..]));
        let other = Keypair::generate_ed25519().public().to_peer_id();
        assert_eq!(open_from(&f, &other), Err(FrameError::NotTheSender));
        for n in 0..f.len() - 5 {
            assert!(open_from(&f[..n], &me).is_err(), "{n}");
        }
    }

    // Arbitrary bytes from a peer, and bytes flipped in a good frame: refused or opened, never
    // a panic, and a flipped frame never opens as another author's.
    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        #[test]
        fn arbitrary_frames_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = open(&bytes);
            let _ = id(&bytes);
            let _ = author(&bytes);
            let _ = signature(&bytes);
            let _ = open_from(&bytes, &Keypair::generate_ed25519().public().to_peer_id());
        }

        #[test]
        fn a_flipped_frame_is_refused(at in proptest::prelude::any::<proptest::sample::Index>(), bit in 0u8..8) {
            let k = Keypair::generate_ed25519();
            let mut f = sign(&k, b"an announcement");
            let i = at.index(f.len());
            f[i] ^= 1 << bit;
            if let Ok((who, payload)) = open(&f) {
                // Only a flip in the unsigned framing may leave it readable, and then as itself.
                proptest::prop_assert_eq!(who, k.public().to_peer_id());
                proptest::prop_assert_eq!(payload, &b"an announcement"[..]);
            }
        }
    }
}
