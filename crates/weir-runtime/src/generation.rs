//! One generation of the engine and the compiler: built from the workspace settings plus the
//! custom tools saved over the API, and rebuilt when those change (drives in flight keep the
//! generation they started with).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use weir_core::settings::{CustomTool, Settings};
use weir_core::{Diagnostic, ModelClient, ToolRunner, Workflow};
use weir_dialects::Capabilities;
use weir_engine::{Engine, LeaseTiming};

use crate::metrics::{Metrics, Sink};
use crate::{Hub, Implementations};

/// What every generation is built from: the settings of weir.toml, the binary's
/// implementations and the process's shared parts.
pub(crate) struct Builder {
    pub base: Settings,
    pub implementations: Arc<dyn Implementations>,
    pub store: Arc<dyn weir_core::RunStore>,
    pub hub: Arc<Hub>,
    pub metrics: Arc<Metrics>,
    pub owner: String,
    /// Interrupts in-flight steps at the end of a drain's grace period.
    pub interrupt: Arc<tokio::sync::Notify>,
    /// True while draining: drives take no new steps.
    pub drain: Arc<std::sync::atomic::AtomicBool>,
}

/// The engine runs are driven with and the compiler workflows are checked with.
pub struct Generation {
    /// The engine of this generation's drives, decisions and run creations.
    pub engine: Arc<Engine>,
    /// The workspace settings with the saved custom tools added.
    pub settings: Settings,
    check_tools: Arc<dyn ToolRunner>,
    check_models: Arc<dyn ModelClient>,
    compiled: Mutex<HashMap<(String, String), Arc<Workflow>>>,
}

impl Builder {
    /// A generation of the base settings plus `saved` custom tools, wired with the
    /// implementations the binary chose.
    pub fn build(&self, saved: &[weir_core::catalog::ToolRow]) -> Result<Generation, String> {
        let rt = self;
        let mut settings = rt.base.clone();
        for t in saved {
            let tool: CustomTool = serde_json::from_value(t.definition.clone())
                .map_err(|e| format!("saved custom tool {}: {e}", t.name))?;
            settings.tools.entry(t.name.clone()).or_insert(tool);
        }
        let parts = rt.implementations.build(&settings)?;
        let services = weir_engine::Services {
            models: parts.models,
            tools: parts.tools,
            scripts: parts.scripts,
            store: rt.store.clone(),
            secrets: Arc::new(settings.clone()),
        };
        let mut engine = Engine::new(
            services,
            Arc::new(Sink {
                hub: rt.hub.clone(),
                metrics: rt.metrics.clone(),
            }),
        );
        engine.owner = rt.owner.clone();
        engine.lease = LeaseTiming::of(&settings.lease);
        engine.limits = settings.limits.clone();
        engine.interrupt = Some(rt.interrupt.clone());
        engine.drain = rt.drain.clone();
        Ok(Generation {
            engine: Arc::new(engine),
            check_tools: parts.check_tools,
            check_models: parts.check_models,
            settings,
            compiled: Mutex::new(HashMap::new()),
        })
    }
}

impl Generation {
    /// Compiles a workflow document against this workspace (the CLI's diagnostics).
    pub fn compile(
        &self,
        path: &str,
        text: &str,
    ) -> Result<weir_dialects::Validated, Vec<Diagnostic>> {
        weir_dialects::compile(
            path,
            text,
            &Capabilities {
                tools: self.check_tools.as_ref(),
                models: self.check_models.as_ref(),
                secrets: &self.settings,
            },
        )
    }

    /// A compiled workflow for a stored source, compiled once per text.
    pub fn workflow(&self, path: &str, text: &str) -> Result<Arc<Workflow>, Vec<Diagnostic>> {
        let key = (path.to_string(), text.to_string());
        if let Some(wf) = self.compiled.lock().expect("compile cache").get(&key) {
            return Ok(wf.clone());
        }
        let wf = self.compile(path, text)?.workflow;
        let mut cache = self.compiled.lock().expect("compile cache");
        if cache.len() > 512 {
            cache.clear();
        }
        cache.insert(key, wf.clone());
        Ok(wf)
    }
}
