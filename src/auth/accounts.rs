//! Local accounts as the server sees them: the configuration (`argocd-cm`,
//! `argocd-secret`) merged with what the server manages in its store.
//!
//! Which password wins: the most recent change. The API writes its change to
//! the store; a change in `argocd-secret` is adopted when the server first
//! sees the new value (at start or on reload), and dated then (or at its
//! `passwordMtime`, if later). So an operator who rotates the secret and a
//! user who changes their password through the API each take effect, the
//! later one last, and neither is silently lost: every adoption is logged.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arc_swap::{ArcSwap, Guard};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use crate::clock::now_ms;
use crate::config::{AccountConfig, ConfigWatch, Settings, TokenRecord};
use crate::error::AppError;
use crate::store::{self, Expect, Store};

/// Store key prefix of account records.
pub const PREFIX: &str = "accounts/";

/// What the server keeps about an account in its store.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountRecord {
    /// bcrypt hash of the password in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_hash: Option<String>,
    /// When the password in force was set, in unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_mtime_ms: Option<i64>,
    /// The `argocd-secret` hash last adopted, to notice when it changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_seen: Option<String>,
    /// The password is the generated initial one (admin only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub initial: bool,
    /// API keys created through the API.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<TokenRecord>,
    /// Ids of API keys deleted through the API (never reused).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub deleted_tokens: BTreeSet<String>,
    /// Tokens issued before this (unix ms) are refused: the account was
    /// disabled or lost a capability, and re-enabling it must not revive them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_before_ms: Option<i64>,
    /// The access last seen in the configuration: enabled, login, apiKey.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen_access: Option<(bool, bool, bool)>,
}

impl AccountRecord {
    pub fn store_key(name: &str) -> String {
        format!("{PREFIX}{name}")
    }

    /// Adopts the secret's password if it changed since last seen. Returns
    /// whether the record changed.
    pub fn adopt_secret(&mut self, config: &AccountConfig, now_ms: i64) -> bool {
        let Some(hash) = &config.password_hash else {
            return false;
        };
        if self.secret_seen.as_ref() == Some(hash) {
            return false;
        }
        let declared = config.password_mtime.map(|t| t.as_millisecond());
        let mtime = match (self.password_hash.is_some(), declared) {
            // First sight of any password: the secret's own date stands, and
            // without one no token is judged by it (as Argo CD does), so
            // tokens from an Argo CD using the same key keep working.
            (false, Some(d)) => Some(d),
            (false, None) => self.password_mtime_ms,
            (true, Some(d)) => Some(d.max(now_ms)),
            (true, None) => Some(now_ms),
        };
        self.password_hash = Some(hash.clone());
        self.password_mtime_ms = mtime;
        self.secret_seen = Some(hash.clone());
        self.initial = false;
        true
    }
}

impl AccountRecord {
    /// Notes the account's access in the configuration. Losing any of it
    /// (disabled, a capability removed) revokes every token issued so far.
    /// Returns whether the record changed.
    pub fn note_access(&mut self, config: &AccountConfig, now_ms: i64) -> bool {
        let now = (config.enabled, config.login, config.api_key);
        let before = self.seen_access.replace(now);
        if before == Some(now) {
            return false;
        }
        if let Some((enabled, login, api_key)) = before
            && ((enabled && !now.0) || (login && !now.1) || (api_key && !now.2))
        {
            self.revoked_before_ms = Some(now_ms);
        }
        true
    }

    /// What remains of an account removed from the configuration.
    pub fn forgotten(now_ms: i64) -> Self {
        Self {
            password_mtime_ms: Some(now_ms),
            revoked_before_ms: Some(now_ms),
            ..Self::default()
        }
    }

    pub fn is_forgotten(&self) -> bool {
        self.password_hash.is_none() && self.tokens.is_empty() && self.revoked_before_ms.is_some()
    }
}

/// One account with everything needed to check a token or a password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub enabled: bool,
    pub login: bool,
    pub api_key: bool,
    pub password_hash: Option<Arc<str>>,
    pub password_mtime_ms: Option<i64>,
    /// Valid API keys by id.
    pub tokens: BTreeMap<String, TokenRecord>,
    pub revoked_before_ms: Option<i64>,
}

