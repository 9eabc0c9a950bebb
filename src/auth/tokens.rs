//! Local tokens as presented: one check for every token this server signs (account logins,
//! API keys, SSO dashboard sessions, project roles), dispatched by subject, and the login
//! tokens it issues and renews.
//!
//! On a shared store (etcd) every check reads what can change elsewhere (the account's record,
//! the token id's revocation, the SSO session) from the store, in one read that also serves the
//! request's read-your-writes fence (`registry::fence`): another replica's
//! logout, password change or disablement is in force at the next request, with no cache to go
//! stale. On a store this process alone writes (redb), the same records come from the mirrors
//! of its own writes ([`super::mirror`]), with no store read. While etcd cannot be reached, a
//! check answers from the records as this replica last wrote or read them (as the registry's
//! reads answer from its view): nobody can write a logout or a password change meanwhile, and
//! what another replica wrote just before and this one never read is missed, as the
//! registry's reads miss it.
//!
//! A login token in its last 5 minutes (or last half, if shorter) is renewed: the renewed
//! token keeps the session's id, so revoking the session (logout) revokes it too.

use std::sync::Arc;
use std::time::Duration;

use super::accounts::{self, AccountRecord, Accounts};
use super::jwt::Claims;
use super::keys::TokenKeys;
use super::personal_tokens::{self, PersonalTokens};
use super::project_tokens::ProjectTokens;
use super::revocations::{self, Revocations};
use super::sso_sessions::{self, SsoSessions};
use crate::clock::Clock;
use crate::config::{AccountConfig, ConfigWatch};
use crate::principal::{AccountPrincipal, LOCAL_ISSUER, Principal, TokenKind};
use crate::store::shared_read::SharedReads;
use crate::store::{Outage, Store, StoreError};

/// A login token is renewed when less than this (or half its lifetime) is left.
const RENEW_WITHIN: Duration = Duration::from_secs(5 * 60);
/// How long a check waits for a shared store before it answers from the last read: longer than
/// an etcd election, short enough that a request still gets its answer when etcd is down.
const READ_WAIT: Duration = Duration::from_secs(4);
/// After a read failed, checks answer from the last read without asking for this long.
const OUTAGE_PAUSE: Duration = Duration::from_secs(2);

pub struct Tokens {
    clock: Clock,
    keys: Arc<TokenKeys>,
    store: Arc<dyn Store>,
    accounts: Arc<Accounts>,
    revocations: Arc<Revocations>,
    sso: Arc<SsoSessions>,
    projects: Arc<ProjectTokens>,
    personal: Arc<PersonalTokens>,
    config: Arc<ConfigWatch>,
    /// When a read of the shared store last failed.
    outage: Outage,
    /// Checks of one token at once (its watches at one event) share store reads.
    reads: SharedReads<Result<(Arc<AccountRecord>, bool), String>>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens").finish_non_exhaustive()
    }
}

