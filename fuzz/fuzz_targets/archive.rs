//! Fuzz target: the archive property of `normafs_fuzz::archive` (see fuzz/README.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| normafs_fuzz::archive(data));
