//! What a file system gets wrong (a library's may give anything) costs
//! only what is wrong. Listings: a name no file can have is left
//! out, a cookie that leads back to where the listing was asked from
//! ends it with `EIO` (not the whole directory failed, not `ls` listing
//! for ever); a name whose lookup panics is left out of a READDIRPLUS; a
//! read answered with more than asked gives what was asked. And
//! POSIX ACL attributes do not reach a file system that
//! keeps no ACLs.

mod common;

use std::sync::Arc;
use std::time::Duration;
use uvfs_fuse::{BackgroundMount, ServeConfig, Timeouts};
use uvfs_vfs::{Attr, Ctx, DirEntry, DirSink, Errno, Fh, FileSystem, FsMount};
use uvfs_vfs::{Ino, Mount, VType, VfsResult, VnodeRef};
use uvfs_vnode::{Config, VnodeLayer};

const ROOT: Ino = 1;
/// Directories, each listing wrong in its own way.
const DIRS: [(&str, Ino); 3] = [("names", 2), ("zero", 3), ("same", 4)];
const FILE: Ino = 10;
/// A file whose reads answer more than asked for.
const OVERLONG: Ino = 11;
const OVERLONG_SIZE: u64 = 100;

struct Odd(FsMount);

impl FileSystem for Odd {
    fn fs_type(&self) -> &'static str {
        "odd"
    }
    fn mount(&self) -> &Arc<Mount> {
        self.0.mount()
    }
    fn root(&self) -> VfsResult<VnodeRef> {
        self.0.vnode(ROOT, VType::Dir)
    }
    fn lookup(&self, _: &Ctx, dir: &VnodeRef, name: &[u8]) -> VfsResult<VnodeRef> {
        if dir.ino() == ROOT {
            if let Some(&(_, ino)) = DIRS.iter().find(|(n, _)| n.as_bytes() == name) {
                return self.0.vnode(ino, VType::Dir);
            }
            if name == b"overlong" {
                return self.0.vnode(OVERLONG, VType::Reg);
            }
        }
        match name {
            b"." => self.0.vnode(dir.ino(), VType::Dir),
            // A bug of the file system's.
            b"boom" => panic!("the lookup of boom panics"),
            // Whatever it listed, it finds (a READDIRPLUS hands each name
            // it finds to the kernel).
            _ if dir.ino() == 2 && name != b".." => self.0.vnode(FILE, VType::Reg),
            b".." => self.root(),
            b"ok" | b"fine" => self.0.vnode(FILE, VType::Reg),
            _ => Err(Errno::ENOENT),
        }
    }
    fn getattr(&self, vp: &VnodeRef) -> VfsResult<Attr> {
        Ok(match vp.ino() {
            FILE => Attr::new(FILE, VType::Reg, 0o444, 0),
            OVERLONG => Attr::new(OVERLONG, VType::Reg, 0o444, OVERLONG_SIZE),
            ino => Attr::new(ino, VType::Dir, 0o555, 0),
        })
    }
    fn read(&self, vp: &VnodeRef, _: Fh, offset: u64, size: u32) -> VfsResult<Vec<u8>> {
        Ok(match vp.ino() {
            // The file's bytes from `offset`, and more than asked for.
            OVERLONG => {
                vec![b'x'; (OVERLONG_SIZE.saturating_sub(offset) as usize).max(size as usize + 10)]
            }
            _ => Vec::new(),
        })
    }
    fn readdir(&self, dir: &VnodeRef, _: Fh, offset: u64, sink: &mut DirSink<'_>) -> VfsResult<()> {
        let entries: Vec<(&[u8], u64)> = match dir.ino() {
            ROOT => {
                let mut v: Vec<(&[u8], u64)> = vec![(b".", 1), (b"..", 2)];
                v.extend(DIRS.iter().zip(3..).map(|((n, _), c)| (n.as_bytes(), c)));
                v
            }
            // Good names around bad ones.
            2 => vec![
                (b"ok", 1),
                (b"a/b", 2),
                (b"", 3),
                (b"nul\0", 4),
                (b"fine", 5),
                (b"boom", 6),
            ],
            // A cookie of 0: the kernel takes it for the start.
            3 => vec![(b"ok", 0), (b"fine", 0)],
            // The same cookie on every entry, whatever was asked.
            _ => vec![(b"ok", 7), (b"fine", 7)],
        };
        for (name, cookie) in entries {
            // Directories 3 and 4 list from the start, whatever asked.
            if dir.ino() <= 2 && cookie <= offset {
                continue;
            }
            let kind = if dir.ino() == ROOT && name.len() > 2 {
                VType::Dir
            } else {
                VType::Reg
            };
            if sink(&DirEntry::new(FILE, kind, name, cookie)) {
                break;
            }
        }
        Ok(())
    }
}

