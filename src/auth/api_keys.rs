//! API keys of local accounts (`sub: <name>:apiKey`): created and deleted through the account
//! API, recorded on the account so that a deleted key's token stops working at once and its
//! id is never reused.

use std::sync::Arc;
use std::time::Duration;

use super::accounts::Accounts;
use super::jwt::Claims;
use super::keys::TokenKeys;
use crate::clock::Clock;
use crate::config::TokenRecord;
use crate::error::AppError;
use crate::principal::LOCAL_ISSUER;

pub struct ApiKeys {
    clock: Clock,
    keys: Arc<TokenKeys>,
    accounts: Arc<Accounts>,
}

impl ApiKeys {
    pub fn new(keys: Arc<TokenKeys>, accounts: Arc<Accounts>, clock: Clock) -> Self {
        Self {
            clock,
            keys,
            accounts,
        }
    }

    /// Creates an API key for account `name` with id `id` (a random one when `None`), not
    /// expiring when `expires_in` is zero; returns the token.
    pub async fn create(
        &self,
        name: &str,
        id: Option<String>,
        expires_in: Duration,
    ) -> Result<String, AppError> {
        let id = id
            .filter(|i| !i.is_empty())
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let now = self.clock.now_ms();
        let iat = now / 1000;
        let exp = (!expires_in.is_zero())
            .then(|| iat.saturating_add(i64::try_from(expires_in.as_secs()).unwrap_or(i64::MAX)));
        let record = TokenRecord {
            id: id.clone(),
            iat,
            exp: exp.unwrap_or(0),
        };
        let taken = self
            .accounts
            .get(name)
            .await?
            .is_some_and(|a| a.tokens.contains_key(&id));
        self.accounts
            .update(name, |r| {
                // An id is never reused: a deleted key's token must stay dead.
                if taken || r.deleted_tokens.contains(&id) || r.tokens.iter().any(|t| t.id == id) {
                    return Err(AppError::InvalidArgument(format!(
                        "account '{name}' already has or had a token with id '{id}'; choose another id"
                    )));
                }
                r.tokens.push(record.clone());
                Ok(())
            })
            .await?;
        Ok(self.keys.sign(&Claims {
            iss: LOCAL_ISSUER.to_owned(),
            sub: format!("{name}:apiKey"),
            jti: id,
            iat,
            nbf: iat,
            exp,
            iat_ms: Some(now),
        }))
    }

    /// Deletes API key `id` of account `name`; its token stops working at once.
    pub async fn delete(&self, name: &str, id: &str) -> Result<(), AppError> {
        let known = self
            .accounts
            .get(name)
            .await?
            .is_some_and(|a| a.tokens.contains_key(id));
        if !known {
            return Err(AppError::NotFound(format!(
                "token with id '{id}' of account '{name}' not found"
            )));
        }
        self.accounts
            .update(name, |r| {
                r.tokens.retain(|t| t.id != id);
                r.deleted_tokens.insert(id.to_owned());
                Ok(())
            })
            .await
    }
}
