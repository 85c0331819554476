//! `weir tokens create|list|revoke`: API tokens, kept as hashes in the store.

use anyhow::Result;
use weir_server::auth::Scope;

use crate::cli::TokenArgs;
use crate::wiring::{self, Env, Open};

pub async fn create(env: &Env, args: TokenArgs) -> Result<u8> {
    let (name, scope, as_json) = (args.name.as_str(), args.scope.as_str(), args.json);
    let scope = Scope::parse(scope)
        .ok_or_else(|| crate::Usage(format!("--scope {scope}: use read, run, approve or admin")))?;
    let store = wiring::store(env, Open::CreateIfMissing).await?;
    let (row, token) =
        weir_server::auth::mint(name, scope).map_err(|e| anyhow::anyhow!(e.message))?;
    weir_core::catalog::Catalog::create_token(store.as_ref(), &row).await?;
    if as_json {
        println!(
            "{}",
            serde_json::json!({"id": row.id, "name": row.name, "scope": row.scope,
                               "created_at": row.created_at, "token": token})
        );
    } else {
        println!("{token}");
        eprintln!(
            "token {} ({}, scope {}) created; it is shown this once. Revoke: weir tokens revoke {}",
            row.id, row.name, row.scope, row.id
        );
    }
    Ok(0)
}

pub async fn list(env: &Env, as_json: bool) -> Result<u8> {
    let store = wiring::store(env, Open::MustExist).await?;
    let tokens = weir_core::catalog::Catalog::tokens(store.as_ref()).await?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&tokens)?);
        return Ok(0);
    }
    if tokens.is_empty() {
        println!("no tokens (weir tokens create --scope run --name ci makes one)");
        return Ok(0);
    }
    let width = tokens.iter().map(|t| t.id.len()).max().unwrap_or(2);
    println!(
        "{:<width$}  {:<8} {:<24} {:<24} REVOKED",
        "ID", "SCOPE", "NAME", "CREATED"
    );
    for t in tokens {
        println!(
            "{:<width$}  {:<8} {:<24} {:<24} {}",
            t.id,
            t.scope,
            t.name,
            t.created_at,
            t.revoked_at.as_deref().unwrap_or("—")
        );
    }
    Ok(0)
}

pub async fn revoke(env: &Env, id: &str) -> Result<u8> {
    let store = wiring::store(env, Open::MustExist).await?;
    weir_core::catalog::Catalog::revoke_token(store.as_ref(), id, &weir_core::store::now_rfc3339())
        .await?;
    println!("token {id} revoked");
    Ok(0)
}
