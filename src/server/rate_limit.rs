//! Which rate limit a request is counted against (`auth::rate_limits` keeps the buckets): the
//! routes a caller reaches without a session by client address, every other call of a signed-in
//! caller by its subject, as a read or a write. Decided from the request's headers, once the
//! caller is known and before its body is read, so a refused flood costs no more than its
//! headers.

use std::collections::HashSet;
use std::sync::Arc;

use http::Method;

use super::protocol::Protocol;
use crate::auth::rate_limits::Bucket;
use crate::config::rate_limits::Class;
use crate::principal::Caller;
use crate::rpc::Rpc;

/// The password login, under the name its audit line gives it on every transport.
pub const LOGIN_METHOD: &str = "/session.SessionService/Create";

/// What a request is counted as, and, for a login, the name its audit line gives.
pub struct Counted<'a> {
    pub class: Class,
    pub bucket: Bucket<'a>,
    /// Set for logins: a refusal is audited under this method.
    pub login: Option<&'static str>,
}

/// The gRPC methods that change something, from the method table (as the audit trail decides).
pub struct RateClasses {
    writes: HashSet<&'static str, foldhash::fast::RandomState>,
}

impl RateClasses {
    pub fn new(rpcs: &[Arc<Rpc>]) -> Self {
        Self {
            writes: rpcs
                .iter()
                .filter(|rpc| rpc.rest.iter().any(|r| r.method != Method::GET))
                .map(|rpc| rpc.path)
                .collect(),
        }
    }

    /// The bucket of a `protocol` request for `path` (after the root path is stripped), or
    /// `None` for what is not limited: health probes, and calls without a session other than
    /// the four routes that take none (they are refused with 401 before any work).
    pub fn of<'a>(
        &self,
        protocol: Protocol,
        method: &Method,
        path: &str,
        caller: &'a Caller,
    ) -> Option<Counted<'a>> {
        let by_address = |class, login| {
            Some(Counted {
                class,
                bucket: Bucket::Address(caller.ip),
                login,
            })
        };
        match protocol {
            Protocol::Ui if path.starts_with("/download/") => return by_address(Class::Download, None),
            Protocol::Ui => return None,
            Protocol::Rest => match (method, path) {
                (&Method::POST, "/api/v1/session") => return by_address(Class::Login, Some(LOGIN_METHOD)),
                (&Method::GET, "/auth/login") => return by_address(Class::Login, Some("/auth/login")),
                (&Method::GET, "/auth/callback") => return by_address(Class::Login, Some("/auth/callback")),
                (&Method::POST, crate::api::webhook::PATH) => return by_address(Class::Webhook, None),
                (&Method::GET, "/api/badge") => return by_address(Class::Badge, None),
                (_, "/healthz") => return None,
                _ => {}
            },
            Protocol::Grpc | Protocol::GrpcWeb => match path {
                LOGIN_METHOD => return by_address(Class::Login, Some(LOGIN_METHOD)),
                p if p.starts_with("/grpc.health.") => return None,
                _ => {}
            },
        }
        if !caller.has_access() {
            return None;
        }
        let write = match protocol {
            Protocol::Rest => !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS),
            _ => self.writes.contains(path),
        };
        Some(Counted {
            class: if write { Class::Write } else { Class::Read },
            bucket: subject_or_address(caller),
            login: None,
        })
    }
}

/// A signed-in caller by its subject; the anonymous user (`users.anonymous.enabled`), who has
/// none, by its address.
fn subject_or_address(caller: &Caller) -> Bucket<'_> {
    match caller.principal.subject() {
        "" => Bucket::Address(caller.ip),
        subject => Bucket::Subject(subject),
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;
    use crate::principal::{AccountPrincipal, Credentials, Principal, TokenKind};

    fn signed_in(ip: IpAddr) -> Caller {
        Caller {
            principal: Principal::Account(AccountPrincipal {
                name: "alice".into(),
                kind: TokenKind::Login,
                jti: "j".into(),
                issued_at_ms: 0,
                expires_at: None,
            }),
            credentials: Credentials::Valid("t".into()),
            ..Caller::anonymous(ip)
        }
    }

    fn address_of(counted: &Counted<'_>) -> Option<IpAddr> {
        match counted.bucket {
            Bucket::Address(ip) => Some(ip),
            Bucket::Subject(_) => None,
        }
    }

    #[test]
    fn each_request_finds_its_class_and_key() {
        let classes = RateClasses::new(&crate::rpc::table());
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let nobody = Caller::anonymous(ip);
        let alice = signed_in(ip);
        let of = |p, m: Method, path, c| classes.of(p, &m, path, c).map(|c| (c.class, c.login));
        assert_eq!(
            of(Protocol::Rest, Method::POST, "/api/v1/session", &nobody),
            Some((Class::Login, Some(LOGIN_METHOD)))
        );
        assert_eq!(
            of(Protocol::GrpcWeb, Method::POST, LOGIN_METHOD, &alice),
            Some((Class::Login, Some(LOGIN_METHOD)))
        );
        assert_eq!(
            of(Protocol::Rest, Method::POST, "/api/webhook", &nobody),
            Some((Class::Webhook, None))
        );
        assert_eq!(
            of(Protocol::Rest, Method::GET, "/api/badge", &nobody),
            Some((Class::Badge, None))
        );
        assert_eq!(
            of(Protocol::Ui, Method::GET, "/download/argocd-linux-amd64", &nobody),
            Some((Class::Download, None))
        );
        assert_eq!(of(Protocol::Ui, Method::GET, "/applications", &alice), None);
        assert_eq!(
            of(Protocol::Rest, Method::GET, "/api/v1/applications", &nobody),
            None
        );
        assert_eq!(of(Protocol::Rest, Method::GET, "/healthz", &alice), None);
        assert_eq!(
            of(Protocol::Rest, Method::GET, "/api/v1/applications", &alice),
            Some((Class::Read, None))
        );
        assert_eq!(
            of(Protocol::Rest, Method::DELETE, "/api/v1/applications/a", &alice),
            Some((Class::Write, None))
        );
        assert_eq!(
            of(
                Protocol::Grpc,
                Method::POST,
                "/application.ApplicationService/List",
                &alice
            ),
            Some((Class::Read, None))
        );
        assert_eq!(
            of(
                Protocol::Grpc,
                Method::POST,
                "/application.ApplicationService/Create",
                &alice
            ),
            Some((Class::Write, None))
        );
        assert_eq!(
            of(
                Protocol::Grpc,
                Method::POST,
                "/grpc.health.v1.Health/Check",
                &alice
            ),
            None
        );
        let counted = classes
            .of(Protocol::Rest, &Method::GET, "/api/badge", &alice)
            .unwrap();
        assert_eq!(address_of(&counted), Some(ip));
        let counted = classes
            .of(Protocol::Rest, &Method::GET, "/api/v1/session/userinfo", &alice)
            .unwrap();
        assert!(matches!(counted.bucket, Bucket::Subject("alice")));
    }
}
