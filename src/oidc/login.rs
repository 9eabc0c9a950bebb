//! Logins in progress: what `/auth/login` promised the provider and the browser, carried
//! to `/auth/callback` by the browser itself, in a cookie no one else can read or forge.
//!
//! No server keeps a table of them. `/auth/login` seals the state, PKCE verifier, nonce,
//! return URL, redirect URI, provider name and creation time ([`crate::seal`], under a key
//! derived from the server key for [`SEAL_PURPOSE`]) into the [`STATE_COOKIE`] (HttpOnly,
//! `Path=<base href>auth`, five minutes). The callback opens it and accepts the login only if:
//!
//! - the cookie is there and opens (not altered, sealed by a server with the same server key
//!   for this purpose and key id): the cookie is what binds the login to the browser;
//! - the `state` parameter is the sealed one (so a callback meant for another browser, or a
//!   code injected with another login's state, does not pass);
//! - it is younger than [`LOGIN_TTL`];
//! - the state was never accepted before: the first accepted callback records
//!   `oidc-used/<SHA-256 of the state>` in the store (an [`Expect::Absent`] put), so a
//!   replayed callback is refused on every server sharing the store, even one racing it.
//!
//! So a login may start on one server process and come back to another that shares the store
//! and the server key. A change of the server key ends the logins in progress (they start
//! again).
//!
//! Bounds. The per-client and global limits of the former in-memory table are gone with the
//! table: there is nothing to exhaust. What replaces it is bounded too: a used-state record
//! is written only for a sealed state whose code the provider has just exchanged (a login
//! completed at the provider, not merely started), and it is purged once the login would
//! have expired anyway ([`LoginStates::purge`]). A bad callback writes nothing. The cookie
//! stays below one browser cookie ([`MAX_COOKIE_VALUE`]; the return URL is bounded by
//! `safe_return_url`).
//!
//! The random values are tiphys's own, from the CSPRNG: the state carries 190 bits, the PKCE
//! verifier is 64 characters (`openidconnect` turns it into its S256 challenge).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use crate::random;
use crate::seal::{SealError, SealKey};
use crate::store::{self, Expect, Store, StoreError};

/// The cookie that carries a login to its callback (Argo CD's name).
pub const STATE_COOKIE: &str = "argocd.oauthstate";
/// How long a login may take at the provider (Argo CD's `StateCookieMaxAge`).
pub const LOGIN_TTL: Duration = Duration::from_secs(5 * 60);
/// The purpose label of the key the cookie is sealed with; a new layout of [`Sealed`] takes a
/// new label, so old cookies fail cleanly.
pub const SEAL_PURPOSE: &str = "tiphys/oidc-login-state/v1";
/// The key id the cookie is sealed under (there is one key: the server key's).
pub const SEAL_KEY_ID: u8 = 1;
/// The longest cookie value handed out: with its name and attributes it stays below the
/// 4,093 bytes one cookie may have.
pub const MAX_COOKIE_VALUE: usize = 3800;
/// How far ahead of this server's clock another server's may be.
const CLOCK_SKEW_S: i64 = 60;
/// Where accepted states are remembered.
const USED_PREFIX: &str = "oidc-used/";

/// Random lengths, in characters of 6 bits (`crate::random::token`).
const STATE_CHARS: usize = 32; // 190 bits
const VERIFIER_CHARS: usize = 64; // RFC 7636: 43..=128 unreserved characters
const NONCE_CHARS: usize = 32;

/// What the cookie carries (short names: it travels with the callback).
#[derive(Serialize, Deserialize)]
struct Sealed {
    /// The state.
    s: String,
    /// The PKCE verifier.
    v: String,
    /// The nonce.
    n: String,
    /// Where the browser goes afterwards.
    r: String,
    /// The redirect URI the authorization request named (the code exchange names it again).
    u: String,
    /// Created, Unix seconds.
    t: i64,
    /// The name of the provider the login was sent to: the callback goes on with that one
    /// only. Absent in cookies sealed before there could be several: the default provider.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    p: String,
}

