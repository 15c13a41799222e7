//! A directory listed again from its start right after a listing that
//! gave the kernel its entries (what `rm -r` does to every directory)
//! lists them by name alone, and what the mount shows stays right.

use crate::{counter, Pt, ATTR};
use std::collections::BTreeMap;
use std::os::unix::fs::{DirEntryExt, MetadataExt, PermissionsExt};
use std::time::{Duration, Instant};

const FILES: usize = 40;

/// name -> (inode number, is a directory) of a full listing of `dir`.
fn listing(dir: &std::path::Path) -> BTreeMap<String, (u64, bool)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            (name, (e.ino(), e.file_type().unwrap().is_dir()))
        })
        .collect()
}

#[test]
fn a_directory_listed_again_at_once_lists_names_alone_and_shows_the_truth() {
    let Some(t) = Pt::new("relist") else { return };
    std::fs::create_dir(t.src("d")).unwrap();
    std::fs::create_dir(t.src("d/sub")).unwrap();
    for i in 0..FILES {
        std::fs::write(t.src(&format!("d/f{i}")), vec![b'x'; i]).unwrap();
    }
    let d = t.m("d");
    let mut names_only = false;
    // The second listing counts as "at once" only within the server's
    // window; a machine slow enough to miss it gets another try.
    for attempt in 0..20 {
        // Changed through the mount: the kernel's cached listing goes.
        std::fs::write(d.join("marker"), b"m").unwrap();
        // One buffer of the listing, as `rm` reads it first: the
        // kernel's listing cache stays incomplete.
        drop(std::fs::read_dir(&d).unwrap().next());
        // Changed on the host in between: a mode the kernel must come to
        // see, within its attribute timeout, whatever the listing gives.
        let mode = 0o600 | ((attempt % 2) * 0o040);
        std::fs::set_permissions(t.src("d/f7"), PermissionsExt::from_mode(mode)).unwrap();
        let remembered = counter(&t, "fuse.nodes.remembered");
        let listed = listing(&d);
        let linked = counter(&t, "fuse.nodes.remembered") - remembered;

        let mut want: Vec<String> = (0..FILES).map(|i| format!("f{i}")).collect();
        want.extend(["sub".into(), "marker".into()]);
        want.sort();
        assert_eq!(listed.keys().cloned().collect::<Vec<_>>(), want);
        for (name, (ino, is_dir)) in &listed {
            let md = std::fs::symlink_metadata(d.join(name)).unwrap();
            assert_eq!(md.ino(), *ino, "{name}: the listing's inode number");
            assert_eq!(md.is_dir(), *is_dir, "{name}: the listing's type");
            let src = std::fs::symlink_metadata(t.src(&format!("d/{name}"))).unwrap();
            assert_eq!(md.size(), src.size(), "{name}: size");
        }
        let deadline = Instant::now() + ATTR * 10 + Duration::from_secs(2);
        loop {
            let now = std::fs::symlink_metadata(d.join("f7")).unwrap().mode() & 0o777;
            if now == mode {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "f7 still shows {now:o}, not {mode:o}"
            );
            std::thread::sleep(ATTR / 4);
        }
        std::fs::remove_file(d.join("marker")).unwrap();
        if linked < FILES as u64 {
            names_only = true;
            break;
        }
    }
    assert!(
        names_only,
        "every listing handed the kernel every entry again"
    );
}
