//! What the source holds shows through the mount as it does natively:
//! ACLs, set-ids, O_TMPFILE, holes, contents and removals made on the
//! host, directories whose inode numbers the host reuses, file handles.

use crate::common::{
    self, acl, as_user, set_acl, ACL_GROUP, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER, ACL_USER_OBJ, NO_ID,
};
use crate::{Pt, ATTR};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

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

#[test]
fn a_file_removed_on_the_host_is_not_opened_by_its_cached_name() {
    // The kernel keeps the name for the entry timeout; the server still
    // reaches the removed file through its cached fd. An open by that
    // name must meet what the source holds now: a new file for O_CREAT
    // (seen by the host), ENOENT without. (It opened the removed file:
    // writes went nowhere, and SQLite on both sides failed at random.)
    let Some(t) = Pt::with_timeouts("removed-host", Duration::from_secs(60)) else {
        return;
    };
    std::fs::write(t.src("j"), b"old").unwrap();
    assert_eq!(std::fs::read(t.m("j")).unwrap(), b"old");
    std::fs::remove_file(t.src("j")).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(t.m("j"))
        .unwrap();
    std::io::Write::write_all(&mut f, b"new").unwrap();
    drop(f);
    assert_eq!(
        std::fs::read(t.src("j")).unwrap(),
        b"new",
        "written nowhere"
    );

    assert_eq!(std::fs::read(t.m("j")).unwrap(), b"new");
    std::fs::remove_file(t.src("j")).unwrap();
    let e = std::fs::File::open(t.m("j")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT));

    // A file removed through the mount while open is still open to its
    // holders, and to /proc's links to it.
    std::fs::write(t.m("held"), b"held").unwrap();
    let held = std::fs::File::open(t.m("held")).unwrap();
    std::fs::remove_file(t.m("held")).unwrap();
    let fd = std::os::unix::io::AsRawFd::as_raw_fd(&held);
    let again = std::fs::read(format!("/proc/self/fd/{fd}")).unwrap();
    assert_eq!(again, b"held");
}

#[test]
fn a_removed_directory_the_kernel_holds_keeps_its_node_when_its_number_is_reused() {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::io::AsRawFd;
    let Some(t) = Pt::with_timeouts("reuse", Duration::ZERO) else {
        return;
    };
    // ext4 hands a freed number to the next directory made; a test making
    // files at the same moment may take it first, so a few rounds are
    // tried, each with a directory of its own.
    let (old, ino, name) = (0..5)
        .find_map(|round| {
            let old_name = format!("old{round}");
            std::fs::create_dir(t.src(&old_name)).unwrap();
            // Held through the mount as a shell's cwd would be: by the
            // kernel alone (an O_PATH open sends no OPENDIR, so no fd of
            // the server's pins the inode, as a directory open through the
            // server would).
            let old = {
                use std::os::unix::fs::OpenOptionsExt;
                std::fs::File::options()
                    .read(true)
                    .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
                    .open(t.m(&old_name))
                    .unwrap()
            };
            let ino = std::fs::metadata(t.src(&old_name)).unwrap().ino();
            std::fs::remove_dir(t.src(&old_name)).unwrap();
            // No fd of the server's may pin the removed inode.
            t.fs.drop_idle_fds();
            let name = (0..64).map(|i| format!("new{round}-{i}")).find(|n| {
                std::fs::create_dir(t.src(n)).unwrap();
                std::fs::metadata(t.src(n)).unwrap().ino() == ino
            })?;
            Some((old, ino, name))
        })
        .expect("the source file system (/var/tmp) reused no inode number");
    // The kernel meets the new directory while it still holds the old one.
    let st = std::fs::metadata(t.m(&name)).unwrap();
    assert!(st.is_dir());
    assert_ne!(st.ino(), ino, "the new directory took the old one's node");
    // A request for the old one answers ESTALE and touches nothing else.
    let x = std::ffi::CString::new("x").unwrap();
    // SAFETY: a valid directory fd and a NUL-terminated name.
    let r = unsafe { libc::mkdirat(old.as_raw_fd(), x.as_ptr(), 0o755) };
    let err = std::io::Error::last_os_error().raw_os_error();
    assert_eq!((r, err), (-1, Some(libc::ESTALE)));
    assert!(!t.src(&name).join("x").exists());
    // The new one works through the mount, under its own number.
    std::fs::create_dir(t.m(&name).join("y")).unwrap();
    assert!(t.src(&name).join("y").is_dir());
    assert_eq!(std::fs::metadata(t.m(&name)).unwrap().ino(), st.ino());
    let listed = std::fs::read_dir(t.m(""))
        .unwrap()
        .map(|e| e.unwrap())
        .find(|e| e.file_name().as_bytes() == name.as_bytes())
        .unwrap();
    assert_eq!(std::os::unix::fs::DirEntryExt::ino(&listed), st.ino());
}

