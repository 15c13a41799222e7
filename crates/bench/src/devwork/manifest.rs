//! The contents check of `uvfs bench devwork`: a manifest (every member's
//! path, type, mode bits, size and a digest of its content or link target)
//! read once from the tarball and once from the unpacked tree, compared
//! member by member, so a mismatch names what differs.

use flate2::read::GzDecoder;
use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hasher};
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    /// Anything else (device, fifo, socket): never in the tarball.
    Other,
}

/// What the check compares of one member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub kind: Kind,
    /// Permission bits and set-id/sticky bits (`mode & 0o7777`).
    pub mode: u32,
    /// Bytes of a file, of a symlink's target; 0 for a directory.
    pub size: u64,
    /// Digest of a file's content or a symlink's target; 0 for a
    /// directory.
    pub digest: u64,
}

/// Path (below the unpack directory, no trailing `/`) to what it is.
pub type Manifest = BTreeMap<String, Meta>;

fn digest_bytes(b: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    h.write(b);
    h.finish()
}

fn digest_reader(r: &mut impl Read) -> io::Result<(u64, u64)> {
    let mut h = DefaultHasher::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut n = 0u64;
    loop {
        let k = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.write(&buf[..k]);
        n += k as u64;
    }
    Ok((n, h.finish()))
}

/// The manifest of a gzip'd tarball, read as it is on disk.
pub fn of_tarball(path: &Path) -> io::Result<Manifest> {
    let file = std::fs::File::open(path)?;
    let mut a = tar::Archive::new(GzDecoder::new(io::BufReader::new(file)));
    let mut m = Manifest::new();
    for e in a.entries()? {
        let mut e = e?;
        let name = e
            .path()?
            .to_string_lossy()
            .trim_end_matches('/')
            .to_string();
        let mode = e.header().mode()? & 0o7777;
        let meta = match e.header().entry_type() {
            tar::EntryType::Directory => Meta {
                kind: Kind::Dir,
                mode,
                size: 0,
                digest: 0,
            },
            tar::EntryType::Regular => {
                let (size, digest) = digest_reader(&mut e)?;
                Meta {
                    kind: Kind::File,
                    mode,
                    size,
                    digest,
                }
            }
            tar::EntryType::Symlink => {
                let target = e.link_name()?.unwrap_or_default();
                let t = target.as_os_str().as_encoded_bytes();
                Meta {
                    kind: Kind::Symlink,
                    mode: SYMLINK_MODE,
                    size: t.len() as u64,
                    digest: digest_bytes(t),
                }
            }
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{}: {name}: unexpected member type {other:?}",
                        path.display()
                    ),
                ))
            }
        };
        m.insert(name, meta);
    }
    Ok(m)
}

/// The manifest of everything below `dir` (paths relative to it; `dir`
/// itself is not listed).
pub fn of_tree(dir: &Path) -> io::Result<Manifest> {
    let mut m = Manifest::new();
    walk(dir, "", &mut m)?;
    Ok(m)
}

fn walk(dir: &Path, prefix: &str, m: &mut Manifest) -> io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = format!("{prefix}{}", e.file_name().to_string_lossy());
        let path = e.path();
        let md = std::fs::symlink_metadata(&path)?;
        let mode = md.permissions().mode() & 0o7777;
        let ft = md.file_type();
        let meta = if ft.is_dir() {
            walk(&path, &format!("{name}/"), m)?;
            Meta {
                kind: Kind::Dir,
                mode,
                size: 0,
                digest: 0,
            }
        } else if ft.is_file() {
            let (size, digest) = digest_reader(&mut std::fs::File::open(&path)?)?;
            if size != md.len() {
                return Err(io::Error::other(format!(
                    "{}: stat says {} bytes, {size} read",
                    path.display(),
                    md.len()
                )));
            }
            Meta {
                kind: Kind::File,
                mode,
                size,
                digest,
            }
        } else if ft.is_symlink() {
            let t = std::fs::read_link(&path)?;
            let t = t.as_os_str().as_encoded_bytes();
            Meta {
                kind: Kind::Symlink,
                mode: SYMLINK_MODE,
                size: t.len() as u64,
                digest: digest_bytes(t),
            }
        } else {
            Meta {
                kind: Kind::Other,
                mode,
                size: md.len(),
                digest: 0,
            }
        };
        m.insert(name, meta);
    }
    Ok(())
}

/// The mode a symlink is recorded with on both sides: Linux gives symlinks
/// no permission bits of their own (a tarball says 0777, some FUSE servers
/// report 0755), so they are not compared.
const SYMLINK_MODE: u32 = 0;

/// One digest of a whole manifest (for the report).
pub fn checksum(m: &Manifest) -> String {
    let mut h = DefaultHasher::new();
    for (path, meta) in m {
        h.write(path.as_bytes());
        h.write_u8(0);
        h.write_u8(meta.kind as u8);
        h.write_u32(meta.mode);
        h.write_u64(meta.size);
        h.write_u64(meta.digest);
    }
    format!("{:016x}", h.finish())
}

/// How many differences [`compare`] names before it says "and N more".
const SHOWN: usize = 5;

