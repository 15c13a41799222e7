//! The source tree `uvfs bench devwork` unpacks: generated from a seed, so
//! every run (and every machine) unpacks the same tree, and nothing large
//! is committed.
//!
//! It is shaped like a project's source: one top directory, a random
//! recursive tree of directories at most [`MAX_DEPTH`] deep with about
//! [`FILES_PER_DIR`] files each, file sizes drawn from a log-normal (median
//! 3 KiB, a long tail to [`MAX_FILE`], a few empty files), text made of
//! code-like lines (so gzip and git's zlib compress it as they would
//! source), a few executable scripts, and a few symlinks. One file in
//! [`NEEDLE_EVERY`] holds [`NEEDLE`], which `git grep` looks for.

use crate::seqio::splitmix;
use flate2::write::GzEncoder;
use flate2::Compression;
use std::collections::BTreeMap;
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// The tree's top directory (what the tarball unpacks to).
pub const TOP: &str = "devwork-src";
/// The string `git grep` looks for; no generated word contains it.
pub const NEEDLE: &str = "DEVWORK_NEEDLE_7F3A";
/// About one regular file in this many holds [`NEEDLE`].
pub const NEEDLE_EVERY: u64 = 40;
pub const FILES_PER_DIR: usize = 12;
/// Deepest directory below [`TOP`].
pub const MAX_DEPTH: usize = 7;
pub const MAX_FILE: u64 = 400 << 10;
/// The modification time of every member (tar restores it).
const MTIME: u64 = 1_700_000_000;

/// A deterministic generator (SplitMix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        splitmix(&mut self.0)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// What a member of the tree is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    Dir,
    File(Vec<u8>),
    Symlink(String),
}

/// One member: its path below the unpack directory (`TOP/...`), mode
/// bits and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub path: String,
    pub mode: u32,
    pub body: Body,
}

/// A generated tree, members in path order (every directory before what
/// it holds).
pub struct Tree {
    pub members: Vec<Member>,
    /// Regular files holding [`NEEDLE`].
    pub needle_files: usize,
}

impl Tree {
    pub fn bytes(&self) -> u64 {
        self.members
            .iter()
            .map(|m| match &m.body {
                Body::File(d) => d.len() as u64,
                _ => 0,
            })
            .sum()
    }
}

const DIR_NAMES: [&str; 32] = [
    "src", "lib", "include", "tests", "docs", "tools", "scripts", "drivers", "net", "fs", "core",
    "util", "arch", "x86", "arm", "common", "internal", "api", "cmd", "pkg", "examples", "bench",
    "contrib", "vendor", "build", "config", "data", "ui", "server", "client", "proto", "io",
];

const WORDS: [&str; 64] = [
    "static", "int", "return", "struct", "const", "void", "if", "else", "for", "while", "size",
    "len", "buf", "node", "list", "entry", "data", "ptr", "count", "name", "path", "file", "dir",
    "lock", "init", "free", "alloc", "read", "write", "open", "close", "error", "value", "key",
    "hash", "table", "next", "prev", "head", "tail", "index", "flags", "mode", "state", "config",
    "parse", "token", "string", "char", "u64", "self", "fn", "let", "mut", "match", "impl", "pub",
    "use", "new", "get", "set", "insert", "remove", "check",
];

/// Extensions by weight (out of 100), and whether such files are scripts.
const EXTS: [(&str, u64, bool); 10] = [
    (".c", 30, false),
    (".h", 20, false),
    (".rs", 10, false),
    (".py", 10, true),
    (".md", 5, false),
    (".txt", 5, false),
    (".sh", 5, true),
    (".json", 5, false),
    (".go", 5, false),
    ("", 5, false),
];

