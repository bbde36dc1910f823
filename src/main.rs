//! The `normafs` binary: parse the command line, run it, map errors to an exit code.
fn main() {
    std::process::exit(normafs::cli::main());
}
