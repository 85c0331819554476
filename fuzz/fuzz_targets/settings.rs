//! `weir.toml` parsing never panics: every input is settings or an error message.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = weir_core::settings::Settings::parse(text);
    }
});
