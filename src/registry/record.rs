//! How documents are laid out in the store.
//!
//! An object's record (under [`Key::store_key`](super::Key)) is an 8-byte header, a format byte
//! and the format's body. Records of the current layout hold a [`Draft`]: the length of the
//! encoding without `resourceVersion`, where the revision's digits go in the JSON, and the JSON
//! with an empty `resourceVersion`. The revision is the record's mod revision in the store, so
//! the header is unused (zero). The encoding itself is a second entry (under `proto_store_key`),
//! written in the same commit: memory keeps only the JSON, and a gRPC List reads the encodings
//! from the store as it writes them.
//!
//! Older layouts (still read; a write replaces them) put the object's revision in the header and
//! in the JSON: the revision followed directly by the JSON (format byte absent), format 1 (the
//! encoding's length, then the JSON) and format 2 (format 1's body, sealed).

use super::Kind;
use super::doc::Draft;

/// Records of the first layout start the JSON right after the header, so a format byte is never
/// `{`; these are the others.
const WITH_PROTO_LEN: u8 = 1;
const SEALED: u8 = 2;
const DRAFT: u8 = 3;
const SEALED_DRAFT: u8 = 4;
/// The header of the current layouts.
const NO_REVISION: u64 = 0;
/// The header of a stored encoding of the current layout, less its kind's wire generation
/// ([`Kind::wire_generation`]).
const BARE_ENCODING: u64 = u64::MAX;
/// `rv_at` of a kind without metadata.
const NOWHERE: u32 = u32::MAX;

/// A stored record, decoded.
pub(crate) enum Decoded<'a> {
    /// The current layout.
    Draft {
        bare_len: usize,
        rv_at: Option<usize>,
        json: &'a [u8],
    },
    /// An older layout: JSON that holds the revision it was written at.
    Old { json: &'a [u8] },
    /// A sealed body (`sealing.rs`), to be opened with context revision `context_rv` and read
    /// with [`decode_opened`].
    Sealed {
        context_rv: u64,
        draft: bool,
        body: &'a [u8],
    },
}

/// The record of `draft`, in clear.
pub(crate) fn encode_draft(draft: &Draft) -> Vec<u8> {
    let mut out = NO_REVISION.to_le_bytes().to_vec();
    out.push(DRAFT);
    out.extend_from_slice(&draft_body(draft));
    out
}

/// The record of `draft`, sealed: `seal` turns the body into the sealed bytes (with context
/// revision 0: the revision is not known when sealing).
pub(crate) fn encode_sealed_draft(draft: &Draft, seal: impl FnOnce(&[u8]) -> Vec<u8>) -> Vec<u8> {
    let mut out = NO_REVISION.to_le_bytes().to_vec();
    out.push(SEALED_DRAFT);
    out.extend_from_slice(&seal(&draft_body(draft)));
    out
}

fn draft_body(draft: &Draft) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + draft.json.len());
    // Objects are far below 4 GiB (the request size limits see to that).
    out.extend_from_slice(&u32::try_from(draft.proto.len()).unwrap_or(u32::MAX).to_le_bytes());
    let rv_at = draft
        .rv_at
        .map_or(NOWHERE, |at| u32::try_from(at).unwrap_or(NOWHERE));
    out.extend_from_slice(&rv_at.to_le_bytes());
    out.extend_from_slice(&draft.json);
    out
}

pub(crate) fn decode(raw: &[u8]) -> Option<Decoded<'_>> {
    let (head, rest) = raw.split_at_checked(8)?;
    let rv = u64::from_le_bytes(head.try_into().ok()?);
    match rest.split_first() {
        Some((&WITH_PROTO_LEN, body)) => Some(Decoded::Old { json: body.get(4..)? }),
        Some((&SEALED, body)) => Some(Decoded::Sealed {
            context_rv: rv,
            draft: false,
            body,
        }),
        Some((&DRAFT, body)) => decode_draft(body),
        Some((&SEALED_DRAFT, body)) => Some(Decoded::Sealed {
            context_rv: rv,
            draft: true,
            body,
        }),
        _ => Some(Decoded::Old { json: rest }),
    }
}

/// The record in an opened sealed body.
pub(crate) fn decode_opened(draft: bool, plain: &[u8]) -> Option<Decoded<'_>> {
    if draft {
        decode_draft(plain)
    } else {
        Some(Decoded::Old {
            json: plain.get(4..)?,
        })
    }
}

