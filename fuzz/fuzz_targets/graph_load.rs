//! The graph loader never panics: every input yields a workflow or diagnostics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let loaded = weir_dialects::load("fuzz.json", text);
        for d in &loaded.diagnostics {
            let _ = d.render(Some(text));
        }
    }
});
