//! Personal access tokens of single sign-on users (a tiphys extension, argo-cd #5403): a
//! signed-in SSO user makes tokens of their own, each with an expiry and a description, that
//! act as them with the groups they had when the token was made.
//!
//! The token is a short HS256 token of this server (`sub: pat:<user key>.<nonce>`, `jti: <id>`,
//! the nonce a random value kept in the record, so that an id made again is another token); what
//! it stands for is its record in the store (`pat/<user key>/<id>`), read at every use together
//! with the user's record (`ssouser/<user key>`), in one read. Deleting the record revokes the
//! token; on a shared store (etcd) every replica reads the same records, so a revocation, a
//! disablement or a deletion is in force on every replica at its next request.
//!
//! The user's record is the least an administrator needs to stop someone who is still signed in
//! at the provider: it is made at the user's first token, and holds a state (active, disabled,
//! deleted). Deleting a user removes their tokens' records and remembers when: a token of theirs
//! made before then is refused saying the user was deleted. A deleted user who signs in again
//! may make new tokens; a disabled one may not, and none of their tokens work.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use super::jwt::Claims;
use super::keys::TokenKeys;
use crate::clock::Clock;
use crate::config::{ConfigWatch, Settings};
use crate::error::AppError;
use crate::principal::{LOCAL_ISSUER, Principal, SsoPrincipal};
use crate::store::{self, Entry, Expect, Op, Store, StoreError};

/// The subject of a personal token is `pat:<user key>.<nonce>`: neither an account's `<name>:login` nor
/// an SSO session's `sso:<id>`.
pub const SUBJECT_PREFIX: &str = "pat:";
/// Tokens' records: `pat/<user key>/<id>`.
const TOKENS: &str = "pat/";
/// Users' records: `ssouser/<user key>`.
const USERS: &str = "ssouser/";
/// The argocd-cm key of the server-wide switch.
pub const ENABLED_KEY: &str = "tiphys.personaltokens.enabled";
/// How many live tokens one user may hold: bounds the records a user's list reads.
pub const MAX_PER_USER: usize = 50;
/// Longest description kept.
pub const MAX_DESCRIPTION: usize = 256;

/// The record of one token. The token itself is never stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersonalToken {
    pub id: String,
    /// The RBAC subject (issuer-qualified among several providers).
    pub user: String,
    /// The name shown (`email`, else the subject).
    pub username: String,
    pub issuer: String,
    /// The name of the provider the user signed in with.
    pub provider: String,
    /// The RBAC groups the user had when the token was made.
    pub groups: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Unix milliseconds.
    pub issued_at_ms: i64,
    /// Unix seconds; 0: no expiry.
    #[serde(default)]
    pub expires_at: i64,
    /// The random part of the token's subject: a token is its record's only while they agree.
    pub nonce: String,
}

impl PersonalToken {
    pub fn issued_at(&self) -> i64 {
        self.issued_at_ms.div_euclid(1000)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum UserState {
    #[default]
    Active,
    Disabled,
    Deleted,
}

impl UserState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Disabled => "disabled",
            Self::Deleted => "deleted",
        }
    }
}

/// The record of one SSO user who made a token.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SsoUser {
    pub user: String,
    pub username: String,
    pub state: UserState,
    /// Unix milliseconds of the last deletion: tokens made before it are refused as the
    /// deleted user's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_at_ms: Option<i64>,
}

/// The key of `user` in store keys and token subjects: URL-safe base64, since a subject may hold
/// any character (`/`, `:`).
pub fn user_key(user: &str) -> String {
    URL_SAFE_NO_PAD.encode(user.as_bytes())
}

fn token_key(ukey: &str, id: &str) -> String {
    format!("{TOKENS}{ukey}/{id}")
}

fn user_record_key(ukey: &str) -> String {
    format!("{USERS}{ukey}")
}

/// What a token's use is checked against, apart from its signature.
#[derive(Debug, Default)]
pub struct Records {
    pub token: Option<PersonalToken>,
    pub user: Option<SsoUser>,
}

