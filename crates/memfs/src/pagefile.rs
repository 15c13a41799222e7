//! A memfs's file data in memfds ("page files"), as a live upgrade hands
//! it to a successor (`handover.rs`).
//!
//! # Why a memfd
//! The data is most of the state (a gigabyte, next to megabytes of
//! metadata). In a memfd it crosses to the successor as a descriptor,
//! never through the encoder or a socket's buffer; page indices and
//! offsets go in the metadata. And the successor copies nothing: it maps
//! the file shared and its restored files use those pages where they lie
//! ([`MappedPage`]), writing them in place and giving each back to the
//! system (`MADV_REMOVE`) when it is dropped. So a restore costs the
//! metadata only, and the first access to a page a minor fault.
//!
//! # Passed on, not copied again
//! A file whose pages lie in a page file already (a restored one, or one
//! the server moved there while still serving, [`SharedFile::create`])
//! is handed on in the same page file: its successor maps the same
//! memory. Only pages in the heap are copied while requests wait.
//!
//! # Who gives pages back: the [`Lease`]
//! With pages shared, a process that frees a page it is done with may
//! free one the other process still uses. So only the process serving
//! the mount gives pages back: a restored memfs holds no lease until it
//! has taken the mount over (a successor that fails before that leaves
//! its predecessor serving from the same pages, and must not free them
//! on its way out), and the predecessor gives its lease up when the
//! successor takes over (its inodes dropped afterwards hold pages the
//! successor serves). A page dropped without the lease stays in its
//! file until the file goes.
//!
//! # Sealed against shrinking
//! Nothing can cut the file under a mapping (which would turn accesses
//! into `SIGBUS`); a file without that seal is refused.

use crate::page::PAGE_SIZE;
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{Advice, MapFlags, ProtFlags};
use std::ops::{Deref, DerefMut};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use uvfs_vfs::{Errno, VfsResult};

/// The seal a page file carries: its pages stay mapped.
const FIXED: SealFlags = SealFlags::SHRINK;

