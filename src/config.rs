//! Configuration (SPEC 10).
