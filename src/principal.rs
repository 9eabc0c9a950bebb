//! Who is calling. Worked out once per request (see `auth::Authenticator`)
//! and handed to every use case; use cases decide what the caller may do.
//! The request's identity is defined here, below every module that reads it.

use std::net::IpAddr;
use std::sync::Arc;

use crate::error::AppError;

/// The issuer of every token this server signs (Argo CD's value, so tokens and tools carry over).
pub const LOCAL_ISSUER: &str = "argocd";

/// Which kind of local token a caller presented.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// A session from logging in (`<name>:login`).
    Login,
    /// An API key (`<name>:apiKey`).
    ApiKey,
}

/// A local account, proven by a token this server issued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountPrincipal {
    pub name: String,
    pub kind: TokenKind,
    pub jti: String,
    pub issued_at_ms: i64,
    /// Unix seconds; `None` for an API key without expiry.
    pub expires_at: Option<i64>,
}

/// A project role, proven by a token issued through `ProjectService.CreateToken` and still
/// listed on the role (deleting it from the role revokes it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectPrincipal {
    pub project: String,
    pub role: String,
    /// `proj:<project>:<role>`: the RBAC subject and the name shown to users.
    pub subject: String,
    /// Unix seconds the token was issued at (its `iat`).
    pub iat: i64,
    /// The token's id; empty for tokens issued before ids existed (matched by `iat`).
    pub jti: String,
    /// Unix seconds; `None` for a token without expiry.
    pub expires_at: Option<i64>,
}

impl ProjectPrincipal {
    pub fn new(project: &str, role: &str, iat: i64, jti: &str, expires_at: Option<i64>) -> Self {
        Self {
            project: project.to_owned(),
            role: role.to_owned(),
            subject: format!("proj:{project}:{role}"),
            iat,
            jti: jti.to_owned(),
            expires_at,
        }
    }
}

/// A person signed in through the OpenID Connect provider: by a dashboard
/// session (kept on the server), or by presenting the provider's ID token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SsoPrincipal {
    /// The RBAC subject: Dex's `federated_claims.user_id`, else `sub` (as upstream).
    pub user: String,
    /// The name shown: `email`, else `user`.
    pub username: String,
    pub issuer: String,
    /// The ID token's claims; RBAC reads groups from the ones named in `scopes`.
    pub claims: Arc<serde_json::Map<String, serde_json::Value>>,
    /// Unix seconds.
    pub issued_at: i64,
    pub expires_at: Option<i64>,
    /// The dashboard session's id; `None` for a presented ID token.
    pub session: Option<String>,
    /// The name of the provider that issued the ID token ("" until [`Self::qualified`] or
    /// the single provider's name is set).
    pub provider: String,
    /// The RBAC groups, `<provider>:`-prefixed, of a provider among several; `None`: RBAC
    /// reads them from the claims named in `scopes` (one provider, as upstream).
    pub groups: Option<Vec<String>>,
    /// The id of the personal access token presented (`auth::personal_tokens`); its groups
    /// are the ones frozen when it was made.
    pub personal_token: Option<String>,
}

