//! `serve --config FILE`: the options of `serve` read from a TOML file.
//!
//! Each key is a long option of `serve` without its dashes, and `dir` is the
//! exported directory: `port = 2049`, `read-only = true`,
//! `allow = ["10.0.0.0/8", "127.0.0.1"]`, `transports = ["tcp", "rdma"]`.
//! Precedence: an option on the command line wins over the file, which wins
//! over the built-in default. An option given on the command line also
//! drops the file's keys it conflicts with (`--exports` drops `dir`,
//! `allow` and `no-root-squash`). A key that is no option of `serve`, or a
//! value of the wrong kind, is an error naming the key.
//!
//! How: the file's keys become `--key=value` arguments placed before the
//! command line's own, and the whole is parsed again by clap, so every
//! value goes through the same parser and checks as the flag itself and a
//! new option of `serve` is a config key with no change here.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};

/// Why a config file could not be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    #[error("reading config {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("config {path}: {error}")]
    Syntax {
        path: PathBuf,
        error: Box<toml::de::Error>,
    },
    #[error("config {path}: unknown key `{key}` (keys are the long options of `{command}` without the dashes)")]
    UnknownKey {
        path: PathBuf,
        key: String,
        command: String,
    },
    #[error("config {path}: key `{key}` {why}")]
    BadValue {
        path: PathBuf,
        key: String,
        why: &'static str,
    },
    /// A value the option's own parser refuses (clap's message).
    #[error("config {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// Keys a config file may not set: the file itself and clap's own flags.
const RESERVED: [&str; 3] = ["config", "help", "version"];

/// Parses `command` again with the keys of the config file at `path` put
/// before `user_args` (the arguments after the subcommand's name), given
/// the matches `given` of the command line alone.
pub(crate) fn reparse(
    command: Command,
    path: &Path,
    given: &ArgMatches,
    user_args: impl IntoIterator<Item = OsString>,
) -> Result<ArgMatches, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
        path: path.to_owned(),
        error,
    })?;
    let mut command = command;
    command.build();
    let mut argv: Vec<OsString> = vec![command.get_name().into()];
    argv.extend(file_args(&command, path, &text, given)?);
    argv.extend(user_args);
    command
        .try_get_matches_from(argv)
        .map_err(|e| ConfigError::Invalid {
            path: path.to_owned(),
            message: e.to_string().lines().next().unwrap_or_default().into(),
        })
}

/// The arguments the file's keys stand for, leaving out those the command
/// line sets (or conflicts with).
fn file_args(
    command: &Command,
    path: &Path,
    text: &str,
    given: &ArgMatches,
) -> Result<Vec<OsString>, ConfigError> {
    let table: toml::Table = text.parse().map_err(|e| ConfigError::Syntax {
        path: path.to_owned(),
        error: Box::new(e),
    })?;
    let mut positionals = Vec::new();
    let mut options = Vec::new();
    for (key, value) in &table {
        let arg = find_arg(command, key).ok_or_else(|| ConfigError::UnknownKey {
            path: path.to_owned(),
            key: key.clone(),
            command: command.get_name().to_string(),
        })?;
        if set_on_command_line(command, arg, given) {
            continue;
        }
        let bad = |why| ConfigError::BadValue {
            path: path.to_owned(),
            key: key.clone(),
            why,
        };
        for v in values(arg, value).map_err(bad)? {
            match arg.get_long() {
                Some(long) if v.is_empty() => options.push(format!("--{long}").into()),
                Some(long) => options.push(format!("--{long}={v}").into()),
                None if v.starts_with('-') => return Err(bad("must not begin with '-'")),
                None => positionals.push(v.into()),
            }
        }
    }
    positionals.extend(options);
    Ok(positionals)
}

/// The argument a key names: its long option, or a positional's name.
fn find_arg<'a>(command: &'a Command, key: &str) -> Option<&'a Arg> {
    if RESERVED.contains(&key) {
        return None;
    }
    command.get_arguments().find(|a| match a.get_long() {
        Some(long) => long == key,
        None => a.is_positional() && a.get_id().as_str() == key,
    })
}

/// Whether the command line sets `arg` or an argument conflicting with it.
fn set_on_command_line(command: &Command, arg: &Arg, given: &ArgMatches) -> bool {
    let on_line =
        |a: &Arg| given.value_source(a.get_id().as_str()) == Some(ValueSource::CommandLine);
    on_line(arg)
        || command.get_arg_conflicts_with(arg).into_iter().any(on_line)
        || command
            .get_arguments()
            .filter(|other| on_line(other))
            .any(|other| {
                command
                    .get_arg_conflicts_with(other)
                    .iter()
                    .any(|c| c.get_id() == arg.get_id())
            })
}

/// The values `value` gives `arg`, as its flag would take them; an empty
/// string stands for a flag without a value.
fn values(arg: &Arg, value: &toml::Value) -> Result<Vec<String>, &'static str> {
    match arg.get_action() {
        ArgAction::SetTrue => match value {
            toml::Value::Boolean(true) => Ok(vec![String::new()]),
            toml::Value::Boolean(false) => Ok(Vec::new()),
            _ => Err("takes true or false"),
        },
        ArgAction::Append => match value {
            toml::Value::Array(items) => items.iter().map(scalar).collect(),
            v => Ok(vec![scalar(v)?]),
        },
        ArgAction::Set => Ok(vec![scalar(value)?]),
        _ => Err("cannot be set in a config file"),
    }
}