impl Account {
    pub fn capabilities(&self) -> Vec<String> {
        let mut caps = Vec::new();
        if self.login {
            caps.push("login".to_owned());
        }
        if self.api_key {
            caps.push("apiKey".to_owned());
        }
        caps
    }
}

/// Every account, as of one configuration and one set of records.
#[derive(Clone, Debug, Default)]
pub struct AccountBook {
    accounts: BTreeMap<String, Account>,
}

impl AccountBook {
    pub fn build(settings: &Settings, records: &BTreeMap<String, AccountRecord>) -> Self {
        let empty = AccountRecord::default();
        let accounts = settings
            .accounts
            .values()
            .map(|config| {
                let record = records.get(&config.name).unwrap_or(&empty);
                let mut tokens: BTreeMap<String, TokenRecord> = config
                    .tokens
                    .iter()
                    .filter(|t| !record.deleted_tokens.contains(&t.id))
                    .map(|t| (t.id.clone(), t.clone()))
                    .collect();
                tokens.extend(record.tokens.iter().map(|t| (t.id.clone(), t.clone())));
                let account = Account {
                    name: config.name.clone(),
                    enabled: config.enabled,
                    login: config.login,
                    api_key: config.api_key,
                    password_hash: record.password_hash.as_deref().map(Arc::from),
                    password_mtime_ms: record.password_mtime_ms,
                    tokens,
                    revoked_before_ms: record.revoked_before_ms,
                };
                (config.name.clone(), account)
            })
            .collect();
        Self { accounts }
    }

    pub fn get(&self, name: &str) -> Option<&Account> {
        self.accounts.get(name)
    }

    pub fn all(&self) -> impl Iterator<Item = &Account> {
        self.accounts.values()
    }

    /// True when no enabled account can log in with a password.
    pub fn logins_disabled(&self) -> bool {
        !self.accounts.values().any(|a| a.enabled && a.login)
    }
}

/// The accounts in force: the configuration merged with the records in the store. Every change
/// of a record is written to the store, then published as a new [`AccountBook`].
pub struct Accounts {
    store: Arc<dyn Store>,
    config: Arc<ConfigWatch>,
    /// The store's records; the lock serialises every change.
    records: Mutex<BTreeMap<String, AccountRecord>>,
    book: ArcSwap<AccountBook>,
}

impl std::fmt::Debug for Accounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accounts").finish_non_exhaustive()
    }
}

impl Accounts {
    /// Loads the records and adopts the configuration's passwords.
    pub async fn open(store: Arc<dyn Store>, config: Arc<ConfigWatch>) -> anyhow::Result<Self> {
        let mut records = BTreeMap::new();
        for entry in store.list(PREFIX).await? {
            let name = entry.key.trim_start_matches(PREFIX).to_owned();
            records.insert(name, serde_json::from_slice(&entry.value)?);
        }
        let accounts = Self {
            book: ArcSwap::from_pointee(AccountBook::build(&config.current(), &records)),
            records: Mutex::new(records),
            store,
            config,
        };
        accounts.reload().await?;
        Ok(accounts)
    }

    /// The accounts as of now, without copying them (a token check on every request).
    pub fn book(&self) -> Guard<Arc<AccountBook>> {
        self.book.load()
    }

    pub fn get(&self, name: &str) -> Option<Account> {
        self.book.load().get(name).cloned()
    }

    pub fn all(&self) -> Vec<Account> {
        self.book.load().all().cloned().collect()
    }

    pub fn logins_disabled(&self) -> bool {
        self.book.load().logins_disabled()
    }

    /// Whether account `name`'s password is the generated initial one.
    pub async fn has_initial_password(&self, name: &str) -> bool {
        self.records.lock().await.get(name).is_some_and(|r| r.initial)
    }

