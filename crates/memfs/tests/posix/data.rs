//! File contents: sparse files, unlinked files still open, a full file
//! system, and data that outlives its vnode.

use crate::{file, memfs, memfs_with_layer, C};
use uvfs_vfs::{Errno, FallocMode, Fh, FileSystem, SetAttr};
use uvfs_vnode::Config;

#[test]
fn read_write_truncate_sparse() {
    let fs = memfs(None);
    let root = fs.root().unwrap();
    let f = file(&fs, &root, "f");
    assert_eq!(fs.write(&f, Fh(0), 1 << 20, b"tail").unwrap(), 4);
    let a = fs.getattr(&f).unwrap();
    assert_eq!(a.size, (1 << 20) + 4);
    assert_eq!(a.blocks, 8, "one page allocated for a sparse file");
    assert_eq!(fs.read(&f, Fh(0), 0, 8).unwrap(), vec![0; 8]);
    assert_eq!(fs.read(&f, Fh(0), 1 << 20, 100).unwrap(), b"tail");
    let set = SetAttr {
        size: Some(2),
        ..Default::default()
    };
    fs.setattr(&C, &f, &set).unwrap();
    assert_eq!(fs.getattr(&f).unwrap().blocks, 0);
    assert_eq!(fs.read(&f, Fh(0), 0, 100).unwrap(), vec![0, 0]);
    assert_eq!(fs.read(&root, Fh(0), 0, 1).unwrap_err(), Errno::EISDIR);
}

#[test]
fn open_unlinked_file_lives_until_last_user() {
    let fs = memfs(Some(64 * 4096));
    let root = fs.root().unwrap();
    let f = file(&fs, &root, "f");
    fs.write(&f, Fh(0), 0, &[1u8; 10 * 4096]).unwrap();
    fs.unlink(&C, &root, b"f").unwrap();
    assert_eq!(fs.lookup(&C, &root, b"f").unwrap_err(), Errno::ENOENT);
    // Still readable and writable through the open reference.
    assert_eq!(fs.read(&f, Fh(0), 4096, 4).unwrap(), vec![1; 4]);
    fs.write(&f, Fh(0), 0, b"x").unwrap();
    assert_eq!(fs.getattr(&f).unwrap().nlink, 0);
    assert_eq!(fs.bytes_used(), 10 * 4096);
    assert_eq!(fs.alive_count(), 2);
    drop(f);
    // The last user went: the data is gone at once.
    assert_eq!(fs.bytes_used(), 0);
    // Cannot link an unlinked file back.
    let g = file(&fs, &root, "g");
    fs.unlink(&C, &root, b"g").unwrap();
    assert_eq!(fs.link(&C, &g, &root, b"g2").unwrap_err(), Errno::ENOENT);
}

#[test]
fn enospc_keeps_data() {
    let fs = memfs(Some(4 * 4096));
    let root = fs.root().unwrap();
    let f = file(&fs, &root, "f");
    assert_eq!(fs.write(&f, Fh(0), 0, &[7u8; 3 * 4096]).unwrap(), 3 * 4096);
    // One page left: a two-page write is short, the next one fails.
    assert_eq!(
        fs.write(&f, Fh(0), 3 * 4096, &[8u8; 2 * 4096]).unwrap(),
        4096
    );
    assert_eq!(
        fs.write(&f, Fh(0), 4 * 4096, b"z").unwrap_err(),
        Errno::ENOSPC
    );
    let g = file(&fs, &root, "g");
    assert_eq!(fs.write(&g, Fh(0), 0, b"z").unwrap_err(), Errno::ENOSPC);
    let all = fs.read(&f, Fh(0), 0, 5 * 4096).unwrap();
    assert_eq!(all.len(), 4 * 4096);
    assert!(all[..3 * 4096].iter().all(|&c| c == 7));
    assert!(all[3 * 4096..].iter().all(|&c| c == 8));
    let st = fs.statfs().unwrap();
    assert_eq!((st.blocks, st.bfree), (4, 0));
    // Freeing space makes room again.
    fs.unlink(&C, &root, b"f").unwrap();
    drop(f);
    assert_eq!(fs.write(&g, Fh(0), 0, b"z").unwrap(), 1);
    let falloc = fs.fallocate(&g, Fh(0), FallocMode(0), 0, 100 * 4096);
    assert_eq!(falloc.unwrap_err(), Errno::ENOSPC);
    assert_eq!(fs.getattr(&g).unwrap().size, 1);
}

#[test]
fn data_outlives_vnode_recycling() {
    // A tiny vnode limit forces recycling; memfs inodes must survive it.
    let mut cfg = Config::with_limit(8);
    cfg.reclaimer = false;
    let fs = memfs_with_layer(None, cfg);
    let root = fs.root().unwrap();
    for i in 0..200 {
        let f = file(&fs, &root, &format!("f{i}"));
        fs.write(&f, Fh(0), 0, format!("data{i}").as_bytes())
            .unwrap();
    }
    for i in 0..200 {
        let f = fs.lookup(&C, &root, format!("f{i}").as_bytes()).unwrap();
        assert_eq!(
            fs.read(&f, Fh(0), 0, 100).unwrap(),
            format!("data{i}").as_bytes()
        );
    }
    assert!(fs.layer().stats().numvnodes < 200);
}
