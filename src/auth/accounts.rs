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

use serde::{Deserialize, Serialize};

use super::mirror::Mirror;
use crate::clock::Clock;
use crate::config::{AccountConfig, ConfigWatch, Settings, TokenRecord};
use crate::error::AppError;
use crate::store::{self, Entry, Expect, Op, Store, StoreError};

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

/// An account of the configuration with what the store records for it.
pub fn merge(config: &AccountConfig, record: &AccountRecord) -> Account {
    let mut tokens: BTreeMap<String, TokenRecord> = config
        .tokens
        .iter()
        .filter(|t| !record.deleted_tokens.contains(&t.id))
        .map(|t| (t.id.clone(), t.clone()))
        .collect();
    tokens.extend(record.tokens.iter().map(|t| (t.id.clone(), t.clone())));
    Account {
        name: config.name.clone(),
        enabled: config.enabled,
        login: config.login,
        api_key: config.api_key,
        password_hash: record.password_hash.as_deref().map(Arc::from),
        password_mtime_ms: record.password_mtime_ms,
        tokens,
        revoked_before_ms: record.revoked_before_ms,
    }
}

/// API key `id` of an account as [`merge`] would list it, without merging.
pub fn api_key<'a>(
    config: &'a AccountConfig,
    record: &'a AccountRecord,
    id: &str,
) -> Option<&'a TokenRecord> {
    record.tokens.iter().rfind(|t| t.id == id).or_else(|| {
        config
            .tokens
            .iter()
            .rfind(|t| t.id == id && !record.deleted_tokens.contains(id))
    })
}

/// Changes of one record lost to another writer (another replica) before giving up.
const UPDATE_ATTEMPTS: usize = 16;

/// The accounts in force: the configuration merged with the records in the store. Every
/// change is a conditional write of the record as the store has it (retried on a conflict), so
/// replicas sharing a store never lose each other's changes; a read asks the store, or the
/// mirror of what this process wrote when it is the store's only writer.
pub struct Accounts {
    clock: Clock,
    store: Arc<dyn Store>,
    config: Arc<ConfigWatch>,
    /// The records by account name.
    mirror: Mirror<AccountRecord>,
}

impl std::fmt::Debug for Accounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accounts").finish_non_exhaustive()
    }
}

/// A stored record of account `name`, and its mod revision (`None`: no record).
pub fn parse_record(name: &str, entry: Option<&Entry>) -> Result<(AccountRecord, Option<u64>), StoreError> {
    match entry {
        None => Ok((AccountRecord::default(), None)),
        Some(entry) => serde_json::from_slice(&entry.value)
            .map(|r| (r, Some(entry.mod_revision)))
            .map_err(|e| {
                StoreError::Corrupt(format!("the stored record of account {name} does not read: {e}"))
            }),
    }
}

fn expect(rev: Option<u64>) -> Expect {
    rev.map_or(Expect::Absent, Expect::ModRevision)
}

fn internal(e: impl Into<anyhow::Error>) -> AppError {
    AppError::Internal(e.into())
}

impl Accounts {
    /// Adopts the configuration's passwords. `exclusive`: this process is the store's only
    /// writer, and reads answer from what it wrote.
    pub async fn open(
        store: Arc<dyn Store>,
        config: Arc<ConfigWatch>,
        exclusive: bool,
        clock: Clock,
    ) -> anyhow::Result<Self> {
        let mut records = Vec::new();
        for entry in store.list(PREFIX).await? {
            let name = entry.key[PREFIX.len()..].to_owned();
            let (record, _) = parse_record(&name, Some(&entry))?;
            records.push((name, entry.mod_revision, record));
        }
        let mirror = Mirror::load(exclusive, records);
        let accounts = Self {
            clock,
            store,
            config,
            mirror,
        };
        accounts.reload(&accounts.config.current()).await?;
        Ok(accounts)
    }

    /// Account `name` as the store has it now.
    pub async fn get(&self, name: &str) -> Result<Option<Account>, AppError> {
        let settings = self.config.current();
        let Some(config) = settings.accounts.get(name) else {
            return Ok(None);
        };
        let record = self.record(name).await.map_err(internal)?;
        Ok(Some(merge(config, &record)))
    }

    /// The stored record of account `name` (empty when there is none): from the mirror, else
    /// from the store.
    pub async fn record(&self, name: &str) -> Result<Arc<AccountRecord>, StoreError> {
        match self.mirror.get(name) {
            Some(held) => Ok(held.unwrap_or_default()),
            None => {
                let entry = self.store.get(&AccountRecord::store_key(name)).await?;
                Ok(Arc::new(parse_record(name, entry.as_ref())?.0))
            }
        }
    }

    /// Record `name` from the mirror: `None` when the store must be read (it is shared).
    pub fn held(&self, name: &str) -> Option<Arc<AccountRecord>> {
        self.mirror.get(name).map(Option::unwrap_or_default)
    }

