//! Fuzz target: the memory property of `normafs_fuzz::memory` (see fuzz/README.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| normafs_fuzz::memory(data));
