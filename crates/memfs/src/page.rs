//! The page: the unit memfs stores file data in, shared by the page
//! table (`pages.rs`) and the page files of a live upgrade
//! (`pagefile.rs`).

/// Bytes per page.
pub const PAGE_SIZE: usize = 4096;
