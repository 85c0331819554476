//! What the routes share: the runtime (store, catalog, engine, workers, hub), the tokens,
//! the cache of ended runs' record JSON, and the signal that ends open event streams.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use weir_runtime::{Options, Runtime, Services};

/// Everything the routes share.
pub struct App {
    /// The runtime runs are created, decided and driven through.
    pub rt: Arc<Runtime>,
    /// Bearer tokens (their hashes are in the catalog).
    pub tokens: crate::auth::Tokens,
    /// Turns true when the server shuts down: open event streams end, so the graceful
    /// shutdown does not wait for their clients.
    pub closing: watch::Sender<bool>,
    /// The JSON of ended runs' records, which never change again.
    pub records: Records,
    /// The largest request body read, in bytes.
    pub max_body: usize,
    /// Each webhook's deliveries per minute.
    pub hooks: crate::hooks::Limiter,
}

/// A bounded cache of ended runs' record JSON (by run id), oldest out first.
#[derive(Default)]
pub struct Records {
    inner: Mutex<(
        HashMap<String, axum::body::Bytes>,
        std::collections::VecDeque<String>,
        usize,
    )>,
}

impl Records {
    const MAX_BYTES: usize = 64 << 20;

    /// The cached JSON record of an ended run.
    pub fn get(&self, run_id: &str) -> Option<axum::body::Bytes> {
        self.inner
            .lock()
            .expect("record cache")
            .0
            .get(run_id)
            .cloned()
    }

    /// Keeps the JSON record of an ended run (it no longer changes).
    pub fn put(&self, run_id: &str, json: axum::body::Bytes) {
        let mut guard = self.inner.lock().expect("record cache");
        let (map, order, bytes) = &mut *guard;
        if json.len() > Self::MAX_BYTES / 16 || map.contains_key(run_id) {
            return;
        }
        *bytes += json.len();
        map.insert(run_id.to_string(), json);
        order.push_back(run_id.to_string());
        while *bytes > Self::MAX_BYTES {
            let Some(old) = order.pop_front() else { break };
            if let Some(b) = map.remove(&old) {
                *bytes -= b.len();
            }
        }
    }

    /// Forgets a run (deleted by retention).
    pub fn forget(&self, run_id: &str) {
        let mut guard = self.inner.lock().expect("record cache");
        let (map, order, bytes) = &mut *guard;
        if let Some(b) = map.remove(run_id) {
            *bytes -= b.len();
            order.retain(|id| id != run_id);
        }
    }
}

impl App {
    /// The runtime for these services, and the API's own state; requests read at most
    /// `max_body` bytes.
    pub async fn new(
        services: Services,
        options: Options,
        max_body: usize,
    ) -> Result<Arc<Self>, String> {
        Ok(Arc::new(Self {
            rt: Runtime::new(services, options).await?,
            tokens: crate::auth::Tokens::default(),
            closing: watch::channel(false).0,
            records: Records::default(),
            hooks: crate::hooks::Limiter::default(),
            max_body,
        }))
    }
}
