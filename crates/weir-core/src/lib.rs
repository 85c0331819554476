//! weir-core: the vocabulary every other crate shares.
//!
//! It owns the workflow IR ([`ir`]), diagnostics ([`diag`]), the sandboxed expression
//! language and templates ([`expr`]), the run/step/attempt record types ([`record`]) and the
//! extension traits the engine is built against ([`ModelClient`], [`ToolRunner`],
//! [`RunStore`]). It has no tokio dependency and does no IO: concrete providers, tools and
//! stores live in their own crates and only the binary wires them together.

pub mod catalog;
pub mod diag;
pub mod event;
pub mod expr;
pub mod interp;
pub mod ir;
pub mod json;
pub mod model;
pub mod patch;
pub mod record;
pub mod schedule;
pub mod schema;
pub mod script;
pub mod secrets;
pub mod settings;
pub mod store;
pub mod tool;
pub mod validate;

pub use diag::{Diagnostic, Severity, Span};
pub use event::{EventKind, RunEvent};
pub use ir::{Dialect, Edge, Node, NodeKind, Workflow};
pub use model::{ErrorClass, ModelClient, ModelError, ModelRequest, ModelResponse};
pub use record::{Attempt, RunRecord, RunStatus, StepRecord, StepStatus};
pub use script::ScriptRunner;
pub use store::{Admin, DriveWrites, Lifecycle, RunReads, RunStore};
pub use tool::{ToolCall, ToolError, ToolRunner};
