//! weir-providers: model clients behind [`weir_core::ModelClient`].
//!
//! [`Router`] sends each model name to its provider (DESIGN §5): `claude-*` → Anthropic
//! Messages, `gpt-*` / `o1*` / `o3*` / `o4*` → OpenAI Chat Completions, an explicit
//! `provider:model` prefix overrides, and `mock` is the built-in offline model. Each provider
//! shares one HTTP client. Token usage is priced from [`pricing`].

#![warn(missing_docs)]

pub mod anthropic;
mod http;
pub mod mock;
pub mod openai;
pub mod pricing;
mod router;

pub use pricing::Pricing;
pub use router::Router;
