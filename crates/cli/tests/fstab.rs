//! fstab-style options (`uvfs mount -o`) and `uvfs` run as mount(8)'s
//! helper (`mount.uvfs SOURCE TARGET -o OPTIONS`, through a link of that
//! name), through the real binary. Skipped (with a message) where
//! mounting is not possible.

mod common;

use common::{can_mount, Mounted};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The mount's (per-mount options, fs type) from mountinfo.
fn mountinfo(mnt: &Path) -> Option<(String, String)> {
    mountinfo_all(mnt).map(|(o, t, _)| (o, t))
}

/// The mount's (per-mount options, fs type, super block options).
fn mountinfo_all(mnt: &Path) -> Option<(String, String, String)> {
    uvfs_fuse::mount_entry(mnt).map(|e| (e.options, e.fstype, e.super_options))
}

fn has(opts: &str, o: &str) -> bool {
    opts.split(',').any(|x| x == o)
}

#[test]
fn options_shape_a_memfs_and_its_mount() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new(
        "fstab-o",
        &[
            "-o",
            "size=1m,inodes=100,mode=1777,uid=1000,gid=1000,nosuid,nodev,noauto",
        ],
    );
    let (opts, fstype) = mountinfo(&m.mnt).expect("mounted");
    assert!(has(&opts, "nosuid") && has(&opts, "nodev"), "{opts}");
    assert!(!has(&opts, "noexec"), "{opts}");
    assert_eq!(fstype, "fuse.uvfs");
    let root = fs::metadata(&m.mnt).unwrap();
    assert_eq!(root.permissions().mode() & 0o7777, 0o1777);
    assert_eq!((root.uid(), root.gid()), (1000, 1000));
    assert_eq!(common::statvfs(&m.mnt).f_files, 100);
    let e = fs::write(m.mnt.join("big"), vec![1u8; 2 << 20]).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
}

/// A mount made by the helper, unmounted on drop.
struct HelperMount(PathBuf);

