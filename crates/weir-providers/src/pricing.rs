//! Built-in price table: USD per million input and output tokens.

use std::collections::BTreeMap;

use weir_core::settings::Price;

/// `(model prefix, input $/Mtok, output $/Mtok)`; the longest matching prefix wins, so
/// dated snapshots (`claude-haiku-4-5-20251001`) price like their family.
const TABLE: &[(&str, f64, f64)] = &[
    ("claude-haiku-4-5", 1.0, 5.0),
    ("claude-3-5-haiku", 0.8, 4.0),
    ("claude-3-haiku", 0.25, 1.25),
    ("claude-sonnet-4-5", 3.0, 15.0),
    ("claude-sonnet-4-6", 3.0, 15.0),
    ("claude-sonnet-4", 3.0, 15.0),
    ("claude-3-7-sonnet", 3.0, 15.0),
    ("claude-3-5-sonnet", 3.0, 15.0),
    ("claude-opus-4-5", 5.0, 25.0),
    ("claude-opus-4-1", 15.0, 75.0),
    ("claude-opus-4", 15.0, 75.0),
    ("gpt-4o-mini", 0.15, 0.6),
    ("gpt-4o", 2.5, 10.0),
    ("gpt-4.1-nano", 0.1, 0.4),
    ("gpt-4.1-mini", 0.4, 1.6),
    ("gpt-4.1", 2.0, 8.0),
    ("gpt-5-nano", 0.05, 0.4),
    ("gpt-5-mini", 0.25, 2.0),
    ("gpt-5", 1.25, 10.0),
    ("o1-mini", 1.1, 4.4),
    ("o1", 15.0, 60.0),
    ("o3-mini", 1.1, 4.4),
    ("o3", 2.0, 8.0),
    ("o4-mini", 1.1, 4.4),
    ("mock", 0.0, 0.0),
];

/// The built-in table plus `weir.toml` `[pricing]` overrides.
#[derive(Debug, Clone, Default)]
pub struct Pricing {
    overrides: BTreeMap<String, Price>,
}

impl Pricing {
    /// The built-in table with `[pricing]` overrides of weir.toml.
    pub fn new(overrides: BTreeMap<String, Price>) -> Self {
        Self { overrides }
    }

    /// Cost of one call of `model` (as the workflow names it, possibly `provider:model`), or
    /// `None` when neither the overrides nor the table price it.
    pub fn cost(&self, model: &str, input_tokens: u64, output_tokens: u64) -> Option<f64> {
        let bare = model.split_once(':').map_or(model, |(_, m)| m);
        let (i, o) = self
            .overrides
            .get(model)
            .or_else(|| self.overrides.get(bare))
            .map(|p| (p.input_per_mtok, p.output_per_mtok))
            .or_else(|| price(model))?;
        Some((input_tokens as f64 * i + output_tokens as f64 * o) / 1_000_000.0)
    }
}

/// The model names (families) the built-in table prices, in its order.
pub fn known_models() -> impl Iterator<Item = &'static str> {
    TABLE.iter().map(|(m, _, _)| *m)
}

/// Price per million tokens `(input, output)` for a model, if known.
pub fn price(model: &str) -> Option<(f64, f64)> {
    let bare = model.split_once(':').map_or(model, |(_, m)| m);
    TABLE
        .iter()
        .filter(|(p, _, _)| bare.starts_with(p))
        .max_by_key(|(p, _, _)| p.len())
        .map(|(_, i, o)| (*i, *o))
}

/// Cost of one call, or `None` when the model has no price.
pub fn cost(model: &str, input_tokens: u64, output_tokens: u64) -> Option<f64> {
    price(model).map(|(i, o)| (input_tokens as f64 * i + output_tokens as f64 * o) / 1_000_000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices() {
        assert_eq!(cost("claude-haiku-4-5", 1_000_000, 1_000_000), Some(6.0));
        assert_eq!(cost("gpt-4o", 1000, 100), Some(0.0035));
        assert_eq!(cost("gpt-4o-mini", 1_000_000, 0), Some(0.15));
        assert_eq!(
            cost("anthropic:claude-sonnet-4-6", 0, 1_000_000),
            Some(15.0)
        );
        assert_eq!(cost("llama3.2", 10, 10), None);
        let mut o = BTreeMap::new();
        o.insert(
            "ollama:llama3.2".to_string(),
            Price {
                input_per_mtok: 0.5,
                output_per_mtok: 1.0,
            },
        );
        o.insert(
            "gpt-4o".to_string(),
            Price {
                input_per_mtok: 1.0,
                output_per_mtok: 1.0,
            },
        );
        let p = Pricing::new(o);
        assert_eq!(p.cost("ollama:llama3.2", 2_000_000, 1_000_000), Some(2.0));
        assert_eq!(p.cost("gpt-4o", 1_000_000, 0), Some(1.0));
        assert_eq!(p.cost("claude-haiku-4-5", 1_000_000, 0), Some(1.0));
        assert_eq!(p.cost("ollama:mistral", 1, 1), None);
    }
}
