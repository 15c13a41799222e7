//! A passthrough mount used as a real file system: what its source holds
//! (POSIX ACLs, contents rewritten on the host) must show through the
//! mount as it does natively. Skipped where FUSE cannot be mounted.

mod common;

use common::{
    acl, as_user, fuse_usable, set_acl, ACL_GROUP, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER,
    ACL_USER_OBJ, NO_ID,
};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use uvfs_fuse::{BackgroundMount, ServeConfig, Timeouts};
use uvfs_passthrough::{PassthroughConfig, PassthroughFs};
use uvfs_vnode::{Config, VnodeLayer};

/// How long the kernel may trust attributes here.
const ATTR: Duration = Duration::from_millis(200);

struct Pt {
    base: PathBuf,
    mount: Option<BackgroundMount>,
}

impl Pt {
    fn new(tag: &str) -> Option<Pt> {
        if let Err(why) = fuse_usable() {
            eprintln!("SKIP: {why}");
            return None;
        }
        // Under /var/tmp: a disk file system with ACLs (the default
        // temp dir may be a tmpfs without them).
        let base = PathBuf::from(format!(
            "/var/tmp/uvfs-pt-mount-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("src")).unwrap();
        std::fs::create_dir_all(base.join("mnt")).unwrap();
        // Others must reach the tree (tests run commands as uid 1000).
        for p in [&base, &base.join("src"), &base.join("mnt")] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let layer = VnodeLayer::new(Config::with_limit(4096));
        let fs = PassthroughFs::new(
            layer.clone(),
            &base.join("src"),
            PassthroughConfig::default(),
        )
        .unwrap();
        let cfg = ServeConfig {
            mountpoint: base.join("mnt"),
            threads: 2,
            timeouts: Timeouts {
                entry: ATTR,
                attr: ATTR,
            },
            fsname: format!("uvfs-pt-{tag}"),
            control: false,
            server_opendir: false,
        };
        let mount = BackgroundMount::start(fs, layer, &cfg).expect("mount");
        Some(Pt {
            base,
            mount: Some(mount),
        })
    }

    fn m(&self, rel: &str) -> PathBuf {
        self.base.join("mnt").join(rel)
    }

    fn src(&self, rel: &str) -> PathBuf {
        self.base.join("src").join(rel)
    }
}

impl Drop for Pt {
    fn drop(&mut self) {
        if let Some(m) = self.mount.take() {
            let r = m.unmount();
            if !std::thread::panicking() {
                r.expect("unmount");
            }
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

#[test]
fn acls_are_enforced_and_default_acls_replace_the_umask() {
    let Some(t) = Pt::new("acl") else { return };
    // Where the source cannot hold ACLs there is nothing to check.
    std::fs::write(t.src("probe"), b"").unwrap();
    let base = acl(&[
        (ACL_USER_OBJ, 6, NO_ID),
        (ACL_GROUP_OBJ, 4, NO_ID),
        (ACL_OTHER, 4, NO_ID),
    ]);
    if set_acl(&t.src("probe"), "system.posix_acl_access", &base).is_err() {
        eprintln!("SKIP: the source file system has no POSIX ACLs");
        return;
    }

    // The kernel enforces what the source stores.
    let grant = common::acls_are_enforced(&t.m("f"));

    // An owner outside the file's group who sets an ACL loses set-gid,
    // as natively (the server must not set it with its own privilege).
    let g = t.m("sgid");
    std::fs::write(&g, b"").unwrap();
    std::os::unix::fs::chown(&g, Some(1000), Some(2000)).unwrap();
    std::fs::set_permissions(&g, std::fs::Permissions::from_mode(0o2775)).unwrap();
    let hex: String = grant.iter().map(|b| format!("{b:02x}")).collect();
    assert!(as_user(&format!(
        "python3 -c 'import os; os.setxattr(\"{}\", \"system.posix_acl_access\", bytes.fromhex(\"{hex}\"))'",
        g.display()
    )));
    let m = std::fs::metadata(&g).unwrap().permissions().mode();
    // (The ACL's entries become the mode bits: rw, mask rw, other r.)
    assert_eq!(m & 0o7777, 0o0664, "set-gid kept: {m:o}");

    // A default ACL replaces the umask for what is created beneath, as
    // natively; without one the umask applies.
    for d in ["dd", "plain"] {
        std::fs::create_dir(t.m(d)).unwrap();
        std::fs::set_permissions(t.m(d), std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let dflt = acl(&[
        (ACL_USER_OBJ, 7, NO_ID),
        (ACL_GROUP_OBJ, 7, NO_ID),
        (ACL_GROUP, 5, 100),
        (ACL_MASK, 7, NO_ID),
        (ACL_OTHER, 7, NO_ID),
    ]);
    set_acl(&t.m("dd"), "system.posix_acl_default", &dflt).unwrap();
    let mk = |d: &str| format!("umask 022 && touch {0}/f && mkdir {0}/d", t.m(d).display());
    assert!(as_user(&mk("dd")) && as_user(&mk("plain")));
    let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(t.m("dd/f")), 0o666);
    assert_eq!(mode(t.m("dd/d")), 0o777);
    assert_eq!(mode(t.m("plain/f")), 0o644);
    assert_eq!(mode(t.m("plain/d")), 0o755);
    // The source holds exactly what the mount shows.
    assert_eq!(mode(t.src("dd/f")), 0o666);
    assert_eq!(mode(t.src("plain/d")), 0o755);
}

#[test]
fn contents_rewritten_on_the_host_show_through() {
    let Some(t) = Pt::new("inval") else { return };
    std::fs::write(t.src("g"), b"aaaa 1111").unwrap();
    assert_eq!(std::fs::read(t.m("g")).unwrap(), b"aaaa 1111");
    // Same size, new contents and mtime, written behind the server.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(t.src("g"), b"bbbb 2222").unwrap();
    // Once the attributes expire, the kernel sees the new mtime and
    // drops the pages it cached.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        std::thread::sleep(ATTR);
        let now = std::fs::read(t.m("g")).unwrap();
        if now == b"bbbb 2222" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still {:?}",
            String::from_utf8_lossy(&now)
        );
    }
}

#[test]
fn seek_data_and_hole_answer_as_the_source() {
    let Some(t) = Pt::new("seek") else { return };
    let ours = common::sparse_seeks(&t.m("sparse"));
    let theirs = common::sparse_seeks(&t.src("direct"));
    assert_eq!(ours, theirs);
    assert!(ours.contains(&(0, libc::SEEK_HOLE, 4096)), "{ours:?}");
}

#[test]
fn o_tmpfile_behaves_as_on_the_source() {
    let Some(t) = Pt::new("tmpfile") else { return };
    let native = t.base.join("native");
    std::fs::create_dir(&native).unwrap();
    let theirs = common::tmpfile_transcript(&native);
    let ours = common::tmpfile_transcript(&t.m(""));
    assert_eq!(
        ours, theirs,
        "passthrough (left) against its source's file system (right)"
    );
    // Linked through the mount, the file is in the source.
    assert_eq!(std::fs::read(t.src("named")).unwrap(), b"tmpfile data");
}

#[test]
fn an_unlinked_tmpfile_goes_with_its_last_close() {
    let Some(t) = Pt::new("tmpfile-gone") else {
        return;
    };
    // One never linked holds its fd (there is no other way back to it)
    // until the kernel forgets it after the last close; then the vnode
    // and the backing inode go.
    let counter = |name: &str| {
        t.mount.as_ref().unwrap().report(false)["counters"][name]
            .as_u64()
            .unwrap()
    };
    let before = counter("mount.vnodes");
    let f = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .open(t.m(""))
            .unwrap()
    };
    std::io::Write::write_all(&mut &f, &[3u8; 1 << 16]).unwrap();
    assert_eq!(counter("mount.vnodes"), before + 1);
    drop(f);
    let deadline = Instant::now() + Duration::from_secs(30);
    while counter("mount.vnodes") != before {
        assert!(Instant::now() < deadline, "the tmpfile's vnode stayed");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn set_ids_go_as_natively() {
    // The server writes and truncates as root, who keeps set-uid: under
    // FUSE_HANDLE_KILLPRIV_V2 it must drop them for a caller who would not.
    let Some(t) = Pt::new("setid") else { return };
    let native = t.base.join("native");
    std::fs::create_dir(&native).unwrap();
    for d in [&native, &t.src("")] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let theirs = common::set_id_transcript(&native);
    let ours = common::set_id_transcript(&t.m(""));
    assert_eq!(
        ours, theirs,
        "passthrough (left) against its source's file system (right)"
    );
}
