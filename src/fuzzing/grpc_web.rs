//! gRPC and gRPC-Web framing: the trailer scan that reads how a gRPC-Web response ended
//! (binary and base64 text), and the reader of a unary request's one framed message.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::grpc::dynamic::MessageReader;
use crate::principal::{BodyLimit, OverLimit};
use crate::server::outcome::{Outcome, TrailerScan};

/// The first byte picks where the body is split into chunks; the rest is the body.
///
/// - The trailer scan finds the same outcome however the body is chunked (whole, split in
///   two, byte by byte), in binary and in text mode, and base64 text of a binary body ends
///   the same way as the body itself.
/// - The message reader returns exactly the framed bytes, never more than the frame's length
///   prefix claims nor more than it was given, and refuses a message over its limit from the
///   prefix alone, however the body is chunked.
pub fn grpc_web(data: &[u8]) {
    let Some((&split, body)) = data.split_first() else {
        return;
    };
    let split = usize::from(split).min(body.len());

    for text in [false, true] {
        let whole = scan(text, &[body]);
        let (a, b) = body.split_at(split);
        assert_eq!(scan(text, &[a, b]), whole, "text {text}: split at {split}");
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(scan(text, &bytes), whole, "text {text}: byte by byte");
    }
    let binary = scan(false, &[body]);
    let encoded = STANDARD.encode(body);
    assert_eq!(scan(true, &[encoded.as_bytes()]), binary, "base64 of the body");
    let (a, b) = encoded.as_bytes().split_at(split.min(encoded.len()));
    assert_eq!(scan(true, &[a, b]), binary, "base64 of the body, split");

    let limit = BodyLimit {
        bytes: 64,
        over: OverLimit::TooLarge {
            noun: "request message",
            why: "fuzzing",
        },
    };
    let whole = read(limit, &[body]);
    let (a, b) = body.split_at(split);
    assert_eq!(read(limit, &[a, b]), whole, "message split at {split}");
    match whole {
        Ok(message) => {
            let claimed = body
                .get(1..5)
                .map(|len| u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize);
            match claimed {
                None => assert!(body.is_empty(), "a message without a frame header"),
                Some(len) => {
                    assert_eq!(message.len(), len, "the message is what its prefix claims");
                    assert_eq!(
                        &body[5..],
                        &message[..],
                        "the message is the bytes after the prefix"
                    );
                    assert!(len <= 64, "a message over the limit was read");
                }
            }
        }
        Err(code) => assert_ne!(code, tonic::Code::Ok),
    }
}

/// The first outcome the scan reports, feeding `chunks` in order.
fn scan(text: bool, chunks: &[&[u8]]) -> Option<Outcome> {
    let mut scan = TrailerScan::new(text);
    chunks.iter().find_map(|chunk| scan.feed(chunk))
}

fn read(limit: BodyLimit, chunks: &[&[u8]]) -> Result<Vec<u8>, tonic::Code> {
    let mut reader = MessageReader::new(limit);
    for chunk in chunks {
        reader.push(chunk).map_err(|s| s.code())?;
    }
    reader.finish().map(|b| b.to_vec()).map_err(|s| s.code())
}
