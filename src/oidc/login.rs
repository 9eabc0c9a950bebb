//! Logins in progress: what `/auth/login` promised the provider and the
//! browser, kept on the server until `/auth/callback` (single use, five
//! minutes at most, bound to the browser by an HttpOnly cookie).
//!
//! The random values (state, PKCE verifier, nonce, browser binding) are
//! tiphys's own, from the CSPRNG, whatever `openidconnect` would generate:
//! the state carries 190 bits and is tied to the cookie here, not in the
//! library. `openidconnect` turns the verifier into its S256 challenge.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use crate::random;

/// The cookie that binds a login to the browser that started it.
pub const STATE_COOKIE: &str = "argocd.oauthstate";
/// How long a login may take at the provider.
pub const LOGIN_TTL: Duration = Duration::from_secs(5 * 60);
/// Logins in progress at once; past it the oldest is dropped rather than
/// growing memory (or refusing everyone's logins).
const MAX_PENDING: usize = 10_000;
/// Logins in progress from one client address (IPv6: one /64), so that no
/// single source can push everyone else's logins out of the table.
const MAX_PENDING_PER_CLIENT: usize = 32;

/// Random lengths, in characters of 6 bits (`crate::random::token`).
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
    /// The client address it counts against.
    client: IpAddr,
    /// Its place in the creation order.
    seq: u64,
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
    #[error("too many logins in progress from this client")]
    ClientFull,
}

#[derive(Default)]
struct Table {
    by_state: HashMap<String, Pending>,
    /// States by creation (oldest first), for expiry and eviction.
    order: BTreeMap<u64, String>,
    per_client: HashMap<IpAddr, usize>,
    next_seq: u64,
}

impl Table {
    fn remove(&mut self, state: &str) -> Option<Pending> {
        let pending = self.by_state.remove(state)?;
        self.order.remove(&pending.seq);
        if let Some(n) = self.per_client.get_mut(&pending.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_client.remove(&pending.client);
            }
        }
        Some(pending)
    }

    /// Drops the oldest login; false when there is none.
    fn evict_oldest(&mut self) -> bool {
        let Some((_, state)) = self.order.pop_first() else {
            return false;
        };
        // `remove` finds the order entry already gone; that is fine.
        self.remove(&state);
        true
    }

    /// Drops the logins past their time (they are at the front of `order`).
    fn expire(&mut self) {
        while let Some((_, state)) = self.order.first_key_value() {
            if self
                .by_state
                .get(state)
                .is_some_and(|p| p.created.elapsed() < LOGIN_TTL)
            {
                break;
            }
            self.evict_oldest();
        }
    }
}

pub struct PendingLogins {
    pending: Mutex<Table>,
    max: usize,
    max_per_client: usize,
}

impl Default for PendingLogins {
    fn default() -> Self {
        Self::with_limits(MAX_PENDING, MAX_PENDING_PER_CLIENT)
    }
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
    /// A table holding at most `max` logins, `max_per_client` of them from one client.
    pub fn with_limits(max: usize, max_per_client: usize) -> Self {
        Self {
            pending: Mutex::new(Table::default()),
            max: max.max(1),
            max_per_client: max_per_client.max(1),
        }
    }

