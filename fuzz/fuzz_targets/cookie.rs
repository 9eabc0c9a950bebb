#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tiphys::fuzzing::cookie(data));
