//! A span-carrying value tree: the whole document parsed once with the line and column of
//! every value, so diagnostics can point at the exact key that is wrong. YAML and JSON both go
//! through serde-saphyr (JSON is YAML 1.2); a JSON file saphyr cannot read falls back to
//! serde_json without positions.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use serde_saphyr::Spanned;
use weir_core::Span;

/// A value of a workflow document (YAML or JSON) with where it is written.
#[derive(Debug, Clone)]
pub struct Node {
    /// Where the value is written; `None` for a document read without positions.
    pub span: Option<Span>,
    /// For a map's value, where its key is written (unknown-key diagnostics point there).
    pub key_span: Option<Span>,
    /// The value.
    pub kind: Kind,
}

/// A document value, as YAML and JSON share them.
#[derive(Debug, Clone)]
pub enum Kind {
    /// `null` (or YAML `~`, or nothing).
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number.
    Num(Number),
    /// A string.
    Str(String),
    /// A list.
    Seq(Vec<Node>),
    /// A mapping, its keys in document order.
    Map(Vec<(String, Node)>),
}

impl Node {
    /// The value under `key` of a mapping; `None` for a missing key or another kind.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.kind {
            Kind::Map(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The entries of a mapping, in document order.
    pub fn as_map(&self) -> Option<&[(String, Node)]> {
        match &self.kind {
            Kind::Map(m) => Some(m),
            _ => None,
        }
    }

    /// The text of a string.
    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            Kind::Str(s) => Some(s),
            _ => None,
        }
    }

    /// What kind of value this is, for diagnostics (`a string`, `a list`, …).
    pub fn type_name(&self) -> &'static str {
        match &self.kind {
            Kind::Null => "null",
            Kind::Bool(_) => "a boolean",
            Kind::Num(_) => "a number",
            Kind::Str(_) => "a string",
            Kind::Seq(_) => "a list",
            Kind::Map(_) => "a map",
        }
    }

    /// The value as JSON.
    pub fn to_json(&self) -> Value {
        match &self.kind {
            Kind::Null => Value::Null,
            Kind::Bool(b) => Value::Bool(*b),
            Kind::Num(n) => Value::Number(n.clone()),
            Kind::Str(s) => Value::String(s.clone()),
            Kind::Seq(v) => Value::Array(v.iter().map(Node::to_json).collect()),
            Kind::Map(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| (k.clone(), v.to_json()))
                    .collect::<Map<_, _>>(),
            ),
        }
    }

    fn from_json(v: Value) -> Node {
        let kind = match v {
            Value::Null => Kind::Null,
            Value::Bool(b) => Kind::Bool(b),
            Value::Number(n) => Kind::Num(n),
            Value::String(s) => Kind::Str(s),
            Value::Array(a) => Kind::Seq(a.into_iter().map(Node::from_json).collect()),
            Value::Object(m) => Kind::Map(
                m.into_iter()
                    .map(|(k, v)| (k, Node::from_json(v)))
                    .collect(),
            ),
        };
        Node {
            span: None,
            key_span: None,
            kind,
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Spanned::<Kind>::deserialize(d)?;
        let loc = s.referenced;
        let span = (loc.line() > 0).then(|| Span {
            line: loc.line() as usize,
            column: loc.column() as usize,
        });
        Ok(Node {
            span,
            key_span: None,
            kind: s.value,
        })
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(KindVisitor)
    }
}

struct KindVisitor;

impl<'de> Visitor<'de> for KindVisitor {
    type Value = Kind;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML or JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Kind, E> {
        Ok(Kind::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Kind, E> {
        Ok(Kind::Num(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Kind, E> {
        Ok(Kind::Num(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Kind, E> {
        Number::from_f64(v)
            .map(Kind::Num)
            .ok_or_else(|| E::custom("numbers must be finite"))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Kind, E> {
        Ok(Kind::Str(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Kind, E> {
        Ok(Kind::Str(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Kind, E> {
        Ok(Kind::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Kind, E> {
        Ok(Kind::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Kind, D::Error> {
        Kind::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kind, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element::<Node>()? {
            out.push(v);
        }
        Ok(Kind::Seq(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kind, A::Error> {
        let mut out: Vec<(String, Node)> = Vec::new();
        // The keys so far, for the duplicate check: a scan of `out` per key made a map of
        // 50,000 keys take 20 s.
        let mut keys: std::collections::HashSet<String> = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<Spanned<String>>()? {
            let mut v = map.next_value::<Node>()?;
            let loc = key.referenced;
            v.key_span = (loc.line() > 0).then(|| Span {
                line: loc.line() as usize,
                column: loc.column() as usize,
            });
            let k = key.value;
            if !keys.insert(k.clone()) {
                return Err(de::Error::custom(format!("duplicate key `{k}`")));
            }
            out.push((k, v));
        }
        Ok(Kind::Map(out))
    }
}

/// A parse failure with its position.
#[derive(Debug)]
pub struct ParseError {
    /// What is wrong, in the parser's words.
    pub message: String,
    /// Where the value is written; `None` for a document read without positions.
    pub span: Option<Span>,
}

/// A JSON document parsed without positions, much faster than [`parse`]: the loader tries it
/// first and re-parses with positions only when it has something to report.
pub fn parse_json_unspanned(text: &str) -> Option<Node> {
    if !text.trim_start().starts_with(['{', '[']) {
        return None;
    }
    weir_core::json::from_str(text).ok().map(Node::from_json)
}

/// Parses YAML or JSON into a spanned tree.
pub fn parse(text: &str) -> Result<Node, ParseError> {
    // saphyr's default budget (250,000 YAML nodes) would fail a 20,000-node graph, which
    // would then lose its positions; the limits that stop alias and nesting bombs stay.
    let opts = serde_saphyr::options! {
        strict_booleans: true,
        budget: serde_saphyr::budget! {
            max_nodes: 5_000_000,
            max_events: 10_000_000,
        },
    };
    match serde_saphyr::from_str_with_options::<Node>(text, opts) {
        Ok(n) => Ok(n),
        Err(e) => {
            let looks_json = text.trim_start().starts_with(['{', '[']);
            if looks_json {
                // Strict: a repeated key is an error here too, never "the last one wins".
                match weir_core::json::from_str(text) {
                    Ok(v) => return Ok(Node::from_json(v)),
                    Err(je) => {
                        return Err(ParseError {
                            message: format!("invalid JSON: {je}"),
                            span: Some(Span {
                                line: je.line(),
                                column: je.column(),
                            }),
                        });
                    }
                }
            }
            let span = e.location().and_then(|l| {
                (l.line() > 0).then(|| Span {
                    line: l.line() as usize,
                    column: l.column() as usize,
                })
            });
            let message = e.to_string();
            let mut message = message.lines().next().unwrap_or("invalid YAML").trim();
            // saphyr prefixes "error: line L column C: "; the span already says where.
            if let Some(rest) = message.strip_prefix("error: ")
                && let Some((_, after)) = rest.split_once(": ")
                && rest.starts_with("line ")
            {
                message = after;
            }
            // The parser's advice to its own callers is not the user's to follow.
            let message = message
                .split_once(", set DuplicateKeyPolicy")
                .map_or(message, |(m, _)| m)
                .replace("duplicate mapping key: ", "duplicate key: ");
            Err(ParseError {
                message: format!("invalid YAML: {message}"),
                span,
            })
        }
    }
}
