#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tiphys::fuzzing::rest_json(data));
