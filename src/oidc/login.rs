//! Logins in progress: what `/auth/login` promised the provider and the
//! browser, kept on the server until `/auth/callback` (single use, five
//! minutes at most, bound to the browser by an HttpOnly cookie).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use crate::auth::random;

/// The cookie that binds a login to the browser that started it.
pub const STATE_COOKIE: &str = "argocd.oauthstate";
/// How long a login may take at the provider.
pub const LOGIN_TTL: Duration = Duration::from_secs(5 * 60);
/// Logins in progress at once; more are refused rather than growing memory.
const MAX_PENDING: usize = 10_000;

/// Random lengths, in characters of 6 bits (`auth::random::token`).
const STATE_CHARS: usize = 32; // 190 bits
const VERIFIER_CHARS: usize = 64; // RFC 7636: 43..=128 unreserved characters
const NONCE_CHARS: usize = 32;
const BINDING_CHARS: usize = 43;

/// A login waiting for its callback.
#[derive(Debug, Clone)]
pub struct Pending {
    pub nonce: String,
    pub verifier: String,
    /// Where to send the browser afterwards (a path on this server).
    pub return_to: String,
    pub redirect_uri: String,
    binding: [u8; 32],
    created: Instant,
}

/// What `/auth/login` hands out.
#[derive(Debug)]
pub struct Begun {
    pub state: String,
    pub nonce: String,
    /// PKCE S256: `base64url(sha256(verifier))`.
    pub challenge: String,
    /// The value of the [`STATE_COOKIE`].
    pub cookie: String,
}

/// Why a callback is refused. Deliberately coarse: the browser learns only
/// that the login must start again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("unknown, used or expired login state")]
    Unknown,
    #[error("the login state is not bound to this browser")]
    NotBound,
    #[error("too many logins in progress")]
    Full,
}

#[derive(Default)]
pub struct PendingLogins {
    pending: Mutex<HashMap<String, Pending>>,
}

impl std::fmt::Debug for PendingLogins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingLogins").finish_non_exhaustive()
    }
}

fn digest(value: &str) -> [u8; 32] {
    Sha256::digest(value.as_bytes()).into()
}

impl PendingLogins {
    /// Records a new login.
    pub fn begin(&self, return_to: String, redirect_uri: String) -> Result<Begun, StateError> {
        let state = random::token(STATE_CHARS);
        let verifier = random::token(VERIFIER_CHARS);
        let nonce = random::token(NONCE_CHARS);
        let cookie = random::token(BINDING_CHARS);
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
        let mut pending = self.pending.lock().map_err(|_| StateError::Full)?;
        if pending.len() >= MAX_PENDING {
            pending.retain(|_, p| p.created.elapsed() < LOGIN_TTL);
            if pending.len() >= MAX_PENDING {
                return Err(StateError::Full);
            }
        }
        pending.insert(
            state.clone(),
            Pending {
                nonce: nonce.clone(),
                verifier,
                return_to,
                redirect_uri,
                binding: digest(&cookie),
                created: Instant::now(),
            },
        );
        Ok(Begun {
            state,
            nonce,
            challenge,
            cookie,
        })
    }

    /// Takes the login named by `state` (it cannot be used again, whatever
    /// the outcome) if `cookie` is the browser binding it was given.
    pub fn take(&self, state: &str, cookie: Option<&str>) -> Result<Pending, StateError> {
        let pending = self
            .pending
            .lock()
            .map_err(|_| StateError::Unknown)?
            .remove(state)
            .ok_or(StateError::Unknown)?;
        if pending.created.elapsed() >= LOGIN_TTL {
            return Err(StateError::Unknown);
        }
        let bound = cookie.is_some_and(|c| bool::from(digest(c).ct_eq(&pending.binding)));
        if !bound {
            return Err(StateError::NotBound);
        }
        Ok(pending)
    }

    /// Forgets a login without the binding check (the provider reported an error).
    pub fn forget(&self, state: &str) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.remove(state);
        }
    }

    pub fn len(&self) -> usize {
        self.pending.lock().map(|p| p.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_is_single_use_and_bound_to_its_cookie() {
        let logins = PendingLogins::default();
        let begun = logins
            .begin("/applications".into(), "https://cd/auth/callback".into())
            .unwrap();
        assert!(begun.state.len() * 6 >= 128 && begun.cookie.len() * 6 >= 128);
        assert_eq!(
            URL_SAFE_NO_PAD.decode(&begun.challenge).unwrap().len(),
            32,
            "S256 challenge"
        );
        assert_eq!(
            logins.take(&begun.state, Some("wrong")).unwrap_err(),
            StateError::NotBound
        );
        // The failed attempt used the state up.
        assert_eq!(
            logins.take(&begun.state, Some(&begun.cookie)).unwrap_err(),
            StateError::Unknown
        );

        let begun = logins
            .begin("/".into(), "https://cd/auth/callback".into())
            .unwrap();
        assert_eq!(logins.take(&begun.state, None).unwrap_err(), StateError::NotBound);
        let begun = logins
            .begin("/x".into(), "https://cd/auth/callback".into())
            .unwrap();
        let pending = logins.take(&begun.state, Some(&begun.cookie)).unwrap();
        assert_eq!((pending.return_to.as_str(), pending.nonce), ("/x", begun.nonce));
        assert_eq!(
            logins.take(&begun.state, Some(&begun.cookie)).unwrap_err(),
            StateError::Unknown,
            "replay"
        );
        assert!(logins.is_empty());
    }
}
