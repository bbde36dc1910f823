//! The command line (SPEC 7).

/// Run the CLI; returns the process exit code.
pub fn main() -> i32 {
    0
}