/// Code-like text of exactly `size` bytes.
fn text(rng: &mut Rng, size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size + 128);
    while out.len() < size {
        match rng.below(10) {
            0 => out.push(b'\n'),
            1 => {
                out.extend_from_slice(b"/* ");
                for _ in 0..3 + rng.below(8) {
                    out.extend_from_slice(rng.pick(&WORDS).as_bytes());
                    out.push(b' ');
                }
                out.extend_from_slice(b"*/\n");
            }
            _ => {
                for _ in 0..rng.below(4) {
                    out.extend_from_slice(b"    ");
                }
                let n = 2 + rng.below(8);
                for i in 0..n {
                    out.extend_from_slice(rng.pick(&WORDS).as_bytes());
                    out.extend_from_slice(match (i + 1 == n, rng.below(6)) {
                        (true, 0) => b" {",
                        (true, 1) => b");",
                        (true, _) => b";",
                        (false, 0) => b"(",
                        (false, 1) => b" = ",
                        (false, 2) => b", ",
                        (false, 3) => b"_",
                        (false, _) => b" ",
                    });
                }
                out.push(b'\n');
            }
        }
    }
    out.truncate(size);
    out
}

/// A file size: log-normal around 3 KiB, 1 % empty, at most [`MAX_FILE`].
fn file_size(rng: &mut Rng) -> u64 {
    if rng.below(100) == 0 {
        return 0;
    }
    let z = (-2.0 * rng.unit().ln()).sqrt() * (2.0 * std::f64::consts::PI * rng.unit()).cos();
    ((3000f64.ln() + 1.3 * z).exp() as u64).clamp(1, MAX_FILE)
}

/// `name` made unique among `taken` (a numeric suffix if need be).
fn unique(taken: &mut std::collections::HashSet<String>, dir: &str, name: String) -> String {
    let mut n = 0;
    loop {
        let cand = if n == 0 {
            format!("{dir}/{name}")
        } else {
            format!("{dir}/{n}{name}")
        };
        if taken.insert(cand.clone()) {
            return cand;
        }
        n += 1;
    }
}

/// Generates a tree of `files` regular files and symlinks (and about
/// `files / FILES_PER_DIR` directories) from `seed`.
pub fn generate(files: usize, seed: u64) -> Tree {
    let mut rng = Rng::new(seed);
    let mut taken = std::collections::HashSet::new();
    // (path, depth); the top directory is depth 0.
    let mut dirs: Vec<(String, usize)> = vec![(TOP.to_string(), 0)];
    taken.insert(TOP.to_string());
    let n_dirs = (files / FILES_PER_DIR).max(1);
    while dirs.len() < n_dirs {
        let (parent, depth) = dirs[rng.below(dirs.len() as u64) as usize].clone();
        if depth >= MAX_DEPTH {
            continue;
        }
        let path = unique(&mut taken, &parent, rng.pick(&DIR_NAMES).to_string());
        dirs.push((path, depth + 1));
    }
    let mut members: BTreeMap<String, Member> = dirs
        .iter()
        .map(|(p, _)| {
            let m = Member {
                path: p.clone(),
                mode: 0o755,
                body: Body::Dir,
            };
            (p.clone(), m)
        })
        .collect();
    // Files per directory so far, for symlinks to a sibling.
    let mut siblings: Vec<Vec<String>> = vec![Vec::new(); dirs.len()];
    let mut needle_files = 0;
    for _ in 0..files {
        let d = rng.below(dirs.len() as u64) as usize;
        let dir = &dirs[d].0;
        if rng.below(200) == 0 && !siblings[d].is_empty() {
            let target = siblings[d][rng.below(siblings[d].len() as u64) as usize].clone();
            let path = unique(&mut taken, dir, format!("{}-link", rng.pick(&WORDS)));
            let m = Member {
                path: path.clone(),
                mode: 0o777,
                body: Body::Symlink(target),
            };
            members.insert(path, m);
            continue;
        }
        let mut w = rng.below(100);
        let (ext, script) = EXTS
            .iter()
            .find(|(_, weight, _)| {
                let hit = w < *weight;
                w = w.saturating_sub(*weight);
                hit
            })
            .map_or((".c", false), |&(e, _, s)| (e, s));
        let stem = if rng.below(2) == 0 {
            rng.pick(&WORDS).to_string()
        } else {
            format!("{}_{}", rng.pick(&WORDS), rng.pick(&WORDS))
        };
        let path = unique(&mut taken, dir, format!("{stem}{ext}"));
        let size = file_size(&mut rng) as usize;
        let mut data = text(&mut rng, size);
        if size >= 200 && rng.below(NEEDLE_EVERY) == 0 {
            let line = format!("/* {NEEDLE} */\n");
            data[..line.len()].copy_from_slice(line.as_bytes());
            needle_files += 1;
        }
        let mode = match (script, rng.below(50)) {
            (true, _) => 0o755,
            (false, 0) => 0o664,
            _ => 0o644,
        };
        siblings[d].push(path.rsplit('/').next().unwrap_or_default().to_string());
        members.insert(
            path.clone(),
            Member {
                path,
                mode,
                body: Body::File(data),
            },
        );
    }
    Tree {
        members: members.into_values().collect(),
        needle_files,
    }
}