impl Tokens {
    #[expect(
        clippy::too_many_arguments,
        reason = "the wiring of the parts it uses, done once, by Auth::open"
    )]
    pub fn new(
        keys: Arc<TokenKeys>,
        store: Arc<dyn Store>,
        accounts: Arc<Accounts>,
        revocations: Arc<Revocations>,
        sso: Arc<SsoSessions>,
        projects: Arc<ProjectTokens>,
        personal: Arc<PersonalTokens>,
        config: Arc<ConfigWatch>,
        clock: Clock,
    ) -> Self {
        Self {
            clock,
            keys,
            store,
            accounts,
            revocations,
            sso,
            projects,
            personal,
            config,
            outage: Outage::new(OUTAGE_PAUSE),
            reads: SharedReads::default(),
        }
    }

    /// Checks a token of this server's. Returns the caller and, for a login token close to
    /// its expiry, a fresh token to hand back to the client; else why the token is refused.
    pub async fn authenticate(&self, token: &str) -> Result<(Principal, Option<String>), String> {
        let now = self.clock.now_ms();
        let claims = self.keys.verify(token, now / 1000)?;
        if let Some(sid) = claims.sub.strip_prefix(sso_sessions::SUBJECT_PREFIX)
            && !sid.is_empty()
            && sid == claims.jti
        {
            return self.sso.authenticate(sid, now / 1000).await.map(|p| (p, None));
        }
        if let Some(subject) = claims.sub.strip_prefix(personal_tokens::SUBJECT_PREFIX) {
            return self
                .personal
                .authenticate(subject, &claims, now / 1000)
                .await
                .map(|p| (p, None));
        }
        if let Some((project, role)) = crate::rbac::project::project_subject(&claims.sub) {
            return self
                .projects
                .authenticate(project, role, &claims)
                .await
                .map(|p| (p, None));
        }
        let (name, kind) = match claims.sub.split_once(':') {
            Some((name, "login")) => (name, TokenKind::Login),
            Some((name, "apiKey")) => (name, TokenKind::ApiKey),
            Some(_) => return Err("token subject is invalid".to_owned()),
            None => (claims.sub.as_str(), TokenKind::ApiKey),
        };
        let settings = self.config.current();
        let config = settings
            .accounts
            .get(name)
            .ok_or_else(|| format!("account {name} does not exist"))?;
        let (record, revoked) = match (self.accounts.held(name), self.revocations.held(&claims.jti)) {
            (Some(record), Some(revoked)) => (record, revoked),
            _ => {
                let key = format!("{name}\n{}", claims.jti);
                self.reads.get(&key, || self.read(name, &claims.jti)).await?
            }
        };
        check_account(config, &record, kind, &claims)?;
        if revoked || self.revocations.revoked_elsewhere(&claims.jti) {
            return Err("token is revoked, please log in again".to_owned());
        }
        let principal = AccountPrincipal {
            name: name.to_owned(),
            kind,
            jti: claims.jti.clone(),
            issued_at_ms: claims.issued_at_ms(),
            expires_at: claims.exp,
        };
        let renewed = (kind == TokenKind::Login)
            .then(|| self.renewal(&claims, name, now))
            .flatten();
        Ok((Principal::Account(principal), renewed))
    }

    /// The account's record and whether the token id is revoked, read together from the store;
    /// while the store cannot be reached, as last read for this token.
    async fn read(&self, name: &str, jti: &str) -> Result<(Arc<AccountRecord>, bool), String> {
        // While the store cannot be reached: the account's record and the id's revocation as
        // this replica last wrote or read them.
        let last_known = |why: &str| match self.accounts.last_known(name) {
            Some(record) => Ok((record, self.revocations.last_known(jti))),
            None => Err(format!("cannot check the token now: {why}")),
        };
        if self.outage.pausing() {
            return last_known("the store did not answer just before");
        }
        let keys = vec![AccountRecord::store_key(name), revocations::key(jti)];
        let read = match tokio::time::timeout(READ_WAIT, self.store.get_many(keys)).await {
            Ok(Ok(read)) => read,
            failed @ (Ok(Err(StoreError::Unavailable(_))) | Err(_)) => {
                self.outage.failed();
                let why = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("the store did not answer within {READ_WAIT:?}"),
                };
                return last_known(&why);
            }
            Ok(Err(e)) => return Err(format!("cannot check the token now: {e}")),
        };
        let (record, _) = accounts::parse_record(name, read[0].as_ref())
            .map_err(|e| format!("cannot check the token now: {e}"))?;
        if let Some(entry) = &read[0] {
            self.accounts.note_read(name, entry.mod_revision, &record);
        }
        let revoked = revocations::is_revocation(read[1].as_ref());
        if let Some(entry) = &read[1] {
            self.revocations.note_read(jti, entry);
        }
        Ok((Arc::new(record), revoked))
    }

    /// A new login token for account `name`.
    pub fn issue_login(&self, name: &str) -> String {
        self.login_token(name, None, self.clock.now_ms())
    }

    fn login_token(&self, name: &str, id: Option<String>, now: i64) -> String {
        let iat = now / 1000;
        let duration = self.config.peek().session_duration;
        self.keys.sign(&Claims {
            iss: LOCAL_ISSUER.to_owned(),
            sub: format!("{name}:login"),
            jti: id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            iat,
            nbf: iat,
            exp: Some(iat.saturating_add(i64::try_from(duration.as_secs()).unwrap_or(i64::MAX))),
            iat_ms: Some(now),
        })
    }

    fn renewal(&self, claims: &Claims, name: &str, now: i64) -> Option<String> {
        let exp = claims.exp?;
        let lifetime = u64::try_from(exp.saturating_sub(claims.iat)).ok()?;
        let left = u64::try_from(exp.saturating_sub(now / 1000)).ok()?;
        let within = RENEW_WITHIN.min(Duration::from_secs(lifetime / 2));
        (Duration::from_secs(left) < within).then(|| self.login_token(name, Some(claims.jti.clone()), now))
    }
}