fn scalar(value: &toml::Value) -> Result<String, &'static str> {
    match value {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(n) => Ok(n.to_string()),
        toml::Value::Float(f) => Ok(f.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        toml::Value::Array(_) => Err("takes one value, not a list"),
        _ => Err("takes a string, a number or true/false"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Args, FromArgMatches};

    #[derive(Args, Debug)]
    struct Demo {
        #[arg(required_unless_present_any = ["exports", "config"])]
        dir: Option<PathBuf>,
        #[arg(long, conflicts_with_all = ["dir", "allow"])]
        exports: Option<PathBuf>,
        #[arg(long)]
        allow: Vec<String>,
        #[arg(long, default_value_t = 2049)]
        port: u16,
        #[arg(long, default_value_t = 20048)]
        mount_port: u16,
        #[arg(long)]
        read_only: bool,
        #[arg(long, value_delimiter = ',', default_value = "tcp,rdma")]
        transports: Vec<String>,
        #[arg(long)]
        config: Option<PathBuf>,
    }

    fn command() -> Command {
        Demo::augment_args(Command::new("serve"))
    }

    /// Parses `line` (the command line after `serve`) with `file` as its
    /// config.
    fn parse(file: &str, line: &[&str]) -> Result<Demo, ConfigError> {
        let dir = std::env::temp_dir().join(format!("nfsrdma-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = dir.join(format!("{n}.toml"));
        std::fs::write(&path, file).unwrap();
        let mut argv = vec![
            "serve".to_string(),
            "--config".into(),
            path.display().to_string(),
        ];
        argv.extend(line.iter().map(|s| s.to_string()));
        let given = command().try_get_matches_from(&argv).unwrap();
        let user = argv[1..].iter().map(OsString::from);
        let m = reparse(command(), &path, &given, user);
        std::fs::remove_file(&path).unwrap();
        Ok(Demo::from_arg_matches(&m?).unwrap())
    }

    const FILE: &str = r#"
dir = "/srv/a"
port = 3049
mount-port = 30048
read-only = true
allow = ["10.0.0.0/8", "127.0.0.1"]
transports = ["tcp"]
"#;

    #[test]
    fn file_sets_options_and_defaults_fill_the_rest() {
        let d = parse(FILE, &[]).unwrap();
        assert_eq!(d.dir, Some(PathBuf::from("/srv/a")));
        assert_eq!((d.port, d.mount_port, d.read_only), (3049, 30048, true));
        assert_eq!(d.allow, ["10.0.0.0/8", "127.0.0.1"]);
        assert_eq!(d.transports, ["tcp"]);
        let d = parse("port = 1", &["/x"]).unwrap();
        assert_eq!((d.port, d.mount_port), (1, 20048));
        assert_eq!(d.transports, ["tcp", "rdma"]);
    }

    #[test]
    fn command_line_overrides_the_file() {
        let d = parse(FILE, &["--port", "4049", "/srv/b", "--allow", "::1"]).unwrap();
        assert_eq!(d.port, 4049);
        assert_eq!(d.dir, Some(PathBuf::from("/srv/b")));
        assert_eq!(
            d.allow,
            ["::1"],
            "a list on the command line replaces the file's"
        );
        assert_eq!(d.mount_port, 30048);
        let d = parse("read-only = false\nport = 7", &["/x"]).unwrap();
        assert!(!d.read_only);
    }

    #[test]
    fn a_conflicting_flag_drops_the_files_keys() {
        let d = parse(FILE, &["--exports", "/etc/e"]).unwrap();
        assert_eq!(d.exports, Some(PathBuf::from("/etc/e")));
        assert_eq!(d.dir, None);
        assert!(d.allow.is_empty());
        assert_eq!(d.port, 3049);
    }

    #[test]
    fn unknown_keys_and_wrong_values_name_the_key() {
        let e = parse("dir = \"/x\"\nprot = 1", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown key `prot`"), "{e}");
        for reserved in ["config = \"x\"", "help = true"] {
            let e = parse(reserved, &["/x"]).unwrap_err().to_string();
            assert!(e.contains("unknown key"), "{e}");
        }
        let e = parse("read-only = 1", &["/x"]).unwrap_err().to_string();
        assert!(e.contains("`read-only` takes true or false"), "{e}");
        let e = parse("port = [1, 2]", &["/x"]).unwrap_err().to_string();
        assert!(e.contains("`port` takes one value"), "{e}");
        let e = parse("port = 70000", &["/x"]).unwrap_err().to_string();
        assert!(e.contains("--port") && e.contains("70000"), "{e}");
        let e = parse("port = ", &["/x"]).unwrap_err().to_string();
        assert!(e.contains("config"), "{e}");
        let e = parse("dir = \"-rf\"", &[]).unwrap_err().to_string();
        assert!(e.contains("`dir` must not begin"), "{e}");
    }
}
