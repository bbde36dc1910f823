//! Fuzz target: the ctl property of `normafs_fuzz::ctl` (see fuzz/README.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| normafs_fuzz::ctl(data));
