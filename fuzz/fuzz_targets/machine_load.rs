//! The machine loader never panics: whatever follows `nodes:` yields diagnostics or a
//! workflow.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let doc = format!("name: fuzz\nnodes:\n{text}");
        let loaded = weir_dialects::load("fuzz.yaml", &doc);
        for d in &loaded.diagnostics {
            let _ = d.render(Some(&doc));
        }
    }
});