    /// Takes the current configuration into effect: adopts changed passwords from
    /// `argocd-secret`, forgets accounts removed from it, then publishes.
    pub async fn reload(&self) -> anyhow::Result<()> {
        let settings = self.config.current();
        let now = now_ms();
        let mut records = self.records.lock().await;
        let mut ops = Vec::new();
        for config in settings.accounts.values() {
            let record = records.entry(config.name.clone()).or_default();
            let adopted = record.adopt_secret(config, now);
            if adopted {
                tracing::info!(account = %config.name, "password taken from argocd-secret (newer than the one in force)");
            }
            if adopted | record.note_access(config, now) {
                ops.push(store::put_json(
                    &AccountRecord::store_key(&config.name),
                    &*record,
                    Expect::Any,
                )?);
            }
        }
        // An account removed from the configuration loses what the server kept for it, so
        // a later account of the same name starts clean.
        for (name, record) in records.iter_mut() {
            if !settings.accounts.contains_key(name) && !record.is_forgotten() {
                *record = AccountRecord::forgotten(now);
                tracing::info!(account = %name, "account removed from the configuration: its password and API keys are forgotten");
                ops.push(store::put_json(
                    &AccountRecord::store_key(name),
                    &*record,
                    Expect::Any,
                )?);
            }
        }
        if !ops.is_empty() {
            self.store.commit(ops).await?;
        }
        self.book.store(Arc::new(AccountBook::build(&settings, &records)));
        Ok(())
    }

    /// Changes the record of account `name` durably, then publishes the new state (nothing is
    /// written when `change` leaves it as it was).
    pub async fn update<T>(
        &self,
        name: &str,
        change: impl FnOnce(&mut AccountRecord) -> Result<T, AppError>,
    ) -> Result<T, AppError> {
        let mut records = self.records.lock().await;
        let before = records.get(name).cloned();
        let mut record = before.clone().unwrap_or_default();
        let out = change(&mut record)?;
        if before.as_ref() == Some(&record) {
            return Ok(out);
        }
        let op = store::put_json(&AccountRecord::store_key(name), &record, Expect::Any)
            .map_err(|e| AppError::Internal(e.into()))?;
        self.store
            .commit(vec![op])
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
        records.insert(name.to_owned(), record);
        self.book
            .store(Arc::new(AccountBook::build(&self.config.current(), &records)));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(hash: Option<&str>, mtime: Option<i64>) -> AccountConfig {
        AccountConfig {
            name: "alice".into(),
            enabled: true,
            login: true,
            api_key: false,
            password_hash: hash.map(Into::into),
            password_mtime: mtime.map(|s| jiff::Timestamp::from_second(s).unwrap()),
            tokens: Vec::new(),
        }
    }

    #[test]
    fn secret_password_is_adopted_once() {
        let mut r = AccountRecord::default();
        assert!(r.adopt_secret(&config(Some("$2a$h1"), Some(1000)), 5_000_000));
        assert_eq!(r.password_mtime_ms, Some(1_000_000));
        assert!(!r.adopt_secret(&config(Some("$2a$h1"), Some(1000)), 6_000_000));
    }

    #[test]
    fn api_change_stands_until_the_secret_changes_again() {
        let mut r = AccountRecord::default();
        r.adopt_secret(&config(Some("$2a$h1"), None), 1_000);
        // The API changes the password.
        r.password_hash = Some("$2a$api".into());
        r.password_mtime_ms = Some(2_000);
        assert!(!r.adopt_secret(&config(Some("$2a$h1"), None), 3_000));
        assert_eq!(r.password_hash.as_deref(), Some("$2a$api"));
        // The operator rotates the secret: the newer change wins, dated now.
        assert!(r.adopt_secret(&config(Some("$2a$h2"), Some(1)), 4_000));
        assert_eq!(r.password_hash.as_deref(), Some("$2a$h2"));
        assert_eq!(r.password_mtime_ms, Some(4_000));
    }

    #[test]
    fn losing_access_revokes_tokens_issued_before() {
        let mut r = AccountRecord::default();
        let mut c = config(None, None);
        assert!(r.note_access(&c, 1_000));
        assert_eq!(r.revoked_before_ms, None);
        c.enabled = false;
        assert!(r.note_access(&c, 2_000));
        assert_eq!(r.revoked_before_ms, Some(2_000));
        // Re-enabling does not bring the old tokens back.
        c.enabled = true;
        assert!(r.note_access(&c, 3_000));
        assert_eq!(r.revoked_before_ms, Some(2_000));
    }
}
