//! Fuzz target: the journal property of `normafs_fuzz::journal` (see fuzz/README.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| normafs_fuzz::journal(data));
