//! How long a million kept nodes take to save and restore (run by hand:
//! `cargo test --release -p uvfs-passthrough -- --ignored --nocapture
//! million`). Prints the times; asserts only what was restored.

use crate::fs::{PassthroughConfig, PassthroughFs};
use crate::handle::Handle;
use crate::node::{Ident, Node, Way};
use std::sync::Arc;
use std::time::Instant;
use uvfs_vfs::{FileSystem, Keep, VType};
use uvfs_vnode::{Config, VnodeLayer};

const N: u64 = 1_000_000;

#[test]
#[ignore = "a measurement: a million vnodes take a few hundred MB"]
fn million_nodes_save_and_restore() {
    let src = std::env::temp_dir().join(format!("uvfs-pt-ho-million-{}", std::process::id()));
    std::fs::create_dir_all(&src).unwrap();
    let layer = VnodeLayer::new(Config::with_limit(2 * N as usize));
    let fs = PassthroughFs::new(layer.clone(), &src, PassthroughConfig::default()).unwrap();
    let mid = fs.handles.mount_id();
    // Nodes as ext4 names them: an 8-byte handle (inode, generation).
    let vps: Vec<_> = (0..N)
        .map(|i| {
            let id = (1 << 40) + i;
            let mut b = [0u8; 8];
            b[..4].copy_from_slice(&(i as u32).to_le_bytes());
            let way = Way::Handle(Handle::from_parts(1, mid, &b));
            let node = Arc::new(Node::new(
                id,
                0,
                id,
                Ident {
                    kind: VType::Reg,
                    way,
                },
                false,
            ));
            layer
                .get(&fs.mnt, id, move || Ok((VType::Reg, node)))
                .unwrap()
        })
        .collect();
    // In no particular order, as a front end's table would give them.
    let mut vps = vps;
    vps.sort_unstable_by_key(|vp| vp.ino().wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let t = Instant::now();
    let saved = fs
        .save(&Keep {
            nodes: &vps,
            open: &[],
            ahead: None,
        })
        .unwrap();
    let save = t.elapsed();
    let bytes = saved.bytes.len();
    let layer2 = VnodeLayer::new(Config::with_limit(2 * N as usize));
    let t = Instant::now();
    let fs2 = PassthroughFs::restore(layer2, &src, PassthroughConfig::default(), saved).unwrap();
    let restore = t.elapsed();
    eprintln!(
        "{N} nodes: save {save:?}, restore {restore:?}, total {:?}, state {bytes} bytes",
        save + restore
    );
    let kept = super::kept_nodes(&fs2).unwrap();
    assert_eq!(kept.len(), N as usize);
    for i in [0, 1, N / 2, N - 1] {
        let e = kept.table().find((1 << 40) + i).unwrap();
        let b = (i as u32).to_le_bytes();
        assert!(matches!(e.way, super::table::Way::Handle { htype: 1, bytes } if bytes[..4] == b));
    }
    assert!(kept.table().find(1 << 41).is_none());
    drop((vps, fs, fs2));
    let _ = std::fs::remove_dir_all(&src);
}
