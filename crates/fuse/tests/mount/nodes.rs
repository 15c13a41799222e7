//! The server's node table: what the kernel FORGETs goes, what the
//! server asks it to forget spares what is in use, and file handles
//! outlive both.

use crate::common::{self, Mnt};
use crate::{cstr, errno_of, until_counters};
use std::ffi::CString;
use std::fs;
use std::io::Read;
use std::os::unix::io::AsRawFd;
use std::time::{Duration, Instant};

#[test]
fn forgets_release_every_vnode() {
    let Some(m) = Mnt::new(None) else { return };
    fs::create_dir(m.p("d")).unwrap();
    for i in 0..300 {
        fs::write(m.p(&format!("d/f{i}")), b"x").unwrap();
    }
    for e in fs::read_dir(m.p("d")).unwrap() {
        fs::metadata(e.unwrap().path()).unwrap();
    }
    // Counted cumulatively: other tests of this binary drop the kernel's
    // caches too, so the nodes may already be going.
    let remembered = &m.report(false)["counters"]["fuse.nodes.remembered"];
    assert!(remembered.as_u64().unwrap() > 300, "{remembered}");
    // Ask the kernel to drop its caches; it then FORGETs every node but
    // the root. Wait (bounded) for the FORGETs to arrive.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let _ = fs::write("/proc/sys/vm/drop_caches", b"2");
        let r = m.report(true);
        if r["accounting"]["kernel_nodes"] == 1 && r["accounting"]["ok"] == true {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "nodes not forgotten: {}",
            r["accounting"]
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Everything still there after the vnodes went.
    assert_eq!(fs::read_dir(m.p("d")).unwrap().count(), 300);
    assert_eq!(fs::read(m.p("d/f7")).unwrap(), b"x");
}

#[test]
fn eviction_leaves_what_is_in_use_alone() {
    // 300 new nodes against a limit of 100: the server asks the kernel to
    // forget cold ones. A directory in use (a cwd, here an open fd) and a
    // file system mounted on a directory of ours must survive that; entry
    // invalidation unhashed both (getcwd ENOENT, the mount detached).
    let Some(m) = Mnt::with_limit(None, 100) else {
        return;
    };
    fs::create_dir_all(m.p("a/b")).unwrap();
    fs::create_dir(m.p("mp")).unwrap();
    let cwd = fs::File::open(m.p("a/b")).unwrap();
    let mp = cstr(&m.p("mp"));
    // SAFETY: NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::mount(
            c"none".as_ptr(),
            mp.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "mount tmpfs: {}", std::io::Error::last_os_error());
    struct Umount(CString);
    impl Drop for Umount {
        fn drop(&mut self) {
            // SAFETY: a NUL-terminated path.
            unsafe { libc::umount2(self.0.as_ptr(), libc::MNT_DETACH) };
        }
    }
    let _tmpfs = Umount(mp);
    fs::write(m.p("mp/inside"), b"tmpfs data").unwrap();

    for i in 0..300 {
        fs::write(m.p(&format!("f{i}")), b"x").unwrap();
    }
    until_counters(&m, "the kernel forgot cold nodes", |c| {
        c["fuse.evict.sent"].as_u64().unwrap() > 0 && c["fuse.nodes"].as_u64().unwrap() <= 100
    });
    let fd_path = fs::read_link(format!("/proc/self/fd/{}", cwd.as_raw_fd())).unwrap();
    assert_eq!(fd_path, m.p("a/b"), "a directory in use was cut off");
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(
        mounts.contains(&format!(" {} tmpfs ", m.p("mp").display())),
        "the tmpfs mounted inside was detached"
    );
    assert_eq!(fs::read(m.p("mp/inside")).unwrap(), b"tmpfs data");
    assert_eq!(fs::read_dir(&m.dir).unwrap().count(), 302);
}