/// The odd file system, mounted on a scratch directory.
fn mount_odd() -> Option<(BackgroundMount, std::path::PathBuf)> {
    let dir = common::scratch_dir("uvfs-odd-fs")?;
    let layer = VnodeLayer::new(Config::with_limit(64));
    let fs = Arc::new(Odd(FsMount::new(&layer, "odd")));
    let cfg = ServeConfig {
        read_only: true,
        timeouts: Timeouts {
            entry: Duration::from_secs(1),
            attr: Duration::from_secs(1),
        },
        uring: common::uring(),
        control: false,
        supervise: false,
        dir_refresh: false,
        ..ServeConfig::new(dir.clone())
    };
    let m = BackgroundMount::start(fs, layer, &cfg).expect("mount");
    Some((m, dir))
}

#[test]
fn listings_a_file_system_gets_wrong_end_and_keep_the_good_names() {
    let Some((m, dir)) = mount_odd() else { return };
    let names = |d: &str| -> std::io::Result<Vec<String>> {
        let mut v: Vec<String> = std::fs::read_dir(dir.join(d))?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<Result<_, _>>()?;
        v.sort();
        Ok(v)
    };
    // `boom`, whose lookup panics, is listed (READDIR) and fails its own
    // lookup only.
    assert_eq!(names("names").unwrap(), ["boom", "fine", "ok"]);
    assert_eq!(
        std::fs::metadata(dir.join("names/boom"))
            .map_err(|e| e.raw_os_error())
            .err(),
        Some(Some(libc::EIO))
    );
    // Each ends, with an error (on a thread: one that never ends must
    // fail the test, not hang it).
    for d in ["zero", "same"] {
        let (tx, rx) = std::sync::mpsc::channel();
        let p = dir.clone();
        std::thread::spawn(move || {
            let _ = tx
                .send(std::fs::read_dir(p.join(d)).and_then(|r| r.collect::<Result<Vec<_>, _>>()));
        });
        let r = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("listing {d} never ended"));
        assert_eq!(
            r.map(|_| ()).map_err(|e| e.raw_os_error()),
            Err(Some(libc::EIO)),
            "{d}"
        );
    }
    drop(m);
    let _ = std::fs::remove_dir(&dir);
}

/// A read answered with more than asked for (a file system's mistake,
/// which the kernel would fail with EIO) gives what was asked for.
#[test]
fn a_read_answered_too_long_gives_what_was_asked() {
    let Some((m, dir)) = mount_odd() else { return };
    let got = std::fs::read(dir.join("overlong")).map_err(|e| e.raw_os_error());
    assert_eq!(got, Ok(vec![b'x'; OVERLONG_SIZE as usize]));
    drop(m);
    let _ = std::fs::remove_dir(&dir);
}

/// The default `readdirplus` (each name looked up) leaves out a name
/// whose lookup panics: one bug of a file system's fails that name, not
/// the listing of every other (the server answers the whole READDIRPLUS
/// EIO when its handler panics).
#[test]
fn a_name_whose_lookup_panics_is_left_out_of_readdirplus() {
    let layer = VnodeLayer::new(Config::with_limit(64));
    let fs = Odd(FsMount::new(&layer, "odd"));
    let ctx = Ctx::ROOT;
    let root = fs.root().unwrap();
    let dir = fs.lookup(&ctx, &root, b"names").unwrap();
    let mut listed = Vec::new();
    fs.readdirplus(&ctx, &dir, Fh(0), 0, &mut |e, found| {
        listed.push((e.name.clone(), found.is_some()));
        false
    })
    .unwrap();
    let mut good: Vec<_> = listed
        .iter()
        .filter(|(_, found)| *found)
        .map(|(n, _)| String::from_utf8_lossy(n).into_owned())
        .collect();
    good.sort();
    assert!(!good.contains(&"boom".to_string()), "{listed:?}");
    assert!(
        good.contains(&"ok".to_string()) && good.contains(&"fine".to_string()),
        "{listed:?}"
    );
}

#[test]
fn acl_attributes_do_not_reach_a_file_system_without_acls() {
    let Some((m, dir)) = mount_odd() else { return };
    // A file system without ACLs (`posix_acls` false) is not handed their
    // attributes: the kernel passes them on as plain ones, and a file
    // system storing attributes as they come would keep them (`cp -a`
    // then set modes through them). Answered as without ACLs.
    let path =
        std::ffi::CString::new(dir.join("names").into_os_string().into_encoded_bytes()).unwrap();
    let mut buf = [0u8; 64];
    // SAFETY: a NUL-terminated path and name, and a buffer of its length.
    let r = unsafe {
        libc::getxattr(
            path.as_ptr(),
            c"system.posix_acl_access".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    assert_eq!(
        (r, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(libc::EOPNOTSUPP))
    );
    drop(m);
    let _ = std::fs::remove_dir(&dir);
}