/// Why a token of a verified signature is refused now, if it is; the message the caller gets.
/// `token_iat_ms`: when the token says it was made; `id`: its id; `nonce`: its subject's.
pub fn check<'r>(
    records: &'r Records,
    enabled: bool,
    id: &str,
    nonce: &str,
    token_iat_ms: i64,
    now_s: i64,
) -> Result<&'r PersonalToken, String> {
    if !enabled {
        return Err(format!(
            "personal access tokens are turned off on this server ({ENABLED_KEY} is not \"true\")"
        ));
    }
    if let Some(user) = &records.user {
        if user.deleted_at_ms.is_some_and(|at| token_iat_ms <= at) || user.state == UserState::Deleted {
            return Err(format!(
                "the SSO user {} was deleted by an administrator",
                user.user
            ));
        }
        if user.state == UserState::Disabled {
            return Err(format!(
                "the SSO user {} is disabled by an administrator",
                user.user
            ));
        }
    }
    let Some(token) = &records.token else {
        return Err(format!("personal access token {id} has been revoked"));
    };
    if token.nonce != nonce || token.issued_at_ms != token_iat_ms {
        return Err(format!("personal access token {id} has been revoked"));
    }
    if token.expires_at != 0 && now_s >= token.expires_at {
        return Err("token is expired".to_owned());
    }
    Ok(token)
}

/// A token id as given by the caller: at most 128 characters of letters, digits, `-`, `_`, `.`.
pub fn check_id(id: &str) -> Result<(), AppError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(AppError::InvalidArgument(format!(
            "token id {id:?} is not valid: use 1 to 128 letters, digits, '-', '_' or '.'"
        )))
    }
}

fn parse<T: serde::de::DeserializeOwned>(entry: Option<&Entry>) -> Option<T> {
    entry.and_then(|e| serde_json::from_slice(&e.value).ok())
}

pub struct PersonalTokens {
    clock: Clock,
    store: Arc<dyn Store>,
    config: Arc<ConfigWatch>,
    keys: Arc<TokenKeys>,
}

impl PersonalTokens {
    pub fn new(store: Arc<dyn Store>, config: Arc<ConfigWatch>, keys: Arc<TokenKeys>, clock: Clock) -> Self {
        Self {
            clock,
            store,
            config,
            keys,
        }
    }

    /// Whether the switch is on in `settings`.
    pub fn enabled(settings: &Settings) -> bool {
        settings.personal_tokens
    }

