//! Fuzz target: the state property of `normafs_fuzz::state` (see fuzz/README.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| normafs_fuzz::state(data));
