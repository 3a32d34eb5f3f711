//! FILTERS and FILTERS_ACK: the multistage router's filters, written once at the
//! controller, sent to the LBs and back-ends as their text in chunks, and each element's
//! answer (docs/dist.md, "Filters"; docs/filters.md, "In the multistage router").
//!
//! ```text
//! FILTERS (type 8): version u32 | digest u64 | total u32 | offset u32 | text[offset..]
//! FILTERS_ACK (type 9): version u32 | digest u64 | incarnation u64 | status u8 |
//!                       reason length u8 | reason (printable ASCII)
//! ```
//!
//! A set is `total` bytes of text whose [`filters_digest`] is `digest`; each message
//! carries the bytes from `offset` on (at most [`FILTERS_CHUNK`]). The receiver holds a set
//! whole once every byte came and the digest checks, and answers with its state.

use super::*;

/// Fixed bytes of a FILTERS body, before its text.
pub const FILTERS_FIXED_LEN: usize = 20;
/// Text bytes the controller puts in one FILTERS message (frames stay under 1,500 bytes
/// with the header and the authentication trailer).
pub const FILTERS_CHUNK: usize = 1_200;
/// The longest text a set may have: 8 MiB (some 80,000 rules).
pub const MAX_FILTERS_TEXT: u32 = 8 << 20;
/// Fixed bytes of a FILTERS_ACK body, before its reason.
pub const FILTERS_ACK_FIXED_LEN: usize = 22;

/// A chunk of a filter set's text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct FilterChunk {
    /// The controller's version of its filters (one more per change).
    pub version: u32,
    /// [`filters_digest`] of the whole text.
    pub digest: u64,
    /// Bytes of the whole text.
    pub total: u32,
    /// Where `data` starts in it.
    pub offset: u32,
    pub data: Vec<u8>,
}

/// What an element did with a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum FiltersStatus {
    /// It runs the set.
    #[default]
    Applied,
    /// It refused the set (`reason` says why) and runs what it ran before.
    Refused,
}

/// An element's answer to a whole set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct FiltersAck {
    pub version: u32,
    pub digest: u64,
    /// The element's incarnation ([`HelloState::incarnation`]).
    pub incarnation: u64,
    pub status: FiltersStatus,
    /// Why it refused (at most 255 printable ASCII characters); empty when applied.
    #[cfg_attr(feature = "serde", serde(default))]
    pub reason: String,
}

/// The digest of a set's text: its bytes in 8-byte words, each mixed in turn, with the
/// length.
pub fn filters_digest(text: &[u8]) -> u64 {
    let mut d = mix(text.len() as u64 ^ 0x6669_6c74_6572_7321);
    for w in text.chunks(8) {
        let mut b = [0u8; 8];
        b[..w.len()].copy_from_slice(w);
        d = mix(d ^ u64::from_be_bytes(b));
    }
    d
}

/// The chunks of `text` as version `version`.
pub fn filter_chunks(version: u32, text: &[u8]) -> Vec<FilterChunk> {
    let digest = filters_digest(text);
    let total = text.len() as u32;
    let mut out: Vec<FilterChunk> = text
        .chunks(FILTERS_CHUNK)
        .enumerate()
        .map(|(i, c)| FilterChunk {
            version,
            digest,
            total,
            offset: (i * FILTERS_CHUNK) as u32,
            data: c.to_vec(),
        })
        .collect();
    if out.is_empty() {
        out.push(FilterChunk {
            version,
            digest,
            total,
            offset: 0,
            data: Vec::new(),
        });
    }
    out
}

/// A reason as an ack carries it: printable ASCII (others become '?'), at most 255 bytes.
pub fn ack_reason(s: &str) -> String {
    s.chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .take(255)
        .collect()
}

impl FilterChunk {
    pub(super) fn check(&self) -> Result<(), Error> {
        let bad = |field, value: usize| Error::BadField {
            field,
            value: value.min(u32::MAX as usize) as u32,
        };
        if self.total > MAX_FILTERS_TEXT {
            return Err(bad("filters total", self.total as usize));
        }
        if self.data.len() > u16::MAX as usize - FILTERS_FIXED_LEN {
            return Err(bad("filters chunk", self.data.len()));
        }
        if self.offset as usize + self.data.len() > self.total as usize {
            return Err(bad("filters offset", self.offset as usize));
        }
        Ok(())
    }

