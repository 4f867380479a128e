//! libFuzzer target: lowcopy_fuzz::capi (see src/lib.rs for what it checks).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| lowcopy_fuzz::capi(data));
