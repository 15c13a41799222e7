//! A passthrough whose source holds its own mountpoint: the server must
//! refuse to walk into its mount (ELOOP) instead of waiting on itself.
//! (`uvfs mount` refuses such a command line outright; a bind mount of a
//! directory above the mountpoint reaches the same state, and so does an
//! embedder of the library, as here.) Skipped where FUSE cannot be mounted.

mod common;

use common::fuse_usable;
use std::path::PathBuf;
use std::time::Duration;
use uvfs_fuse::{BackgroundMount, ServeConfig, Timeouts};
use uvfs_passthrough::{PassthroughConfig, PassthroughFs};
use uvfs_vnode::{Config, VnodeLayer};

#[test]
fn a_source_holding_the_mountpoint_gets_eloop_not_a_hang() {
    if let Err(why) = fuse_usable() {
        eprintln!("SKIP: {why}");
        return;
    }
    let src = std::env::temp_dir().join(format!("uvfs-own-mount-{}", std::process::id()));
    let mnt: PathBuf = src.join("m");
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::write(src.join("f"), b"data").unwrap();

    let layer = VnodeLayer::new(Config::with_limit(4096));
    let fs = PassthroughFs::new(layer.clone(), &src, PassthroughConfig::default()).unwrap();
    let cfg = ServeConfig {
        mountpoint: mnt.clone(),
        threads: 2,
        timeouts: Timeouts {
            entry: Duration::from_secs(1),
            attr: Duration::from_secs(1),
        },
        fsname: "uvfs-own-mount-test".into(),
        control: false,
        server_opendir: false,
        uring: common::uring(),
        read_only: false,
        mount_flags: 0,
        kernel_io: false,
        dir_refresh: true,
        allow_other: false,
        successor: None,
        supervise: false,
    };
    let m = BackgroundMount::start(fs, layer, &cfg).expect("mount");

    // The rest of the source is served as usual.
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"data");
    // Its own mountpoint, seen through the source, is refused. Run off the
    // test thread: were the server to wait on itself, the test fails with
    // a timeout instead of hanging.
    let (tx, rx) = std::sync::mpsc::channel();
    let inner = mnt.join("m");
    std::thread::spawn(move || {
        let r = std::fs::symlink_metadata(&inner).map(drop);
        let l = std::fs::read_dir(inner.join("m")).map(drop);
        let _ = tx.send((r, l));
    });
    let (stat, list) = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the server waited on its own mount");
    assert_eq!(stat.unwrap_err().raw_os_error(), Some(libc::ELOOP));
    assert_eq!(list.unwrap_err().raw_os_error(), Some(libc::ELOOP));
    let names: Vec<String> = std::fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.contains(&"f".to_string()) && names.contains(&"m".to_string()),
        "{names:?}"
    );
    let report = m.report(false);
    assert!(
        report["counters"]["passthrough.lookups.own_mount"]
            .as_u64()
            .unwrap()
            >= 1,
        "{}",
        report["counters"]
    );
    m.unmount().expect("unmount");
    std::fs::remove_dir_all(&src).unwrap();
}
