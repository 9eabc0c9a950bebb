//! How a request ended, for every protocol, from its final status: the one place that reads
//! it. Native gRPC puts the status in the HTTP trailers (or, trailers-only, in the headers);
//! gRPC-Web puts it in the body's last frame (flag 0x80, a `grpc-status:` line), base64 in
//! the `-text` variant; REST and the UI have the HTTP status.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, StatusCode};

use super::protocol::{GRPC_STATUS, Protocol};

/// How a request ended, coarsely: HTTP status class, or the gRPC code's class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    ClientError,
    ServerError,
    Redirect,
}

impl Outcome {
    pub const ALL: [Self; 4] = [
        Self::Success,
        Self::Redirect,
        Self::ClientError,
        Self::ServerError,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Redirect => "redirect",
            Self::ClientError => "client_error",
            Self::ServerError => "server_error",
        }
    }

    /// The position in [`Outcome::ALL`].
    pub fn index(self) -> usize {
        match self {
            Self::Success => 0,
            Self::Redirect => 1,
            Self::ClientError => 2,
            Self::ServerError => 3,
        }
    }

    pub fn from_http(status: u16) -> Self {
        match status {
            300..=399 => Self::Redirect,
            400..=499 => Self::ClientError,
            500.. => Self::ServerError,
            _ => Self::Success,
        }
    }

    /// gRPC codes a client caused are client errors; the rest server errors.
    pub fn from_grpc(code: &[u8]) -> Self {
        match code.trim_ascii() {
            b"0" => Self::Success,
            b"1" | b"3" | b"4" | b"5" | b"6" | b"7" | b"8" | b"9" | b"10" | b"11" | b"12" | b"16" => {
                Self::ClientError
            }
            _ => Self::ServerError,
        }
    }

    /// From the trailers of a native gRPC call; none is UNKNOWN, as gRPC says.
    pub fn from_trailers(trailers: &HeaderMap) -> Self {
        trailers
            .get(GRPC_STATUS)
            .map_or(Self::ServerError, |v| Self::from_grpc(v.as_bytes()))
    }
}

/// Where the final status of a response is.
pub enum Final {
    /// Already known from the response head.
    Known(Outcome),
    /// In the HTTP trailers (native gRPC).
    Trailers,
    /// In the gRPC-Web trailer frame at the end of the body.
    GrpcWeb(TrailerScan),
}

/// Where to find how the response to a `protocol` request ends, from its head.
pub fn at_head(protocol: Protocol, status: StatusCode, headers: &HeaderMap) -> Final {
    if !matches!(protocol, Protocol::Grpc | Protocol::GrpcWeb) {
        return Final::Known(Outcome::from_http(status.as_u16()));
    }
    // Trailers-only: the status is in the headers.
    if let Some(code) = headers.get(GRPC_STATUS) {
        return Final::Known(Outcome::from_grpc(code.as_bytes()));
    }
    if status != StatusCode::OK {
        return Final::Known(Outcome::from_http(status.as_u16()));
    }
    if protocol == Protocol::Grpc {
        return Final::Trailers;
    }
    let text = headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc-web-text"));
    Final::GrpcWeb(TrailerScan::new(text))
}

/// Enough of a trailer line to read `grpc-status: NN`; longer lines are cut, never kept.
const LINE_MAX: usize = 24;
const STATUS_KEY: &[u8] = b"grpc-status:";

/// Finds the status in a gRPC-Web body as it streams by. Keeps a frame header, at most three
/// base64 characters and the start of one trailer line: a few dozen bytes, whatever the body.
pub struct TrailerScan {
    /// `-text`: base64 characters of an incomplete quantum.
    text: Option<([u8; 4], usize)>,
    at: Position,
    line: [u8; LINE_MAX],
    line_len: usize,
    code: Option<Outcome>,
    /// `-text` that is not base64: nothing after it can be read, however the body is chunked.
    unreadable: bool,
}

#[derive(Clone, Copy)]
enum Position {
    /// In a frame header, with this many of its five bytes read.
    Header { bytes: [u8; 5], read: usize },
    /// In a frame's payload, with `left` bytes to go.
    Payload { left: u32, trailer: bool },
}