impl SsoPrincipal {
    pub fn from_claims(
        claims: Arc<serde_json::Map<String, serde_json::Value>>,
        issued_at: i64,
        expires_at: Option<i64>,
        session: Option<String>,
    ) -> Self {
        let text = |v: Option<&serde_json::Value>| {
            v.and_then(serde_json::Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let user = text(claims.get("federated_claims").and_then(|f| f.get("user_id")))
            .or_else(|| text(claims.get("sub")))
            .unwrap_or_default();
        let username = text(claims.get("email")).unwrap_or_else(|| user.clone());
        Self {
            user,
            username,
            issuer: text(claims.get("iss")).unwrap_or_default(),
            claims,
            issued_at,
            expires_at,
            session,
            provider: String::new(),
            groups: None,
            personal_token: None,
        }
    }

    /// This identity as provider `provider`'s among several: the user becomes
    /// `<provider>:<user>` and the groups the `<provider>:`-prefixed values of the claim
    /// `groups_claim`. Provider names hold no `:`, so two providers' users or groups never
    /// meet, whatever `sub` each one issues.
    pub fn qualified(mut self, provider: &str, groups_claim: &str) -> Self {
        let groups = match self.claims.get(groups_claim) {
            Some(serde_json::Value::String(g)) => vec![g.as_str()],
            Some(serde_json::Value::Array(items)) => {
                items.iter().filter_map(serde_json::Value::as_str).collect()
            }
            _ => Vec::new(),
        };
        self.groups = Some(groups.into_iter().map(|g| format!("{provider}:{g}")).collect());
        self.user = format!("{provider}:{}", self.user);
        provider.clone_into(&mut self.provider);
        self
    }
}

/// A Kubernetes ServiceAccount, proven by a token the `--kube` API server accepted in a
/// TokenReview (`tiphys.serviceaccountlogin.*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceAccountPrincipal {
    pub namespace: String,
    pub name: String,
    /// `system:serviceaccount:<namespace>:<name>`: the RBAC subject and the name shown.
    pub subject: String,
    /// The token's `iss`.
    pub issuer: String,
    /// `{"groups": [...]}`: the groups the TokenReview returned, where RBAC reads groups
    /// from (through `scopes`, as for an ID token).
    pub claims: Arc<serde_json::Map<String, serde_json::Value>>,
    /// Unix seconds.
    pub issued_at: Option<i64>,
    pub expires_at: Option<i64>,
}

/// The identity a request acts as.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Principal {
    /// No credentials were presented.
    #[default]
    Anonymous,
    Account(AccountPrincipal),
    /// A project role token (`proj:<project>:<role>`): never an account.
    Project(ProjectPrincipal),
    /// Signed in through single sign-on.
    Sso(SsoPrincipal),
    /// A Kubernetes ServiceAccount token (a tiphys extension).
    ServiceAccount(ServiceAccountPrincipal),
}

impl Principal {
    /// Whether the caller presented valid credentials.
    pub fn is_authenticated(&self) -> bool {
        !matches!(self, Self::Anonymous)
    }

    /// The RBAC subject and the name shown to users ("" when anonymous).
    pub fn subject(&self) -> &str {
        match self {
            Self::Anonymous => "",
            Self::Account(a) => &a.name,
            Self::Project(p) => &p.subject,
            Self::Sso(s) => &s.user,
            Self::ServiceAccount(s) => &s.subject,
        }
    }

    /// The name shown to the user (`GetUserInfo`): an SSO user's email when known.
    pub fn username(&self) -> &str {
        match self {
            Self::Sso(s) => &s.username,
            other => other.subject(),
        }
    }

    /// The token issuer (`argocd` for local accounts).
    pub fn issuer(&self) -> &str {
        match self {
            Self::Anonymous => "",
            Self::Account(_) | Self::Project(_) => LOCAL_ISSUER,
            Self::Sso(s) => &s.issuer,
            Self::ServiceAccount(s) => &s.issuer,
        }
    }

    /// The id of the token the caller presented ("" without one): what a revocation names.
    pub fn token_id(&self) -> &str {
        match self {
            Self::Anonymous => "",
            Self::Account(a) => &a.jti,
            Self::Project(p) => &p.jti,
            Self::Sso(s) => s.session.as_deref().or(s.personal_token.as_deref()).unwrap_or(""),
            Self::ServiceAccount(_) => "",
        }
    }

    /// The claims of the caller's token that RBAC reads groups from (through
    /// `scopes`). Tokens this server issues for local accounts carry no groups.
    pub fn claims(&self) -> Option<&serde_json::Map<String, serde_json::Value>> {
        match self {
            Self::Sso(s) => Some(&s.claims),
            Self::ServiceAccount(s) => Some(&s.claims),
            Self::Anonymous | Self::Account(_) | Self::Project(_) => None,
        }
    }

    /// When the caller's token was issued (RFC 3339), for error messages.
    pub fn issued_at(&self) -> Option<String> {
        let seconds = match self {
            Self::Anonymous => return None,
            Self::Account(a) => a.issued_at_ms.div_euclid(1000),
            Self::Project(p) => p.iat,
            Self::Sso(s) => s.issued_at,
            Self::ServiceAccount(s) => s.issued_at?,
        };
        crate::schema::time::format(seconds, 0, false)
    }

    /// When the caller's token expires (Unix seconds); `None` without a token or expiry.
    pub fn expires_at(&self) -> Option<i64> {
        match self {
            Self::Anonymous => None,
            Self::Account(a) => a.expires_at,
            Self::Project(p) => p.expires_at,
            Self::Sso(s) => s.expires_at,
            Self::ServiceAccount(s) => s.expires_at,
        }
    }

