//! The plaintext side of a TLS-mode port: what to do with a request that did
//! not come over TLS. Redirect to https, except for health probes and for
//! requests a trusted proxy says arrived over https (no redirect loops).

use std::net::IpAddr;

use http::{HeaderMap, Uri};
use ipnet::IpNet;

use super::redirect::{NoRedirect, RedirectHosts};
use crate::principal::ClientScheme;

#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    Serve(ClientScheme),
    /// 307 to this location.
    Redirect(String),
    /// The Host header is missing or unusable for a redirect.
    BadHost,
    /// The Host header names a host this server does not answer for (no open redirect).
    ForeignHost,
}

/// Whether `peer` is a trusted proxy that says the client used https.
pub fn forwarded_https(headers: &HeaderMap, peer: IpAddr, trusted: &[IpNet]) -> bool {
    let peer = canonical(peer);
    if !trusted.iter().any(|net| net.contains(&peer)) {
        return false;
    }
    // The nearest hop's value is the last one: that is what the trusted peer added.
    if let Some(proto) = last_value(headers, "x-forwarded-proto") {
        return proto.eq_ignore_ascii_case("https");
    }
    last_value(headers, "forwarded")
        .and_then(|elem| {
            elem.split(';').find_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                k.trim()
                    .eq_ignore_ascii_case("proto")
                    .then(|| v.trim().trim_matches('"').to_owned())
            })
        })
        .is_some_and(|p| p.eq_ignore_ascii_case("https"))
}

/// The client's address: the TCP peer, or, when the peer is a trusted proxy,
/// the nearest `X-Forwarded-For` entry that is not itself a trusted proxy.
/// Behind an ingress every client would otherwise share the ingress's
/// address (and its brute-force limits).
pub fn client_ip(headers: &HeaderMap, peer: IpAddr, trusted: &[IpNet]) -> IpAddr {
    let peer = canonical(peer);
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(&peer) {
        return peer;
    }
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .collect();
    let mut client = peer;
    // From the nearest hop outwards; stop at the first one not vouched for.
    for hop in hops.iter().rev() {
        let Ok(ip) = hop.trim().parse::<IpAddr>().map(canonical) else {
            break;
        };
        client = ip;
        if !is_trusted(&ip) {
            break;
        }
    }
    client
}

fn last_value(headers: &HeaderMap, name: &str) -> Option<String> {
    let all: Vec<&str> = headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    all.last()?.rsplit(',').next().map(|s| s.trim().to_owned())
}

/// IPv4-mapped IPv6 peers (a dual-stack listener) match IPv4 CIDRs.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// Where a plaintext request in TLS mode goes: `external` is the configured external URL.
pub struct Redirect<'a> {
    pub hosts: &'a RedirectHosts,
    pub rootpath: &'a str,
    pub external: Option<&'a str>,
}

/// Decides for a plaintext request in TLS mode.
pub fn decide(
    uri: &Uri,
    headers: &HeaderMap,
    peer: IpAddr,
    trusted: &[IpNet],
    to: &Redirect<'_>,
) -> Decision {
    if uri.path() == "/healthz" {
        return Decision::Serve(ClientScheme::Http);
    }
    if forwarded_https(headers, peer, trusted) {
        return Decision::Serve(ClientScheme::Https);
    }
    match to.hosts.target(uri, headers, to.rootpath, to.external) {
        Ok(location) => Decision::Redirect(location),
        Err(NoRedirect::BadHost) => Decision::BadHost,
        Err(NoRedirect::ForeignHost) => Decision::ForeignHost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ip_comes_from_x_forwarded_for_only_through_trusted_proxies() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            "203.0.113.9, 198.51.100.7, 10.0.0.3".parse().unwrap(),
        );
        let proxy: IpAddr = "10.0.0.2".parse().unwrap();
        let outsider: IpAddr = "192.0.2.1".parse().unwrap();
        assert_eq!(
            client_ip(&h, proxy, &trusted),
            "198.51.100.7".parse::<IpAddr>().unwrap()
        );
        assert_eq!(client_ip(&h, outsider, &trusted), outsider);
        assert_eq!(client_ip(&HeaderMap::new(), proxy, &trusted), proxy);
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn forwarded_headers_count_only_from_trusted_peers() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let h = headers(&[("x-forwarded-proto", "https")]);
        assert!(forwarded_https(&h, "10.1.2.3".parse().unwrap(), &trusted));
        assert!(!forwarded_https(&h, "192.0.2.1".parse().unwrap(), &trusted));
        let f = headers(&[("forwarded", "for=1.2.3.4;proto=https")]);
        assert!(forwarded_https(&f, "10.1.2.3".parse().unwrap(), &trusted));
        let spoofed = headers(&[("x-forwarded-proto", "https, http")]);
        assert!(!forwarded_https(&spoofed, "10.1.2.3".parse().unwrap(), &trusted));
    }
}
