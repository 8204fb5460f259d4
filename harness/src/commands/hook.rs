//! `harness hook install|uninstall`: the pre-push hook ([`crate::hook`]) and what to tell the
//! user about it.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;

use crate::hook::{self, Previous, Uninstalled};

/// The git pre-push hook: runs the quick suite on every pushed branch and blocks the push on
/// a regression (skip once with `git push --no-verify`).
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand, Debug)]
enum Action {
    /// Write the pre-push hook (into core.hooksPath if set, else the repository's hooks/).
    Install {
        /// Replace a pre-push hook that harness did not install (it is kept as pre-push.bak).
        #[arg(long)]
        force: bool,
        /// The repository (default: the current directory).
        #[arg(long, default_value = ".")]
        repo: PathBuf,
    },
    /// Remove the pre-push hook if harness installed it; any other hook is left alone.
    Uninstall {
        /// The repository (default: the current directory).
        #[arg(long, default_value = ".")]
        repo: PathBuf,
    },
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    match args.action {
        Action::Install { force, repo } => {
            let exe = std::env::current_exe().context("cannot find this harness binary")?;
            let installed = hook::install(&repo, &exe, force)?;
            let path = installed.path.display();
            match installed.previous {
                Previous::None => println!("installed the pre-push hook {path}"),
                Previous::Ours => println!("updated the pre-push hook {path}"),
                Previous::Foreign { backup } => println!(
                    "installed the pre-push hook {path}; the hook it replaced is kept as {}",
                    backup.display()
                ),
            }
            println!(
                "every `git push` now runs `{} compare --suite quick` and is blocked on a \
                 regression; skip it once with `git push --no-verify`, remove it with `harness \
                 hook uninstall`",
                exe.display()
            );
        }
        Action::Uninstall { repo } => match hook::uninstall(&repo)? {
            Uninstalled::Removed { path, backup } => {
                println!("removed the pre-push hook {}", path.display());
                if let Some(b) = backup {
                    println!(
                        "the hook it once replaced is still at {} (restore it with: mv {} {})",
                        b.display(),
                        b.display(),
                        path.display()
                    );
                }
            }
            Uninstalled::NotInstalled { path } => {
                println!("no pre-push hook at {}: nothing to remove", path.display())
            }
            Uninstalled::Foreign { path } => println!(
                "{} was not installed by harness: left it alone",
                path.display()
            ),
        },
    }
    Ok(0)
}
