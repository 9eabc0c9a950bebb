//! Project-role tokens (`sub: proj:<project>:<role>`), issued through
//! `ProjectService.CreateToken`. A presented one is valid while its project's role still
//! records it (SEC-08: deleting it there revokes it at once, whatever the policy would
//! allow); the projects are the registry's, which this module reaches through
//! [`ProjectTokenSource`], given when it is made.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::jwt::Claims;
use super::keys::TokenKeys;
use super::revocations::Revocations;
use crate::clock::Clock;
use crate::principal::{LOCAL_ISSUER, Principal, ProjectPrincipal};

/// Where presented project tokens are looked up: the AppProjects.
#[async_trait::async_trait]
pub trait ProjectTokenSource: Send + Sync {
    /// Ok when project `project` exists, has role `role`, and that role still records the
    /// token (by `jti`, or by `iat` for a token without an id, with the same expiry); else
    /// why not.
    fn check(&self, project: &str, role: &str, claims: &ProjectTokenClaims<'_>) -> Result<(), String>;

    /// Waits until [`Self::check`] sees every change acknowledged before `began`, on any
    /// replica (a role that lost the token on another one).
    async fn caught_up(&self, _began: Instant) -> Result<(), String> {
        Ok(())
    }
}

/// What of a verified project token the source compares.
#[derive(Clone, Copy, Debug)]
pub struct ProjectTokenClaims<'a> {
    pub jti: &'a str,
    pub iat: i64,
    pub exp: Option<i64>,
}

/// A project token just signed, and what the role must record about it.
#[derive(Clone, Debug)]
pub struct IssuedProjectToken {
    pub token: String,
    pub iat: i64,
    pub exp: Option<i64>,
    pub jti: String,
}

pub struct ProjectTokens {
    clock: Clock,
    keys: Arc<TokenKeys>,
    revocations: Arc<Revocations>,
    source: Arc<dyn ProjectTokenSource>,
}

impl ProjectTokens {
    pub fn new(
        keys: Arc<TokenKeys>,
        revocations: Arc<Revocations>,
        source: Arc<dyn ProjectTokenSource>,
        clock: Clock,
    ) -> Self {
        Self {
            clock,
            keys,
            revocations,
            source,
        }
    }

    /// Signs a token for role `role` of `project`, with id `id` (a random one when `None`)
    /// and no expiry when `expires_in` is zero. Recording it on the role is the caller's
    /// job: until then the token is not accepted.
    pub fn issue(
        &self,
        project: &str,
        role: &str,
        id: Option<String>,
        expires_in: Duration,
    ) -> IssuedProjectToken {
        let iat = self.clock.now_s();
        let exp = (!expires_in.is_zero())
            .then(|| iat.saturating_add(i64::try_from(expires_in.as_secs()).unwrap_or(i64::MAX)));
        let jti = id
            .filter(|i| !i.is_empty())
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let token = self.keys.sign(&Claims {
            iss: LOCAL_ISSUER.to_owned(),
            sub: format!("proj:{project}:{role}"),
            jti: jti.clone(),
            iat,
            nbf: iat,
            exp,
            iat_ms: None,
        });
        IssuedProjectToken { token, iat, exp, jti }
    }

    /// The caller of a verified token whose subject is `proj:<project>:<role>`. Never renewed.
    pub async fn authenticate(
        &self,
        project: &str,
        role: &str,
        claims: &Claims,
    ) -> Result<Principal, String> {
        if project.is_empty() || role.is_empty() {
            return Err("token subject is invalid".to_owned());
        }
        let began = Instant::now();
        if !claims.jti.is_empty()
            && self
                .revocations
                .is_revoked(&claims.jti)
                .await
                .map_err(|e| format!("cannot check the token now: {e}"))?
        {
            return Err("token is revoked".to_owned());
        }
        // On etcd the revocation read above has also learned how far the view must be.
        self.source.caught_up(began).await?;
        self.source.check(
            project,
            role,
            &ProjectTokenClaims {
                jti: &claims.jti,
                iat: claims.iat,
                exp: claims.exp,
            },
        )?;
        Ok(Principal::Project(ProjectPrincipal::new(
            project,
            role,
            claims.iat,
            &claims.jti,
            claims.exp,
        )))
    }
}