    /// Makes a token for `owner` with `groups` (frozen into the record), expiring after
    /// `expires_in` (never when zero). Returns the token and its record.
    pub async fn create(
        &self,
        owner: &SsoPrincipal,
        groups: Vec<String>,
        id: Option<String>,
        description: String,
        expires_in: Duration,
    ) -> Result<(String, PersonalToken), AppError> {
        if !Self::enabled(&self.config.peek()) {
            return Err(AppError::FailedPrecondition(format!(
                "personal access tokens are turned off on this server: set {ENABLED_KEY} to \"true\" in argocd-cm"
            )));
        }
        if description.chars().count() > MAX_DESCRIPTION || description.chars().any(char::is_control) {
            return Err(AppError::InvalidArgument(format!(
                "description must be at most {MAX_DESCRIPTION} characters without control characters"
            )));
        }
        let id = match id.filter(|i| !i.is_empty()) {
            Some(id) => {
                check_id(&id)?;
                id
            }
            None => uuid::Uuid::new_v4().to_string(),
        };
        let ukey = user_key(&owner.user);
        let internal = |e: StoreError| AppError::Internal(e.into());
        let user_key_s = user_record_key(&ukey);
        let found = store::get_json::<SsoUser>(self.store.as_ref(), &user_key_s)
            .await
            .map_err(internal)?;
        let (mut user, expect) = match found {
            Some((user, revision)) => (user, Expect::ModRevision(revision)),
            None => (SsoUser::default(), Expect::Absent),
        };
        if user.state == UserState::Disabled {
            return Err(AppError::FailedPrecondition(format!(
                "the SSO user {} is disabled by an administrator: no token can be made",
                owner.user
            )));
        }
        let now = self.clock.now_ms();
        // Expired tokens go with this write (else they would count toward the limit forever);
        // one of the id being made stays, so that reusing it is a conflict, not a lost record.
        let (expired, live): (Vec<_>, Vec<_>) = self
            .list_of(&ukey)
            .await?
            .into_iter()
            .partition(|t| t.expires_at != 0 && t.expires_at <= now / 1000 && t.id != id);
        if live.len() >= MAX_PER_USER {
            return Err(AppError::FailedPrecondition(format!(
                "{} already holds {MAX_PER_USER} personal access tokens: revoke one first",
                owner.user
            )));
        }
        user.user.clone_from(&owner.user);
        user.username.clone_from(&owner.username);
        user.state = UserState::Active;
        let iat = now / 1000;
        let exp = (!expires_in.is_zero())
            .then(|| iat.saturating_add(i64::try_from(expires_in.as_secs()).unwrap_or(i64::MAX)));
        let record = PersonalToken {
            id: id.clone(),
            user: owner.user.clone(),
            username: owner.username.clone(),
            issuer: owner.issuer.clone(),
            provider: owner.provider.clone(),
            groups,
            description,
            issued_at_ms: now,
            expires_at: exp.unwrap_or(0),
            nonce: crate::random::token(16),
        };
        let mut ops = vec![
            store::put_json(&user_key_s, &user, expect).map_err(internal)?,
            store::put_json(&token_key(&ukey, &id), &record, Expect::Absent).map_err(internal)?,
        ];
        ops.extend(expired.iter().map(|t| Op::Delete {
            key: token_key(&ukey, &t.id),
            expect: Expect::Any,
        }));
        match self.store.commit(ops).await {
            Ok(_) => {}
            Err(StoreError::Conflict { key, .. }) if key.starts_with(TOKENS) => {
                return Err(AppError::AlreadyExists(format!(
                    "{} already has a personal access token with id '{id}'; choose another id",
                    owner.user
                )));
            }
            Err(StoreError::Conflict { .. }) => {
                return Err(AppError::Aborted(
                    "the user's record changed meanwhile; try again".to_owned(),
                ));
            }
            Err(e) => return Err(internal(e)),
        }
        let token = self.keys.sign(&Claims {
            iss: LOCAL_ISSUER.to_owned(),
            sub: format!("{SUBJECT_PREFIX}{ukey}.{}", record.nonce),
            jti: id,
            iat,
            nbf: iat,
            exp,
            iat_ms: Some(now),
        });
        Ok((token, record))
    }

    async fn list_of(&self, ukey: &str) -> Result<Vec<PersonalToken>, AppError> {
        self.records(&format!("{TOKENS}{ukey}/")).await
    }

    /// The records under `prefix` that parse (one that does not is left out, as a record
    /// [`check`] cannot read counts as revoked).
    async fn records<T: serde::de::DeserializeOwned>(&self, prefix: &str) -> Result<Vec<T>, AppError> {
        let entries = self
            .store
            .list(prefix)
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
        Ok(entries.iter().filter_map(|e| parse(Some(e))).collect())
    }

    /// The tokens `user` holds, expired ones included (until revoked or until the user makes
    /// another), oldest first.
    pub async fn list(&self, user: &str) -> Result<Vec<PersonalToken>, AppError> {
        let mut tokens = self.list_of(&user_key(user)).await?;
        tokens.sort_by(|a, b| a.issued_at_ms.cmp(&b.issued_at_ms).then_with(|| a.id.cmp(&b.id)));
        Ok(tokens)
    }

    /// Revokes token `id` of `user`: refused at once at its next use, on every replica.
    pub async fn revoke(&self, user: &str, id: &str) -> Result<(), AppError> {
        let key = token_key(&user_key(user), id);
        let exists = self
            .store
            .get(&key)
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
        let Some(entry) = exists else {
            return Err(AppError::NotFound(format!(
                "personal access token '{id}' of {user} not found"
            )));
        };
        let op = Op::Delete {
            key,
            expect: Expect::ModRevision(entry.mod_revision),
        };
        self.store
            .commit(vec![op])
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
        Ok(())
    }

    /// The users who ever made a token, by subject.
    pub async fn users(&self) -> Result<Vec<SsoUser>, AppError> {
        self.records(USERS).await
    }

    /// The record of `user`, if they ever made a token.
    pub async fn user(&self, user: &str) -> Result<Option<SsoUser>, AppError> {
        store::get_json::<SsoUser>(self.store.as_ref(), &user_record_key(&user_key(user)))
            .await
            .map(|f| f.map(|(u, _)| u))
            .map_err(|e| AppError::Internal(e.into()))
    }

