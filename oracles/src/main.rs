//! `oracle` binary (contract `oracle-decode/1` in DESIGN.md). Not built yet: it says so and exits 2
//! ("could not run"), so nothing can mistake it for a passing reference.

fn main() -> std::process::ExitCode {
    eprintln!("error: oracle decode is not implemented in this revision (lands with the oracle issue)");
    std::process::ExitCode::from(2)
}