#[test]
fn free_vnodes_do_not_make_the_server_evict() {
    // Linked files the kernel has forgotten keep free vnodes, which the
    // layer recycles by itself at the limit. Enough of them to pass high
    // water must not make the server ask the kernel to forget the few
    // nodes it does hold (each would cost a new node its dentry).
    let Some(m) = Mnt::with_limit(None, 400) else {
        return;
    };
    fs::create_dir(m.p("d")).unwrap();
    for i in 0..380 {
        fs::write(m.p(&format!("d/f{i}")), b"x").unwrap();
    }
    until_counters(&m, "the kernel forgets the files", |c| {
        let _ = fs::write("/proc/sys/vm/drop_caches", b"2");
        c["fuse.nodes"].as_u64().unwrap() <= 2
    });
    let before = m.report(false)["counters"]["fuse.evict.sent"]
        .as_u64()
        .unwrap();
    let held: Vec<fs::File> = (0..20)
        .map(|i| fs::File::create(m.p(&format!("new{i}"))).unwrap())
        .collect();
    // Give the evictor time to act, were it to.
    std::thread::sleep(Duration::from_millis(200));
    let c = m.report(false)["counters"].clone();
    assert!(c["mount.vnodes"].as_u64().unwrap() > 350, "{c}");
    assert_eq!(c["fuse.evict.sent"].as_u64().unwrap(), before, "{c}");
    assert!(c["fuse.nodes"].as_u64().unwrap() >= 21, "{c}");
    drop(held);
}

#[test]
fn file_handles_outlive_the_kernel_forgetting_the_node() {
    let Some(m) = Mnt::new(None) else { return };
    fs::create_dir(m.p("d")).unwrap();
    fs::write(m.p("d/f"), b"by handle").unwrap();
    fs::write(m.p("d/gone"), b"x").unwrap();
    let hf = common::handle_of(&m.p("d/f"));
    let hd = common::handle_of(&m.p("d"));
    let hg = common::handle_of(&m.p("d/gone"));
    fs::remove_file(m.p("d/gone")).unwrap();
    // The kernel forgets every node but the root.
    until_counters(&m, "the kernel forgets its nodes", |c| {
        let _ = fs::write("/proc/sys/vm/drop_caches", b"2");
        c["fuse.nodes"].as_u64().unwrap() == 1
    });
    let mut data = Vec::new();
    common::open_handle(&m.dir, &hf)
        .unwrap()
        .read_to_end(&mut data)
        .unwrap();
    assert_eq!(data, b"by handle");
    let d = common::open_handle(&m.dir, &hd).unwrap();
    assert!(d.metadata().unwrap().is_dir());
    // A deleted file's handle is stale, not another file.
    assert_eq!(errno_of(common::open_handle(&m.dir, &hg)), libc::ESTALE);
}

#[test]
fn a_handle_of_a_file_just_removed_is_stale() {
    // Right after the unlink the kernel has let the inode go, and its
    // FORGET may not have reached the server: the handle's `.` lookup
    // finds the node still there, with no name left. ext4 answers ESTALE
    // (open or not), and so must the mount.
    //
    // The files are made by MKNOD, never opened: the kernel holds a closed
    // file's inode until the server answers its RELEASE (sent in the
    // background), and an open by handle meanwhile finds that inode in
    // the kernel's cache and opens it without asking the server. That
    // window is the kernel's (docs/STATUS.md, "Noticed and left alone").
    let Some(m) = Mnt::new(None) else { return };
    let opened: Vec<usize> = (0..40)
        .filter(|i| {
            let p = m.p(&format!("f{i}"));
            // SAFETY: `cstr` gives a NUL-terminated path that lives for the
            // call.
            let rc = unsafe { libc::mknod(cstr(&p).as_ptr(), libc::S_IFREG | 0o644, 0) };
            assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
            let h = common::handle_of(&p);
            fs::remove_file(&p).unwrap();
            match common::open_handle(&m.dir, &h) {
                Ok(_) => true,
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}");
                    false
                }
            }
        })
        .collect();
    assert!(
        opened.is_empty(),
        "deleted files opened by handle: {opened:?}"
    );
}
