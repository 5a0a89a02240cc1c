//! `man` and `completions`: manual pages and shell completions generated
//! from the command-line definitions, so they never drift from `--help`.

use std::path::PathBuf;

use anyhow::Context;

/// Arguments of `nfsrdma man`.
#[derive(clap::Args, Debug)]
pub(crate) struct ManArgs {
    /// Directory to write the pages to: nfsrdma.1 and one
    /// nfsrdma-SUBCOMMAND.1 per subcommand (created if missing).
    #[arg(default_value = ".")]
    dir: PathBuf,
}

/// Arguments of `nfsrdma completions`.
#[derive(clap::Args, Debug)]
pub(crate) struct CompletionsArgs {
    /// The shell to write completions for.
    shell: clap_complete::Shell,
}

/// Writes the manual pages of `command` and its subcommands into the
/// directory of `args`, and prints their paths.
pub(crate) fn man(command: clap::Command, args: &ManArgs) -> anyhow::Result<()> {
    let name = command.get_name().to_string();
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    clap_mangen::generate_to(command, &args.dir)
        .with_context(|| format!("writing manual pages to {}", args.dir.display()))?;
    let mut pages: Vec<_> = std::fs::read_dir(&args.dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "1"))
        .filter(|p| {
            p.file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with(&name))
        })
        .collect();
    pages.sort();
    for p in pages {
        println!("{}", p.display());
    }
    Ok(())
}

/// Prints the completion script of `shell` for `command` to standard output.
pub(crate) fn completions(mut command: clap::Command, args: &CompletionsArgs) {
    let name = command.get_name().to_string();
    clap_complete::generate(args.shell, &mut command, name, &mut std::io::stdout());
}