/// A login whose callback passed the cookie checks.
#[derive(Debug, Clone)]
pub struct Pending {
    pub state: String,
    pub nonce: String,
    pub verifier: String,
    /// Where to send the browser afterwards (a path on this server).
    pub return_to: String,
    pub redirect_uri: String,
    /// Unix seconds.
    pub created: i64,
    /// The provider the login was sent to ("": the default one).
    pub provider: String,
}

/// What `/auth/login` hands out.
#[derive(Debug)]
pub struct Begun {
    pub state: String,
    pub nonce: String,
    /// The PKCE verifier (the authorization request carries its S256 challenge).
    pub verifier: String,
    /// The value of the [`STATE_COOKIE`].
    pub cookie: String,
}

/// Why a login cannot start or a callback is refused. The browser learns only that the login
/// must start again; the kinds are for the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("the login state cookie is missing")]
    NoCookie,
    #[error("the login state cookie does not open: {0}")]
    Sealed(SealError),
    #[error("the login state cookie is not base64url or not a login state")]
    Malformed,
    #[error("the state parameter is not the one sealed in this browser's cookie")]
    Mismatch,
    #[error("the login has expired")]
    Expired,
    #[error("the login state was already used")]
    Used,
    #[error("the login state does not fit in a cookie")]
    TooLarge,
    #[error("the store cannot be used: {0}")]
    Store(String),
}

/// Logins in progress across servers: the cookie format, and the used states in the store.
pub struct LoginStates {
    store: Arc<dyn Store>,
}

impl std::fmt::Debug for LoginStates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginStates").finish_non_exhaustive()
    }
}

