//! File data: a sparse map of 4 KiB pages and the file size.
//!
//! # Layout
//! Pages live in a `BTreeMap` keyed by page index; a missing page is a hole
//! and reads as zeros. A page `fallocate` added and nothing has written
//! yet is allocated (counted in `st_blocks` and the budget) but, as in
//! tmpfs, still a hole to `SEEK_DATA`/`SEEK_HOLE`, so that tools that copy
//! only data (`cp --sparse`, `tar -S`) skip preallocated space. Each page has its own reader/writer lock so that
//! I/O to disjoint ranges, admitted together by the vnode's range lock,
//! copies in parallel; the map lock is held shared while copying and
//! exclusively only to add or drop pages.
//!
//! The lock sits in the map's node and the 4 KiB of data in an allocation
//! of its own: exactly one allocator size class, so resident memory is
//! the data plus the map. A lock and its data in one allocation (4,104
//! bytes) would fall into the next class up and waste about a third
//! (docs/design/memfs.md).
//!
//! # Invariants
//! - Every byte at or past `size` that lies in an allocated page is zero.
//!   Shrinking zeroes the tail of the last page and drops the pages past
//!   it, so growing (truncate up, a write past the end) never has to
//!   clear anything and an extending write races harmlessly with a grow.
//! - `npages == map.len()` and the budget holds exactly `npages` pages for
//!   this file.
//!
//! # Lock order
//! The caller's range lock, then the map lock, then one page lock at a
//! time in ascending order.
//!
//! # Atomicity
//! This module does not make an operation atomic against an overlapping
//! one: the caller's range lock does (shared for reads, exclusive for
//! writes, exclusive over `[new size, inf)` or the whole file for
//! truncation and fallocate).

use crate::budget::Budget;
use crate::pagefile::{MappedPage, SharedFile};
use parking_lot::{RwLock, RwLockUpgradableReadGuard, RwLockWriteGuard};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use uvfs_vfs::{Errno, VfsResult};

pub use crate::page::PAGE_SIZE;
const PAGE: u64 = PAGE_SIZE as u64;

/// Largest file size (Linux's `MAX_LFS_FILESIZE` on 64-bit).
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;

type Page = RwLock<PageBuf>;

/// A page's memory: an allocation of its own, or, in a memfs restored
/// after a live upgrade, a page of the predecessor's page file used in
/// place (`pagefile.rs`).
#[derive(Debug)]
enum PageBuf {
    /// Memory of its own; `written` is false for a page `fallocate` added
    /// that no write has reached yet.
    Heap {
        data: Box<[u8; PAGE_SIZE]>,
        written: bool,
    },
    /// A page of a predecessor's page file; `written` as for `Heap`.
    Mapped { page: MappedPage, written: bool },
}

impl PageBuf {
    /// Whether `SEEK_DATA` counts the page as data.
    fn is_data(&self) -> bool {
        match self {
            PageBuf::Heap { written, .. } => *written,
            PageBuf::Mapped { written, .. } => *written,
        }
    }

    /// Marks a restored page as preallocated, not written.
    fn set_reserved(&mut self) {
        match self {
            PageBuf::Heap { written, .. } | PageBuf::Mapped { written, .. } => *written = false,
        }
    }

    /// Called by writes before they copy in.
    fn mark_written(&mut self) {
        match self {
            PageBuf::Heap { written, .. } | PageBuf::Mapped { written, .. } => *written = true,
        }
    }
}

impl std::ops::Deref for PageBuf {
    type Target = [u8; PAGE_SIZE];
    fn deref(&self) -> &[u8; PAGE_SIZE] {
        match self {
            PageBuf::Heap { data, .. } => data,
            PageBuf::Mapped { page, .. } => page,
        }
    }
}

impl std::ops::DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8; PAGE_SIZE] {
        match self {
            PageBuf::Heap { data, .. } => data,
            PageBuf::Mapped { page, .. } => page,
        }
    }
}

