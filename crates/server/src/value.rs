//! How a Redis string is stored as an engine value: one tag byte, then for
//! a key with a time to live the expiry instant (milliseconds since the Unix
//! epoch, little-endian), then the string's bytes.
//!
//! ```text
//! 0x00 | bytes…                  a string without expiry
//! 0x01 | expires_at_ms: u64 LE | bytes…
//! ```
//!
//! Expiry is lazy, as in Redis: an expired key reads as missing, and a
//! background sweep (`expire.rs`) deletes expired keys in small
//! transactions.

/// Tag of a string without a time to live.
const PLAIN: u8 = 0;
/// Tag of a string with an expiry instant.
const EXPIRING: u8 = 1;
/// Bytes before the string in an expiring value.
const EXPIRING_HEADER_BYTES: usize = 9;

/// A decoded stored value, borrowing the engine's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stored<'a> {
    /// The string.
    pub(crate) data: &'a [u8],
    /// When it expires, in milliseconds since the Unix epoch.
    pub(crate) expires_at_ms: Option<u64>,
}

impl<'a> Stored<'a> {
    /// Decodes a value the server wrote. `None` for bytes it did not write
    /// (treated as a wrong-type value by commands).
    pub(crate) fn decode(bytes: &'a [u8]) -> Option<Self> {
        match bytes.split_first()? {
            (&PLAIN, data) => Some(Stored {
                data,
                expires_at_ms: None,
            }),
            (&EXPIRING, rest) if rest.len() >= 8 => {
                let (when, data) = rest.split_at(8);
                let when = u64::from_le_bytes(when.try_into().ok()?);
                Some(Stored {
                    data,
                    expires_at_ms: Some(when),
                })
            }
            _ => None,
        }
    }

    /// Whether the value has expired at `now_ms`.
    pub(crate) fn is_expired(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_some_and(|when| when <= now_ms)
    }
}

/// Encodes `data` with an optional expiry into `out` (cleared first).
pub(crate) fn encode(out: &mut Vec<u8>, data: &[u8], expires_at_ms: Option<u64>) {
    out.clear();
    match expires_at_ms {
        None => {
            out.reserve(1 + data.len());
            out.push(PLAIN);
        }
        Some(when) => {
            out.reserve(EXPIRING_HEADER_BYTES + data.len());
            out.push(EXPIRING);
            out.extend_from_slice(&when.to_le_bytes());
        }
    }
    out.extend_from_slice(data);
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips(data in proptest::collection::vec(any::<u8>(), 0..64), when in proptest::option::of(any::<u64>())) {
            let mut buf = Vec::new();
            encode(&mut buf, &data, when);
            let stored = Stored::decode(&buf).unwrap();
            prop_assert_eq!(stored.data, &data[..]);
            prop_assert_eq!(stored.expires_at_ms, when);
        }

        #[test]
        fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..32)) {
            let _ = Stored::decode(&bytes);
        }
    }

    #[test]
    fn expiry_is_inclusive_of_the_instant() {
        let s = Stored {
            data: b"",
            expires_at_ms: Some(10),
        };
        assert!(!s.is_expired(9));
        assert!(s.is_expired(10));
        assert!(!Stored {
            data: b"",
            expires_at_ms: None
        }
        .is_expired(u64::MAX));
    }
}