    /// Record `name` as last written or read here, for a shared store that cannot be reached.
    pub fn last_known(&self, name: &str) -> Option<Arc<AccountRecord>> {
        self.mirror.last_known(name)
    }

    /// A record of account `name` read from the store, at its mod revision.
    pub fn note_read(&self, name: &str, revision: u64, record: &AccountRecord) {
        self.mirror.note_written(name, revision, Some(record.clone()));
    }

    /// Every account of the configuration, as the store has them now.
    pub async fn all(&self) -> Result<Vec<Account>, AppError> {
        let settings = self.config.current();
        let records = self.records().await.map_err(internal)?;
        let empty = (AccountRecord::default(), None);
        Ok(settings
            .accounts
            .values()
            .map(|c| merge(c, &records.get(&c.name).unwrap_or(&empty).0))
            .collect())
    }

    /// True when no enabled account can log in with a password (the configuration decides).
    pub fn logins_disabled(&self) -> bool {
        !self.config.peek().accounts.values().any(|a| a.enabled && a.login)
    }

    /// Whether account `name`'s password is the generated initial one.
    pub async fn has_initial_password(&self, name: &str) -> Result<bool, StoreError> {
        Ok(self.record(name).await?.initial)
    }

    async fn records(&self) -> Result<BTreeMap<String, (AccountRecord, Option<u64>)>, StoreError> {
        let mut records = BTreeMap::new();
        for entry in self.store.list(PREFIX).await? {
            let name = entry.key[PREFIX.len()..].to_owned();
            let record = parse_record(&name, Some(&entry))?;
            records.insert(name, record);
        }
        Ok(records)
    }

    /// Takes the current configuration into effect: adopts changed passwords from
    /// `argocd-secret`, notes lost access, forgets accounts removed from it. Replicas
    /// reloading the same configuration at once agree: the second finds the first's record.
    pub async fn reload(&self, settings: &Settings) -> anyhow::Result<()> {
        let now = self.clock.now_ms();
        let records = self.records().await?;
        let mut names: BTreeSet<&String> = settings.accounts.keys().collect();
        names.extend(records.keys());
        for name in names {
            let config = settings.accounts.get(name.as_str());
            let mut logged = false;
            self.update(name, |record| {
                match config {
                    Some(config) => {
                        let adopted = record.adopt_secret(config, now);
                        if adopted && !logged {
                            logged = true;
                            tracing::info!(account = %name, "password taken from argocd-secret (newer than the one in force)");
                        }
                        record.note_access(config, now);
                    }
                    // An account removed from the configuration loses what the server kept
                    // for it, so a later account of the same name starts clean.
                    None if !record.is_forgotten() => {
                        *record = AccountRecord::forgotten(now);
                        if !logged {
                            logged = true;
                            tracing::info!(account = %name, "account removed from the configuration: its password and API keys are forgotten");
                        }
                    }
                    None => {}
                }
                Ok(())
            })
            .await
            .map_err(|e| anyhow::anyhow!("cannot update the record of account {name}: {e}"))?;
        }
        Ok(())
    }

    /// Changes the record of account `name` durably (nothing is written when `change` leaves
    /// it as it was). `change` sees the record as stored and may run again if another writer
    /// changed it meanwhile.
    pub async fn update<T>(
        &self,
        name: &str,
        mut change: impl FnMut(&mut AccountRecord) -> Result<T, AppError>,
    ) -> Result<T, AppError> {
        self.update_with(name, |record| Ok((change(record)?, Vec::new())))
            .await
    }