/// Pages being freed: those of a page file given back together
/// (`pagefile::free_together`).
struct Freed(BTreeMap<u64, Page>);

impl Drop for Freed {
    fn drop(&mut self) {
        let pages = std::mem::take(&mut self.0).into_values();
        release(pages.map(RwLock::into_inner));
    }
}

/// Drops `pages`, those in page files given back together.
fn release(pages: impl Iterator<Item = PageBuf>) {
    crate::pagefile::free_together(pages.filter_map(|p| match p {
        PageBuf::Mapped { page, .. } => Some(page),
        PageBuf::Heap { .. } => None,
    }));
}

/// A zeroed page, `written` by its first user (a write) or not (an
/// `fallocate`).
fn new_page(written: bool) -> Page {
    // Zeroed by the allocator (calloc), not copied from a stack array.
    let data: Box<[u8; PAGE_SIZE]> = vec![0u8; PAGE_SIZE]
        .into_boxed_slice()
        .try_into()
        .expect("PAGE_SIZE bytes");
    RwLock::new(PageBuf::Heap { data, written })
}

/// The data of one regular file.
#[derive(Debug)]
pub struct FileData {
    /// Allocated pages by index.
    map: RwLock<BTreeMap<u64, Page>>,
    /// File size in bytes. Written under the map lock (exclusive for
    /// shrinking, shared or exclusive plus `fetch_max` for growing);
    /// read without it.
    size: AtomicU64,
    /// `map.len()`, readable without the map lock (for `st_blocks`).
    npages: AtomicU64,
    budget: Arc<Budget>,
}

impl FileData {
    /// An empty file charged to `budget`.
    pub fn new(budget: Arc<Budget>) -> FileData {
        FileData {
            map: RwLock::new(BTreeMap::new()),
            size: AtomicU64::new(0),
            npages: AtomicU64::new(0),
            budget,
        }
    }

    /// The file size.
    pub fn size(&self) -> u64 {
        // Acquire pairs with the Release stores in write/truncate, so a
        // reader that sees a size also sees the pages that back it.
        self.size.load(Ordering::Acquire)
    }

    /// Allocated pages.
    pub fn pages(&self) -> u64 {
        self.npages.load(Ordering::Relaxed)
    }

    /// `SEEK_DATA` / `SEEK_HOLE` (`hole`) from `offset`, by page as tmpfs:
    /// a written page is data; a missing one, one `fallocate` added that
    /// nothing wrote, and the end of file are holes. `ENXIO` at or past
    /// the end.
    pub fn seek(&self, offset: u64, hole: bool) -> VfsResult<u64> {
        let map = self.map.read();
        let size = self.size();
        if offset >= size {
            return Err(Errno::ENXIO);
        }
        let first = offset / PAGE;
        let found = if hole {
            // The first page index at or after `first` with no page.
            let mut want = first;
            for (&p, page) in map.range(first..) {
                if p != want || !page.read().is_data() {
                    break;
                }
                want += 1;
            }
            want.saturating_mul(PAGE)
        } else {
            match map.range(first..).find(|(_, page)| page.read().is_data()) {
                Some((&p, _)) => p.saturating_mul(PAGE),
                None => return Err(Errno::ENXIO),
            }
        };
        let at = found.max(offset);
        match (hole, at >= size) {
            (true, true) => Ok(size),
            (false, true) => Err(Errno::ENXIO),
            (_, false) => Ok(at),
        }
    }

    /// Reads up to `len` bytes at `offset`, stopping at end of file.
    pub fn read(&self, offset: u64, len: usize) -> Vec<u8> {
        let avail = self.size().saturating_sub(offset).min(len as u64);
        let mut out = vec![0u8; avail as usize];
        let n = self.read_into(offset, &mut out);
        out.truncate(n);
        out
    }