#[test]
fn file_handles_outlive_the_kernel_and_the_server_forgetting_the_node() {
    let Some(t) = Pt::new("handles") else { return };
    std::fs::create_dir(t.m("d")).unwrap();
    std::fs::write(t.m("d/f"), b"by handle").unwrap();
    std::fs::write(t.m("d/gone"), b"x").unwrap();
    let hf = common::handle_of(&t.m("d/f"));
    let hd = common::handle_of(&t.m("d"));
    let hg = common::handle_of(&t.m("d/gone"));
    std::fs::remove_file(t.m("d/gone")).unwrap();
    // The kernel forgets every node but the root's, then the vnode layer
    // recycles every free vnode: nothing of the files is left in memory
    // but what the server keeps for file handles.
    let fs: &dyn uvfs_vfs::FileSystem = &*t.fs;
    let deadline = Instant::now() + Duration::from_secs(20);
    while fs.mount().vnode_count() > 1 {
        assert!(Instant::now() < deadline, "the kernel kept its nodes");
        let _ = std::fs::write("/proc/sys/vm/drop_caches", b"2");
        t.fs.layer().prune(fs.mount(), usize::MAX);
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut data = Vec::new();
    std::io::Read::read_to_end(&mut common::open_handle(&t.m(""), &hf).unwrap(), &mut data)
        .unwrap();
    assert_eq!(data, b"by handle");
    let d = common::open_handle(&t.m(""), &hd).unwrap();
    assert!(d.metadata().unwrap().is_dir());
    // A removed file's handle is stale, not another file.
    let e = common::open_handle(&t.m(""), &hg).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}");
}

/// A file saved by rename over its name again and again (as editors and
/// package managers save), opened meanwhile by another thread: every open
/// finds a file, as on ext4 (never ENOENT: the name never stopped
/// existing), and no replaced file stays pinned once the kernel let it
/// go.
#[test]
fn a_file_saved_by_rename_in_a_loop_always_opens() {
    let Some(t) = Pt::new("saved") else { return };
    std::fs::write(t.m("config"), b"v0").unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (tmp, name, done) = (t.m("config.tmp"), t.m("config"), done.clone());
        std::thread::spawn(move || {
            for i in 0..3000 {
                std::fs::write(&tmp, format!("v{i}")).unwrap();
                std::fs::rename(&tmp, &name).unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        })
    };
    let mut failed = std::collections::BTreeMap::new();
    let mut opened = 0u64;
    while !done.load(std::sync::atomic::Ordering::SeqCst) {
        match std::fs::File::open(t.m("config")) {
            Ok(_) => opened += 1,
            Err(e) => *failed.entry(e.raw_os_error().unwrap_or(0)).or_insert(0u64) += 1,
        }
    }
    writer.join().unwrap();
    // A second race in a row (a rename between the kernel's look-again
    // and its open) may still answer ESTALE; a name that never stopped
    // existing must never answer ENOENT.
    assert!(
        !failed.contains_key(&libc::ENOENT),
        "opens failed by errno: {failed:?} ({opened} opened)"
    );
    // The replaced files' space: nothing of this process (the server)
    // holds a deleted file of the source once the kernel forgot them.
    let src = t.src("");
    let pinned = || -> Vec<String> {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .map(|p| p.to_string_lossy().into_owned())
            .filter(|p| p.starts_with(&*src.to_string_lossy()) && p.ends_with(" (deleted)"))
            .collect()
    };
    let start = std::time::Instant::now();
    while !pinned().is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "replaced files still held: {:?}",
            pinned()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