/// An empty, sealable page file.
fn new_memfd() -> VfsResult<OwnedFd> {
    Ok(rustix::fs::memfd_create(
        "uvfs-memfs-pages",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?)
}

/// Fixes a page file's size for good: no shrinking (under a mapping),
/// no growing, no unsealing.
fn seal(fd: &OwnedFd) -> VfsResult<()> {
    Ok(rustix::fs::fcntl_add_seals(
        fd,
        FIXED | SealFlags::GROW | SealFlags::SEAL,
    )?)
}

/// A new page file being filled, front to back, through a buffer.
///
/// Written with `pwrite`, not through a mapping: shmem zeroes a page it
/// allocates for a mapping, but not one a write fills whole, and zeroing
/// is half the cost of a copy.
pub(crate) struct Writer {
    fd: OwnedFd,
    /// Pages not yet written.
    buf: Vec<u8>,
    /// Where `buf` goes in the file.
    at: u64,
}

/// Bytes written at once.
const CHUNK: usize = 1 << 20;

impl Writer {
    /// An empty page file.
    pub fn new() -> VfsResult<Writer> {
        Ok(Writer {
            fd: new_memfd()?,
            buf: Vec::with_capacity(CHUNK),
            at: 0,
        })
    }

    /// Pages given so far.
    pub fn pages(&self) -> u64 {
        (self.at + self.buf.len() as u64) / PAGE_SIZE as u64
    }

    /// Appends one page.
    pub fn push(&mut self, page: &[u8; PAGE_SIZE]) -> VfsResult<()> {
        self.buf.extend_from_slice(page);
        if self.buf.len() >= CHUNK {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> VfsResult<()> {
        let mut done = 0;
        while done < self.buf.len() {
            let n = rustix::io::pwrite(&self.fd, &self.buf[done..], self.at + done as u64)?;
            if n == 0 {
                return Err(Errno::EIO);
            }
            done += n;
        }
        self.at += done as u64;
        self.buf.clear();
        Ok(())
    }

    /// Writes what is left, seals the file, and returns it.
    pub fn finish(mut self) -> VfsResult<OwnedFd> {
        self.flush()?;
        seal(&self.fd)?;
        Ok(self.fd)
    }
}

/// Whether this process gives the pages it drops back to the system
/// (module doc, "Who gives pages back"). One per memfs.
#[derive(Debug)]
pub(crate) struct Lease(AtomicBool);

impl Lease {
    pub fn new(held: bool) -> Arc<Lease> {
        Arc::new(Lease(AtomicBool::new(held)))
    }

    /// Takes the lease (`true`) or gives it up.
    pub fn set(&self, held: bool) {
        self.0.store(held, Ordering::SeqCst);
    }

    fn held(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// A page file, mapped shared and writable, whose pages are lent out one
/// by one as [`MappedPage`]s.
pub(crate) struct SharedFile {
    ptr: *mut u8,
    pages: u64,
    /// One bit per page: lent out (each page to one owner only).
    lent: Vec<AtomicU64>,
    /// Pages lent out and not dropped since.
    live: AtomicU64,
    /// Kept to pass the file on to a successor.
    fd: OwnedFd,
    lease: Arc<Lease>,
}

// SAFETY: the mapping is plain memory, valid until `drop`; every access
// to a page goes through the one `MappedPage` that owns it, under
// Rust's borrow rules (`lent` makes sure there is one).
unsafe impl Send for SharedFile {}
// SAFETY: as above; `lent` is atomic.
unsafe impl Sync for SharedFile {}

impl SharedFile {
    /// Maps the first `pages` pages of `fd`, which it keeps. `EPROTO`
    /// unless `fd` is a memfd sealed against shrinking that holds that
    /// many.
    pub fn open(fd: OwnedFd, pages: u64, lease: &Arc<Lease>) -> VfsResult<Arc<SharedFile>> {
        let seals = rustix::fs::fcntl_get_seals(&fd).map_err(|_| Errno::EPROTO)?;
        if !seals.contains(FIXED) || pages > u64::from(u32::MAX) {
            return Err(Errno::EPROTO);
        }
        let len = pages
            .checked_mul(PAGE_SIZE as u64)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or(Errno::EPROTO)?;
        let size = rustix::fs::fstat(&fd)?.st_size;
        if u64::try_from(size).map_or(true, |s| s < len as u64) {
            return Err(Errno::EPROTO);
        }
        let ptr = if len == 0 {
            std::ptr::null_mut()
        } else {
            // SAFETY: a new mapping at an address the kernel chooses
            // aliases nothing of ours; `SharedFile` owns it until `drop`.
            unsafe {
                rustix::mm::mmap(
                    std::ptr::null_mut(),
                    len,
                    ProtFlags::READ | ProtFlags::WRITE,
                    MapFlags::SHARED,
                    &fd,
                    0,
                )
            }?
            .cast()
        };
        let words = pages.div_ceil(64) as usize;
        Ok(Arc::new(SharedFile {
            ptr,
            pages,
            lent: (0..words).map(|_| AtomicU64::new(0)).collect(),
            live: AtomicU64::new(0),
            fd,
            lease: lease.clone(),
        }))
    }

    /// A new page file of `pages` pages, none allocated yet, for the
    /// server's own pages to move to while it serves (`FileData::migrate`).
    pub fn create(pages: u64, lease: &Arc<Lease>) -> VfsResult<Arc<SharedFile>> {
        let fd = new_memfd()?;
        let len = pages.checked_mul(PAGE_SIZE as u64).ok_or(Errno::ENOMEM)?;
        rustix::fs::ftruncate(&fd, len)?;
        seal(&fd)?;
        SharedFile::open(fd, pages, lease).map_err(|e| match e {
            Errno::EPROTO => Errno::EIO,
            e => e,
        })
    }

    /// Pages the file holds (allocated or not).
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// Pages in use.
    pub fn live(&self) -> u64 {
        self.live.load(Ordering::Relaxed)
    }

    /// A duplicate of the file's descriptor, for a successor.
    pub fn dup(&self) -> VfsResult<OwnedFd> {
        Ok(self.fd.try_clone()?)
    }

    /// Allocates pages `first..first + count` ahead of their first write
    /// (one call, not a fault per page); best effort.
    pub fn populate(&self, first: u64, count: u64) {
        self.advise(first, count, Advice::LinuxPopulateWrite);
    }

    /// Gives back every page no [`take`](Self::take) claimed (pages of
    /// files the predecessor had and the successor does not). Only once
    /// the predecessor serves no more, and with the lease.
    pub fn give_back_unclaimed(&self) {
        let claimed =
            |i: u64| self.lent[(i / 64) as usize].load(Ordering::Relaxed) & (1 << (i % 64)) != 0;
        let mut i = 0;
        while i < self.pages {
            if claimed(i) {
                i += 1;
                continue;
            }
            let first = i;
            while i < self.pages && !claimed(i) {
                i += 1;
            }
            // Nothing here uses them (never taken).
            self.give_back(first, i - first);
        }
    }

    /// Page `index`, to own; `EPROTO` if there is no such page or it was
    /// lent out already (a state that names a page twice).
    pub fn take(self: &Arc<Self>, index: u64) -> VfsResult<MappedPage> {
        if index >= self.pages {
            return Err(Errno::EPROTO);
        }
        let bit = 1u64 << (index % 64);
        let was = self.lent[(index / 64) as usize].fetch_or(bit, Ordering::Relaxed);
        if was & bit != 0 {
            return Err(Errno::EPROTO);
        }
        self.live.fetch_add(1, Ordering::Relaxed);
        Ok(MappedPage {
            file: self.clone(),
            index: index as u32,
            freed: false,
        })
    }
}

impl Drop for SharedFile {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: the mapping `open` made; every `MappedPage` holds
            // an `Arc` to `self`, so none is left to use it.
            let _ = unsafe { rustix::mm::munmap(self.ptr.cast(), self.pages as usize * PAGE_SIZE) };
        }
    }
}

/// One page of a [`SharedFile`], owned: read and written in place, given
/// back to the system when dropped.
pub(crate) struct MappedPage {
    file: Arc<SharedFile>,
    index: u32,
    /// Given back already, with its neighbours ([`free_together`]).
    freed: bool,
}

impl MappedPage {
    /// The page file it lies in, and where.
    pub fn place(&self) -> (&Arc<SharedFile>, u64) {
        (&self.file, u64::from(self.index))
    }

    fn ptr(&self) -> *mut [u8; PAGE_SIZE] {
        // SAFETY: `take` checked `index < pages`, so the offset stays
        // inside the mapping.
        unsafe { self.file.ptr.add(self.index as usize * PAGE_SIZE).cast() }
    }
}

impl Deref for MappedPage {
    type Target = [u8; PAGE_SIZE];
    fn deref(&self) -> &[u8; PAGE_SIZE] {
        // SAFETY: a page inside a live mapping (`self.file`), aligned,
        // that only this `MappedPage` reaches (`SharedFile::lent`), and
        // the borrow of `self` bounds the reference.
        unsafe { &*self.ptr() }
    }
}

impl DerefMut for MappedPage {
    fn deref_mut(&mut self) -> &mut [u8; PAGE_SIZE] {
        // SAFETY: as for `deref`, borrowed mutably through `self`.
        unsafe { &mut *self.ptr() }
    }
}

impl Drop for MappedPage {
    fn drop(&mut self) {
        if !self.freed {
            remove(&self.file, self.index, 1);
        }
    }
}

/// Gives `count` pages of `file` from `first` back to the system (the
/// file's memory, not only the mapping's), if this process holds the
/// lease; either way they leave the count of pages in use.
fn remove(file: &SharedFile, first: u32, count: u32) {
    file.live.fetch_sub(u64::from(count), Ordering::Relaxed);
    file.give_back(u64::from(first), u64::from(count));
}

impl SharedFile {
    /// Gives `count` pages from `first` back to the system (the file's
    /// memory, not only the mapping's) if this process holds the lease.
    /// The caller's pages: no [`MappedPage`] of theirs is left.
    fn give_back(&self, first: u64, count: u64) {
        if self.lease.held() {
            self.advise(first, count, Advice::LinuxRemove);
        }
    }

    /// `madvise` of pages `first..first + count`: populating them, or
    /// removing them ([`give_back`](Self::give_back)'s terms).
    fn advise(&self, first: u64, count: u64, advice: Advice) {
        if count == 0 || first.saturating_add(count) > self.pages {
            return;
        }
        // SAFETY: pages inside the live mapping. Populating changes no
        // contents (it allocates what a write fault would). Removing is
        // asked only for pages no `MappedPage` owns any more (their
        // owners are dropping them, or none took them; `lent` gave each
        // page to one owner), so nothing in this process uses them, and
        // with the lease no other process does: their contents may go.
        let _ = unsafe {
            rustix::mm::madvise(
                self.ptr.add(first as usize * PAGE_SIZE).cast(),
                count as usize * PAGE_SIZE,
                advice,
            )
        };
    }
}

/// Drops `pages`, giving back each run of neighbours in one call rather
/// than one per page (a restored file's pages lie in order).
pub(crate) fn free_together(pages: impl Iterator<Item = MappedPage>) {
    let mut run: Option<(Arc<SharedFile>, u32, u32)> = None;
    for mut page in pages {
        page.freed = true;
        match &mut run {
            Some((file, first, n))
                if Arc::ptr_eq(file, &page.file) && first.checked_add(*n) == Some(page.index) =>
            {
                *n += 1;
            }
            _ => {
                if let Some((file, first, n)) = run.take() {
                    remove(&file, first, n);
                }
                run = Some((page.file.clone(), page.index, 1));
            }
        }
    }
    if let Some((file, first, n)) = run {
        remove(&file, first, n);
    }
}

impl std::fmt::Debug for MappedPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MappedPage({})", self.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_used_in_place_once_each() {
        let mut w = Writer::new().unwrap();
        let mut page = [0u8; PAGE_SIZE];
        w.push(&page).unwrap();
        page[..3].copy_from_slice(b"abc");
        w.push(&page).unwrap();
        assert_eq!(w.pages(), 2);
        let fd = w.finish().unwrap();
        assert!(rustix::fs::ftruncate(&fd, 0).is_err(), "sealed");
        let lease = Lease::new(true);
        let open = |n| SharedFile::open(fd.try_clone().unwrap(), n, &lease);
        assert_eq!(open(3).err(), Some(Errno::EPROTO));
        let f = open(2).unwrap();
        let mut p = f.take(1).unwrap();
        assert_eq!(&p[..4], b"abc\0");
        assert_eq!(f.take(1).err(), Some(Errno::EPROTO), "lent already");
        assert_eq!(f.take(2).err(), Some(Errno::EPROTO), "past the end");
        p[0] = b'x';
        let q = f.take(0).unwrap();
        drop(f);
        assert_eq!(&p[..2], b"xb", "written in place, mapped while used");
        assert_eq!(q[0], 0);
        drop(p);
        let mut back = [1u8; 2];
        rustix::io::pread(&fd, &mut back, PAGE_SIZE as u64).unwrap();
        assert_eq!(back, [0, 0], "a dropped page goes back to the system");
        drop(q);
    }

    #[test]
    fn pages_freed_together_go_back_together() {
        let mut w = Writer::new().unwrap();
        for i in 0..5u8 {
            w.push(&[i + 1; PAGE_SIZE]).unwrap();
        }
        let fd = w.finish().unwrap();
        let f = SharedFile::open(fd.try_clone().unwrap(), 5, &Lease::new(true)).unwrap();
        let pages: Vec<MappedPage> = [0, 1, 3, 4].iter().map(|&i| f.take(i).unwrap()).collect();
        free_together(pages.into_iter());
        let mut back = [9u8; 5 * PAGE_SIZE];
        rustix::io::pread(&fd, &mut back, 0).unwrap();
        let firsts: Vec<u8> = back.chunks(PAGE_SIZE).map(|c| c[0]).collect();
        assert_eq!(firsts, [0, 0, 3, 0, 0]);
    }

    #[test]
    fn an_unsealed_file_is_refused() {
        let fd = rustix::fs::memfd_create("t", MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, PAGE_SIZE as u64).unwrap();
        let lease = Lease::new(true);
        assert_eq!(SharedFile::open(fd, 1, &lease).err(), Some(Errno::EPROTO));
    }

    #[test]
    fn without_the_lease_a_dropped_page_keeps_its_contents() {
        let lease = Lease::new(true);
        let f = SharedFile::create(3, &lease).unwrap();
        f.populate(0, 3);
        let (mut a, mut b) = (f.take(0).unwrap(), f.take(2).unwrap());
        a[0] = 7;
        b[0] = 8;
        assert_eq!((f.pages(), f.live()), (3, 2));
        let fd = f.dup().unwrap();
        lease.set(false);
        drop(a);
        lease.set(true);
        drop(b);
        assert_eq!(f.live(), 0);
        let mut back = [0u8; 1];
        rustix::io::pread(&fd, &mut back, 0).unwrap();
        assert_eq!(back, [7], "dropped without the lease: still there");
        rustix::io::pread(&fd, &mut back, 2 * PAGE_SIZE as u64).unwrap();
        assert_eq!(back, [0], "dropped with it: given back");
        let other = SharedFile::open(fd, 3, &Lease::new(false)).unwrap();
        assert_eq!(
            other.take(0).unwrap()[0],
            7,
            "the same memory, mapped again"
        );
    }
}