const HEADER_START: Position = Position::Header {
    bytes: [0; 5],
    read: 0,
};

impl TrailerScan {
    pub fn new(text: bool) -> Self {
        Self {
            text: text.then_some(([0; 4], 0)),
            at: HEADER_START,
            line: [0; LINE_MAX],
            line_len: 0,
            code: None,
            unreadable: false,
        }
    }

    /// Reads the next body bytes; the outcome once the trailer frame is complete.
    pub fn feed(&mut self, data: &[u8]) -> Option<Outcome> {
        if self.unreadable {
            return None;
        }
        match self.text.take() {
            None => self.scan(data),
            Some(pending) => {
                let (found, pending) = self.decode(data, pending);
                self.text = Some(pending);
                found
            }
        }
    }

    /// Decodes base64 quantum by quantum (each gRPC-Web text frame is padded on its own, so
    /// the body is not one base64 string) and scans the bytes.
    fn decode(
        &mut self,
        data: &[u8],
        (mut quad, mut filled): ([u8; 4], usize),
    ) -> (Option<Outcome>, ([u8; 4], usize)) {
        for &c in data {
            if c.is_ascii_whitespace() {
                continue;
            }
            quad[filled] = c;
            filled += 1;
            if filled < 4 {
                continue;
            }
            filled = 0;
            let mut bytes = [0; 3];
            // Not base64: the status cannot be read, and the end of the body says so. Nor can
            // anything after it (decoding on from the next chunk would make the outcome depend
            // on where the body was split).
            let Ok(n) = STANDARD.decode_slice(quad, &mut bytes) else {
                self.unreadable = true;
                return (None, (quad, 0));
            };
            if let Some(found) = self.scan(&bytes[..n]) {
                return (Some(found), (quad, 0));
            }
        }
        (None, (quad, filled))
    }

    fn scan(&mut self, mut data: &[u8]) -> Option<Outcome> {
        while !data.is_empty() {
            match &mut self.at {
                Position::Header { bytes, read } => {
                    let n = (5 - *read).min(data.len());
                    bytes[*read..*read + n].copy_from_slice(&data[..n]);
                    *read += n;
                    data = &data[n..];
                    if *read == 5 {
                        let left = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
                        let trailer = bytes[0] & 0x80 != 0;
                        self.at = Position::Payload { left, trailer };
                    }
                }
                Position::Payload { left, trailer } => {
                    let n = data.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                    let is_trailer = *trailer;
                    // `n` is at most `left`, a u32.
                    *left -= u32::try_from(n).unwrap_or(*left);
                    let done = *left == 0;
                    if is_trailer {
                        self.lines(&data[..n]);
                    }
                    data = &data[n..];
                    if done {
                        self.at = HEADER_START;
                        if is_trailer {
                            self.end_line();
                            return Some(self.code.unwrap_or(Outcome::ServerError));
                        }
                    }
                }
            }
        }
        // An empty trailer frame ends here too.
        if let Position::Payload {
            left: 0,
            trailer: true,
        } = self.at
        {
            self.at = HEADER_START;
            return Some(self.code.unwrap_or(Outcome::ServerError));
        }
        None
    }

    fn lines(&mut self, payload: &[u8]) {
        for &b in payload {
            if b == b'\n' {
                self.end_line();
            } else if self.line_len < LINE_MAX {
                self.line[self.line_len] = b;
                self.line_len += 1;
            }
        }
    }

