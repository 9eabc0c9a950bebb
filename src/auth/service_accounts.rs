//! Kubernetes ServiceAccount tokens as bearer tokens (`tiphys.serviceaccountlogin.*`, a tiphys
//! extension): a token that looks like one is checked with a TokenReview
//! (`authentication.k8s.io/v1`) on the API server of `--kube`, and, when that server accepts it
//! for a configured audience and the ServiceAccount is allowed, the caller is
//! `system:serviceaccount:<namespace>:<name>` with the groups the review returned.
//!
//! Recognition reads the token's claims unverified, only to choose this path: nothing read
//! there grants anything (the review decides), and what it can refuse early (an expired
//! token, an audience not accepted) it refuses without asking the API server. A token of this
//! server's (HS256) is never looked at.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::review_cache::{self, ReviewCache};
use crate::clock::Clock;
use crate::config::service_account_login::{ALLOWED, AUDIENCES, ServiceAccountLogin as Config};
use crate::kubernetes::Connection;
use crate::principal::{Principal, ServiceAccountPrincipal};

/// The `iss` of the tokens of a ServiceAccount's Secret (the legacy, unbound kind).
pub const LEGACY_ISSUER: &str = "kubernetes/serviceaccount";
const SUBJECT_PREFIX: &str = "system:serviceaccount:";
/// How long a TokenReview may take before the caller gets 503.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a refusal by the API server is remembered: long enough that a client retrying a
/// bad token in a loop does not cost a review each time, short enough to not matter.
const REFUSAL_CACHE_MS: i64 = 5_000;

/// Why a ServiceAccount token did not authenticate its caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The token is not good (401).
    Invalid(String),
    /// It could not be checked: the API server did not answer (503).
    Unavailable(String),
}

/// The claims of a token that looks like a ServiceAccount's, unverified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Looks {
    pub issuer: String,
    pub namespace: String,
    pub name: String,
    pub audiences: Vec<String>,
    pub expires_at: Option<i64>,
    pub issued_at: Option<i64>,
}

#[derive(Deserialize)]
struct RawClaims {
    iss: Option<Value>,
    sub: Option<Value>,
    aud: Option<Value>,
    exp: Option<Value>,
    iat: Option<Value>,
    #[serde(rename = "kubernetes.io")]
    kubernetes: Option<Value>,
}

/// Whether `token` is a ServiceAccount token, from its header and claims alone: not HS256
/// (this server's tokens), `sub` `system:serviceaccount:<namespace>:<name>`, and either the
/// `kubernetes.io` claim object of a bound token or the legacy issuer. An identity provider's
/// ID token has neither, so it never takes this path.
pub fn recognise(token: &str) -> Option<Looks> {
    let header = super::jwt::decode(token).ok()?;
    if header.algorithm() == "HS256" {
        return None;
    }
    let claims = jsonwebtoken::dangerous::insecure_decode_claims::<RawClaims>(token).ok()?;
    let text = |v: &Option<Value>| v.as_ref().and_then(Value::as_str).map(str::to_owned);
    let issuer = text(&claims.iss)?;
    let (namespace, name) = split_subject(claims.sub.as_ref()?.as_str()?)?;
    let bound = claims.kubernetes.as_ref().is_some_and(Value::is_object);
    if !bound && issuer != LEGACY_ISSUER {
        return None;
    }
    let audiences = match &claims.aud {
        Some(Value::String(a)) => vec![a.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    };
    let seconds = |v: &Option<Value>| v.as_ref().and_then(Value::as_f64).map(|s| s as i64);
    Some(Looks {
        issuer,
        namespace,
        name,
        audiences,
        expires_at: seconds(&claims.exp),
        issued_at: seconds(&claims.iat),
    })
}

/// `system:serviceaccount:<namespace>:<name>` → (namespace, name).
fn split_subject(subject: &str) -> Option<(String, String)> {
    let rest = subject.strip_prefix(SUBJECT_PREFIX)?;
    let (namespace, name) = rest.split_once(':')?;
    if namespace.is_empty() || name.is_empty() || name.contains(':') {
        return None;
    }
    Some((namespace.to_owned(), name.to_owned()))
}

/// Until when (ms) an accepted review is reused: `ttl` from now, never past the token's `exp`.
fn trusted_until(now_ms: i64, ttl: Duration, expires_at: Option<i64>) -> i64 {
    let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    let exp = expires_at.map_or(i64::MAX, |e| e.saturating_mul(1000));
    now_ms.saturating_add(ttl).min(exp)
}

/// Who the API server said a token is.
#[derive(Clone, Debug)]
struct Reviewed {
    namespace: String,
    name: String,
    groups: Vec<String>,
}

/// TokenReviews asked, by answer (`tiphys_serviceaccount_token_reviews_total{result}`).
#[derive(Debug, Default)]
pub struct ReviewCounts {
    pub accepted: AtomicU64,
    pub refused: AtomicU64,
    /// The API server could not be asked (or did not answer in time).
    pub failed: AtomicU64,
}

pub struct ServiceAccounts {
    /// The `--kube` API server; `None` without `--kube` (such tokens are then refused).
    kube: Option<Connection>,
    pub reviews: ReviewCounts,
    cache: Mutex<ReviewCache<Result<Reviewed, String>>>,
    clock: Clock,
}

impl std::fmt::Debug for ServiceAccounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccounts").finish_non_exhaustive()
    }
}

