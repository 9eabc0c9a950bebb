//! Who a request comes from: the one place that reads credentials from a request
//! ([`Authenticator::identify`]), and the one check that a caller's token is still good
//! ([`Authenticator::revalidate`]), which long-lived streams repeat.

use std::net::IpAddr;
use std::sync::Arc;

use http::HeaderMap;
use http::header::AUTHORIZATION;

use super::service_accounts::{Refused, ServiceAccounts};
use super::tokens::Tokens;
use crate::config::ConfigWatch;
use crate::error::AppError;
use crate::oidc::Oidc;
use crate::principal::{Caller, Carrier, Credentials, Principal};

/// Where the request came in; it decides where a token may be read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    /// gRPC and gRPC-Web: metadata `token`, then `Authorization: Bearer`.
    /// Never the cookie: a browser page cannot be made to send one there.
    Grpc,
    /// REST and `/auth/*`: `Authorization: Bearer`, then the cookie.
    Http,
}

/// The outcome of identifying one request.
#[derive(Debug)]
pub struct Identified {
    pub caller: Caller,
    pub carrier: Option<Carrier>,
    /// A fresh login token to hand back (the presented one is close to expiry).
    pub renewed: Option<String>,
    /// `argocd.token*` cookies the request carried (to clear or replace them all).
    pub cookie_chunks: usize,
}

pub struct Authenticator {
    tokens: Arc<Tokens>,
    config: Arc<ConfigWatch>,
    /// Verifies the identity provider's ID tokens; `None` in tools without SSO.
    oidc: Option<Arc<Oidc>>,
    /// Kubernetes ServiceAccount tokens, when `tiphys.serviceaccountlogin.enabled`.
    service_accounts: ServiceAccounts,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator").finish_non_exhaustive()
    }
}

impl Authenticator {
    pub fn new(
        tokens: Arc<Tokens>,
        config: Arc<ConfigWatch>,
        oidc: Option<Arc<Oidc>>,
        service_accounts: ServiceAccounts,
    ) -> Self {
        Self {
            tokens,
            config,
            oidc,
            service_accounts,
        }
    }

    /// Kubernetes ServiceAccount tokens (for the metrics of their reviews).
    pub fn service_accounts(&self) -> &ServiceAccounts {
        &self.service_accounts
    }

    /// Who sent the request; [`Ambiguous`] when it carries credentials that disagree (no
    /// rule could say which one the caller meant, so none is tried).
    pub async fn identify(
        &self,
        headers: &HeaderMap,
        channel: Channel,
        ip: IpAddr,
    ) -> Result<Identified, Ambiguous> {
        let mut caller = Caller::anonymous(ip);
        caller.anonymous_allowed = self.config.peek().anonymous_enabled;
        let (found, cookie_chunks) = find_token(headers, channel)?;
        let mut out = Identified {
            caller,
            carrier: None,
            renewed: None,
            cookie_chunks,
        };
        let Some((carrier, token)) = found else {
            return Ok(out);
        };
        out.carrier = Some(carrier);
        let checked = match token {
            Ok(t) => self.check(&t).await.map(|r| (t, r)),
            Err(why) => Err(Refused::Invalid(why)),
        };
        match checked {
            Ok((token, (principal, renewed))) => {
                out.caller.principal = principal;
                out.caller.credentials = Credentials::Valid(Arc::from(token));
                out.renewed = renewed;
            }
            Err(refused) => {
                out.caller.principal = Principal::Anonymous;
                out.caller.credentials = match refused {
                    Refused::Invalid(reason) => Credentials::Rejected(Arc::from(reason)),
                    Refused::Unavailable(reason) => Credentials::Unchecked(Arc::from(reason)),
                };
            }
        }
        Ok(out)
    }
}

impl Authenticator {
    /// One of our HS256 tokens; when `tiphys.serviceaccountlogin` is on, a Kubernetes
    /// ServiceAccount token (reviewed by the API server); when SSO is on, an ID token of the
    /// provider (any other algorithm). Every path verifies the token (its signature, or the
    /// API server's review) before trusting anything, and names why a token is refused.
    async fn check(&self, token: &str) -> Result<(Principal, Option<String>), Refused> {
        let ours = super::jwt::decode(token).map(|u| u.algorithm() == "HS256");
        if matches!(ours, Ok(false)) {
            let settings = self.config.peek();
            if let Some(answer) = self
                .service_accounts
                .authenticate(token, &settings.service_account_login)
                .await
            {
                return answer.map(|p| (p, None));
            }
        }
        match (&self.oidc, ours) {
            (Some(oidc), Ok(false)) if oidc.enabled() => oidc
                .verify_bearer(token)
                .await
                .map(|p| (Principal::Sso(p), None))
                .map_err(Refused::Invalid),
            _ => self.tokens.authenticate(token).await.map_err(Refused::Invalid),
        }
    }

