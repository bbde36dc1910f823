//! Fuzz target: the transcript property of `normafs_fuzz::transcript` (see fuzz/README.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| normafs_fuzz::transcript(data));