    pub(super) fn emit(&self, body: &mut [u8]) {
        body[0..4].copy_from_slice(&self.version.to_be_bytes());
        body[4..12].copy_from_slice(&self.digest.to_be_bytes());
        body[12..16].copy_from_slice(&self.total.to_be_bytes());
        body[16..20].copy_from_slice(&self.offset.to_be_bytes());
        body[FILTERS_FIXED_LEN..FILTERS_FIXED_LEN + self.data.len()].copy_from_slice(&self.data);
    }

    pub(super) fn parse(body: &[u8], bad: Error) -> Result<Message, Error> {
        if body.len() < FILTERS_FIXED_LEN {
            return Err(bad);
        }
        let c = FilterChunk {
            version: be32(body, 0),
            digest: be64(body, 4),
            total: be32(body, 12),
            offset: be32(body, 16),
            data: body[FILTERS_FIXED_LEN..].to_vec(),
        };
        c.check()?;
        Ok(Message::Filters(c))
    }
}

impl FiltersAck {
    pub(super) fn check(&self) -> Result<(), Error> {
        if self.reason.len() > 255 || !self.reason.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(Error::BadField {
                field: "filters reason",
                value: self.reason.len() as u32,
            });
        }
        Ok(())
    }

    pub(super) fn emit(&self, body: &mut [u8]) {
        body[0..4].copy_from_slice(&self.version.to_be_bytes());
        body[4..12].copy_from_slice(&self.digest.to_be_bytes());
        body[12..20].copy_from_slice(&self.incarnation.to_be_bytes());
        body[20] = match self.status {
            FiltersStatus::Applied => 0,
            FiltersStatus::Refused => 1,
        };
        body[21] = self.reason.len() as u8;
        body[FILTERS_ACK_FIXED_LEN..FILTERS_ACK_FIXED_LEN + self.reason.len()]
            .copy_from_slice(self.reason.as_bytes());
    }

    pub(super) fn parse(body: &[u8], bad: Error) -> Result<Message, Error> {
        if body.len() < FILTERS_ACK_FIXED_LEN
            || body.len() != FILTERS_ACK_FIXED_LEN + body[21] as usize
        {
            return Err(bad);
        }
        let status = match body[20] {
            0 => FiltersStatus::Applied,
            1 => FiltersStatus::Refused,
            v => {
                return Err(Error::BadField {
                    field: "filters status",
                    value: v as u32,
                })
            }
        };
        let reason = std::str::from_utf8(&body[FILTERS_ACK_FIXED_LEN..])
            .map_err(|_| Error::BadField {
                field: "filters reason",
                value: body[21] as u32,
            })?
            .to_string();
        let a = FiltersAck {
            version: be32(body, 0),
            digest: be64(body, 4),
            incarnation: be64(body, 12),
            status,
            reason,
        };
        a.check()?;
        Ok(Message::FiltersAck(a))
    }
}

/// A set being received: the chunks of one (version, digest) put together.
#[derive(Debug, Default)]
pub struct FilterInbox {
    key: Option<(u32, u64, u32)>,
    text: Vec<u8>,
    have: Vec<bool>,
    missing: usize,
}

