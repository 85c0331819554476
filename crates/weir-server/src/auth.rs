//! API tokens (DESIGN §10): scopes `read` ⊂ `run` ⊂ `approve` ⊂ `admin`, 256-bit random
//! secrets shown once and stored as their SHA-256, compared in constant time, revocable.
//!
//! A token reads `weir_<id>_<secret>`: the id (48 bits, hex) finds the row, the secret (256
//! bits, hex) is hashed and compared with the stored hash. Verified tokens are remembered for
//! a few seconds so a busy client does not pay a store read per request; a revocation in
//! this process takes effect at once, one made by another process within that time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use weir_core::catalog::{Catalog, TokenRow};

use crate::error::{ApiError, ApiResult};

/// What a token may do; each scope includes the ones before it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Read workflows, runs and tools.
    Read,
    /// Read, and start and cancel runs.
    Run,
    /// Read, and decide gates.
    Approve,
    /// Everything, tokens and custom tools included.
    Admin,
}

impl Scope {
    /// The scope's name (`read`, `run`, `approve`, `admin`).
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Run => "run",
            Scope::Approve => "approve",
            Scope::Admin => "admin",
        }
    }

    /// The scope named `s`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "read" => Some(Scope::Read),
            "run" => Some(Scope::Run),
            "approve" => Some(Scope::Approve),
            "admin" => Some(Scope::Admin),
            _ => None,
        }
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

pub(crate) fn random<const N: usize>() -> Result<[u8; N], ApiError> {
    let mut buf = [0u8; N];
    getrandom::fill(&mut buf)
        .map_err(|e| ApiError::internal(format!("no system randomness: {e}")))?;
    Ok(buf)
}

pub(crate) fn digest(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

/// A new token: the row to store and the value to show once.
pub fn mint(name: &str, scope: Scope) -> ApiResult<(TokenRow, String)> {
    let id = hex(&random::<6>()?);
    let secret = hex(&random::<32>()?);
    let row = TokenRow {
        id: id.clone(),
        name: name.to_string(),
        scope: scope.as_str().to_string(),
        hash: digest(&secret),
        created_at: weir_core::store::now_rfc3339(),
        revoked_at: None,
    };
    Ok((row, format!("weir_{id}_{secret}")))
}

/// The bearer token of a request, split into id and secret.
fn presented(headers: &HeaderMap) -> Option<(&str, &str)> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))?
        .trim();
    let rest = token.strip_prefix("weir_")?;
    let (id, secret) = rest.split_once('_')?;
    (id.len() == 12 && secret.len() == 64).then_some((id, secret))
}

/// Who is calling, once verified.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The token's id.
    pub token_id: String,
    /// The name given at creation.
    pub name: String,
    /// What the token may do.
    pub scope: Scope,
}

struct Cached {
    hash: Vec<u8>,
    caller: Caller,
    revoked: bool,
    at: Instant,
}

/// Verifies tokens against the store, remembering recent answers.
#[derive(Default)]
pub struct Tokens {
    cache: Mutex<HashMap<String, Cached>>,
}

const REMEMBER: Duration = Duration::from_secs(5);

impl Tokens {
    /// The caller behind a request, if its token is valid and has `needed`.
    pub async fn require(
        &self,
        catalog: &dyn Catalog,
        headers: &HeaderMap,
        needed: Scope,
    ) -> ApiResult<Caller> {
        let (id, secret) = presented(headers).ok_or_else(ApiError::unauthorized)?;
        let hash = digest(secret);
        let cached = {
            let cache = self.cache.lock().expect("token cache lock");
            cache
                .get(id)
                .filter(|c| c.at.elapsed() < REMEMBER)
                .map(|c| (c.hash.clone(), c.caller.clone(), c.revoked))
        };
        let (stored, caller, revoked) = match cached {
            Some(c) => c,
            None => {
                let row = catalog
                    .token(id)
                    .await?
                    .ok_or_else(ApiError::unauthorized)?;
                let caller = Caller {
                    token_id: row.id.clone(),
                    name: row.name.clone(),
                    scope: Scope::parse(&row.scope).unwrap_or(Scope::Read),
                };
                let revoked = row.revoked_at.is_some();
                self.cache.lock().expect("token cache lock").insert(
                    id.to_string(),
                    Cached {
                        hash: row.hash.clone(),
                        caller: caller.clone(),
                        revoked,
                        at: Instant::now(),
                    },
                );
                (row.hash, caller, revoked)
            }
        };
        if !bool::from(stored.ct_eq(&hash)) || revoked {
            return Err(ApiError::unauthorized());
        }
        if caller.scope < needed {
            return Err(ApiError::forbidden(needed.as_str(), caller.scope.as_str()));
        }
        Ok(caller)
    }

    /// Forgets a token at once (after a revocation in this process).
    pub fn forget(&self, id: &str) {
        self.cache.lock().expect("token cache lock").remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_tokens_parse_and_hash() {
        let (row, value) = mint("ci", Scope::Run).unwrap();
        let mut h = HeaderMap::new();
        h.insert("authorization", format!("Bearer {value}").parse().unwrap());
        let (id, secret) = presented(&h).unwrap();
        assert_eq!(id, row.id);
        assert_eq!(digest(secret), row.hash);
        assert_ne!(mint("ci", Scope::Run).unwrap().1, value);
        assert!(Scope::Read < Scope::Run && Scope::Approve < Scope::Admin);
    }
}
