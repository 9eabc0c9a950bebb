//! The protobuf framing of what the resource adapter writes by hand: lists written item by
//! item, and watch events around an object's stored encoding.

use bytes::Bytes;

/// The protobuf encoding of a list `{metadata: {resourceVersion, continue}, items}` up to its
/// items (ListMeta is field 1 with resourceVersion as its field 2 and continue as its field 3,
/// items are field 2: the same in every list type served); each item follows as
/// [`list_item_prefix`] and its encoding.
pub fn encode_list_head(resource_version: u64, continue_token: Option<&str>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut meta = Vec::new();
    put_bytes(&mut meta, 2, resource_version.to_string().as_bytes());
    if let Some(token) = continue_token {
        put_bytes(&mut meta, 3, token.as_bytes());
    }
    put_bytes(&mut out, 1, &meta);
    out
}

/// The field key and length that precede an item of `len` bytes in a list.
pub fn list_item_prefix(len: usize) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(6);
    prost::encoding::encode_key(2, prost::encoding::WireType::LengthDelimited, &mut prefix);
    prost::encoding::encode_varint(len as u64, &mut prefix);
    prefix
}

/// The protobuf encoding of a watch event `{type = 1, <object> = 2}`.
pub fn encode_event(kind: &str, proto: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(proto.len() + 16);
    put_bytes(&mut out, 1, kind.as_bytes());
    put_bytes(&mut out, 2, proto);
    out.into()
}

/// A length-delimited field.
fn put_bytes(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    prost::encoding::encode_key(field, prost::encoding::WireType::LengthDelimited, out);
    prost::encoding::encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}
