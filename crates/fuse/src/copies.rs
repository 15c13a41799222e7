//! Where a FUSE file system unmounted here is still mounted: bind mounts
//! of it in this mount namespace, and copies in others.
//!
//! A mount namespace made while the file system was mounted (`unshare -m`,
//! a container, a systemd service with `PrivateTmp=` or `ProtectSystem=`)
//! holds a copy of the mount, and with private propagation an unmount here
//! does not reach it: the kernel keeps the connection up and the server
//! serves the copy, as it should. `uvfs umount` then returns with the
//! server still running, and the user who expected it gone (to unmount the
//! source's file system next, say) needs to hear why and where.

use std::path::PathBuf;

use uvfs_vfs::mountinfo::{entries, read_table};

/// The other mounts of one file system (by device number).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Copies {
    /// Its mountpoints in this mount namespace.
    pub here: Vec<PathBuf>,
    /// One process in each other mount namespace that has it mounted:
    /// (pid, command name).
    pub elsewhere: Vec<(i32, String)>,
}

impl Copies {
    /// Whether no other mount was found (there may still be one in a
    /// namespace no process is in, or one this user may not read).
    pub fn is_empty(&self) -> bool {
        self.here.is_empty() && self.elsewhere.is_empty()
    }
}

/// The mounts of device `dev` that remain: listed in this namespace's
/// table, and in the tables of other namespaces that some process here
/// is in (read once per namespace; processes this user may not look at
/// are skipped).
pub fn copies_of(dev: u64) -> Copies {
    let here = read_table()
        .map(|t| {
            entries(&t)
                .filter(|e| e.dev == dev)
                .map(|e| e.mountpoint)
                .collect()
        })
        .unwrap_or_default();
    let own_ns = std::fs::read_link("/proc/self/ns/mnt").ok();
    let mut seen = std::collections::HashSet::new();
    let mut elsewhere = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Copies { here, elsewhere };
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(ns) = std::fs::read_link(format!("/proc/{pid}/ns/mnt")) else {
            continue;
        };
        if Some(&ns) == own_ns.as_ref() || !seen.insert(ns) {
            continue;
        }
        let Ok(table) = std::fs::read(format!("/proc/{pid}/mountinfo")) else {
            continue;
        };
        if entries(&table).any(|e| e.dev == dev) {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .map(|c| c.trim_end().to_string())
                .unwrap_or_default();
            elsewhere.push((pid, comm));
        }
    }
    Copies { here, elsewhere }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_mounted_nowhere_has_no_copies() {
        // No mount has device (4095, 1048575) here, nor any namespace.
        let none = copies_of(libc::makedev(4095, 1_048_575));
        assert!(none.is_empty(), "{none:?}");
    }

    #[test]
    fn the_root_file_system_is_found_in_this_namespace() {
        let Some(root) = uvfs_vfs::mountinfo::mount_entry(std::path::Path::new("/")) else {
            return; // no /proc here
        };
        let c = copies_of(root.dev);
        assert!(
            c.here.iter().any(|p| p == std::path::Path::new("/")),
            "{c:?}"
        );
    }
}