    /// Whether the token `caller` presented is still good now: not expired, not revoked,
    /// its account, session, project role or provider still there. A caller without a
    /// token has nothing to lose. Streams repeat this while they last; the dispatcher asks
    /// it before handing back a renewed token.
    pub async fn revalidate(&self, caller: &Caller) -> Result<(), AppError> {
        match &caller.credentials {
            Credentials::Valid(token) => self.still_valid(token).await,
            Credentials::None | Credentials::Rejected(_) | Credentials::Unchecked(_) => Ok(()),
        }
    }

    /// [`Self::revalidate`] for one token.
    pub async fn still_valid(&self, token: &str) -> Result<(), AppError> {
        self.check(token)
            .await
            .map(|_| ())
            .map_err(|refused| match refused {
                Refused::Invalid(why) => AppError::Unauthenticated(format!("invalid session: {why}")),
                Refused::Unavailable(why) => AppError::Unavailable(why),
            })
    }
}

type Found = Option<(Carrier, Result<String, String>)>;

/// A request whose credentials disagree: answered 400 (INVALID_ARGUMENT) with this message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ambiguous(pub &'static str);

pub const TWO_AUTHORIZATION: Ambiguous =
    Ambiguous("the request carries more than one Authorization header: send one");
pub const TWO_TOKEN_METADATA: Ambiguous =
    Ambiguous("the request carries more than one `token` metadata entry: send one");
pub const DIFFERENT_TOKENS: Ambiguous = Ambiguous(
    "the request carries different tokens (session cookie, Authorization bearer, `token` metadata): send one",
);

/// The gRPC metadata key Argo CD's clients send their token in.
const TOKEN_METADATA: http::HeaderName = http::HeaderName::from_static("token");

/// The token a request carries, where from, and how many session cookie chunks it sent.
/// Every place a token may be read from on `channel` is read: two that disagree (or two
/// `Authorization` headers, or two `token` entries) are refused, never "first wins", so a
/// proxy or page that adds a credential cannot silently change who the caller is.
pub(crate) fn find_token(headers: &HeaderMap, channel: Channel) -> Result<(Found, usize), Ambiguous> {
    let sent = super::cookie::read(headers);
    let chunks = sent.chunks;
    // gRPC metadata is read on gRPC only.
    let mut metadata = headers
        .get_all(TOKEN_METADATA)
        .iter()
        .filter(|_| channel == Channel::Grpc);
    let first_metadata = metadata.next();
    if metadata.next().is_some() {
        return Err(TWO_TOKEN_METADATA);
    }
    let mut authorization = headers.get_all(AUTHORIZATION).iter();
    let first_authorization = authorization.next();
    if authorization.next().is_some() {
        return Err(TWO_AUTHORIZATION);
    }
    let metadata = first_metadata.map(|v| {
        let token = match v.to_str() {
            Ok("") => Err("empty token metadata".to_owned()),
            Ok(token) => Ok(token.to_owned()),
            Err(_) => Err("token metadata is not ASCII".to_owned()),
        };
        (Carrier::Metadata, token)
    });
    // Other schemes (Basic, …) carry no token of ours.
    let bearer = first_authorization
        .and_then(|v| bearer(v.as_bytes()))
        .map(|token| (Carrier::Bearer, token));
    // Never the cookie on gRPC: a browser page cannot be made to send one there.
    let cookie = match (channel, sent.token) {
        (Channel::Http, Some(token)) => Some((Carrier::Cookie, token.map_err(|e| e.to_string()))),
        _ => None,
    };
    let mut found = [metadata, bearer, cookie].into_iter().flatten();
    let first = found.next();
    if let Some((_, token)) = &first
        && found.any(|(_, other)| &other != token)
    {
        return Err(DIFFERENT_TOKENS);
    }
    Ok((first, chunks))
}

