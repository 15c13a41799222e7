//! The steps of `uvfs bench devwork`, each the commands a developer types
//! (`tar`, `git`, `sqlite3`, `rm`), timed from the first command's start
//! to the last one's exit, then checked (untimed) for what they must have
//! done.

use super::manifest::{self, Manifest};
use super::tree::{NEEDLE, TOP};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `tar -xzf TARBALL`.
    Untar,
    /// `git init -q && git add -A && git commit -q -m x`.
    GitCommit,
    /// `git status --porcelain`, after [`super::STATUS_PAUSE`].
    GitStatus,
    /// `git grep -l NEEDLE`.
    GitGrep,
    /// `sqlite3 devwork.db < script`.
    Sqlite,
    /// `rm -rf` of the tree (the repository and database in it).
    Rm,
}

impl Step {
    pub const ALL: [Step; 6] = [
        Step::Untar,
        Step::GitCommit,
        Step::GitStatus,
        Step::GitGrep,
        Step::Sqlite,
        Step::Rm,
    ];

    /// Its name in rows and tables.
    pub const fn name(self) -> &'static str {
        match self {
            Step::Untar => "untar",
            Step::GitCommit => "git_commit",
            Step::GitStatus => "git_status",
            Step::GitGrep => "git_grep",
            Step::Sqlite => "sqlite",
            Step::Rm => "rm_rf",
        }
    }
}

/// What every repeat unpacks and checks against.
pub struct Job {
    pub tarball: PathBuf,
    /// The tarball's manifest (see `manifest.rs`).
    pub expected: Manifest,
    pub needle_files: usize,
    /// The `sqlite3` script and what it must print.
    pub sql: PathBuf,
    pub sql_expected: String,
}

/// What a step's commands printed, and how long they took.
pub struct Ran {
    pub secs: f64,
    pub stdout: String,
}

/// Options every `git` command gets: who commits, no repository-wide
/// maintenance in the background (its timing would land in a later step),
/// and no hints about the default branch.
const GIT_CONFIG: [&str; 8] = [
    "-c",
    "user.name=uvfs bench",
    "-c",
    "user.email=bench@uvfs.invalid",
    "-c",
    "init.defaultBranch=main",
    "-c",
    "gc.auto=0",
];

fn command(prog: &str, cwd: &Path) -> Command {
    let mut c = Command::new(prog);
    crate::cleanup::unblock_in_child(&mut c);
    c.current_dir(cwd).stdin(Stdio::null());
    if prog == "git" {
        // The user's and the system's git configuration stay out of it, and
        // so does any repository this benchmark was started from.
        c.args(GIT_CONFIG)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env_remove("GIT_INDEX_FILE");
    }
    c
}

/// Runs `c` to its exit; an error carries its stderr.
fn output(c: &mut Command) -> io::Result<String> {
    let out = c.stderr(Stdio::piped()).stdout(Stdio::piped()).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{:?} {}: {}",
            c.get_program(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The tree's top directory in `work`.
pub fn top(work: &Path) -> PathBuf {
    work.join(TOP)
}

/// Runs `step`'s commands in `work` (the directory the tree is unpacked
/// in), timed.
pub fn run(step: Step, job: &Job, work: &Path) -> io::Result<Ran> {
    let tree = top(work);
    let start = Instant::now();
    let stdout = match step {
        Step::Untar => output(command("tar", work).arg("-xzf").arg(&job.tarball))?,
        Step::GitCommit => {
            output(command("git", &tree).args(["init", "-q"]))?;
            output(command("git", &tree).args(["add", "-A"]))?;
            output(command("git", &tree).args(["commit", "-q", "-m", "x"]))?
        }
        Step::GitStatus => output(command("git", &tree).args(["status", "--porcelain"]))?,
        Step::GitGrep => output(command("git", &tree).args(["grep", "-l", NEEDLE]))?,
        Step::Sqlite => output(
            command("sqlite3", &tree)
                .arg("devwork.db")
                .stdin(std::fs::File::open(&job.sql)?),
        )?,
        Step::Rm => output(command("rm", work).args(["-rf", TOP]))?,
    };
    Ok(Ran {
        secs: start.elapsed().as_secs_f64(),
        stdout,
    })
}

/// Whether `step` did what it must: the unpacked tree is the tarball's,
/// the commit holds every file, `git status` sees nothing changed,
/// `git grep` finds the files holding the needle, the database holds what
/// the script put in, and the tree is gone.
pub fn check(step: Step, job: &Job, work: &Path, ran: &Ran) -> Result<(), String> {
    let tree = top(work);
    match step {
        Step::Untar => {
            let got = manifest::of_tree(work).map_err(|e| format!("reading the tree back: {e}"))?;
            manifest::compare(&job.expected, &got)
        }
        Step::GitCommit => {
            let files = output(command("git", &tree).args(["ls-files"]))
                .map_err(|e| format!("git ls-files: {e}"))?;
            let want = job
                .expected
                .values()
                .filter(|m| m.kind != manifest::Kind::Dir)
                .count();
            let got = files.lines().count();
            if got == want {
                Ok(())
            } else {
                Err(format!("the commit holds {got} files, the tree {want}"))
            }
        }
        Step::GitStatus if ran.stdout.is_empty() => Ok(()),
        Step::GitStatus => Err(format!(
            "git status shows changes in a tree nobody touched: {}",
            ran.stdout.lines().take(5).collect::<Vec<_>>().join("; ")
        )),
        Step::GitGrep => {
            let got = ran.stdout.lines().count();
            if got == job.needle_files {
                Ok(())
            } else {
                Err(format!(
                    "git grep found {NEEDLE} in {got} files, {} hold it",
                    job.needle_files
                ))
            }
        }
        Step::Sqlite if ran.stdout == job.sql_expected => Ok(()),
        Step::Sqlite => Err(format!(
            "sqlite3 printed {:?}, expected {:?}",
            ran.stdout, job.sql_expected
        )),
        Step::Rm => match std::fs::read_dir(work).map(|mut d| d.next()) {
            Ok(None) => Ok(()),
            Ok(Some(e)) => Err(format!(
                "rm -rf left {}",
                e.map(|e| e.path().display().to_string())
                    .unwrap_or_else(|e| e.to_string())
            )),
            Err(e) => Err(format!("{}: {e}", work.display())),
        },
    }
}

/// Whether `prog` runs here (`prog --version`).
pub fn have(prog: &str) -> bool {
    Command::new(prog)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Fails with a clear message unless `tar`, `git` and `sqlite3` are here.
pub fn check_tools() -> io::Result<()> {
    let missing: Vec<&str> = ["tar", "git", "sqlite3"]
        .into_iter()
        .filter(|p| !have(p))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "uvfs bench devwork needs {} (scripts/install-deps.sh installs them)",
                missing.join(", ")
            ),
        ))
    }
}
