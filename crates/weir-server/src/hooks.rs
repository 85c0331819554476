//! `POST /hooks/{workflow}/{name}`: a webhook delivery starts a run of a saved workflow.
//! No bearer token: the delivery's signature is the authentication (HMAC-SHA256 of the raw
//! body with the declared secret, in the sender's scheme), or, for senders that cannot sign,
//! a random token in the URL that weir made when the workflow was saved and keeps hashed.
//! Both are compared in constant time, before the body is parsed; a bad one creates nothing
//! and logs nothing of the body. A repeated delivery id (`dedupe`) returns the first run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hmac::{KeyInit, Mac};
use serde::Serialize;
use serde_json::{Map, Value, json};
use subtle::ConstantTimeEq;
use utoipa::ToSchema;
use weir_core::ir::{Signature, TriggerKind, Webhook};
use weir_core::record::{RunTrigger, StartKind};
use weir_engine::CreateOptions;

use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::{App, Path};

/// How far a signed timestamp (Stripe, Slack) may be from now.
pub const TOLERANCE: Duration = Duration::from_secs(300);

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The lower-case hex HMAC-SHA256 of `parts` with `key`.
fn hmac_hex(key: &[u8], parts: &[&[u8]]) -> String {
    let Ok(mut mac) = HmacSha256::new_from_slice(key) else {
        return String::new();
    };
    for p in parts {
        mac.update(p);
    }
    let bytes = mac.finalize().into_bytes();
    crate::auth::hex(&bytes)
}

/// Whether two strings are equal, in time that does not depend on where they differ.
fn same(a: &str, b: &str) -> bool {
    bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// A signed timestamp within [`TOLERANCE`] of `now` (seconds since the epoch).
fn fresh(at: &str, now: i64) -> bool {
    at.trim()
        .parse::<i64>()
        .is_ok_and(|t| (now - t).unsigned_abs() <= TOLERANCE.as_secs())
}

/// Checks a delivery's signature with `secret` under `scheme` at `now` (seconds since the
/// epoch); `Err` says what is wrong, never what was expected.
pub fn verify(
    scheme: Signature,
    secret: &str,
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
) -> Result<(), &'static str> {
    let key = secret.as_bytes();
    match scheme {
        Signature::HmacSha256 | Signature::Github => {
            let name = if scheme == Signature::Github {
                "x-hub-signature-256"
            } else {
                "x-signature-256"
            };
            let given = header(headers, name).ok_or("the signature header is missing")?;
            let given = given.strip_prefix("sha256=").unwrap_or(given);
            if same(&hmac_hex(key, &[body]), &given.to_ascii_lowercase()) {
                Ok(())
            } else {
                Err("the signature does not match the body")
            }
        }
        Signature::Stripe => {
            let given = header(headers, "stripe-signature").ok_or("Stripe-Signature is missing")?;
            let mut at = None;
            let mut sigs = Vec::new();
            for part in given.split(',') {
                match part.trim().split_once('=') {
                    Some(("t", t)) => at = Some(t),
                    Some(("v1", s)) => sigs.push(s),
                    _ => {}
                }
            }
            let at = at.ok_or("Stripe-Signature has no timestamp")?;
            let expected = hmac_hex(key, &[at.as_bytes(), b".", body]);
            // Every v1 is compared (Stripe sends one per secret while one is rolled).
            let matched = sigs.iter().fold(false, |ok, s| ok | same(&expected, s));
            if !matched {
                return Err("the signature does not match the body");
            }
            if !fresh(at, now) {
                return Err("the signed timestamp is outside the five-minute tolerance");
            }
            Ok(())
        }
        Signature::Slack => {
            let given =
                header(headers, "x-slack-signature").ok_or("X-Slack-Signature is missing")?;
            let at = header(headers, "x-slack-request-timestamp")
                .ok_or("X-Slack-Request-Timestamp is missing")?;
            let expected = format!("v0={}", hmac_hex(key, &[b"v0:", at.as_bytes(), b":", body]));
            if !same(&expected, given) {
                return Err("the signature does not match the body");
            }
            if !fresh(at, now) {
                return Err("the signed timestamp is outside the five-minute tolerance");
            }
            Ok(())
        }
        Signature::Token => Err("the token scheme is checked by its URL token"),
    }
}