/// `Bearer <token>`, the scheme matched case-insensitively (RFC 7235).
fn bearer(value: &[u8]) -> Option<Result<String, String>> {
    let Ok(value) = std::str::from_utf8(value) else {
        // Not text, so not a scheme we can ignore safely: a bad token.
        let bearer = value.len() >= 6 && value[..6].eq_ignore_ascii_case(b"bearer");
        return bearer.then(|| Err("authorization header is not valid text".to_owned()));
    };
    let value = value.trim_start();
    let (scheme, rest) = value
        .split_once(|c: char| c.is_ascii_whitespace())
        .unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = rest.trim();
    Some(if token.is_empty() {
        Err("empty bearer token".to_owned())
    } else {
        Ok(token.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn bearer_scheme_is_case_insensitive() {
        for scheme in ["Bearer", "bearer", "BEARER"] {
            let h = headers(&[("authorization", &format!("{scheme} a.b.c"))]);
            let (found, _) = find_token(&h, Channel::Http).unwrap();
            assert_eq!(found, Some((Carrier::Bearer, Ok("a.b.c".into()))));
        }
        let h = headers(&[("authorization", "Basic dXNlcjpwYXNz")]);
        assert_eq!(find_token(&h, Channel::Http).unwrap().0, None);
    }

    #[test]
    fn grpc_reads_metadata_first_and_never_the_cookie() {
        let h = headers(&[("token", "m.m.m"), ("authorization", "Bearer m.m.m")]);
        assert_eq!(
            find_token(&h, Channel::Grpc).unwrap().0,
            Some((Carrier::Metadata, Ok("m.m.m".into())))
        );
        let h = headers(&[("cookie", "argocd.token=c.c.c")]);
        assert_eq!(find_token(&h, Channel::Grpc).unwrap().0, None);
        assert_eq!(
            find_token(&h, Channel::Http).unwrap().0,
            Some((Carrier::Cookie, Ok("c.c.c".into())))
        );
    }

    #[test]
    fn empty_token_metadata_is_a_rejected_token() {
        // Found by the cookie fuzz target: it was checked as the token "".
        let h = headers(&[("token", "")]);
        let (found, _) = find_token(&h, Channel::Grpc).unwrap();
        assert_eq!(
            found,
            Some((Carrier::Metadata, Err("empty token metadata".into())))
        );
    }

    #[test]
    fn empty_bearer_is_a_rejected_token() {
        let h = headers(&[("authorization", "Bearer ")]);
        assert!(matches!(
            find_token(&h, Channel::Http).unwrap().0,
            Some((Carrier::Bearer, Err(_)))
        ));
    }

    #[test]
    fn credentials_that_disagree_are_refused() {
        type Case<'a> = (&'a [(&'a str, &'a str)], Channel, Ambiguous);
        let cases: [Case<'_>; 6] = [
            (
                &[
                    ("authorization", "Bearer a.a.a"),
                    ("authorization", "Bearer a.a.a"),
                ],
                Channel::Http,
                TWO_AUTHORIZATION,
            ),
            (
                &[
                    ("authorization", "Basic dXNlcjpwYXNz"),
                    ("authorization", "Bearer a.a.a"),
                ],
                Channel::Grpc,
                TWO_AUTHORIZATION,
            ),
            (
                &[("token", "a.a.a"), ("token", "b.b.b")],
                Channel::Grpc,
                TWO_TOKEN_METADATA,
            ),
            (
                &[
                    ("cookie", "argocd.token=c.c.c"),
                    ("authorization", "Bearer b.b.b"),
                ],
                Channel::Http,
                DIFFERENT_TOKENS,
            ),
            (
                &[("token", "m.m.m"), ("authorization", "Bearer b.b.b")],
                Channel::Grpc,
                DIFFERENT_TOKENS,
            ),
            (
                &[("cookie", "argocd.token=c.c.c"), ("authorization", "Bearer ")],
                Channel::Http,
                DIFFERENT_TOKENS,
            ),
        ];
        for (pairs, channel, why) in cases {
            assert_eq!(find_token(&headers(pairs), channel), Err(why), "{pairs:?}");
        }
        // The same token twice over is one caller; the cookie is never read on gRPC.
        let h = headers(&[
            ("cookie", "argocd.token=c.c.c"),
            ("authorization", "Bearer c.c.c"),
        ]);
        assert_eq!(
            find_token(&h, Channel::Http).unwrap().0,
            Some((Carrier::Bearer, Ok("c.c.c".into())))
        );
        let h = headers(&[
            ("cookie", "argocd.token=c.c.c"),
            ("authorization", "Bearer b.b.b"),
        ]);
        assert!(find_token(&h, Channel::Grpc).is_ok());
    }
}
