//! The audit: findings catalogue (SPEC 9).