/// Each webhook's deliveries per minute, on this process: a bucket of `per_minute` that
/// refills evenly.
#[derive(Default)]
pub struct Limiter {
    buckets: Mutex<HashMap<(String, String), (f64, Instant)>>,
}

impl Limiter {
    /// Takes one delivery for `hook`; `Err` holds the seconds until one is free.
    fn take(&self, hook: (String, String), per_minute: u32) -> Result<(), u64> {
        let per_minute = f64::from(per_minute.max(1));
        let now = Instant::now();
        let mut buckets = self.buckets.lock().expect("hook limiter");
        let (left, at) = buckets.entry(hook).or_insert((per_minute, now));
        *left = (*left + now.duration_since(*at).as_secs_f64() * per_minute / 60.0).min(per_minute);
        *at = now;
        if *left >= 1.0 {
            *left -= 1.0;
            Ok(())
        } else {
            Err(((1.0 - *left) * 60.0 / per_minute).ceil() as u64)
        }
    }
}

/// The answer to a delivery.
#[derive(Serialize, ToSchema)]
pub struct Delivered {
    pub run_id: String,
    /// `queued`, or for a repeated delivery id the first run's status now.
    pub status: String,
    /// `false` when the delivery id was seen before: this is the first delivery's run.
    pub created: bool,
}

/// The delivery's body as the input templates read it: JSON, a form, or text.
fn parsed_body(headers: &HeaderMap, body: &[u8]) -> Value {
    let kind = header(headers, "content-type").unwrap_or("");
    if kind.contains("x-www-form-urlencoded") {
        let form: Map<String, Value> = url::form_urlencoded::parse(body)
            .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
            .collect();
        return Value::Object(form);
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => v,
        Err(_) => Value::String(String::from_utf8_lossy(body).into_owned()),
    }
}

/// The run's input: the hook's `input` templates over `{body, headers, query}`, or the body
/// itself (an object) or `{body: …}`.
fn input_of(hook: &Webhook, headers: &HeaderMap, query: &str, body: Value) -> ApiResult<Value> {
    let Some(templates) = &hook.input else {
        return Ok(match body {
            Value::Object(_) => body,
            other => json!({ "body": other }),
        });
    };
    let headers: Map<String, Value> = headers
        .iter()
        .filter_map(|(k, v)| {
            Some((
                k.as_str().to_ascii_lowercase().replace('-', "_"),
                Value::String(v.to_str().ok()?.to_string()),
            ))
        })
        .collect();
    let query: Map<String, Value> = url::form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k != "token")
        .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
        .collect();
    let scope = json!({"body": body, "headers": headers, "query": query});
    weir_core::expr::render_value(templates, &scope).map_err(|e| {
        ApiError::invalid(format!(
            "the delivery does not fit the webhook's input templates: {e}"
        ))
    })
}

fn unauthorized(why: &str) -> ApiError {
    ApiError::new(
        ErrorCode::Unauthorized,
        format!("the delivery is not authenticated: {why}"),
    )
}

#[utoipa::path(post, path = "/hooks/{workflow}/{name}", tag = "triggers",
    params(("workflow" = String, Path, description = "saved workflow id"),
           ("name" = String, Path, description = "the webhook trigger's name"),
           ("token" = Option<String>, Query, description = "the URL token of a webhook with the token scheme")),
    request_body(content = Object, description = "the delivery, as the sender sends it (JSON, a form or text)"),
    responses((status = 202, description = "a run started (or, for a repeated delivery id, the first one)", body = Delivered),
              (status = 401, description = "a missing or wrong signature or token; nothing was created", body = crate::openapi::ErrorBody),
              (status = 404, body = crate::openapi::ErrorBody),
              (status = 413, body = crate::openapi::ErrorBody),
              (status = 429, description = "over the webhook's `[webhooks] requests_per_minute`", body = crate::openapi::ErrorBody)))]