    /// Reads into `buf` at `offset`, stopping at end of file; returns the
    /// bytes read. Holes read as zeros.
    pub fn read_into(&self, offset: u64, buf: &mut [u8]) -> usize {
        let map = self.map.read();
        let size = self.size();
        if offset >= size {
            return 0;
        }
        let end = size.min(offset.saturating_add(buf.len() as u64));
        let mut pos = offset;
        while pos < end {
            let idx = pos / PAGE;
            let in_page = (pos % PAGE) as usize;
            let n = ((PAGE - pos % PAGE).min(end - pos)) as usize;
            let dst = (pos - offset) as usize;
            match map.get(&idx) {
                Some(page) => buf[dst..dst + n].copy_from_slice(&page.read()[in_page..in_page + n]),
                None => buf[dst..dst + n].fill(0),
            }
            pos += n as u64;
        }
        (end - offset) as usize
    }

    /// Writes `data` at `offset`, allocating pages. Returns the bytes
    /// written: all of `data`, or a prefix when the budget runs out part
    /// way; `ENOSPC` if not even one byte fits, `EFBIG` past the largest
    /// file size. Nothing outside the written prefix changes.
    pub fn write(&self, offset: u64, data: &[u8]) -> VfsResult<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(Errno::EFBIG)?;
        let first = offset / PAGE;
        let last = (end - 1) / PAGE;
        let map = self.map.upgradable_read();
        let missing: Vec<u64> = (first..=last).filter(|i| !map.contains_key(i)).collect();
        let map = if missing.is_empty() {
            RwLockUpgradableReadGuard::downgrade(map)
        } else {
            let granted = self.budget.try_reserve(missing.len() as u64) as usize;
            let mut map = RwLockUpgradableReadGuard::upgrade(map);
            for &idx in &missing[..granted] {
                map.insert(idx, new_page(true));
            }
            self.npages.fetch_add(granted as u64, Ordering::Relaxed);
            RwLockWriteGuard::downgrade(map)
        };
        // Without every page, write the prefix up to the first page the
        // budget could not pay for.
        let end = match (first..=last).find(|i| !map.contains_key(i)) {
            Some(hole) => hole * PAGE,
            None => end,
        };
        if end <= offset {
            return Err(Errno::ENOSPC);
        }
        let mut pos = offset;
        while pos < end {
            let idx = pos / PAGE;
            let in_page = (pos % PAGE) as usize;
            let n = ((PAGE - pos % PAGE).min(end - pos)) as usize;
            let src = (pos - offset) as usize;
            if let Some(page) = map.get(&idx) {
                let mut page = page.write();
                page.mark_written();
                page[in_page..in_page + n].copy_from_slice(&data[src..src + n]);
            }
            pos += n as u64;
        }
        // Release: publishes the page contents with the new size.
        self.size.fetch_max(end, Ordering::Release);
        Ok((end - offset) as usize)
    }

    /// Sets the size. Shrinking, or setting the same size, drops and
    /// zeroes everything past the new size, space preallocated past the
    /// old one too (as tmpfs and ext4 do: `O_TRUNC` on an empty file frees
    /// its preallocation); growing keeps it, which `fallocate
    /// --keep-size` promised (nothing past the old size holds data, so
    /// there is nothing to zero).
    pub fn truncate(&self, new_size: u64) -> VfsResult<()> {
        if new_size > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        let mut map = self.map.write();
        let old = self.size();
        if new_size <= old {
            self.drop_from(&mut map, new_size);
        }
        self.size.store(new_size, Ordering::Release);
        Ok(())
    }

    /// Zeroes `[from, inf)` inside allocated pages and frees whole pages.
    fn drop_from(&self, map: &mut BTreeMap<u64, Page>, from: u64) {
        let keep = from.div_ceil(PAGE);
        if !from.is_multiple_of(PAGE) {
            if let Some(page) = map.get(&(from / PAGE)) {
                page.write()[(from % PAGE) as usize..].fill(0);
            }
        }
        let gone = map.split_off(&keep);
        let n = gone.len() as u64;
        self.forget_pages(n);
        crate::reaper::free(Freed(gone), n);
    }

    fn forget_pages(&self, n: u64) {
        self.npages.fetch_sub(n, Ordering::Relaxed);
        self.budget.release(n);
    }

    /// Zeroes `[offset, offset+len)`, freeing the whole pages inside it;
    /// the size does not change.
    pub fn punch_hole(&self, offset: u64, len: u64) {
        let end = offset.saturating_add(len);
        if end <= offset {
            return;
        }
        let mut map = self.map.write();
        let first_whole = offset.div_ceil(PAGE);
        let end_whole = end / PAGE; // exclusive
                                    // Partial pages at either end are zeroed in place.
        let zero = |from: u64, to: u64| {
            if from >= to {
                return;
            }
            if let Some(page) = map.get(&(from / PAGE)) {
                let a = (from % PAGE) as usize;
                let b = a + (to - from) as usize;
                page.write()[a..b].fill(0);
            }
        };
        if first_whole >= end_whole {
            // Within one page, or spanning two partial pages.
            let mid = (offset / PAGE + 1) * PAGE;
            zero(offset, end.min(mid));
            if end > mid {
                zero(mid, end);
            }
        } else {
            zero(offset, first_whole * PAGE);
            zero(end_whole * PAGE, end);
        }
        if first_whole >= end_whole {
            return;
        }
        let doomed: Vec<u64> = map.range(first_whole..end_whole).map(|(i, _)| *i).collect();
        let gone: BTreeMap<u64, Page> = doomed.iter().filter_map(|i| map.remove_entry(i)).collect();
        self.forget_pages(doomed.len() as u64);
        drop(Freed(gone));
    }

    /// Allocates every page of `[offset, offset+len)` (all or nothing) and,
    /// unless `keep_size`, grows the size to cover the range.
    pub fn allocate(&self, offset: u64, len: u64, keep_size: bool) -> VfsResult<()> {
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(Errno::EFBIG)?;
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let mut map = self.map.write();
        let (lo, hi) = (offset / PAGE, end.div_ceil(PAGE));
        // Count before listing: a huge range must fail on the budget, not
        // walk billions of page indices.
        let have = map.range(lo..hi).count() as u64;
        let want = (hi - lo) - have;
        if !self.budget.reserve_exact(want) {
            return Err(Errno::ENOSPC);
        }
        let mut added = 0;
        for i in lo..hi {
            if added == want {
                break;
            }
            if let std::collections::btree_map::Entry::Vacant(v) = map.entry(i) {
                v.insert(new_page(false));
                added += 1;
            }
        }
        self.npages.fetch_add(added, Ordering::Relaxed);
        if !keep_size {
            self.size.fetch_max(end, Ordering::Release);
        }
        Ok(())
    }
}