fn decode_draft(body: &[u8]) -> Option<Decoded<'_>> {
    let word = |range: std::ops::Range<usize>| Some(u32::from_le_bytes(body.get(range)?.try_into().ok()?));
    let bare_len = word(0..4)? as usize;
    let rv_at = word(4..8)?;
    Some(Decoded::Draft {
        bare_len,
        rv_at: (rv_at != NOWHERE).then_some(rv_at as usize),
        json: body.get(8..)?,
    })
}

/// The sealed bytes of a sealed record and the revision they were sealed with; `None` for the
/// clear layouts.
pub(crate) fn sealed_body(raw: &[u8]) -> Option<(u64, &[u8])> {
    match decode(raw)? {
        Decoded::Sealed { context_rv, body, .. } => Some((context_rv, body)),
        _ => None,
    }
}

/// The stored encoding of a draft (without `resourceVersion`) of a `kind`.
pub(crate) fn encode_proto_entry(kind: Kind, bare: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + bare.len());
    out.extend_from_slice(&proto_header(kind).to_le_bytes());
    out.extend_from_slice(bare);
    out
}

/// Where the encoding starts in a stored entry of the current layout and of `kind`'s current
/// wire generation; `None` for any other entry (an older layout holds its revision; an older
/// generation numbers a field differently): an encoding is then made from the JSON.
pub(crate) fn proto_entry_offset(kind: Kind, raw: &[u8]) -> Option<usize> {
    let head = raw.get(..8)?;
    (u64::from_le_bytes(head.try_into().ok()?) == proto_header(kind)).then_some(8)
}

fn proto_header(kind: Kind) -> u64 {
    BARE_ENCODING - kind.wire_generation()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{Key, Kind};
    use super::*;

    #[test]
    fn every_record_layout_is_read() {
        let value = json!({"metadata": {"name": "a", "resourceVersion": "9"}, "spec": {}});
        let draft = Draft::new(Key::new(Kind::Application, "ns", "a"), &value).unwrap();
        let raw = encode_draft(&draft);
        let Some(Decoded::Draft {
            bare_len,
            rv_at,
            json,
        }) = decode(&raw)
        else {
            panic!("not read as a draft");
        };
        assert_eq!(
            (bare_len, rv_at, json),
            (draft.proto.len(), draft.rv_at, &draft.json[..])
        );
        assert!(
            !String::from_utf8_lossy(json).contains('9'),
            "the revision is not stored"
        );

        let old_json = br#"{"a":1}"#;
        let mut first = 7u64.to_le_bytes().to_vec();
        first.extend_from_slice(old_json);
        assert!(matches!(decode(&first), Some(Decoded::Old { json }) if json == old_json));
        let mut second = 7u64.to_le_bytes().to_vec();
        second.push(WITH_PROTO_LEN);
        second.extend_from_slice(&300u32.to_le_bytes());
        second.extend_from_slice(old_json);
        assert!(matches!(decode(&second), Some(Decoded::Old { json }) if json == old_json));
        assert!(decode(b"short").is_none());
        assert!(decode(&[0, 0, 0, 0, 0, 0, 0, 0, WITH_PROTO_LEN, 1]).is_none());
        assert!(decode(&[0, 0, 0, 0, 0, 0, 0, 0, DRAFT, 1, 2]).is_none());
    }

    #[test]
    fn proto_entries_of_the_older_layout_are_not_used() {
        let raw = encode_proto_entry(Kind::Application, b"\x0a\x01x");
        assert_eq!(
            proto_entry_offset(Kind::Application, &raw).map(|at| &raw[at..]),
            Some(&b"\x0a\x01x"[..])
        );
        let mut old = 9u64.to_le_bytes().to_vec();
        old.extend_from_slice(b"\x0a\x01x");
        assert_eq!(proto_entry_offset(Kind::Application, &old), None);
        assert_eq!(proto_entry_offset(Kind::Application, b"1234"), None);
    }

    #[test]
    fn encodings_of_an_older_wire_generation_are_not_used() {
        // Stored before ApplicationSetSpec's fields were renumbered: the generation-0 header.
        let mut before = u64::MAX.to_le_bytes().to_vec();
        before.extend_from_slice(b"\x0a\x01x");
        assert_eq!(proto_entry_offset(Kind::ApplicationSet, &before), None);
        // Kinds whose layout did not change still use theirs.
        assert_eq!(proto_entry_offset(Kind::Application, &before), Some(8));
        let now = encode_proto_entry(Kind::ApplicationSet, b"\x0a\x01x");
        assert_eq!(proto_entry_offset(Kind::ApplicationSet, &now), Some(8));
        // An encoding is read back only as the kind it was written for.
        assert_eq!(proto_entry_offset(Kind::Application, &now), None);
    }
}