    /// Disables (or enables again) `user`: while disabled, none of their tokens works and no
    /// new one can be made.
    pub async fn set_disabled(&self, user: &str, disabled: bool) -> Result<SsoUser, AppError> {
        let key = user_record_key(&user_key(user));
        let found = store::get_json::<SsoUser>(self.store.as_ref(), &key)
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
        let Some((mut record, revision)) = found else {
            return Err(AppError::NotFound(format!(
                "SSO user {user} not found: a user is known once they make a personal access token"
            )));
        };
        if record.state == UserState::Deleted {
            return Err(AppError::FailedPrecondition(format!(
                "SSO user {user} was deleted: it can be neither disabled nor enabled"
            )));
        }
        record.state = if disabled {
            UserState::Disabled
        } else {
            UserState::Active
        };
        let op = store::put_json(&key, &record, Expect::ModRevision(revision))
            .map_err(|e| AppError::Internal(e.into()))?;
        self.commit_user(vec![op]).await?;
        Ok(record)
    }

    /// Deletes `user`: their tokens' records go, and a token of theirs made before now is
    /// refused saying so.
    pub async fn delete_user(&self, user: &str) -> Result<(), AppError> {
        let ukey = user_key(user);
        let key = user_record_key(&ukey);
        let found = store::get_json::<SsoUser>(self.store.as_ref(), &key)
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
        let Some((mut record, revision)) = found else {
            return Err(AppError::NotFound(format!(
                "SSO user {user} not found: a user is known once they make a personal access token"
            )));
        };
        record.state = UserState::Deleted;
        record.deleted_at_ms = Some(self.clock.now_ms());
        let op = store::put_json(&key, &record, Expect::ModRevision(revision))
            .map_err(|e| AppError::Internal(e.into()))?;
        // The user's record first: once it says deleted, no token of theirs passes, and the
        // token records can go in batches after.
        self.commit_user(vec![op]).await?;
        let tokens = self
            .store
            .list(&format!("{TOKENS}{ukey}/"))
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
        let deletes = tokens
            .into_iter()
            .map(|e: Entry| Op::Delete {
                key: e.key,
                expect: Expect::Any,
            })
            .collect();
        super::revocations::delete_in_batches(self.store.as_ref(), deletes)
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
        Ok(())
    }

    async fn commit_user(&self, ops: Vec<Op>) -> Result<(), AppError> {
        match self.store.commit(ops).await {
            Ok(_) => Ok(()),
            Err(StoreError::Conflict { .. }) => Err(AppError::Aborted(
                "the user's record changed meanwhile; try again".to_owned(),
            )),
            Err(e) => Err(AppError::Internal(e.into())),
        }
    }