    /// The local account, when the caller is one (not anonymous, not a project token).
    pub fn account(&self) -> Option<&AccountPrincipal> {
        match self {
            Self::Account(a) => Some(a),
            Self::Anonymous | Self::Project(_) | Self::Sso(_) | Self::ServiceAccount(_) => None,
        }
    }

    /// The single sign-on identity, when the caller is one.
    pub fn sso(&self) -> Option<&SsoPrincipal> {
        match self {
            Self::Sso(s) => Some(s),
            Self::Anonymous | Self::Account(_) | Self::Project(_) | Self::ServiceAccount(_) => None,
        }
    }

    /// The project role, when the caller presented a project token.
    pub fn project_role(&self) -> Option<&ProjectPrincipal> {
        match self {
            Self::Project(p) => Some(p),
            Self::Anonymous | Self::Account(_) | Self::Sso(_) | Self::ServiceAccount(_) => None,
        }
    }
}

/// What a request presented as credentials.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Credentials {
    #[default]
    None,
    /// A token that verified; kept to revoke it on logout.
    Valid(Arc<str>),
    /// A token was presented but rejected, and why.
    Rejected(Arc<str>),
    /// A token was presented that could not be checked now (the API server that reviews
    /// ServiceAccount tokens did not answer), and why: 503, never a 401.
    Unchecked(Arc<str>),
}

/// Everything a use case knows about the caller of one request.
#[derive(Clone, Debug)]
pub struct Caller {
    pub principal: Principal,
    pub credentials: Credentials,
    /// The client's address (the TCP peer).
    pub ip: IpAddr,
    /// Anonymous access (`users.anonymous.enabled`) was on when the request arrived.
    pub anonymous_allowed: bool,
}

impl Caller {
    pub fn anonymous(ip: IpAddr) -> Self {
        Self {
            principal: Principal::Anonymous,
            credentials: Credentials::None,
            ip,
            anonymous_allowed: false,
        }
    }

    /// Whether [`Caller::require`] lets the caller through, without building its error.
    pub fn has_access(&self) -> bool {
        match (&self.credentials, &self.principal) {
            (Credentials::Rejected(_) | Credentials::Unchecked(_), _) => false,
            (_, Principal::Anonymous) => self.anonymous_allowed,
            _ => true,
        }
    }

    /// The principal of a use case that needs one. A token that was presented
    /// and rejected is refused even when anonymous access is on: a bad token
    /// is never silently downgraded.
    pub fn require(&self) -> Result<&Principal, AppError> {
        match (&self.credentials, &self.principal) {
            (Credentials::Rejected(why), _) => {
                Err(AppError::Unauthenticated(format!("invalid session: {why}")))
            }
            (Credentials::Unchecked(why), _) => Err(AppError::Unavailable(why.to_string())),
            (_, Principal::Anonymous) if !self.anonymous_allowed => {
                Err(AppError::Unauthenticated("no session information".to_owned()))
            }
            (_, principal) => Ok(principal),
        }
    }
}

/// Why a request body stopped being read: its limit . Carries both
/// forms of the refusal: tonic finds the status in the error's source chain, REST takes the
/// error.
#[derive(Debug)]
pub struct BodyRefused {
    pub limit: BodyLimit,
    status: tonic::Status,
}

impl BodyRefused {
    pub fn new(limit: BodyLimit) -> Self {
        Self {
            limit,
            status: limit.refusal().into(),
        }
    }

    /// The `AppError` of a request body that failed to read: the limit's refusal (wherever
    /// in the chain of wrapping errors it is), or (the client went away, a broken frame) a
    /// bad request.
    pub fn app_error(err: &(dyn std::error::Error + 'static)) -> AppError {
        let mut cause = Some(err);
        while let Some(err) = cause {
            if let Some(refused) = err.downcast_ref::<Self>() {
                return refused.limit.refusal();
            }
            cause = err.source();
        }
        AppError::InvalidArgument(format!("cannot read the request body: {err}"))
    }
}

impl std::fmt::Display for BodyRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.status.message())
    }
}

impl std::error::Error for BodyRefused {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.status)
    }
}

/// The unit of "one client" for per-client limits: IPv4 as is (IPv4-mapped
/// IPv6 too), IPv6 by its /64.
pub fn client_scope(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// How the token of a request was carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carrier {
    Metadata,
    Bearer,
    Cookie,
}