    /// [`Self::update`] whose `change` also names other writes to commit with the record's.
    pub async fn update_with<T>(
        &self,
        name: &str,
        mut change: impl FnMut(&mut AccountRecord) -> Result<(T, Vec<Op>), AppError>,
    ) -> Result<T, AppError> {
        let key = AccountRecord::store_key(name);
        for _ in 0..UPDATE_ATTEMPTS {
            let entry = self.store.get(&key).await.map_err(internal)?;
            let (before, rev) = parse_record(name, entry.as_ref()).map_err(internal)?;
            let mut record = before.clone();
            let (out, mut ops) = change(&mut record)?;
            if record == before && ops.is_empty() {
                return Ok(out);
            }
            let written = record != before;
            if written {
                self.save_to_installation(name, &before, &mut record).await?;
            }
            if written {
                ops.push(store::put_json(&key, &record, expect(rev)).map_err(internal)?);
            }
            match self.store.commit(ops).await {
                Ok(revision) => {
                    if written {
                        self.mirror.note_written(name, revision, Some(record));
                    }
                    return Ok(out);
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(internal(e)),
            }
        }
        Err(AppError::Unavailable(format!(
            "the record of account {name} kept changing ({UPDATE_ATTEMPTS} attempts): try again"
        )))
    }
}

impl Accounts {
    /// On an installation (`--kube`), writes what upstream keeps of the account in
    /// `argocd-secret` (its password, the password's date and its API keys: util/settings/
    /// accounts.go saveAccount) before the record is committed, so that argocd-server and every
    /// other replica see the change; the record then notes the password as seen there, so that
    /// reading it back is not taken for an operator's edit.
    async fn save_to_installation(
        &self,
        name: &str,
        before: &AccountRecord,
        record: &mut AccountRecord,
    ) -> Result<(), AppError> {
        if !self.config.on_installation() {
            return Ok(());
        }
        let settings = self.config.current();
        let Some(config) = settings.accounts.get(name) else {
            return Ok(());
        };
        // Only what the secret does not hold yet: a password adopted from it (a start, a
        // reload) is not written back, so a start needs no right to change it.
        let account = merge(config, record);
        let secret_tokens: BTreeMap<&str, &TokenRecord> =
            config.tokens.iter().map(|t| (t.id.as_str(), t)).collect();
        let tokens: BTreeMap<&str, &TokenRecord> =
            account.tokens.iter().map(|(id, t)| (id.as_str(), t)).collect();
        if account.password_hash.as_deref() == config.password_hash.as_deref() && tokens == secret_tokens {
            return Ok(());
        }
        let keys = installation_keys(name, &account);
        if keys == installation_keys(name, &merge(config, before)) {
            return Ok(());
        }
        self.config.save_secret_keys(&keys).await.map_err(|e| {
            AppError::Unavailable(format!("the change of account {name} was not saved: {e:#}"))
        })?;
        if record.password_hash != before.password_hash {
            record.secret_seen = record.password_hash.clone();
        }
        Ok(())
    }
}

/// The keys of `argocd-secret` that hold `account`, as upstream names and formats them:
/// `admin.password`, `admin.passwordMtime` and `admin.tokens` for admin,
/// `accounts.<name>.password` and so on for the others; the password's date in RFC 3339 (to
/// the second), the keys as a JSON list of `{id, iat, exp}` (`exp` left out when they never
/// expire). A key upstream would leave empty (no password, no keys) is removed.
pub fn installation_keys(name: &str, account: &Account) -> BTreeMap<String, Option<String>> {
    let prefix = if name == "admin" {
        "admin".to_owned()
    } else {
        format!("accounts.{name}")
    };
    let mtime = account
        .password_mtime_ms
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    let mut tokens: Vec<&TokenRecord> = account.tokens.values().collect();
    tokens.sort_by(|a, b| (a.iat, &a.id).cmp(&(b.iat, &b.id)));
    let listed: Vec<serde_json::Value> = tokens
        .iter()
        .map(|t| {
            let mut entry = serde_json::json!({"id": t.id, "iat": t.iat});
            if t.exp != 0 {
                entry["exp"] = serde_json::Value::from(t.exp);
            }
            entry
        })
        .collect();
    BTreeMap::from([
        (
            format!("{prefix}.password"),
            account.password_hash.as_deref().map(str::to_owned),
        ),
        (format!("{prefix}.passwordMtime"), mtime),
        (
            format!("{prefix}.tokens"),
            (!listed.is_empty()).then(|| serde_json::Value::Array(listed).to_string()),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installation_keys_are_upstreams() {
        let mut config = config(None, None);
        config.name = "ci".into();
        let record = AccountRecord {
            password_hash: Some("$2a$10$hash".into()),
            password_mtime_ms: Some(1_700_000_000_123),
            tokens: vec![
                TokenRecord {
                    id: "b".into(),
                    iat: 20,
                    exp: 0,
                },
                TokenRecord {
                    id: "a".into(),
                    iat: 10,
                    exp: 99,
                },
            ],
            ..AccountRecord::default()
        };
        let keys = installation_keys("ci", &merge(&config, &record));
        assert_eq!(keys["accounts.ci.password"].as_deref(), Some("$2a$10$hash"));
        assert_eq!(
            keys["accounts.ci.passwordMtime"].as_deref(),
            Some("2023-11-14T22:13:20Z")
        );
        let tokens: serde_json::Value =
            serde_json::from_str(keys["accounts.ci.tokens"].as_deref().unwrap()).unwrap();
        assert_eq!(
            tokens,
            serde_json::json!([{"id": "a", "iat": 10, "exp": 99}, {"id": "b", "iat": 20}])
        );
        let empty = installation_keys("admin", &merge(&config, &AccountRecord::default()));
        assert_eq!(
            empty,
            BTreeMap::from([
                ("admin.password".to_owned(), None),
                ("admin.passwordMtime".to_owned(), None),
                ("admin.tokens".to_owned(), None),
            ])
        );
    }

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
