//! uvfs-memfs (being built).