/// Writes `tree` as a gzip'd tar (GNU format, owner root, one fixed
/// modification time) to `path`.
pub fn write_tarball(tree: &Tree, path: &Path) -> io::Result<()> {
    let file = std::fs::File::create(path)?;
    let gz = GzEncoder::new(BufWriter::new(file), Compression::default());
    let mut b = tar::Builder::new(gz);
    for m in &tree.members {
        let mut h = tar::Header::new_gnu();
        h.set_mode(m.mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(MTIME);
        match &m.body {
            Body::Dir => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_size(0);
                b.append_data(&mut h, format!("{}/", m.path), io::empty())?;
            }
            Body::File(data) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(data.len() as u64);
                b.append_data(&mut h, &m.path, data.as_slice())?;
            }
            Body::Symlink(target) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_size(0);
                b.append_link(&mut h, &m.path, target)?;
            }
        }
    }
    let gz = b.into_inner()?;
    gz.finish()?.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_tree() {
        let a = generate(300, 7);
        let b = generate(300, 7);
        assert_eq!(a.members, b.members);
        assert_ne!(generate(300, 8).members, a.members);
    }

    #[test]
    fn shaped_like_a_source_tree() {
        let t = generate(4650, 1);
        let files = t
            .members
            .iter()
            .filter(|m| !matches!(m.body, Body::Dir))
            .count();
        assert_eq!(files, 4650);
        let dirs = t.members.len() - files;
        assert_eq!(dirs, 4650 / FILES_PER_DIR);
        let depth = |m: &Member| m.path.matches('/').count();
        let max_depth = t
            .members
            .iter()
            .filter(|m| m.body == Body::Dir)
            .map(depth)
            .max();
        assert!(matches!(max_depth, Some(4..=MAX_DEPTH)), "{max_depth:?}");
        // Roughly 20-60 MB, as a mid-sized project's source.
        let bytes = t.bytes();
        assert!((20 << 20..60 << 20).contains(&bytes), "{bytes}");
        assert!(
            t.needle_files > 50 && t.needle_files < 200,
            "{}",
            t.needle_files
        );
        assert!(t.members.iter().any(|m| matches!(m.body, Body::Symlink(_))));
        assert!(t
            .members
            .iter()
            .any(|m| m.mode == 0o755 && m.body != Body::Dir));
        // Every member but the top lies in a directory listed before it.
        for (i, m) in t.members.iter().enumerate().skip(1) {
            let parent = &m.path[..m.path.rfind('/').unwrap()];
            assert!(
                t.members[..i]
                    .iter()
                    .any(|p| p.path == parent && p.body == Body::Dir),
                "{}",
                m.path
            );
        }
        for w in WORDS {
            assert!(!NEEDLE.contains(w) && !w.contains(NEEDLE));
        }
    }
}