impl FileData {
    /// Calls `f` with each allocated page's index, contents and whether
    /// it was written (not only preallocated), in index order, holding the
    /// map lock shared and each page's lock in turn; stops at `f`'s first
    /// error.
    pub fn for_each_page<E>(
        &self,
        mut f: impl FnMut(u64, &[u8; PAGE_SIZE], bool) -> Result<(), E>,
    ) -> Result<(), E> {
        let map = self.map.read();
        for (&idx, page) in map.iter() {
            let page = page.read();
            f(idx, &page, page.is_data())?;
        }
        Ok(())
    }

    /// Where the file's pages lie: all in one page file, in index order
    /// one after another (as a restore or [`migrate`](Self::migrate) put
    /// them), or not.
    pub(crate) fn placement(&self) -> Placement {
        let map = self.map.read();
        let mut runs = Vec::new();
        let mut reserved = Vec::new();
        let mut first: Option<(Arc<SharedFile>, u64)> = None;
        for (k, (&idx, page)) in map.iter().enumerate() {
            let page = page.read();
            let PageBuf::Mapped { page: mp, written } = &*page else {
                return Placement::Elsewhere;
            };
            let (file, at) = mp.place();
            match &first {
                None => first = Some((file.clone(), at)),
                Some((f, a)) if Arc::ptr_eq(f, file) && *a + k as u64 == at => {}
                Some(_) => return Placement::Elsewhere,
            }
            extend_runs(&mut runs, idx);
            if !written {
                extend_runs(&mut reserved, idx);
            }
        }
        match first {
            None => Placement::Empty,
            Some((file, at)) => Placement::InPlace {
                file,
                at,
                runs,
                reserved,
            },
        }
    }

