//! What `uvfs bench all` sets up before it runs: the Debian packages its
//! workloads and peers need, then the peers themselves, so a fresh
//! machine gets results rather than rows failed for want of a compiler
//! input. As root the packages are installed with apt-get, as
//! scripts/install-deps.sh does; otherwise the command that would install
//! them is printed and the run goes on with what there is.

use crate::peers;
use std::path::Path;
use std::process::{Command, Stdio};

/// Debian packages the benchmarks need, and what for.
pub const DEBIAN_PACKAGES: [(&str, &str); 5] = [
    ("fuse3", "fusermount3, for peers run as a user"),
    (
        "libfuse3-dev",
        "libfuse's passthrough_ll peer (its source and headers)",
    ),
    ("pkg-config", "compiling passthrough_ll against libfuse"),
    ("git", "devwork's git steps"),
    ("sqlite3", "devwork's SQLite step"),
];

/// Whether a Go toolchain is there (on PATH or where the official tarball
/// puts it); Debian's golang-go is added to the packages when it is not.
/// Its version is not checked here: scripts/build-peers.sh downloads a
/// newer Go through that go command when it is older than the go-fuse
/// peer asks.
fn has_go() -> bool {
    Path::new("/usr/local/go/bin/go").is_file()
        || Command::new("go")
            .arg("version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

fn installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success() && o.stdout.starts_with(b"install ok installed"))
}

/// The packages to install: those of [`DEBIAN_PACKAGES`] (and golang-go
/// without a Go) that `installed` says are missing.
pub fn missing(installed: impl Fn(&str) -> bool, has_go: bool) -> Vec<&'static str> {
    DEBIAN_PACKAGES
        .iter()
        .map(|p| p.0)
        .chain((!has_go).then_some("golang-go"))
        .filter(|p| !installed(p))
        .collect()
}

/// The command that installs `pkgs`.
pub fn install_command(pkgs: &[&str]) -> String {
    format!(
        "apt-get install -y --no-install-recommends {}",
        pkgs.join(" ")
    )
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Installs what is missing (as root) or says how (otherwise), then builds
/// every peer. Returns one line per thing that is still not set up; the
/// run goes on, and the rows of a peer that could not be built say so.
pub fn prepare() -> Vec<String> {
    let mut problems = Vec::new();
    let debian = Command::new("dpkg-query")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !debian {
        let names: Vec<&str> = DEBIAN_PACKAGES.iter().map(|p| p.0).collect();
        problems.push(format!(
            "not a Debian system: install the equivalents of {} and Go 1.22+ yourself",
            names.join(", ")
        ));
    } else {
        let pkgs = missing(installed, has_go());
        if !pkgs.is_empty() {
            if is_root() {
                println!("setup: installing Debian packages: {}", pkgs.join(" "));
                if let Err(e) = apt_get(&pkgs) {
                    problems.push(format!("{}: {e}", install_command(&pkgs)));
                }
            } else {
                problems.push(format!(
                    "missing Debian packages ({}); as root: apt-get update && {}",
                    pkgs.join(", "),
                    install_command(&pkgs)
                ));
            }
        }
    }
    let mut built = Vec::new();
    for kind in peers::PeerKind::ALL {
        if built.contains(&kind.binary()) {
            continue;
        }
        built.push(kind.binary());
        println!("setup: peer {} ...", kind.binary());
        if let Err(e) = peers::ensure_built(kind) {
            problems.push(e.to_string());
        }
    }
    problems
}

fn apt_get(pkgs: &[&str]) -> std::io::Result<()> {
    let run = |args: &[&str]| -> std::io::Result<()> {
        let status = crate::cleanup::unblock_in_child(&mut Command::new("apt-get"))
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(std::io::Error::other(format!(
                "apt-get {} failed ({status})",
                args[0]
            )))
        }
    };
    run(&["update", "-qq"])?;
    let mut args = vec!["install", "-y", "-qq", "--no-install-recommends"];
    args.extend_from_slice(pkgs);
    run(&args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_missing_packages_are_named() {
        assert!(missing(|_| true, true).is_empty());
        assert_eq!(missing(|p| p != "libfuse3-dev", true), ["libfuse3-dev"]);
        assert_eq!(missing(|p| p != "golang-go", false), ["golang-go"]);
        assert_eq!(missing(|_| false, true).len(), DEBIAN_PACKAGES.len());
        assert_eq!(
            install_command(&["git", "sqlite3"]),
            "apt-get install -y --no-install-recommends git sqlite3"
        );
    }

    #[test]
    fn install_deps_installs_the_same_packages() {
        let script = include_str!("../../../scripts/install-deps.sh");
        let line = script
            .lines()
            .find(|l| l.trim_start().starts_with("local pkgs=("))
            .expect("install-deps.sh's package list");
        for (p, _) in DEBIAN_PACKAGES {
            assert!(
                line.split(['(', ')', ' ']).any(|w| w == p),
                "{p} missing from install-deps.sh: {line}"
            );
        }
    }
}