    /// The caller of a verified token whose subject is `pat:<ukey>.<nonce>`: the owner, with the
    /// groups frozen in the record, while the token, its user and the switch allow it.
    pub async fn authenticate(
        &self,
        subject: &str,
        claims: &Claims,
        now_s: i64,
    ) -> Result<Principal, String> {
        let Some((ukey, nonce)) = subject
            .split_once('.')
            .filter(|(u, n)| !u.is_empty() && !n.is_empty())
        else {
            return Err("token subject is invalid".to_owned());
        };
        let keys = vec![token_key(ukey, &claims.jti), user_record_key(ukey)];
        let read = self
            .store
            .get_many(keys)
            .await
            .map_err(|e| format!("cannot check the token now: {e}"))?;
        // A token record that does not read is no token; a user's record that does not read
        // may be a disablement, so it refuses.
        let records = Records {
            token: parse(read[0].as_ref()),
            user: parse(read[1].as_ref()),
        };
        if read[1].is_some() && records.user.is_none() {
            return Err("cannot check the token now: its user's record does not read".to_owned());
        }
        let settings = self.config.peek();
        let token = check(
            &records,
            Self::enabled(&settings),
            &claims.jti,
            nonce,
            claims.issued_at_ms(),
            now_s,
        )?;
        // The token is only as good as the provider that let its user in.
        let provider = settings
            .oidc_providers
            .iter()
            .find(|p| p.id == token.provider && p.issuer == token.issuer);
        if provider.is_none() {
            return Err(format!(
                "the provider of personal access token {} is no longer configured",
                token.id
            ));
        }
        let mut claims_map = serde_json::Map::new();
        claims_map.insert("iss".to_owned(), token.issuer.clone().into());
        let mut principal = SsoPrincipal::from_claims(
            Arc::new(claims_map),
            token.issued_at(),
            (token.expires_at != 0).then_some(token.expires_at),
            None,
        );
        principal.user.clone_from(&token.user);
        principal.username.clone_from(&token.username);
        principal.provider.clone_from(&token.provider);
        principal.groups = Some(token.groups.clone());
        principal.personal_token = Some(token.id.clone());
        Ok(Principal::Sso(principal))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(iat_ms: i64, exp: i64) -> PersonalToken {
        PersonalToken {
            id: "t1".to_owned(),
            user: "p:alice".to_owned(),
            username: "alice@example.com".to_owned(),
            issuer: "https://idp".to_owned(),
            provider: "p".to_owned(),
            groups: vec!["p:devs".to_owned()],
            description: String::new(),
            issued_at_ms: iat_ms,
            expires_at: exp,
            nonce: "n1".to_owned(),
        }
    }

    fn user(state: UserState, deleted_at_ms: Option<i64>) -> SsoUser {
        SsoUser {
            user: "p:alice".to_owned(),
            username: String::new(),
            state,
            deleted_at_ms,
        }
    }

    #[test]
    fn a_live_token_of_an_active_user_passes() {
        let records = Records {
            token: Some(token(1_000, 0)),
            user: Some(user(UserState::Active, None)),
        };
        assert_eq!(
            check(&records, true, "t1", "n1", 1_000, 5).map(|t| &t.id),
            Ok(&"t1".to_owned())
        );
    }

    #[test]
    fn each_refusal_names_its_reason() {
        let live = || Records {
            token: Some(token(1_000, 10)),
            user: Some(user(UserState::Active, None)),
        };
        let off = check(&live(), false, "t1", "n1", 1_000, 5).unwrap_err();
        assert!(off.contains(ENABLED_KEY), "{off}");
        let revoked = Records {
            token: None,
            ..live()
        };
        assert_eq!(
            check(&revoked, true, "t1", "n1", 1_000, 5).unwrap_err(),
            "personal access token t1 has been revoked"
        );
        // A record made again under the same id is another token.
        assert_eq!(
            check(&live(), true, "t1", "n1", 999, 5).unwrap_err(),
            "personal access token t1 has been revoked"
        );
        assert_eq!(
            check(&live(), true, "t1", "n2", 1_000, 5).unwrap_err(),
            "personal access token t1 has been revoked"
        );
        assert_eq!(
            check(&live(), true, "t1", "n1", 1_000, 10).unwrap_err(),
            "token is expired"
        );
        let disabled = Records {
            user: Some(user(UserState::Disabled, None)),
            ..live()
        };
        assert_eq!(
            check(&disabled, true, "t1", "n1", 1_000, 5).unwrap_err(),
            "the SSO user p:alice is disabled by an administrator"
        );
        let deleted = Records {
            token: None,
            user: Some(user(UserState::Deleted, Some(2_000))),
        };
        assert_eq!(
            check(&deleted, true, "t1", "n1", 1_000, 5).unwrap_err(),
            "the SSO user p:alice was deleted by an administrator"
        );
    }

    #[test]
    fn a_deleted_user_who_came_back_has_only_new_tokens() {
        let records = Records {
            token: Some(token(3_000, 0)),
            user: Some(user(UserState::Active, Some(2_000))),
        };
        assert!(check(&records, true, "t1", "n1", 3_000, 5).is_ok());
        let old = Records {
            token: Some(token(1_500, 0)),
            user: Some(user(UserState::Active, Some(2_000))),
        };
        assert!(
            check(&old, true, "t1", "n1", 1_500, 5)
                .unwrap_err()
                .contains("was deleted")
        );
    }

    #[test]
    fn ids_and_user_keys_are_safe_in_store_keys() {
        assert!(check_id("ci-token_1.a").is_ok());
        for bad in ["", "a/b", "a b", &"x".repeat(129)] {
            assert!(check_id(bad).is_err(), "{bad:?}");
        }
        let key = user_key("p:a/b c");
        assert!(!key.contains('/') && !key.contains(':'), "{key}");
    }
}
