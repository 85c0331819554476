//! Strict JSON: like `serde_json::from_str::<Value>`, but a repeated key in an object is an
//! error with its line and column instead of "the last one wins". Workflow files, run input
//! and approval input are all read this way.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Parses `text`, refusing duplicate keys and integers too large to keep exactly (the error
/// says where): JSON reads `123456789012345678901234567890` as a float, which would record
/// `1.2345678901234568e29`, another value than the one written.
pub fn from_str(text: &str) -> Result<Value, serde_json::Error> {
    LARGE.with(|l| l.set(false));
    let mut de = serde_json::Deserializer::from_str(text);
    let v = de.deserialize_any(Strict)?;
    de.end()?;
    if LARGE.with(std::cell::Cell::get)
        && let Some((line, column, literal)) = inexact_integer(text)
    {
        // serde_json's errors are made by its parser; this one is built from a parse of
        // the offending literal alone, then given the literal's place in the text.
        let why = format!(
            "the integer {literal} at line {line} column {column} is too large to keep \
             exactly (weir keeps integers from -9223372036854775808 to \
             18446744073709551615); write it as a string"
        );
        return Err(de::Error::custom(why));
    }
    Ok(v)
}

/// The length of `v`'s JSON text, counted without building it; `None` once it passes
/// `limit` (counting stops there).
pub fn len_within<T: serde::Serialize + ?Sized>(v: &T, limit: usize) -> Option<usize> {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self
                .0
                .checked_sub(buf.len())
                .ok_or_else(|| std::io::Error::other("over the limit"))?;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(limit);
    serde_json::to_writer(&mut count, v).ok()?;
    Some(limit - count.0)
}

/// A size for people: `512 bytes`, `64 KiB`, `8 MiB`, `1.5 GiB`.
pub fn bytes(n: usize) -> String {
    const UNITS: [&str; 3] = ["KiB", "MiB", "GiB"];
    if n < 1024 {
        return format!("{n} bytes");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[unit])
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

thread_local! {
    /// Whether the parse on this thread met a float with no fraction beyond the integers'
    /// range: only then is the text scanned for an integer literal written that large.
    static LARGE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The first integer literal of `text` (no fraction, no exponent) that does not fit an
/// `i64` or a `u64`: its line, column (1-based) and text. Strings are skipped.
fn inexact_integer(text: &str) -> Option<(usize, usize, &str)> {
    let b = text.as_bytes();
    let (mut i, mut line, mut line_start) = (0, 1, 0);
    while i < b.len() {
        match b[i] {
            b'\n' => {
                line += 1;
                line_start = i + 1;
                i += 1;
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < b.len() && matches!(b[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    i += 1;
                }
                let lit = &text[start..i];
                let integer = !lit.contains(['.', 'e', 'E']);
                if integer && lit.parse::<i64>().is_err() && lit.parse::<u64>().is_err() {
                    return Some((line, start - line_start + 1, lit));
                }
            }
            _ => i += 1,
        }
    }
    None
}

struct Strict;

impl<'de> de::DeserializeSeed<'de> for Strict {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(Strict)
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        if v.fract() == 0.0 && v.abs() >= 9.2e18 {
            LARGE.with(|l| l.set(true));
        }
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("numbers must be finite"))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(Strict)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            if out.contains_key(&k) {
                return Err(de::Error::custom(format!(
                    "duplicate key `{k}` (each key may appear once in an object)"
                )));
            }
            let v = map.next_value_seed(Strict)?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::{bytes, from_str, len_within};
    use serde_json::json;

    #[test]
    fn sizes_are_counted_up_to_the_limit_and_told_in_units() {
        let v = json!({"a": [1, 2, "x"]});
        assert_eq!(len_within(&v, 100), Some(v.to_string().len()));
        let n = v.to_string().len();
        assert_eq!(len_within(&v, n), Some(n));
        assert_eq!(len_within(&v, n - 1), None);
        assert_eq!(bytes(512), "512 bytes");
        assert_eq!(bytes(8 << 20), "8 MiB");
        assert_eq!(bytes(1536 << 20), "1.5 GiB");
    }

    #[test]
    fn integers_too_large_to_keep_are_refused_where_they_are_written() {
        let e = from_str(
            "{\"s\": \"9999999999999999999999\",\n \"x\": 123456789012345678901234567890}",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("123456789012345678901234567890 at line 2 column 7"),
            "{e}"
        );
        // Within range, or written as a float, the value is kept as written.
        assert_eq!(
            from_str("[18446744073709551615, -9223372036854775808, 1e30]").unwrap(),
            json!([18_446_744_073_709_551_615_u64, i64::MIN, 1e30])
        );
    }

    #[test]
    fn duplicate_keys_are_refused_with_a_location() {
        assert_eq!(
            from_str(r#"{"a": [1, {"b": null}], "c": 1.5}"#).unwrap(),
            json!({"a": [1, {"b": null}], "c": 1.5})
        );
        let e = from_str("{\n  \"model\": \"mock\",\n  \"model\": \"claude-x\"\n}").unwrap_err();
        assert!(e.to_string().contains("duplicate key `model`"), "{e}");
        assert_eq!(e.line(), 3);
        assert!(from_str(r#"{"x": {"y": 1, "y": 2}}"#).is_err());
        assert!(from_str("{} trailing").is_err());
    }
}