    /// Records a new login started by `client`. Refused when that client
    /// already has its share of logins in progress; when the table is full
    /// the oldest login (whoever started it) makes room.
    pub fn begin(
        &self,
        return_to: String,
        redirect_uri: String,
        client: IpAddr,
    ) -> Result<Begun, StateError> {
        let client = crate::principal::client_scope(client);
        let state = random::token(STATE_CHARS);
        let verifier = random::token(VERIFIER_CHARS);
        let nonce = random::token(NONCE_CHARS);
        let cookie = random::token(BINDING_CHARS);
        let mut table = self.pending.lock().map_err(|_| StateError::Full)?;
        table.expire();
        if table.per_client.get(&client).copied().unwrap_or(0) >= self.max_per_client {
            return Err(StateError::ClientFull);
        }
        while table.by_state.len() >= self.max {
            if !table.evict_oldest() {
                break;
            }
        }
        let seq = table.next_seq;
        table.next_seq += 1;
        table.order.insert(seq, state.clone());
        *table.per_client.entry(client).or_default() += 1;
        table.by_state.insert(
            state.clone(),
            Pending {
                nonce: nonce.clone(),
                verifier: verifier.clone(),
                return_to,
                redirect_uri,
                binding: digest(&cookie),
                created: Instant::now(),
                client,
                seq,
            },
        );
        Ok(Begun {
            state,
            nonce,
            verifier,
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
        if let Ok(mut table) = self.pending.lock() {
            table.remove(state);
        }
    }

    pub fn len(&self) -> usize {
        self.pending.lock().map(|t| t.by_state.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CB: &str = "https://cd/auth/callback";

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn one_client_cannot_fill_the_table() {
        let logins = PendingLogins::with_limits(100, 3);
        let mut own = Vec::new();
        for _ in 0..3 {
            own.push(logins.begin("/".into(), CB.into(), ip("192.0.2.1")).unwrap());
        }
        assert_eq!(
            logins.begin("/".into(), CB.into(), ip("192.0.2.1")).unwrap_err(),
            StateError::ClientFull
        );
        // IPv4-mapped is the same client; one IPv6 /64 is one client.
        assert_eq!(
            logins
                .begin("/".into(), CB.into(), ip("::ffff:192.0.2.1"))
                .unwrap_err(),
            StateError::ClientFull
        );
        for i in 0..3 {
            logins
                .begin("/".into(), CB.into(), ip(&format!("2001:db8::{i}")))
                .unwrap();
        }
        assert_eq!(
            logins
                .begin("/".into(), CB.into(), ip("2001:db8::ffff"))
                .unwrap_err(),
            StateError::ClientFull
        );
        // Others are unaffected.
        logins.begin("/".into(), CB.into(), ip("192.0.2.2")).unwrap();
        // A finished login frees its share.
        let done = own.pop().unwrap();
        logins.take(&done.state, Some(&done.cookie)).unwrap();
        logins.begin("/".into(), CB.into(), ip("192.0.2.1")).unwrap();
        // So does a failed one.
        let failed = own.pop().unwrap();
        logins.forget(&failed.state);
        logins.begin("/".into(), CB.into(), ip("192.0.2.1")).unwrap();
        assert_eq!(logins.len(), 7);
    }

    #[test]
    fn a_full_table_drops_its_oldest_login_instead_of_refusing() {
        let logins = PendingLogins::with_limits(4, 32);
        let begun: Vec<Begun> = (0..4)
            .map(|i| {
                logins
                    .begin("/".into(), CB.into(), ip(&format!("198.51.100.{i}")))
                    .unwrap()
            })
            .collect();
        let newest = logins.begin("/".into(), CB.into(), ip("203.0.113.9")).unwrap();
        assert_eq!(logins.len(), 4);
        assert_eq!(
            logins.take(&begun[0].state, Some(&begun[0].cookie)).unwrap_err(),
            StateError::Unknown,
            "the oldest was evicted"
        );
        logins.take(&begun[1].state, Some(&begun[1].cookie)).unwrap();
        logins.take(&newest.state, Some(&newest.cookie)).unwrap();
        // The evicted login's client got its share back.
        let logins = PendingLogins::with_limits(2, 1);
        logins.begin("/".into(), CB.into(), ip("192.0.2.1")).unwrap();
        logins.begin("/".into(), CB.into(), ip("192.0.2.2")).unwrap();
        logins.begin("/".into(), CB.into(), ip("192.0.2.3")).unwrap();
        logins.begin("/".into(), CB.into(), ip("192.0.2.1")).unwrap();
        assert_eq!(logins.len(), 2);
    }

    #[test]
    fn a_state_is_single_use_and_bound_to_its_cookie() {
        let logins = PendingLogins::default();
        let begun = logins
            .begin("/applications".into(), CB.into(), ip("127.0.0.1"))
            .unwrap();
        assert!(begun.state.len() * 6 >= 128 && begun.cookie.len() * 6 >= 128);
        assert!((43..=128).contains(&begun.verifier.len()), "RFC 7636 verifier");
        let verifier = openidconnect::PkceCodeVerifier::new(begun.verifier.clone());
        let challenge = openidconnect::PkceCodeChallenge::from_code_verifier_sha256(&verifier);
        assert_eq!(challenge.method().as_str(), "S256");
        assert_eq!(challenge.as_str().len(), 43, "base64url of a SHA-256");
        assert_eq!(
            logins.take(&begun.state, Some("wrong")).unwrap_err(),
            StateError::NotBound
        );
        // The failed attempt used the state up.
        assert_eq!(
            logins.take(&begun.state, Some(&begun.cookie)).unwrap_err(),
            StateError::Unknown
        );

        let begun = logins.begin("/".into(), CB.into(), ip("127.0.0.1")).unwrap();
        assert_eq!(logins.take(&begun.state, None).unwrap_err(), StateError::NotBound);
        let begun = logins.begin("/x".into(), CB.into(), ip("127.0.0.1")).unwrap();
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
