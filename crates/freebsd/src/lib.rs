//! uvfs-freebsd (being built).