    /// Moves the file's pages to `dest`, in index order from its page
    /// `*next` on, as far as `dest` holds them, advancing `*next`; the
    /// contents stay as they are. Returns whether every page moved.
    ///
    /// Runs while the file is served: each page moves under its own
    /// lock, a run of them under the map lock held shared (so reads and
    /// writes of existing pages go on; only adding or dropping pages
    /// waits, for one run). A page added or dropped between runs may
    /// leave the pages out of order, which [`placement`](Self::placement)
    /// sees: such a file is copied at the pause instead.
    pub(crate) fn migrate(&self, dest: &Arc<SharedFile>, next: &mut u64) -> VfsResult<bool> {
        const RUN: usize = 256;
        let mut from = 0u64;
        loop {
            let mut old = Vec::with_capacity(RUN);
            {
                let map = self.map.read();
                let run: Vec<(&u64, &Page)> = map.range(from..).take(RUN).collect();
                let Some(&(&last, _)) = run.last() else {
                    return Ok(true);
                };
                if *next + run.len() as u64 > dest.pages() {
                    return Ok(false);
                }
                dest.populate(*next, run.len() as u64);
                for (_, page) in run.iter() {
                    let mut page = page.write();
                    let mut mp = dest.take(*next)?;
                    *next += 1;
                    mp.copy_from_slice(&page[..]);
                    let written = page.is_data();
                    old.push(std::mem::replace(
                        &mut *page,
                        PageBuf::Mapped { page: mp, written },
                    ));
                }
                from = last + 1;
            }
            // The old memory goes after the locks do.
            release(old.into_iter());
        }
    }

    /// A file of `size` bytes whose allocated pages are `runs` of
    /// consecutive indices `(first, count)`, found one after another in
    /// `file` from its page `at` and used there, charged to `budget`;
    /// those in the runs `reserved` were preallocated and never written.
    /// `EINVAL` if they do not make a file (runs out of order,
    /// overlapping, past the largest file, or not in `file`; reserved
    /// pages not among them), `ENOSPC` if the budget cannot pay for them
    /// all.
    pub fn restored(
        budget: Arc<Budget>,
        size: u64,
        runs: &[(u64, u64)],
        file: Option<&Arc<SharedFile>>,
        at: u64,
        reserved: &[(u64, u64)],
    ) -> VfsResult<FileData> {
        if size > MAX_FILE_SIZE {
            return Err(Errno::EINVAL);
        }
        let (mut next, mut n) = (0u64, 0u64);
        for &(first, count) in runs {
            next = first
                .checked_add(count)
                .filter(|&end| count > 0 && first >= next && end <= MAX_FILE_SIZE.div_ceil(PAGE))
                .ok_or(Errno::EINVAL)?;
            n += count;
        }
        let file = match (n, file) {
            (0, _) => None,
            (_, Some(f)) => Some(f),
            (_, None) => return Err(Errno::EINVAL),
        };
        if !budget.reserve_exact(n) {
            return Err(Errno::ENOSPC);
        }
        let f = FileData::new(budget);
        f.npages.store(n, Ordering::Relaxed);
        f.size.store(size, Ordering::Relaxed);
        if let Some(file) = file {
            let mut map = f.map.write();
            let indices = runs.iter().flat_map(|&(first, count)| first..first + count);
            for (idx, k) in indices.zip(0..) {
                let place = at.checked_add(k).ok_or(Errno::EINVAL)?;
                let page = file.take(place).map_err(|_| Errno::EINVAL)?;
                let page = PageBuf::Mapped {
                    page,
                    written: true,
                };
                map.insert(idx, RwLock::new(page));
            }
            for &(first, count) in reserved {
                let end = first.checked_add(count).ok_or(Errno::EINVAL)?;
                for i in first..end {
                    map.get_mut(&i)
                        .ok_or(Errno::EINVAL)?
                        .get_mut()
                        .set_reserved();
                }
            }
        } else if !reserved.is_empty() {
            return Err(Errno::EINVAL);
        }
        Ok(f)
    }
}

