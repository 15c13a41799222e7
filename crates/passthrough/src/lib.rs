//! uvfs-passthrough (being built).