impl Drop for HelperMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn the_mount_helper_mounts_remounts_and_refuses_what_it_does_not_know() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let scratch = std::env::temp_dir().join(format!("uvfs-cli-helper-{}", std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    for d in ["src", "mnt", "mnt2", "bin"] {
        fs::create_dir_all(scratch.join(d)).unwrap();
    }
    let helper = scratch.join("bin/mount.uvfs");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_uvfs"), &helper).unwrap();
    fs::write(scratch.join("src/f"), b"from the source").unwrap();
    let run = |args: &[&str]| -> Output { Command::new(&helper).args(args).output().unwrap() };
    let (src, mnt, mnt2) = (
        scratch.join("src"),
        scratch.join("mnt"),
        scratch.join("mnt2"),
    );
    let s = |p: &Path| p.to_str().unwrap().to_string();

    // As mount(8) calls it for `SRC MNT uvfs ro,noexec,nofail`.
    let out = run(&[&s(&src), &s(&mnt), "-n", "-o", "ro,noexec,nofail"]);
    assert!(out.status.success(), "{out:?}");
    let _guard = HelperMount(mnt.clone());
    let (opts, _) = mountinfo(&mnt).expect("mounted");
    assert!(has(&opts, "ro") && has(&opts, "noexec"), "{opts}");
    assert_eq!(fs::read(mnt.join("f")).unwrap(), b"from the source");

    // `mount -o remount,rw`: the mount turns read-write, the server still
    // refuses (read-only is its promise); the kernel's own options that
    // mount(8) repeats are no error.
    let out = run(&[&s(&src), &s(&mnt), "-o", "remount,rw,user_id=0,group_id=0"]);
    assert!(out.status.success(), "{out:?}");
    let (opts, _) = mountinfo(&mnt).unwrap();
    assert!(has(&opts, "rw"), "{opts}");
    let e = fs::write(mnt.join("g"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    assert!(!src.join("g").exists());

    // Unknown options fail (and mount nothing) unless sloppy; -f mounts
    // nothing either way.
    let out = run(&["memfs", &s(&mnt2), "-o", "size=1m,bogus"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("\"bogus\""),
        "{out:?}"
    );
    assert!(mountinfo(&mnt2).is_none());
    let out = run(&["memfs", &s(&mnt2), "-f", "-s", "-o", "size=1m,bogus"]);
    assert!(out.status.success(), "{out:?}");
    assert!(mountinfo(&mnt2).is_none(), "-f mounted");
    let out = run(&["memfs", &s(&mnt2), "-s", "-o", "size=1m,bogus"]);
    assert!(out.status.success(), "{out:?}");
    let _guard2 = HelperMount(mnt2.clone());
    fs::write(mnt2.join("h"), b"memfs").unwrap();
    assert_eq!(fs::read(mnt2.join("h")).unwrap(), b"memfs");
    drop(_guard2);
    drop(_guard);
    let _ = fs::remove_dir_all(&scratch);
}

#[test]
fn the_mount_helper_takes_the_standard_options_on_mount_and_remount() {
    // `mount -t fuse.uvfs -o strictatime` (and lazytime, ...) as fstests
    // and other tools pass them, remounts included: accepted, and the
    // kernel's mount shows them.
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let scratch = std::env::temp_dir().join(format!("uvfs-cli-stdopts-{}", std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    for d in ["mnt", "bin"] {
        fs::create_dir_all(scratch.join(d)).unwrap();
    }
    let helper = scratch.join("bin/mount.fuse.uvfs");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_uvfs"), &helper).unwrap();
    let mnt = scratch.join("mnt");
    let run = |opts: &str| -> Output {
        Command::new(&helper)
            .args(["memfs", mnt.to_str().unwrap(), "-o", opts])
            .output()
            .unwrap()
    };
    let out = run("rw,strictatime,lazytime,nosymfollow,iversion,silent,defaults,_netdev,x-a=b");
    assert!(out.status.success(), "{out:?}");
    let _guard = HelperMount(mnt.clone());
    let (opts, _, sb) = mountinfo_all(&mnt).expect("mounted");
    assert!(!has(&opts, "relatime") && !has(&opts, "noatime"), "{opts}");
    assert!(has(&opts, "nosymfollow"), "{opts}");
    assert!(has(&sb, "lazytime"), "{sb}");
    for (remount, want, sb_lazy) in [
        ("remount,noatime,nolazytime", "noatime", false),
        ("remount,strictatime", "", false),
        ("remount,relatime,lazytime", "relatime", true),
    ] {
        let out = run(remount);
        assert!(out.status.success(), "{remount}: {out:?}");
        let (opts, _, sb) = mountinfo_all(&mnt).unwrap();
        for a in ["noatime", "relatime"] {
            assert_eq!(has(&opts, a), a == want, "{remount}: {opts}");
        }
        assert_eq!(has(&sb, "lazytime"), sb_lazy, "{remount}: {sb}");
    }
    let out = run("remount,mand");
    assert!(!out.status.success(), "{out:?}");
    fs::write(mnt.join("f"), b"still served").unwrap();
    assert_eq!(fs::read(mnt.join("f")).unwrap(), b"still served");
    drop(_guard);
    let _ = fs::remove_dir_all(&scratch);
}

/// The mount's source as the mount table shows it.
fn mount_source(mnt: &Path) -> Option<String> {
    uvfs_fuse::mount_entry(mnt).map(|e| e.source)
}

/// `-o source=DIR` and `-o fs=memfs` make the helper's SOURCE the mount's
/// name, which `umount NAME` finds (fstests unmounts its test and scratch
/// file systems so, `umount $TEST_DEV`); a directory SOURCE cannot be.
#[test]
fn named_mounts_are_unmounted_by_name() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let scratch = std::env::temp_dir().join(format!("uvfs-cli-named-{}", std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    for d in ["src", "mnt", "mnt2", "bin"] {
        fs::create_dir_all(scratch.join(d)).unwrap();
    }
    let helper = scratch.join("bin/mount.fuse.uvfs");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_uvfs"), &helper).unwrap();
    fs::write(scratch.join("src/f"), b"from the source").unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let (src, mnt, mnt2) = (
        scratch.join("src"),
        scratch.join("mnt"),
        scratch.join("mnt2"),
    );
    let pt_name = format!("uvfs-named-pt-{}", std::process::id());
    let mem_name = format!("uvfs-named-mem-{}", std::process::id());
    let run = |args: &[&str]| -> Output { Command::new(&helper).args(args).output().unwrap() };

    let out = run(&[&pt_name, &s(&mnt), "-o", &format!("source={}", s(&src))]);
    assert!(out.status.success(), "{out:?}");
    let _guard = HelperMount(mnt.clone());
    assert_eq!(mount_source(&mnt).as_deref(), Some(pt_name.as_str()));
    assert_eq!(fs::read(mnt.join("f")).unwrap(), b"from the source");

    let out = run(&[&mem_name, &s(&mnt2), "-o", "fs=memfs,size=1m"]);
    assert!(out.status.success(), "{out:?}");
    let _guard2 = HelperMount(mnt2.clone());
    assert_eq!(mount_source(&mnt2).as_deref(), Some(mem_name.as_str()));
    assert!(
        fs::read_dir(&mnt2).unwrap().next().is_none(),
        "a memfs starts empty"
    );

    for (name, m) in [(&pt_name, &mnt), (&mem_name, &mnt2)] {
        let st = Command::new("umount").arg(name).output().unwrap();
        assert!(st.status.success(), "umount {name}: {st:?}");
        assert!(mount_source(m).is_none(), "{name} still mounted");
    }
    // Both are unmounted: nothing left for the guards to do.
    std::mem::forget((_guard, _guard2));
    let _ = fs::remove_dir_all(&scratch);
}