impl ServiceAccounts {
    pub fn new(kube: Option<Connection>, clock: Clock) -> Self {
        Self {
            kube,
            cache: Mutex::new(ReviewCache::new(review_cache::CAPACITY)),
            reviews: ReviewCounts::default(),
            clock,
        }
    }

    /// The caller `token` proves, when it is a ServiceAccount token and `config` turns the
    /// feature on; `None` otherwise (the token is then checked as any other).
    pub async fn authenticate(&self, token: &str, config: &Config) -> Option<Result<Principal, Refused>> {
        if !config.enabled {
            return None;
        }
        let looks = recognise(token)?;
        Some(self.check(token, &looks, config).await)
    }

    async fn check(&self, token: &str, looks: &Looks, config: &Config) -> Result<Principal, Refused> {
        let now_ms = self.clock.now_ms();
        if looks
            .expires_at
            .is_some_and(|exp| exp.saturating_mul(1000) <= now_ms)
        {
            return Err(Refused::Invalid(
                "the ServiceAccount token has expired".to_owned(),
            ));
        }
        if !looks.audiences.iter().any(|a| config.audiences.contains(a)) {
            return Err(Refused::Invalid(format!(
                "the ServiceAccount token's audiences {:?} are not accepted: {AUDIENCES} is {:?} \
                 (mint it with `kubectl create token --audience {}`)",
                looks.audiences,
                config.audiences.join(","),
                config.audiences.first().map_or(AUDIENCES, String::as_str),
            )));
        }
        let key = review_cache::key(token, &config.audiences);
        let cached = self.lock().get(&key, now_ms);
        let reviewed = match cached {
            Some(answer) => answer,
            None => {
                let answer = self.review(token, config).await;
                let counter = match &answer {
                    Ok(Ok(_)) => &self.reviews.accepted,
                    Ok(Err(_)) => &self.reviews.refused,
                    Err(_) => &self.reviews.failed,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                let answer = answer?;
                let until = match &answer {
                    Ok(_) => trusted_until(now_ms, config.cache_duration, looks.expires_at),
                    Err(_) => now_ms.saturating_add(REFUSAL_CACHE_MS),
                };
                self.lock().put(key, answer.clone(), until, now_ms);
                answer
            }
        };
        let reviewed = reviewed.map_err(Refused::Invalid)?;
        // Checked on every request, cached or not: an edit of the list applies at once.
        if !config.allows(&reviewed.namespace, &reviewed.name) {
            return Err(Refused::Invalid(format!(
                "the ServiceAccount {}/{} may not sign in: it matches no pattern of {ALLOWED}",
                reviewed.namespace, reviewed.name
            )));
        }
        let mut claims = Map::new();
        claims.insert(
            "groups".to_owned(),
            Value::Array(reviewed.groups.iter().cloned().map(Value::String).collect()),
        );
        Ok(Principal::ServiceAccount(ServiceAccountPrincipal {
            subject: format!("{SUBJECT_PREFIX}{}:{}", reviewed.namespace, reviewed.name),
            namespace: reviewed.namespace,
            name: reviewed.name,
            issuer: looks.issuer.clone(),
            claims: Arc::new(claims),
            issued_at: looks.issued_at,
            expires_at: looks.expires_at,
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ReviewCache<Result<Reviewed, String>>> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Asks the API server. `Ok(Err(why))`: it answered that the token is not good;
    /// `Err`: it could not be asked.
    async fn review(&self, token: &str, config: &Config) -> Result<Result<Reviewed, String>, Refused> {
        let Some(kube) = &self.kube else {
            return Ok(Err(
                "ServiceAccount tokens are accepted only on the Kubernetes backend (--kube)".to_owned(),
            ));
        };
        let url = &kube.url;
        let review = TokenReview {
            spec: TokenReviewSpec {
                audiences: Some(config.audiences.clone()),
                token: Some(token.to_owned()),
            },
            ..TokenReview::default()
        };
        let api: kube::Api<TokenReview> = kube::Api::all(kube.client.clone());
        let params = kube::api::PostParams::default();
        let answer = match tokio::time::timeout(REVIEW_TIMEOUT, api.create(&params, &review)).await {
            Err(_) => {
                return Err(Refused::Unavailable(format!(
                    "cannot check the ServiceAccount token: the Kubernetes API server at {url} did not \
                     answer the TokenReview within {REVIEW_TIMEOUT:?}"
                )));
            }
            Ok(Err(kube::Error::Api(status))) if status.code == 403 => {
                return Err(Refused::Unavailable(format!(
                    "cannot check the ServiceAccount token: this server may not create tokenreviews on \
                     the Kubernetes API server at {url} (grant its ServiceAccount `create` on \
                     `tokenreviews.authentication.k8s.io`): {}",
                    status.message
                )));
            }
            Ok(Err(e)) => {
                return Err(Refused::Unavailable(format!(
                    "cannot check the ServiceAccount token: the TokenReview on the Kubernetes API server \
                     at {url} failed: {e}"
                )));
            }
            Ok(Ok(answer)) => answer,
        };
        let status = answer.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            let why = status
                .error
                .filter(|e| !e.is_empty())
                .unwrap_or_else(|| "no reason given".to_owned());
            return Ok(Err(format!(
                "the Kubernetes API server did not accept the ServiceAccount token: {why}"
            )));
        }
        let user = status.user.unwrap_or_default();
        let Some((namespace, name)) = user.username.as_deref().and_then(split_subject) else {
            return Ok(Err(format!(
                "the token is not a ServiceAccount's: the Kubernetes API server says it is {:?}",
                user.username.unwrap_or_default()
            )));
        };
        // An API server that does not check audiences says so by answering with other ones.
        if let Some(audiences) = status.audiences
            && !audiences.iter().any(|a| config.audiences.contains(a))
        {
            return Ok(Err(format!(
                "the ServiceAccount token's audiences {audiences:?} are not accepted: {AUDIENCES} is {:?}",
                config.audiences.join(",")
            )));
        }
        Ok(Ok(Reviewed {
            namespace,
            name,
            groups: user.groups.unwrap_or_default(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    fn token(alg: &str, claims: Value) -> String {
        let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        let header = serde_json::json!({"alg": alg, "typ": "JWT"});
        format!("{}.{}.c2ln", b64(&header), b64(&claims))
    }

    fn bound(sub: &str) -> Value {
        serde_json::json!({
            "iss": "https://kubernetes.default.svc.cluster.local",
            "sub": sub,
            "aud": ["tiphys"],
            "exp": 2_000_000_000,
            "iat": 1_900_000_000,
            "kubernetes.io": {"namespace": "ci", "serviceaccount": {"name": "deployer", "uid": "u"}},
        })
    }

    #[test]
    fn service_account_tokens_are_recognised() {
        let looks = recognise(&token("RS256", bound("system:serviceaccount:ci:deployer"))).unwrap();
        assert_eq!(
            (looks.namespace.as_str(), looks.name.as_str()),
            ("ci", "deployer")
        );
        assert_eq!(looks.audiences, ["tiphys"]);
        assert_eq!(looks.expires_at, Some(2_000_000_000));
        let legacy = serde_json::json!({
            "iss": LEGACY_ISSUER,
            "sub": "system:serviceaccount:ci:old",
            "kubernetes.io/serviceaccount/namespace": "ci",
        });
        let looks = recognise(&token("ES256", legacy)).unwrap();
        assert_eq!(looks.name, "old");
        assert!(looks.audiences.is_empty());
    }

    #[test]
    fn other_tokens_are_not() {
        // This server's own kind, whatever it claims.
        assert_eq!(
            recognise(&token("HS256", bound("system:serviceaccount:ci:deployer"))),
            None
        );
        // An ID token: no kubernetes.io claim, another issuer.
        let id_token = serde_json::json!({
            "iss": "https://idp.example", "sub": "system:serviceaccount:ci:deployer", "aud": "argo-cd",
        });
        assert_eq!(recognise(&token("RS256", id_token)), None);
        // Subjects that are no ServiceAccount's.
        for sub in [
            "alice",
            "system:serviceaccount:ci",
            "system:serviceaccount::x",
            "system:serviceaccount:a:b:c",
        ] {
            assert_eq!(recognise(&token("RS256", bound(sub))), None, "{sub}");
        }
        for garbage in [
            "",
            "a.b.c",
            "not a token",
            "eyJhbGciOiJSUzI1NiJ9.bm90IGpzb24.c2ln",
        ] {
            assert_eq!(recognise(garbage), None, "{garbage}");
        }
    }

    fn config(audiences: &[&str]) -> Config {
        let cm = [
            ("tiphys.serviceaccountlogin.enabled", "true".to_owned()),
            ("tiphys.serviceaccountlogin.audiences", audiences.join(",")),
            ("tiphys.serviceaccountlogin.allowed", "ci/*".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        Config::parse(&cm).unwrap()
    }

    #[test]
    fn a_review_is_trusted_for_the_duration_and_never_past_exp() {
        let now = 1_000_000;
        assert_eq!(trusted_until(now, Duration::from_secs(60), None), now + 60_000);
        assert_eq!(
            trusted_until(now, Duration::from_secs(60), Some(1_010)),
            1_010_000
        );
        assert_eq!(
            trusted_until(now, Duration::ZERO, Some(2_000)),
            now,
            "zero: not kept"
        );
        // Kept in the cache until exactly then, with time passed in.
        let mut cache = ReviewCache::new(4);
        let key = review_cache::key("t", &[]);
        cache.put(key, (), trusted_until(now, Duration::from_secs(2), None), now);
        assert_eq!(cache.get(&key, now + 1_999), Some(()));
        assert_eq!(cache.get(&key, now + 2_000), None);
    }

    #[tokio::test]
    async fn refusals_decided_from_the_claims_never_ask() {
        // No API server at all: anything that reached the review would say so.
        let accounts = ServiceAccounts::new(None, Clock::paused());
        let good = token("RS256", bound("system:serviceaccount:ci:deployer"));
        let off = Config::default();
        assert!(
            accounts.authenticate(&good, &off).await.is_none(),
            "off: not ours to judge"
        );
        let Some(Err(Refused::Invalid(why))) = accounts.authenticate(&good, &config(&["other"])).await else {
            panic!("wrong audience must be refused");
        };
        assert!(why.contains("audiences [\"tiphys\"] are not accepted"), "{why}");
        let mut expired = bound("system:serviceaccount:ci:deployer");
        expired["exp"] = 1_000.into();
        let Some(Err(Refused::Invalid(why))) = accounts
            .authenticate(&token("RS256", expired), &config(&["tiphys"]))
            .await
        else {
            panic!("an expired token must be refused");
        };
        assert!(why.contains("expired"), "{why}");
        let Some(Err(Refused::Invalid(why))) = accounts.authenticate(&good, &config(&["tiphys"])).await
        else {
            panic!("without --kube the token is refused");
        };
        assert!(why.contains("--kube"), "{why}");
    }
}
