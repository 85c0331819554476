//! The expression compiler and evaluator never panic, whatever the source.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(src) = std::str::from_utf8(data) {
        let state = serde_json::json!({"x": 1, "s": "text", "items": [1, 2, 3], "m": {"k": "v"}});
        if weir_core::expr::check(src).is_ok() {
            let _ = weir_core::expr::eval_value(src, &state);
        }
        if let Ok(t) = weir_core::expr::Template::parse(src) {
            let _ = t.render(&state);
        }
    }
});