/// Ok if `actual` (the unpacked tree) is `expected` (the tarball's);
/// otherwise a message naming the differing members.
pub fn compare(expected: &Manifest, actual: &Manifest) -> Result<(), String> {
    let mut diffs = Vec::new();
    for (path, want) in expected {
        match actual.get(path) {
            None => diffs.push(format!("{path}: missing")),
            Some(got) if got != want => {
                let mut what = Vec::new();
                if got.kind != want.kind {
                    what.push(format!("type {:?}, tarball {:?}", got.kind, want.kind));
                }
                if got.mode != want.mode {
                    what.push(format!("mode {:o}, tarball {:o}", got.mode, want.mode));
                }
                if got.size != want.size {
                    what.push(format!("size {}, tarball {}", got.size, want.size));
                }
                if what.is_empty() {
                    what.push("content differs".into());
                }
                diffs.push(format!("{path}: {}", what.join(", ")));
            }
            Some(_) => {}
        }
    }
    for path in actual.keys().filter(|p| !expected.contains_key(*p)) {
        diffs.push(format!("{path}: not in the tarball"));
    }
    if diffs.is_empty() {
        return Ok(());
    }
    let more = diffs.len().saturating_sub(SHOWN);
    let mut msg = format!(
        "the unpacked tree differs from the tarball in {} member(s) (tree checksum {}, tarball {}): {}",
        diffs.len(),
        checksum(actual),
        checksum(expected),
        diffs[..diffs.len().min(SHOWN)].join("; ")
    );
    if more > 0 {
        msg += &format!("; and {more} more");
    }
    Err(msg)
}

#[cfg(test)]
mod tests {
    use super::super::tree;
    use super::*;
    use std::process::Command;

    struct TempDir(std::path::PathBuf);
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn meta(kind: Kind, size: u64, digest: u64) -> Meta {
        Meta {
            kind,
            mode: 0o644,
            size,
            digest,
        }
    }

    #[test]
    fn compare_names_each_difference() {
        let mut want = Manifest::new();
        want.insert("t".into(), meta(Kind::Dir, 0, 0));
        want.insert("t/a".into(), meta(Kind::File, 3, 1));
        want.insert("t/b".into(), meta(Kind::File, 3, 2));
        want.insert("t/c".into(), meta(Kind::File, 3, 3));
        assert_eq!(compare(&want, &want.clone()), Ok(()));
        let mut got = want.clone();
        got.get_mut("t/a").unwrap().digest = 9;
        got.get_mut("t/b").unwrap().mode = 0o600;
        got.remove("t/c");
        got.insert("t/d".into(), meta(Kind::File, 0, 0));
        let e = compare(&want, &got).unwrap_err();
        assert!(e.contains("4 member(s)"), "{e}");
        assert!(e.contains("t/a: content differs"), "{e}");
        assert!(e.contains("t/b: mode 600, tarball 644"), "{e}");
        assert!(e.contains("t/c: missing"), "{e}");
        assert!(e.contains("t/d: not in the tarball"), "{e}");
        assert_ne!(checksum(&want), checksum(&got));
    }

    #[test]
    fn compare_stops_listing_after_a_few() {
        let want: Manifest = (0..20)
            .map(|i| (format!("f{i:02}"), meta(Kind::File, 1, i)))
            .collect();
        let e = compare(&want, &Manifest::new()).unwrap_err();
        assert!(
            e.contains("20 member(s)") && e.contains("and 15 more"),
            "{e}"
        );
    }

    /// The tarball unpacked by GNU tar reads back as the tarball; a
    /// corrupted, re-moded, removed or added member fails the check.
    #[test]
    fn unpacked_tree_matches_and_corruption_is_caught() {
        let dir = TempDir(
            std::env::temp_dir().join(format!("uvfs-devwork-manifest-{}", std::process::id())),
        );
        let out = dir.0.join("out");
        std::fs::create_dir_all(&out).unwrap();
        let t = tree::generate(150, 3);
        let tgz = dir.0.join("t.tar.gz");
        tree::write_tarball(&t, &tgz).unwrap();
        let want = of_tarball(&tgz).unwrap();
        assert_eq!(want.len(), t.members.len());
        let st = Command::new("tar")
            .arg("-xzf")
            .arg(&tgz)
            .arg("-C")
            .arg(&out)
            // As root the modes are restored as they are; not as root
            // too, with this flag.
            .arg("--same-permissions")
            .status()
            .unwrap();
        assert!(st.success());
        let got = of_tree(&out).unwrap();
        assert_eq!(compare(&want, &got), Ok(()));
        assert_eq!(checksum(&want), checksum(&got));

        let file = t
            .members
            .iter()
            .find(|m| matches!(&m.body, tree::Body::File(d) if d.len() > 10))
            .unwrap();
        let p = out.join(&file.path);
        let mut data = std::fs::read(&p).unwrap();
        data[5] ^= 1;
        std::fs::write(&p, &data).unwrap();
        let e = compare(&want, &of_tree(&out).unwrap()).unwrap_err();
        assert!(
            e.contains(&format!("{}: content differs", file.path)),
            "{e}"
        );
        assert!(e.contains("1 member(s)"), "{e}");

        data[5] ^= 1;
        std::fs::write(&p, &data).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = compare(&want, &of_tree(&out).unwrap()).unwrap_err();
        assert!(e.contains(&format!("{}: mode 600", file.path)), "{e}");

        std::fs::remove_file(&p).unwrap();
        std::fs::write(out.join(tree::TOP).join("extra"), b"x").unwrap();
        let e = compare(&want, &of_tree(&out).unwrap()).unwrap_err();
        assert!(e.contains(&format!("{}: missing", file.path)), "{e}");
        assert!(e.contains("devwork-src/extra: not in the tarball"), "{e}");
    }
}