/// Whether the account (its configuration and stored record) still accepts a verified token of
/// `kind` with these claims.
fn check_account(
    account: &AccountConfig,
    record: &AccountRecord,
    kind: TokenKind,
    claims: &Claims,
) -> Result<(), String> {
    let name = &account.name;
    if !account.enabled {
        return Err(format!("account {name} is disabled"));
    }
    match kind {
        TokenKind::Login if !account.login => {
            return Err(format!("account {name} does not have login capability"));
        }
        TokenKind::ApiKey if !account.api_key => {
            return Err(format!("account {name} does not have apiKey capability"));
        }
        _ => {}
    }
    if claims.jti.is_empty() {
        return Err("token has no id".to_owned());
    }
    if kind == TokenKind::Login && claims.exp.is_none() {
        return Err("token has no expiry".to_owned());
    }
    if kind == TokenKind::ApiKey
        && accounts::api_key(account, record, &claims.jti).is_none_or(|t| t.iat != claims.iat)
    {
        return Err(format!("account {name} has no API key with id {}", claims.jti));
    }
    if record
        .password_mtime_ms
        .is_some_and(|m| claims.issued_at_ms() < m)
    {
        return Err("account password has changed since token issued".to_owned());
    }
    if record
        .revoked_before_ms
        .is_some_and(|m| claims.issued_at_ms() < m)
    {
        // The record may already know of an access lost that the settings in hand do not show
        // yet (a reload updates the records before it publishes the settings): name that loss.
        return Err(match record.seen_access {
            Some((false, _, _)) => format!("account {name} is disabled"),
            Some((_, false, _)) if kind == TokenKind::Login => {
                format!("account {name} does not have login capability")
            }
            Some((_, _, false)) if kind == TokenKind::ApiKey => {
                format!("account {name} does not have apiKey capability")
            }
            _ => format!("account {name} was disabled after the token was issued"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TokenRecord;

    /// A reload writes the account records before it publishes the settings: a token checked in
    /// between meets the old settings and the new record, and its refusal still names the
    /// capability that was lost.
    #[test]
    fn a_revocation_names_the_access_the_record_saw_lost() {
        let account = AccountConfig {
            name: "alice".to_owned(),
            enabled: true,
            login: true,
            api_key: true,
            password_hash: None,
            password_mtime: None,
            tokens: vec![TokenRecord {
                id: "k1".to_owned(),
                iat: 100,
                exp: 0,
            }],
        };
        let claims = Claims {
            iss: LOCAL_ISSUER.to_owned(),
            sub: "alice:apiKey".to_owned(),
            jti: "k1".to_owned(),
            iat: 100,
            nbf: 100,
            exp: None,
            iat_ms: Some(100_000),
        };
        let mut record = AccountRecord::default();
        assert_eq!(
            check_account(&account, &record, TokenKind::ApiKey, &claims),
            Ok(())
        );
        record.revoked_before_ms = Some(200_000);
        for (seen, why) in [
            (
                (true, true, false),
                "account alice does not have apiKey capability",
            ),
            ((false, true, true), "account alice is disabled"),
            (
                (true, false, true),
                "account alice was disabled after the token was issued",
            ),
        ] {
            record.seen_access = Some(seen);
            assert_eq!(
                check_account(&account, &record, TokenKind::ApiKey, &claims),
                Err(why.to_owned())
            );
        }
    }
}
