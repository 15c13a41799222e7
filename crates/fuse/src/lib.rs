//! uvfs-fuse (being built).
