//! A memfs's file data on its way to a successor (`handover.rs`): every
//! allocated page, one after another, in one sealed memfd.
//!
//! # Why a memfd
//! The data is most of the state (a gigabyte, next to megabytes of
//! metadata). In a memfd it crosses to the successor as one descriptor,
//! copied once in (here) and once out (`Reader`), never through the
//! encoder or a socket's buffer; page indices and offsets go in the
//! metadata.
//!
//! # Why sealed
//! The successor maps the file and reads it as plain memory. Sealed
//! against writes, shrinking and growing before it is handed over, the
//! file cannot change under that mapping (no torn page, no `SIGBUS`), so
//! a reader refuses a descriptor without those seals.

use crate::pages::PAGE_SIZE;
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};
use std::os::fd::{AsFd, OwnedFd};
use uvfs_vfs::{Errno, VfsResult};

/// Seals that make a memfd's contents fixed for good.
const FIXED: SealFlags = SealFlags::WRITE
    .union(SealFlags::SHRINK)
    .union(SealFlags::GROW);

/// One shared mapping of a whole file, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    /// Maps `len` (> 0) bytes of `fd`, writable or not, populated at once
    /// (one call instead of a fault per page).
    fn new(fd: impl AsFd, len: usize, writable: bool) -> VfsResult<Mapping> {
        let prot = if writable {
            ProtFlags::READ | ProtFlags::WRITE
        } else {
            ProtFlags::READ
        };
        // SAFETY: a new mapping at an address the kernel chooses aliases
        // nothing of ours; `Mapping` owns it until `drop` unmaps it.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                MapFlags::SHARED | MapFlags::POPULATE,
                fd,
                0,
            )
        }?;
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr+len` is the mapping `new` made, and every
        // slice lent from it borrowed `self`, so none outlives this.
        let _ = unsafe { rustix::mm::munmap(self.ptr.cast(), self.len) };
    }
}

/// A new page file being filled.
pub(crate) struct Writer {
    fd: OwnedFd,
    map: Mapping,
}

impl Writer {
    /// A page file of `pages` (> 0) pages, mapped for writing.
    pub fn new(pages: u64) -> VfsResult<Writer> {
        let len = pages
            .checked_mul(PAGE_SIZE as u64)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or(Errno::EFBIG)?;
        let fd = rustix::fs::memfd_create(
            "uvfs-memfs-pages",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )?;
        rustix::fs::ftruncate(&fd, len as u64)?;
        let map = Mapping::new(&fd, len, true)?;
        Ok(Writer { fd, map })
    }

    /// The whole file, to be filled.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is `len` writable bytes that only this
        // `Writer` reaches (the memfd is not shared yet), borrowed
        // mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.map.ptr, self.map.len) }
    }

    /// Unmaps and seals the file, and returns it.
    pub fn finish(self) -> VfsResult<OwnedFd> {
        let Writer { fd, map } = self;
        // The write seal is refused while a writable mapping exists.
        drop(map);
        rustix::fs::fcntl_add_seals(&fd, FIXED | SealFlags::SEAL)?;
        Ok(fd)
    }
}

/// A predecessor's page file, mapped for reading.
pub(crate) struct Reader {
    map: Mapping,
}

impl Reader {
    /// Maps the first `pages` (> 0) pages of `fd`. `EPROTO` unless `fd`
    /// is a memfd sealed against change and holds that many.
    pub fn open(fd: &OwnedFd, pages: u64) -> VfsResult<Reader> {
        let seals = rustix::fs::fcntl_get_seals(fd).map_err(|_| Errno::EPROTO)?;
        if !seals.contains(FIXED) {
            return Err(Errno::EPROTO);
        }
        let len = pages
            .checked_mul(PAGE_SIZE as u64)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or(Errno::EPROTO)?;
        let size = rustix::fs::fstat(fd)?.st_size;
        if u64::try_from(size).map_or(true, |s| s < len as u64) {
            return Err(Errno::EPROTO);
        }
        Ok(Reader {
            map: Mapping::new(fd, len, false)?,
        })
    }

    /// The pages, one after another.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes of a file sealed
        // against writes and shrinking, so they stay mapped and unchanged
        // while `self` (which this borrow holds) lives.
        unsafe { std::slice::from_raw_parts(self.map.ptr, self.map.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_is_read_back_and_fixed() {
        let mut w = Writer::new(2).unwrap();
        w.bytes_mut()[PAGE_SIZE..PAGE_SIZE + 3].copy_from_slice(b"abc");
        let fd = w.finish().unwrap();
        let r = Reader::open(&fd, 2).unwrap();
        assert_eq!(&r.bytes()[PAGE_SIZE..PAGE_SIZE + 4], b"abc\0");
        assert!(rustix::fs::ftruncate(&fd, 0).is_err(), "sealed");
        assert_eq!(Reader::open(&fd, 3).err(), Some(Errno::EPROTO));
    }

    #[test]
    fn an_unsealed_file_is_refused() {
        let fd = rustix::fs::memfd_create("t", MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, PAGE_SIZE as u64).unwrap();
        assert_eq!(Reader::open(&fd, 1).err(), Some(Errno::EPROTO));
    }
}
