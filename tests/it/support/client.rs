//! An HTTP client over one connection whose TLS, ALPN and HTTP version the
//! test chooses, plus gRPC and gRPC-Web framing helpers.

use std::net::SocketAddr;
use std::sync::Arc;

use base64::Engine as _;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use tiphys::tlsclient::NoVerification;
use tokio::net::TcpStream;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    H1,
    H2,
}

pub enum Conn {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

pub struct Collected {
    pub status: u16,
    pub version: http::Version,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub trailers: Option<HeaderMap>,
}

impl Collected {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// grpc-status from the headers (trailers-only) or the trailers.
    pub fn grpc_status(&self) -> Option<String> {
        self.header("grpc-status").map(str::to_owned).or_else(|| {
            self.trailers
                .as_ref()?
                .get("grpc-status")?
                .to_str()
                .ok()
                .map(str::to_owned)
        })
    }

    pub fn grpc_message(&self) -> String {
        let raw = self
            .header("grpc-message")
            .map(str::to_owned)
            .or_else(|| {
                self.trailers
                    .as_ref()?
                    .get("grpc-message")?
                    .to_str()
                    .ok()
                    .map(str::to_owned)
            })
            .unwrap_or_default();
        percent_encoding::percent_decode_str(&raw)
            .decode_utf8_lossy()
            .into_owned()
    }
}

pub fn tls_config(
    alpn: &[&[u8]],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(versions)
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NoVerification::new(provider)))
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

/// TLS handshake; returns the stream and the peer's leaf certificate.
pub async fn tls_connect(
    addr: SocketAddr,
    config: rustls::ClientConfig,
) -> std::io::Result<(tokio_rustls::client::TlsStream<TcpStream>, Vec<u8>)> {
    let tcp = TcpStream::connect(addr).await?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await?;
    let leaf = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default();
    Ok((tls, leaf))
}

pub async fn connect(addr: SocketAddr, tls: bool, proto: Proto) -> Conn {
    if tls {
        let alpn: &[&[u8]] = if proto == Proto::H2 {
            &[b"h2"]
        } else {
            &[b"http/1.1"]
        };
        let (stream, _) = tls_connect(addr, tls_config(alpn, rustls::ALL_VERSIONS))
            .await
            .unwrap();
        handshake(TokioIo::new(stream), proto).await
    } else {
        handshake(TokioIo::new(TcpStream::connect(addr).await.unwrap()), proto).await
    }
}

pub async fn handshake<IO>(io: IO, proto: Proto) -> Conn
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    match proto {
        Proto::H1 => {
            let (send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(conn);
            Conn::H1(send)
        }
        Proto::H2 => {
            let (send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .unwrap();
            tokio::spawn(conn);
            Conn::H2(send)
        }
    }
}

impl Conn {
    pub async fn send(&mut self, mut req: Request<Full<Bytes>>) -> Collected {
        let response: Response<hyper::body::Incoming> = match self {
            Self::H1(s) => {
                if !req.headers().contains_key(http::header::HOST) {
                    let host = req
                        .uri()
                        .authority()
                        .map_or("localhost".to_owned(), |a| a.to_string());
                    req.headers_mut()
                        .insert(http::header::HOST, host.parse().unwrap());
                }
                *req.uri_mut() = req.uri().path_and_query().unwrap().as_str().parse().unwrap();
                s.ready().await.unwrap();
                s.send_request(req).await.unwrap()
            }
            Self::H2(s) => {
                s.ready().await.unwrap();
                s.send_request(req).await.unwrap()
            }
        };
        let (parts, body) = response.into_parts();
        let collected = body.collect().await.unwrap();
        let trailers = collected.trailers().cloned();
        Collected {
            status: parts.status.as_u16(),
            version: parts.version,
            headers: parts.headers,
            body: collected.to_bytes(),
            trailers,
        }
    }
}

/// A request with an absolute URI (needed for HTTP/2's :authority and :scheme).
pub fn request(method: &str, url: &str) -> http::request::Builder {
    Request::builder().method(method).uri(url)
}

pub fn get(url: &str) -> Request<Full<Bytes>> {
    request("GET", url).body(Full::new(Bytes::new())).unwrap()
}

/// One length-prefixed gRPC message.
pub fn grpc_frame(message: &[u8]) -> Bytes {
    let mut buf = BytesMut::with_capacity(5 + message.len());
    buf.put_u8(0);
    buf.put_u32(u32::try_from(message.len()).unwrap());
    buf.put_slice(message);
    buf.freeze()
}

pub fn grpc_request(url: &str, content_type: &str, body: Bytes) -> Request<Full<Bytes>> {
    request("POST", url)
        .header("content-type", content_type)
        .header("te", "trailers")
        .body(Full::new(body))
        .unwrap()
}

/// Splits a gRPC-Web body into data messages and the trailer block.
pub fn grpc_web_frames(body: &[u8], text: bool) -> (Vec<Bytes>, String) {
    // Text mode: each frame is base64 on its own, so decode quantum by quantum.
    let raw = if text {
        body.chunks(4)
            .flat_map(|q| base64::engine::general_purpose::STANDARD.decode(q).unwrap())
            .collect()
    } else {
        body.to_vec()
    };
    let mut buf = Bytes::from(raw);
    let mut messages = Vec::new();
    let mut trailer = String::new();
    while buf.remaining() >= 5 {
        let flag = buf.get_u8();
        let len = buf.get_u32() as usize;
        let data = buf.split_to(len);
        if flag & 0x80 != 0 {
            trailer = String::from_utf8_lossy(&data).into_owned();
        } else {
            messages.push(data);
        }
    }
    (messages, trailer)
}

/// The Version string of a VersionMessage (field 1).
pub fn version_field(message: &[u8]) -> String {
    assert_eq!(message.first(), Some(&0x0a), "field 1, wire type 2");
    let len = message[1] as usize;
    String::from_utf8(message[2..2 + len].to_vec()).unwrap()
}