/// The store key remembering `state` (hashed: the state itself went through URLs and logs).
fn used_key(state: &str) -> String {
    let digest = Sha256::digest(state.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{USED_PREFIX}{hex}")
}

#[derive(Serialize, Deserialize)]
struct Used {
    /// Unix seconds after which no cookie carrying the state is accepted anyway.
    exp: i64,
}

fn ttl_s() -> i64 {
    i64::try_from(LOGIN_TTL.as_secs()).unwrap_or(i64::MAX)
}

fn store_error(err: StoreError) -> StateError {
    StateError::Store(err.to_string())
}

impl LoginStates {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// A new login returning to `return_to`, sealed with `key` at `now_s` (Unix seconds).
    pub fn begin(
        key: &SealKey,
        return_to: String,
        redirect_uri: String,
        provider: &str,
        now_s: i64,
    ) -> Result<Begun, StateError> {
        let sealed = Sealed {
            s: random::token(STATE_CHARS),
            v: random::token(VERIFIER_CHARS),
            n: random::token(NONCE_CHARS),
            r: return_to,
            u: redirect_uri,
            t: now_s,
            p: provider.to_owned(),
        };
        let plain = serde_json::to_vec(&sealed).map_err(|_| StateError::Malformed)?;
        let cookie = URL_SAFE_NO_PAD.encode(key.seal(&plain, STATE_COOKIE.as_bytes()));
        if cookie.len() > MAX_COOKIE_VALUE {
            return Err(StateError::TooLarge);
        }
        Ok(Begun {
            state: sealed.s,
            nonce: sealed.n,
            verifier: sealed.v,
            cookie,
        })
    }

    /// The login in `cookie`, if `state` is the one it carries and it has not expired at
    /// `now_s`. Reads and writes nothing: whether it was used is [`Self::check_unused`]'s.
    pub fn open(key: &SealKey, state: &str, cookie: Option<&str>, now_s: i64) -> Result<Pending, StateError> {
        let cookie = cookie.filter(|c| !c.is_empty()).ok_or(StateError::NoCookie)?;
        if cookie.len() > MAX_COOKIE_VALUE {
            return Err(StateError::Malformed);
        }
        let sealed = URL_SAFE_NO_PAD
            .decode(cookie)
            .map_err(|_| StateError::Malformed)?;
        let plain = key
            .open(&sealed, STATE_COOKIE.as_bytes())
            .map_err(StateError::Sealed)?;
        let login: Sealed = serde_json::from_slice(&plain).map_err(|_| StateError::Malformed)?;
        if !bool::from(login.s.as_bytes().ct_eq(state.as_bytes())) {
            return Err(StateError::Mismatch);
        }
        if now_s >= login.t.saturating_add(ttl_s()) || login.t > now_s.saturating_add(CLOCK_SKEW_S) {
            return Err(StateError::Expired);
        }
        Ok(Pending {
            state: login.s,
            nonce: login.n,
            verifier: login.v,
            return_to: login.r,
            redirect_uri: login.u,
            created: login.t,
            provider: login.p,
        })
    }

    /// Refuses a login whose state was accepted before (checked before the provider is asked
    /// to exchange its code; [`Self::mark_used`] settles races).
    pub async fn check_unused(&self, login: &Pending) -> Result<(), StateError> {
        match self.store.get(&used_key(&login.state)).await {
            Ok(None) => Ok(()),
            Ok(Some(_)) => Err(StateError::Used),
            Err(err) => Err(store_error(err)),
        }
    }

    /// Records `login`'s state as accepted, once: a second call, from any server sharing the
    /// store, gets [`StateError::Used`]. Kept until no cookie carrying it can be accepted.
    pub async fn mark_used(&self, login: &Pending) -> Result<(), StateError> {
        let exp = login.created.saturating_add(ttl_s() + CLOCK_SKEW_S);
        let op =
            store::put_json(&used_key(&login.state), &Used { exp }, Expect::Absent).map_err(store_error)?;
        match self.store.commit(vec![op]).await {
            Ok(_) => Ok(()),
            Err(StoreError::Conflict { .. }) => Err(StateError::Used),
            Err(err) => Err(store_error(err)),
        }
    }

    /// Forgets the used states whose logins have expired anyway (at `now_s`); how many are
    /// still remembered.
    pub async fn purge(&self, now_s: i64) -> Result<usize, StoreError> {
        let live = store::load_live::<Used>(self.store.as_ref(), USED_PREFIX, |u| u.exp > now_s).await?;
        Ok(live.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::FileStore;

    const CB: &str = "https://cd.example.com/auth/callback";
    const NOW: i64 = 1_800_000_000;

    fn key() -> SealKey {
        SealKey::derive(b"server key", SEAL_PURPOSE, SEAL_KEY_ID)
    }

    fn states() -> (LoginStates, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(FileStore::open(dir.path()).unwrap());
        (LoginStates::new(store), dir)
    }

    #[test]
    fn the_cookie_carries_the_login_to_any_server_with_the_key() {
        let begun = LoginStates::begin(&key(), "/applications".into(), CB.into(), "default", NOW).unwrap();
        assert!(begun.state.len() * 6 >= 128);
        assert!((43..=128).contains(&begun.verifier.len()), "RFC 7636 verifier");
        let verifier = openidconnect::PkceCodeVerifier::new(begun.verifier.clone());
        let challenge = openidconnect::PkceCodeChallenge::from_code_verifier_sha256(&verifier);
        assert_eq!(challenge.method().as_str(), "S256");
        // Nothing readable in the cookie.
        for secret in [
            begun.state.as_str(),
            &begun.verifier,
            &begun.nonce,
            "/applications",
        ] {
            assert!(!begun.cookie.contains(secret));
        }
        // Another process derives the same key from the same server key.
        let login = LoginStates::open(&key(), &begun.state, Some(&begun.cookie), NOW + 10).unwrap();
        assert_eq!(
            (
                login.nonce,
                login.verifier,
                login.return_to.as_str(),
                login.redirect_uri.as_str()
            ),
            (begun.nonce, begun.verifier, "/applications", CB)
        );
        assert_eq!(login.created, NOW);
    }

    #[test]
    fn bad_cookies_and_states_are_refused() {
        let begun = LoginStates::begin(&key(), "/".into(), CB.into(), "default", NOW).unwrap();
        let open = |key: &SealKey, state: &str, cookie: Option<&str>, now: i64| {
            LoginStates::open(key, state, cookie, now).unwrap_err()
        };
        assert_eq!(open(&key(), &begun.state, None, NOW), StateError::NoCookie);
        assert_eq!(open(&key(), &begun.state, Some(""), NOW), StateError::NoCookie);
        assert_eq!(
            open(&key(), "another-state", Some(&begun.cookie), NOW),
            StateError::Mismatch
        );
        // Tampered: every character changed in turn.
        let bytes = begun.cookie.as_bytes();
        for i in (0..bytes.len()).step_by(7) {
            let mut bad = bytes.to_vec();
            bad[i] = if bad[i] == b'A' { b'B' } else { b'A' };
            let bad = String::from_utf8(bad).unwrap();
            assert!(
                LoginStates::open(&key(), &begun.state, Some(&bad), NOW).is_err(),
                "{i}"
            );
        }
        assert_eq!(
            open(&key(), &begun.state, Some("not base64!"), NOW),
            StateError::Malformed
        );
        let other_server = SealKey::derive(b"another server key", SEAL_PURPOSE, SEAL_KEY_ID);
        assert_eq!(
            open(&other_server, &begun.state, Some(&begun.cookie), NOW),
            StateError::Sealed(SealError::Forged)
        );
        let other_purpose = SealKey::derive(b"server key", "tiphys/other/v1", SEAL_KEY_ID);
        assert_eq!(
            open(&other_purpose, &begun.state, Some(&begun.cookie), NOW),
            StateError::Sealed(SealError::Forged)
        );
        let other_id = SealKey::derive(b"server key", SEAL_PURPOSE, 2);
        assert!(matches!(
            open(&other_id, &begun.state, Some(&begun.cookie), NOW),
            StateError::Sealed(SealError::OtherKey { .. })
        ));
        // A value sealed for another purpose under the same server key does not pass either.
        let foreign = URL_SAFE_NO_PAD.encode(other_purpose.seal(b"{}", STATE_COOKIE.as_bytes()));
        assert_eq!(
            open(&key(), &begun.state, Some(&foreign), NOW),
            StateError::Sealed(SealError::Forged)
        );
        // Expiry, by the creation time inside the seal.
        let ttl = ttl_s();
        LoginStates::open(&key(), &begun.state, Some(&begun.cookie), NOW + ttl - 1).unwrap();
        assert_eq!(
            open(&key(), &begun.state, Some(&begun.cookie), NOW + ttl),
            StateError::Expired
        );
        assert_eq!(
            open(&key(), &begun.state, Some(&begun.cookie), NOW - CLOCK_SKEW_S - 1),
            StateError::Expired
        );
    }

    #[test]
    fn the_longest_return_url_still_fits_one_cookie() {
        // `safe_return_url` accepts up to 2,048 bytes.
        let long = format!("/{}", "a".repeat(2047));
        let redirect = format!("https://{}.example.com/argocd/auth/callback", "h".repeat(60));
        let begun = LoginStates::begin(&key(), long, redirect, "default", NOW).unwrap();
        assert!(begun.cookie.len() < 3300, "{}", begun.cookie.len());
        // Something that would not fit is refused, not cut.
        let huge = format!("/{}", "\"".repeat(3000));
        assert_eq!(
            LoginStates::begin(&key(), huge, CB.into(), "default", NOW).unwrap_err(),
            StateError::TooLarge
        );
    }

    #[tokio::test]
    async fn a_state_is_accepted_once_across_servers_and_forgotten_after_expiry() {
        let (states, _dir) = states();
        let begun = LoginStates::begin(&key(), "/".into(), CB.into(), "default", NOW).unwrap();
        let login = LoginStates::open(&key(), &begun.state, Some(&begun.cookie), NOW).unwrap();
        states.check_unused(&login).await.unwrap();
        states.mark_used(&login).await.unwrap();
        assert_eq!(states.check_unused(&login).await.unwrap_err(), StateError::Used);
        assert_eq!(states.mark_used(&login).await.unwrap_err(), StateError::Used);
        // Another login is unaffected.
        let other = LoginStates::begin(&key(), "/".into(), CB.into(), "default", NOW).unwrap();
        let other = LoginStates::open(&key(), &other.state, Some(&other.cookie), NOW).unwrap();
        states.check_unused(&other).await.unwrap();

        assert_eq!(states.purge(NOW).await.unwrap(), 1);
        // Kept as long as the cookie could be accepted somewhere, then forgotten.
        let last_ok = NOW + ttl_s() - 1 + CLOCK_SKEW_S;
        assert_eq!(states.purge(last_ok).await.unwrap(), 1);
        assert_eq!(states.purge(NOW + ttl_s() + CLOCK_SKEW_S).await.unwrap(), 0);
        assert!(states.store.list(USED_PREFIX).await.unwrap().is_empty());
    }
}