/// Where a file's pages lie ([`FileData::placement`]).
pub(crate) enum Placement {
    /// No pages.
    Empty,
    /// All in `file`, one after another from its page `at`, holding the
    /// `runs` of page indices `(first, count)`; those in `reserved` were
    /// preallocated and never written.
    InPlace {
        file: Arc<SharedFile>,
        at: u64,
        runs: Vec<(u64, u64)>,
        reserved: Vec<(u64, u64)>,
    },
    /// Some in the heap, or not in order in one page file.
    Elsewhere,
}

/// Adds page `idx` (above every index in `runs`) to `runs`.
pub(crate) fn extend_runs(runs: &mut Vec<(u64, u64)>, idx: u64) {
    match runs.last_mut() {
        Some((first, n)) if *first + *n == idx => *n += 1,
        _ => runs.push((idx, 1)),
    }
}

impl Drop for FileData {
    fn drop(&mut self) {
        let n = *self.npages.get_mut();
        self.budget.release(n);
        crate::reaper::free(Freed(std::mem::take(self.map.get_mut())), n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(limit: u64) -> (Arc<Budget>, FileData) {
        let b = Arc::new(Budget::new(limit));
        let f = FileData::new(b.clone());
        (b, f)
    }

    #[test]
    fn sparse_write_and_read() {
        let (b, f) = file(u64::MAX);
        assert_eq!(f.write(10_000, b"hello").unwrap(), 5);
        assert_eq!(f.size(), 10_005);
        assert_eq!(f.pages(), 1);
        assert_eq!(b.used(), 1);
        let r = f.read(9_998, 100);
        assert_eq!(r, b"\0\0hello");
        assert!(f.read(0, 4096).iter().all(|&c| c == 0));
        assert!(f.read(20_000, 10).is_empty());
    }

    #[test]
    fn read_into_reads_holes_as_zeros_up_to_the_end() {
        let (_, f) = file(u64::MAX);
        f.write(7 * PAGE + 5, b"x").unwrap();
        let mut buf = [9u8; 3 * PAGE_SIZE];
        assert_eq!(f.read_into(6 * PAGE, &mut buf), PAGE_SIZE + 6);
        assert!(buf[..PAGE_SIZE + 5].iter().all(|&c| c == 0));
        assert_eq!(buf[PAGE_SIZE + 5], b'x');
        assert_eq!(buf[PAGE_SIZE + 6], 9, "past the end: untouched");
        assert_eq!(f.read_into(8 * PAGE, &mut buf), 0);
    }

    #[test]
    fn truncate_zeroes_the_tail() {
        let (b, f) = file(u64::MAX);
        f.write(0, &[7u8; 10_000]).unwrap();
        assert_eq!(b.used(), 3);
        f.truncate(5).unwrap();
        assert_eq!(b.used(), 1);
        f.truncate(10_000).unwrap();
        let r = f.read(0, 10_000);
        assert_eq!(&r[..5], &[7u8; 5]);
        assert!(r[5..].iter().all(|&c| c == 0));
    }

    #[test]
    fn growing_keeps_space_preallocated_past_the_end() {
        let (b, f) = file(u64::MAX);
        f.write(0, b"abc").unwrap();
        // Pages 34 and 35, past the end, size unchanged.
        f.allocate(143_359, 4097, true).unwrap();
        assert_eq!((f.size(), b.used()), (3, 3));
        f.truncate(6260).unwrap();
        assert_eq!((f.size(), b.used()), (6260, 3), "a grow frees nothing");
        assert_eq!(f.read(0, 6260)[..4], *b"abc\0");
        f.allocate(143_359, 4097, true).unwrap();
        f.truncate(6260).unwrap();
        assert_eq!(
            (f.size(), b.used()),
            (6260, 1),
            "the same size frees past it"
        );
        f.allocate(143_359, 4097, true).unwrap();
        f.truncate(2).unwrap();
        assert_eq!((f.size(), b.used()), (2, 1), "a shrink frees past it");
        f.truncate(4096).unwrap();
        assert_eq!(f.read(0, 4096)[..3], *b"ab\0");
    }

    #[test]
    fn enospc_keeps_what_was_written() {
        let (b, f) = file(2);
        f.write(0, &[1u8; 4096]).unwrap();
        // One page left: a three-page write is cut after its first page.
        assert_eq!(f.write(4096, &[2u8; 3 * 4096]).unwrap(), 4096);
        assert_eq!(f.write(8192, &[3u8; 10]), Err(Errno::ENOSPC));
        // Rewriting allocated pages still works at the limit.
        assert_eq!(f.write(0, &[4u8; 8192]).unwrap(), 8192);
        assert_eq!(f.size(), 8192);
        assert_eq!(b.used(), 2);
        assert!(f.read(0, 8192).iter().all(|&c| c == 4));
        drop(f);
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn punch_and_allocate() {
        let (b, f) = file(u64::MAX);
        f.write(0, &[9u8; 4 * 4096]).unwrap();
        f.punch_hole(100, 2 * 4096);
        assert_eq!(f.size(), 4 * 4096);
        assert_eq!(f.pages(), 3);
        let r = f.read(0, 4 * 4096);
        assert!(r[..100].iter().all(|&c| c == 9));
        assert!(r[100..100 + 2 * 4096].iter().all(|&c| c == 0));
        assert!(r[100 + 2 * 4096..].iter().all(|&c| c == 9));
        f.allocate(0, 8 * 4096, true).unwrap();
        assert_eq!(f.pages(), 8);
        assert_eq!(f.size(), 4 * 4096);
        f.allocate(0, 9 * 4096, false).unwrap();
        assert_eq!(f.size(), 9 * 4096);
        assert_eq!(b.used(), 9);
        // Small punch inside one page, and one straddling two pages.
        f.write(0, &[5u8; 8192]).unwrap();
        f.punch_hole(10, 20);
        f.punch_hole(4000, 200);
        let r = f.read(0, 8192);
        assert!(r[10..30].iter().all(|&c| c == 0));
        assert!(r[4000..4200].iter().all(|&c| c == 0));
        assert_eq!(r[9], 5);
        assert_eq!(r[30], 5);
        assert_eq!(r[4200], 5);
    }

    /// As tmpfs: space `fallocate` added is allocated but a hole to
    /// `SEEK_DATA`/`SEEK_HOLE` until something is written in it.
    #[test]
    fn preallocated_pages_are_holes_until_written() {
        let (b, f) = file(u64::MAX);
        const P: u64 = 4096;
        f.allocate(0, 4 * P, false).unwrap();
        assert_eq!((f.size(), f.pages(), b.used()), (4 * P, 4, 4));
        assert_eq!(f.seek(0, false), Err(Errno::ENXIO));
        assert_eq!(f.seek(0, true), Ok(0));
        // A write makes its pages data, all of each page.
        f.write(P + 10, b"x").unwrap();
        assert_eq!(f.seek(0, false), Ok(P));
        assert_eq!(f.seek(P + 100, false), Ok(P + 100));
        assert_eq!(f.seek(P, true), Ok(2 * P));
        assert_eq!(f.seek(2 * P, false), Err(Errno::ENXIO));
        // Past a written page, preallocated space is a hole up to the end.
        f.write(3 * P, b"y").unwrap();
        assert_eq!(f.seek(2 * P, false), Ok(3 * P));
        assert_eq!(f.seek(3 * P, true), Ok(4 * P));
        // Reads see zeros either way, and the blocks stay counted.
        let r = f.read(0, 4 * P as usize);
        assert_eq!((r[P as usize + 10], r[3 * P as usize]), (b'x', b'y'));
        assert_eq!(r.iter().filter(|&&c| c != 0).count(), 2);
        assert_eq!(f.pages(), 4);
        // Preallocating over written data leaves it data.
        f.allocate(0, 4 * P, true).unwrap();
        assert_eq!(f.seek(0, false), Ok(P));
    }

    /// Counts, on the recording thread only, allocations a little over a
    /// page: in a size-classed allocator (mimalloc, which `uvfs` uses)
    /// those take the next class up, 5 KiB for 4 KiB of data.
    mod sizes {
        use std::alloc::{GlobalAlloc, Layout, System};
        use std::cell::Cell;
        use std::sync::atomic::{AtomicUsize, Ordering};

        pub struct Recording;
        pub static OVER_A_PAGE: AtomicUsize = AtomicUsize::new(0);
        pub static PAGES: AtomicUsize = AtomicUsize::new(0);
        thread_local!(pub static ON: Cell<bool> = const { Cell::new(false) });

        // SAFETY: forwards every call to `System` unchanged; the counting
        // touches only atomics and a const-initialised thread-local (no
        // allocation inside the allocator).
        unsafe impl GlobalAlloc for Recording {
            unsafe fn alloc(&self, l: Layout) -> *mut u8 {
                note(l.size());
                // SAFETY: the caller's contract, passed through.
                unsafe { System.alloc(l) }
            }
            unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
                note(l.size());
                // SAFETY: as above.
                unsafe { System.alloc_zeroed(l) }
            }
            unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
                // SAFETY: as above.
                unsafe { System.dealloc(p, l) }
            }
        }

        fn note(size: usize) {
            if ON.try_with(|on| on.get()).unwrap_or(false) {
                if size == super::PAGE_SIZE {
                    PAGES.fetch_add(1, Ordering::Relaxed);
                } else if size > super::PAGE_SIZE && size <= super::PAGE_SIZE + 512 {
                    OVER_A_PAGE.fetch_add(1, Ordering::Relaxed);
                }
            }
        }

        #[global_allocator]
        static A: Recording = Recording;
    }

    #[test]
    fn page_data_is_exactly_one_page_of_heap() {
        use std::sync::atomic::Ordering::Relaxed;
        let (_b, f) = file(u64::MAX);
        sizes::ON.with(|on| on.set(true));
        f.write(0, &[1u8; 64 * 4096]).unwrap();
        f.allocate(64 * 4096, 16 * 4096, false).unwrap();
        sizes::ON.with(|on| on.set(false));
        assert_eq!(f.pages(), 80);
        assert_eq!(sizes::PAGES.load(Relaxed), 80, "one 4 KiB block per page");
        assert_eq!(
            sizes::OVER_A_PAGE.load(Relaxed),
            0,
            "a page's data shares its allocation with something else"
        );
    }

    #[test]
    fn huge_offsets() {
        let (_b, f) = file(u64::MAX);
        assert_eq!(f.write(MAX_FILE_SIZE, b"x"), Err(Errno::EFBIG));
        assert_eq!(f.write(MAX_FILE_SIZE - 1, b"x").unwrap(), 1);
        assert_eq!(f.size(), MAX_FILE_SIZE);
        assert_eq!(f.read(MAX_FILE_SIZE - 1, 10), b"x");
        f.truncate(0).unwrap();
        assert_eq!(f.pages(), 0);
    }
}