pub async fn deliver(
    State(app): State<Arc<App>>,
    Path((workflow, name)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let per_minute = app.rt.generation().settings.webhooks.requests_per_minute;
    if let Err(wait) = app.hooks.take((workflow.clone(), name.clone()), per_minute) {
        let mut r = ApiError::new(
            ErrorCode::RateLimited,
            format!("webhook {name} of {workflow} takes {per_minute} deliveries a minute ([webhooks] requests_per_minute in weir.toml)"),
        )
        .into_response();
        r.headers_mut()
            .insert("retry-after", HeaderValue::from(wait.max(1)));
        return r;
    }
    match accept(
        &app,
        &workflow,
        &name,
        query.as_deref().unwrap_or(""),
        &headers,
        &body,
    )
    .await
    {
        Ok(d) => (StatusCode::ACCEPTED, Json(d)).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn accept(
    app: &App,
    workflow: &str,
    name: &str,
    query: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> ApiResult<Delivered> {
    let (saved, trigger, state) = app.rt.active_trigger(workflow, name).await?;
    let TriggerKind::Webhook(hook) = &trigger.kind else {
        return Err(ApiError::not_found(format!(
            "{name} of {workflow} is a schedule, not a webhook"
        )));
    };
    let token_hash = state.and_then(|s| s.token_hash);
    authenticate(app, workflow, name, hook, token_hash, query, headers, body)?;
    let input = input_of(hook, headers, query, parsed_body(headers, body))?;
    let delivery = hook
        .dedupe
        .as_deref()
        .and_then(|h| header(headers, &h.to_ascii_lowercase()))
        .filter(|d| !d.is_empty() && d.len() <= 200)
        .map(str::to_string);
    let opts = CreateOptions {
        idempotency_key: delivery
            .as_ref()
            .map(|d| format!("webhook:{workflow}:{name}:{d}")),
        claim: false,
        trigger: RunTrigger {
            kind: StartKind::Webhook,
            name: Some(name.to_string()),
            delivery,
            ..RunTrigger::default()
        },
    };
    let created = app.rt.start_saved(&saved, input, opts, None).await?;
    let status = if created.created {
        "queued".to_string()
    } else {
        app.rt
            .store
            .load_run(&created.run_id)
            .await?
            .status
            .as_str()
            .to_string()
    };
    Ok(Delivered {
        run_id: created.run_id,
        status,
        created: created.created,
    })
}

/// The delivery's signature, or its URL token (against `token_hash`, the one stored),
/// checked before anything of it is read.
#[expect(
    clippy::too_many_arguments,
    reason = "the delivery's parts, each read once"
)]
fn authenticate(
    app: &App,
    workflow: &str,
    name: &str,
    hook: &Webhook,
    token_hash: Option<Vec<u8>>,
    query: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> ApiResult<()> {
    if hook.signature == Signature::Token {
        let given = url::form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == "token")
            .map(|(_, v)| v.into_owned())
            .ok_or_else(|| unauthorized("the URL has no token"))?;
        let stored = token_hash.ok_or_else(|| unauthorized("the webhook has no token yet"))?;
        let presented = crate::auth::digest(&given);
        return if bool::from(presented.ct_eq(&stored)) {
            Ok(())
        } else {
            Err(unauthorized("the token is not this webhook's"))
        };
    }
    let secret_name = hook.secret.as_deref().unwrap_or_default();
    let secret = app
        .rt
        .generation()
        .settings
        .secret(secret_name)
        .map_err(|e| {
            tracing::warn!("webhook {name} of {workflow}: its secret cannot be read: {e}");
            ApiError::internal(format!(
                "the webhook's secret {secret_name} is not set on this server"
            ))
        })?;
    verify(
        hook.signature,
        &secret,
        headers,
        body,
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64),
    )
    .map_err(unauthorized)
}

/// Makes the URL tokens of a saved version's `token` webhooks that have none yet: each is
/// stored hashed and returned (as `/hooks/…?token=…`) this once.
pub async fn mint_tokens(app: &App, workflow_id: &str) -> ApiResult<Vec<HookToken>> {
    let saved = app.rt.catalog.workflow(workflow_id).await?.latest;
    let Ok(wf) = app.rt.saved_workflow(&saved) else {
        return Ok(Vec::new());
    };
    let states = app.rt.catalog.trigger_states(Some(workflow_id)).await?;
    let mut out = Vec::new();
    for t in &wf.triggers {
        let TriggerKind::Webhook(h) = &t.kind else {
            continue;
        };
        let has = states
            .iter()
            .any(|s| s.name == t.name && s.token_hash.is_some());
        if h.signature != Signature::Token || has {
            continue;
        }
        let token = crate::auth::hex(&crate::auth::random::<32>()?);
        app.rt
            .catalog
            .set_hook_token(
                workflow_id,
                &t.name,
                &crate::auth::digest(&token),
                &weir_core::store::now_rfc3339(),
            )
            .await?;
        out.push(HookToken {
            name: t.name.clone(),
            url: format!(
                "{}?token={token}",
                weir_runtime::triggers::hook_path(workflow_id, &t.name)
            ),
        });
    }
    Ok(out)
}

/// A webhook's URL with its token, shown once.
#[derive(Serialize, ToSchema, Debug)]
pub struct HookToken {
    /// The webhook trigger's name.
    pub name: String,
    /// Its path with `?token=…`: give it to the sender; weir keeps only its hash.
    pub url: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    #[expect(clippy::too_many_lines, reason = "one table of cases")]
    fn signatures_of_each_scheme_are_checked_against_the_raw_body() {
        let (secret, body, now) = (
            "s3cret",
            br#"{"action":"opened"}"#.as_slice(),
            1_800_000_000,
        );
        let sig = hmac_hex(secret.as_bytes(), &[body]);
        let at = now.to_string();
        let stripe = hmac_hex(secret.as_bytes(), &[at.as_bytes(), b".", body]);
        let slack = hmac_hex(secret.as_bytes(), &[b"v0:", at.as_bytes(), b":", body]);
        let old = (now - 301).to_string();
        let stripe_old = hmac_hex(secret.as_bytes(), &[old.as_bytes(), b".", body]);
        let mut changed = body.to_vec();
        changed[2] = b'b';
        let cases: Vec<(Signature, HeaderMap, &[u8], bool)> = vec![
            (
                Signature::HmacSha256,
                headers(&[("x-signature-256", &format!("sha256={sig}"))]),
                body,
                true,
            ),
            (
                Signature::HmacSha256,
                headers(&[("x-signature-256", &sig)]),
                body,
                true,
            ),
            (
                Signature::HmacSha256,
                headers(&[("x-signature-256", &sig)]),
                &changed,
                false,
            ),
            (Signature::HmacSha256, headers(&[]), body, false),
            (
                Signature::Github,
                headers(&[("x-hub-signature-256", &format!("sha256={sig}"))]),
                body,
                true,
            ),
            (
                Signature::Github,
                headers(&[(
                    "x-hub-signature-256",
                    &format!("sha256={}", hmac_hex(b"other", &[body])),
                )]),
                body,
                false,
            ),
            (
                Signature::Stripe,
                headers(&[("stripe-signature", &format!("t={at},v1=00,v1={stripe}"))]),
                body,
                true,
            ),
            (
                Signature::Stripe,
                headers(&[("stripe-signature", &format!("t={old},v1={stripe_old}"))]),
                body,
                false,
            ),
            (
                Signature::Stripe,
                headers(&[("stripe-signature", &format!("v1={stripe}"))]),
                body,
                false,
            ),
            (
                Signature::Slack,
                headers(&[
                    ("x-slack-signature", &format!("v0={slack}")),
                    ("x-slack-request-timestamp", &at),
                ]),
                body,
                true,
            ),
            (
                Signature::Slack,
                headers(&[("x-slack-signature", &format!("v0={slack}"))]),
                body,
                false,
            ),
            (
                Signature::Slack,
                headers(&[
                    ("x-slack-signature", &format!("v0={slack}")),
                    ("x-slack-request-timestamp", &at),
                ]),
                &changed,
                false,
            ),
        ];
        for (i, (scheme, h, b, ok)) in cases.into_iter().enumerate() {
            assert_eq!(
                verify(scheme, secret, &h, b, now).is_ok(),
                ok,
                "case {i}: {scheme:?}"
            );
        }
    }

    #[test]
    fn a_hook_takes_its_rate_and_then_says_when_to_come_back() {
        let l = Limiter::default();
        let hook = || ("wf".to_string(), "gh".to_string());
        for _ in 0..3 {
            assert!(l.take(hook(), 3).is_ok());
        }
        assert_eq!(l.take(hook(), 3), Err(20));
        assert!(
            l.take(("wf".into(), "other".into()), 3).is_ok(),
            "each hook its own"
        );
    }
}
