//! How documents are laid out in the store.
//!
//! An object's record (under [`Key::store_key`](super::Key)) is its revision, a format byte, the
//! length of its protobuf encoding and its canonical JSON. The encoding itself is a second entry
//! (under `proto_store_key`) holding the revision and the bytes: memory keeps only the JSON, and
//! a gRPC List reads the encodings from the store as it writes them.
//!
//! Records written before the encodings were stored are the revision followed directly by the
//! JSON; they are still read (their encoding is made from the JSON until they are rewritten).

/// The format byte of records that name their encoding's length. A JSON object never starts
/// with it, so it tells the two layouts apart.
const WITH_PROTO_LEN: u8 = 1;
/// The format byte of sealed records (`sealing.rs`): the revision, this byte, then the
/// [`WITH_PROTO_LEN`] layout's length and JSON, sealed. Their encoding is not stored.
const SEALED: u8 = 2;

/// A decoded object record.
pub(crate) struct Record {
    pub rv: u64,
    /// `None` in a record of the first layout.
    pub proto_len: Option<usize>,
    /// Where the JSON starts in the record.
    pub json_offset: usize,
}

pub(crate) fn encode_record(rv: u64, proto_len: usize, json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(13 + json.len());
    out.extend_from_slice(&rv.to_le_bytes());
    out.push(WITH_PROTO_LEN);
    // Objects are far below 4 GiB (the request size limits see to that).
    out.extend_from_slice(&u32::try_from(proto_len).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(json);
    out
}

/// A sealed record: `seal` turns the plaintext (length and JSON) into the sealed bytes.
pub(crate) fn encode_sealed_record(
    rv: u64,
    proto_len: usize,
    json: &[u8],
    seal: impl FnOnce(&[u8]) -> Vec<u8>,
) -> Vec<u8> {
    let plain = encode_record(rv, proto_len, json);
    let sealed = seal(&plain[9..]);
    let mut out = Vec::with_capacity(9 + sealed.len());
    out.extend_from_slice(&rv.to_le_bytes());
    out.push(SEALED);
    out.extend_from_slice(&sealed);
    out
}

/// The revision and sealed bytes of a sealed record; `None` for the clear layouts.
pub(crate) fn sealed_body(raw: &[u8]) -> Option<(u64, &[u8])> {
    let (head, rest) = raw.split_at_checked(8)?;
    let (format, body) = rest.split_first()?;
    (*format == SEALED).then_some((u64::from_le_bytes(head.try_into().ok()?), body))
}

/// The length and JSON of an opened sealed record's plaintext.
pub(crate) fn split_opened(plain: &[u8]) -> Option<(usize, usize)> {
    let len = plain.get(..4)?;
    Some((u32::from_le_bytes(len.try_into().ok()?) as usize, 4))
}

pub(crate) fn decode_record(raw: &[u8]) -> Option<Record> {
    let (head, rest) = raw.split_at_checked(8)?;
    let rv = u64::from_le_bytes(head.try_into().ok()?);
    if rest.first() == Some(&WITH_PROTO_LEN) {
        let len = rest.get(1..5)?;
        let proto_len = u32::from_le_bytes(len.try_into().ok()?) as usize;
        return Some(Record {
            rv,
            proto_len: Some(proto_len),
            json_offset: 13,
        });
    }
    Some(Record {
        rv,
        proto_len: None,
        json_offset: 8,
    })
}

/// The stored encoding: the object's revision, then the bytes.
pub(crate) fn encode_proto_entry(rv: u64, proto: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + proto.len());
    out.extend_from_slice(&rv.to_le_bytes());
    out.extend_from_slice(proto);
    out
}

pub(crate) fn decode_proto_entry(raw: &[u8]) -> Option<(u64, &[u8])> {
    let (head, proto) = raw.split_at_checked(8)?;
    Some((u64::from_le_bytes(head.try_into().ok()?), proto))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_record_layouts_are_read() {
        let json = br#"{"a":1}"#;
        let new = encode_record(42, 300, json);
        let record = decode_record(&new).unwrap();
        assert_eq!((record.rv, record.proto_len), (42, Some(300)));
        assert_eq!(&new[record.json_offset..], json);

        let mut old = 7u64.to_le_bytes().to_vec();
        old.extend_from_slice(json);
        let record = decode_record(&old).unwrap();
        assert_eq!((record.rv, record.proto_len), (7, None));
        assert_eq!(&old[record.json_offset..], json);
        assert!(decode_record(b"short").is_none());
        assert!(decode_record(&[0, 0, 0, 0, 0, 0, 0, 0, WITH_PROTO_LEN, 1]).is_none());
    }

    #[test]
    fn proto_entries_round_trip() {
        let raw = encode_proto_entry(9, b"\x0a\x01x");
        assert_eq!(decode_proto_entry(&raw), Some((9, &b"\x0a\x01x"[..])));
        assert_eq!(decode_proto_entry(b"1234"), None);
    }
}
