//! The noa core (SPEC 4): a pure library. Inputs are loaded files and a configuration; outputs
//! are bytes and decisions. No I/O, no clock: time is passed in.