impl FilterInbox {
    /// Takes chunk `c`: the whole text once its last byte came and the digest checks
    /// (Err: the digest did not; the set starts over). A chunk of another set starts that
    /// one.
    pub fn take(&mut self, c: &FilterChunk) -> Result<Option<Vec<u8>>, &'static str> {
        let key = (c.version, c.digest, c.total);
        if self.key != Some(key) {
            // Checked by the parser; a set this large is refused here too.
            if c.total > MAX_FILTERS_TEXT {
                return Err("filter set over its bound");
            }
            let words = (c.total as usize).div_ceil(FILTERS_CHUNK).max(1);
            self.key = Some(key);
            self.text = vec![0; c.total as usize];
            self.have = vec![false; words];
            self.missing = words;
        }
        let end = c.offset as usize + c.data.len();
        if !(c.offset as usize).is_multiple_of(FILTERS_CHUNK)
            || c.offset as usize >= self.text.len().max(1)
            || end > self.text.len()
            || (c.data.len() != FILTERS_CHUNK && end != self.text.len())
        {
            return Err("filter chunk out of place");
        }
        let i = c.offset as usize / FILTERS_CHUNK;
        if !self.have[i] {
            self.have[i] = true;
            self.missing -= 1;
            self.text[c.offset as usize..end].copy_from_slice(&c.data);
        }
        if self.missing > 0 {
            return Ok(None);
        }
        let text = std::mem::take(&mut self.text);
        self.key = None;
        if filters_digest(&text) != c.digest {
            return Err("filter set digest does not match its text");
        }
        Ok(Some(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(m: Message) {
        let r = Repr { seq: 9, msg: m };
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b).unwrap();
        assert_eq!(Repr::parse(&b).unwrap(), r);
    }

    #[test]
    fn chunks_and_acks_round_trip_and_a_set_comes_back_whole() {
        let text: Vec<u8> = (0..3000u32).map(|i| b"[[acl]]\n"[i as usize % 8]).collect();
        let chunks = filter_chunks(4, &text);
        assert_eq!(chunks.len(), 3);
        for c in &chunks {
            round_trip(Message::Filters(c.clone()));
        }
        round_trip(Message::FiltersAck(FiltersAck {
            version: 4,
            digest: chunks[0].digest,
            incarnation: 77,
            status: FiltersStatus::Refused,
            reason: "interface ext-a has filters of its own".into(),
        }));
        // Out of order, one repeated: whole once, the digest checked.
        let mut inbox = FilterInbox::default();
        assert_eq!(inbox.take(&chunks[2]), Ok(None));
        assert_eq!(inbox.take(&chunks[2]), Ok(None));
        assert_eq!(inbox.take(&chunks[0]), Ok(None));
        assert_eq!(inbox.take(&chunks[1]), Ok(Some(text.clone())));
        // An empty set is one empty chunk.
        let empty = filter_chunks(5, b"");
        assert_eq!(empty.len(), 1);
        assert_eq!(inbox.take(&empty[0]), Ok(Some(Vec::new())));
        // A chunk altered on the way: the digest says so.
        let mut bad = filter_chunks(6, b"abc");
        bad[0].data[1] = b'x';
        assert!(inbox.take(&bad[0]).is_err());
    }

    #[test]
    fn what_is_wrong_is_refused() {
        let c = FilterChunk {
            version: 1,
            digest: 2,
            total: 3,
            offset: 2,
            data: vec![1, 2],
        };
        let r = Repr {
            seq: 1,
            msg: Message::Filters(c),
        };
        assert!(matches!(r.validate(), Err(Error::BadField { .. })));
        let r = Repr {
            seq: 1,
            msg: Message::FiltersAck(FiltersAck {
                reason: "tab\there".into(),
                ..Default::default()
            }),
        };
        assert!(r.validate().is_err());
        // A chunk that claims a total past the bound.
        let mut b = vec![VERSION, kind::FILTERS, 0, 20, 0, 0, 0, 1];
        b.extend_from_slice(&[0; 12]);
        b.extend_from_slice(&(MAX_FILTERS_TEXT + 1).to_be_bytes());
        b.extend_from_slice(&[0; 4]);
        assert!(Repr::parse(&b).is_err());
    }

    proptest! {
        #[test]
        fn any_text_comes_back_whole(text in proptest::collection::vec(any::<u8>(), 0..5000), order in any::<u64>()) {
            let mut chunks = filter_chunks(3, &text);
            let n = chunks.len();
            chunks.rotate_left((order as usize) % n);
            let mut inbox = FilterInbox::default();
            let mut got = None;
            for c in &chunks {
                if let Some(t) = inbox.take(c).unwrap() {
                    got = Some(t);
                }
            }
            prop_assert_eq!(got, Some(text));
        }
    }
}