/// The scheme the client used, as far as the server can tell: TLS here, or a
/// trusted proxy that says it terminated https.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientScheme {
    Http,
    Https,
}

/// How the request authenticated.
#[derive(Clone, Copy, Debug, Default)]
pub struct AuthInfo {
    pub carrier: Option<Carrier>,
    /// `argocd.token*` cookies the request carried.
    pub cookie_chunks: usize,
}

/// The one request extension the dispatcher sets for the transport adapters (each
/// extension is an allocation of its own, on every request).
#[derive(Clone, Debug)]
pub struct RequestContext {
    pub caller: Caller,
    pub auth: AuthInfo,
    pub scheme: ClientScheme,
    /// The registry's view had reached every registry write acknowledged before the request
    /// arrived (the fence ran beside the caller's identification), so the use case need not
    /// wait for it again.
    pub fenced: bool,
    /// What the request may send.
    pub body_limit: BodyLimit,
}

/// What a request may send, decided by the dispatcher from its headers once the caller is
/// known: enforced while the body is read, and for gRPC against a message's declared length
/// before the message itself is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyLimit {
    /// Bytes of body (REST, the dashboard) or of the one request message (gRPC, gRPC-Web).
    pub bytes: u64,
    pub over: OverLimit,
}

/// What sending more than the limit means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverLimit {
    /// Larger than the server takes: `noun` is what was too large, `why` names the limit
    /// (its flag).
    TooLarge { noun: &'static str, why: &'static str },
    /// The caller has no valid session, and without one only a small request is read;
    /// `rejected`: a token was presented and refused.
    Unauthenticated { rejected: bool },
}

impl BodyLimit {
    /// No limit (requests the dispatcher did not see: in-process calls).
    pub const NONE: Self = Self {
        bytes: u64::MAX,
        over: OverLimit::TooLarge {
            noun: "request",
            why: "no limit",
        },
    };

    /// Whether `len` bytes are more than the limit.
    pub fn exceeded_by(&self, len: u64) -> bool {
        len > self.bytes
    }

    /// The error that refuses a request over the limit: 401/UNAUTHENTICATED for a caller
    /// without a valid session (its body is never read), else 413/RESOURCE_EXHAUSTED.
    pub fn refusal(&self) -> AppError {
        let bytes = self.bytes;
        match self.over {
            OverLimit::TooLarge { noun, why } => {
                AppError::PayloadTooLarge(format!("{noun} is larger than {bytes} bytes ({why})"))
            }
            OverLimit::Unauthenticated { rejected } => AppError::Unauthenticated(format!(
                "{}: without a valid session a request may send at most {bytes} bytes",
                if rejected {
                    "invalid session"
                } else {
                    "no session information"
                }
            )),
        }
    }
}

impl RequestContext {
    /// A request's caller; anonymous from an unknown address if the
    /// dispatcher did not say.
    pub fn caller_of(extensions: &http::Extensions) -> Caller {
        extensions
            .get::<Self>()
            .map(|c| c.caller.clone())
            .unwrap_or_else(|| Caller::anonymous(std::net::Ipv4Addr::UNSPECIFIED.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(credentials: Credentials, anonymous_allowed: bool) -> Caller {
        Caller {
            credentials,
            anonymous_allowed,
            ..Caller::anonymous(IpAddr::from([127, 0, 0, 1]))
        }
    }

    #[test]
    fn rejected_token_is_refused_even_with_anonymous_access() {
        let c = caller(Credentials::Rejected("token is expired".into()), true);
        let err = c.require().unwrap_err();
        assert!(matches!(err, AppError::Unauthenticated(m) if m == "invalid session: token is expired"));
    }

    #[test]
    fn project_principal_is_its_role_subject_and_no_account() {
        let p = Principal::Project(ProjectPrincipal::new("p1", "ci", 1_767_225_600, "id-1", None));
        assert_eq!(p.subject(), "proj:p1:ci");
        assert_eq!(p.issuer(), "argocd");
        assert!(p.is_authenticated());
        assert!(p.account().is_none());
        assert_eq!(p.issued_at().as_deref(), Some("2026-01-01T00:00:00Z"));
        assert_eq!(p.expires_at(), None);
    }

    #[test]
    fn no_token_is_anonymous_only_when_allowed() {
        assert!(caller(Credentials::None, false).require().is_err());
        assert_eq!(
            caller(Credentials::None, true).require().unwrap(),
            &Principal::Anonymous
        );
    }
}