    fn end_line(&mut self) {
        let line = &self.line[..self.line_len];
        self.line_len = 0;
        if line.len() >= STATUS_KEY.len() && line[..STATUS_KEY.len()].eq_ignore_ascii_case(STATUS_KEY) {
            self.code = Some(Outcome::from_grpc(&line[STATUS_KEY.len()..]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(flag: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![flag];
        out.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    fn body(status: &str) -> Vec<u8> {
        let mut out = frame(0, b"\x0a\x06v1.2.3");
        let trailer = format!("grpc-message: x%20y\r\ngrpc-status:{status}\r\nx-extra: 1\r\n");
        out.extend(frame(0x80, trailer.as_bytes()));
        out
    }

    /// Feeds `chunks` in order; the outcome and how many chunks it took.
    fn feed_all(scan: &mut TrailerScan, chunks: &[&[u8]]) -> Option<(Outcome, usize)> {
        chunks
            .iter()
            .enumerate()
            .find_map(|(i, c)| scan.feed(c).map(|o| (o, i + 1)))
    }

    #[test]
    fn binary_trailer_frame_gives_the_outcome_in_any_split() {
        for (status, want) in [
            ("0", Outcome::Success),
            (" 5", Outcome::ClientError),
            ("13", Outcome::ServerError),
        ] {
            let body = body(status);
            for split in 0..body.len() {
                let mut scan = TrailerScan::new(false);
                let (a, b) = body.split_at(split);
                assert_eq!(
                    feed_all(&mut scan, &[a, b]).map(|f| f.0),
                    Some(want),
                    "{status} at {split}"
                );
            }
            let mut scan = TrailerScan::new(false);
            let bytes: Vec<&[u8]> = body.chunks(1).collect();
            assert_eq!(feed_all(&mut scan, &bytes), Some((want, body.len())));
        }
    }

    #[test]
    fn text_frames_are_base64_each_padded_on_its_own() {
        let message = STANDARD.encode(frame(0, b"\x0a\x01x"));
        let trailer = STANDARD.encode(frame(0x80, b"grpc-status: 16\r\n"));
        assert!(
            message.ends_with('='),
            "the test needs padding mid-body: {message}"
        );
        let text = format!("{message}{trailer}");
        for split in 0..text.len() {
            let mut scan = TrailerScan::new(true);
            let (a, b) = text.as_bytes().split_at(split);
            assert_eq!(
                feed_all(&mut scan, &[a, b]).map(|f| f.0),
                Some(Outcome::ClientError),
                "at {split}"
            );
        }
    }

    #[test]
    fn a_trailer_without_status_or_no_trailer_is_not_a_success() {
        let mut scan = TrailerScan::new(false);
        assert_eq!(scan.feed(&frame(0x80, b"x: y\r\n")), Some(Outcome::ServerError));
        let mut scan = TrailerScan::new(false);
        assert_eq!(scan.feed(&frame(0x80, b"")), Some(Outcome::ServerError));
        let mut scan = TrailerScan::new(false);
        assert_eq!(scan.feed(&frame(0, b"grpc-status: 0\r\n")), None);
        let mut scan = TrailerScan::new(true);
        assert_eq!(scan.feed(b"!!!!"), None);
    }

    #[test]
    fn text_that_is_not_base64_ends_the_scan_in_any_split() {
        // Found by the grpc_web fuzz target: decoding went on with the next chunk.
        let text = format!("!!!!{}", STANDARD.encode(frame(0x80, b"grpc-status:0\r\n")));
        for split in 0..text.len() {
            let mut scan = TrailerScan::new(true);
            let (a, b) = text.as_bytes().split_at(split);
            assert_eq!(feed_all(&mut scan, &[a, b]), None, "at {split}");
        }
    }

    #[test]
    fn a_long_message_line_is_cut_not_kept() {
        let long = format!("grpc-message: {}\r\ngrpc-status: 0\r\n", "m".repeat(10_000));
        let mut scan = TrailerScan::new(false);
        assert_eq!(scan.feed(&frame(0x80, long.as_bytes())), Some(Outcome::Success));
    }

    #[test]
    fn head_decides_rest_and_trailers_only() {
        let mut headers = HeaderMap::new();
        assert!(matches!(
            at_head(Protocol::Rest, StatusCode::NOT_FOUND, &headers),
            Final::Known(Outcome::ClientError)
        ));
        assert!(matches!(
            at_head(Protocol::Grpc, StatusCode::OK, &headers),
            Final::Trailers
        ));
        headers.insert(GRPC_STATUS, http::HeaderValue::from_static("16"));
        assert!(matches!(
            at_head(Protocol::GrpcWeb, StatusCode::OK, &headers),
            Final::Known(Outcome::ClientError)
        ));
    }
}
