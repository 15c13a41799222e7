//! `copy_file_range` served in memory.
//!
//! Why: without it the kernel copies through its page cache, a READ and a
//! WRITE round trip per chunk, and the copy's pages sit in the kernel's
//! cache as well as here. Here it is a copy from page to page, faster than
//! the kernel's (`scripts/cp-memfs.sh`; figures in docs/design/memfs.md).
//! The kernel drops the destination's set-uid and set-gid bits first, as
//! for a write.
//!
//! # Locks
//! The source range shared, the destination range exclusive: the copy is
//! atomic with respect to every read and write of either range, as a read
//! followed by a write under one lock would be. Two copies in opposite
//! directions between the same two files would each hold one lock and
//! wait for the other's, so the two locks are taken in inode-number
//! order. A copy within one file takes a single exclusive lock over both
//! ranges: the range lock serves conflicting requests first come, first
//! served, so holding one range of a file while asking for another could
//! wait behind a writer queued for both, which waits for us.
//!
//! # Holes
//! A hole in the source is copied as the zeros it reads as, so the
//! destination's pages there are allocated: what tmpfs does (the kernel
//! copies it through its page cache), and what `scripts/difftest.py
//! --blocks` holds memfs to. Sparse-aware callers (`cp`) copy only the
//! data they find with `SEEK_DATA`/`SEEK_HOLE`.
//!
//! # Size of one request
//! At most `MAX_COPY` bytes per request; callers loop on short counts
//! (`cp` does, and the kernel asks for at most 4 GiB anyway). A request
//! holds its io_uring queue while it copies, so a bound on its length is a
//! bound on how long the other requests of that CPU wait.

use crate::fs::MemFs;
use crate::inode::Inode;
use crate::io_lock;
use crate::pages::{FileData, MAX_FILE_SIZE};
use uvfs_vfs::{Errno, Timespec, VType, VfsResult, VnodeRef};

/// Most bytes one request copies (a few milliseconds of copying).
pub(crate) const MAX_COPY: u64 = 8 << 20;

/// Bytes copied through the buffer at a time.
const CHUNK: u64 = 1 << 20;

impl MemFs {
    /// Copies up to `len` bytes from `vin` at `off_in` to `vout` at
    /// `off_out`; returns the bytes copied (0 at or past the source's
    /// end, fewer than asked at its end, past `MAX_COPY` or when the size
    /// limit is reached part way).
    pub(crate) fn do_copy_file_range(
        &self,
        vin: &VnodeRef,
        off_in: u64,
        vout: &VnodeRef,
        off_out: u64,
        len: u64,
        flags: u32,
    ) -> VfsResult<u64> {
        if flags != 0 {
            return Err(Errno::EINVAL);
        }
        let (iin, fin) = self.regular(vin)?;
        let (iout, fout) = self.regular(vout)?;
        iout.check_write(off_out, fout.size())?;
        if off_in > MAX_FILE_SIZE || off_out > MAX_FILE_SIZE {
            return Err(Errno::EINVAL);
        }
        if off_out == MAX_FILE_SIZE && len > 0 {
            return Err(Errno::EFBIG);
        }
        let len = len.min(MAX_COPY).min(MAX_FILE_SIZE - off_out);
        if len == 0 {
            return Ok(0);
        }
        let (end_in, end_out) = (off_in.saturating_add(len), off_out + len);
        let n = if std::ptr::eq(iin, iout) {
            let _g = io_lock::lock_write(vin, off_in.min(off_out)..end_in.max(end_out));
            let n = copy_len(fin, off_in, len);
            // The kernel refuses overlapping copies within a file before
            // asking; a client that did not gets what it would.
            if n > 0 && off_out < off_in + n && off_in < off_out + n {
                return Err(Errno::EINVAL);
            }
            copy(fin, off_in, fout, off_out, n)?
        } else if vin.ino() < vout.ino() {
            let _r = io_lock::lock_read(vin, off_in..end_in);
            let _w = io_lock::lock_write(vout, off_out..end_out);
            copy(fin, off_in, fout, off_out, copy_len(fin, off_in, len))?
        } else {
            let _w = io_lock::lock_write(vout, off_out..end_out);
            let _r = io_lock::lock_read(vin, off_in..end_in);
            copy(fin, off_in, fout, off_out, copy_len(fin, off_in, len))?
        };
        if n > 0 {
            let now = Timespec::now();
            self.accessed(iin, now);
            iout.meta.lock().touch_modified(now);
        }
        Ok(n)
    }

    /// A regular file's inode and data; `EISDIR` for a directory,
    /// `EINVAL` for anything else (as `copy_file_range(2)`).
    fn regular<'a>(&self, vp: &'a VnodeRef) -> VfsResult<(&'a Inode, &'a FileData)> {
        let inode = self.inode_of(vp)?;
        match inode.kind {
            VType::Reg => Ok((inode, inode.file().ok_or(Errno::EIO)?)),
            VType::Dir => Err(Errno::EISDIR),
            _ => Err(Errno::EINVAL),
        }
    }
}

/// How much of `len` bytes at `off` the source has (under its lock).
fn copy_len(f: &FileData, off: u64, len: u64) -> u64 {
    f.size().saturating_sub(off).min(len)
}

/// Copies `n` bytes (all inside the source); returns the bytes copied.
/// The caller holds both ranges.
fn copy(fin: &FileData, off_in: u64, fout: &FileData, off_out: u64, n: u64) -> VfsResult<u64> {
    let mut buf = vec![0u8; n.min(CHUNK) as usize];
    let mut done = 0;
    while done < n {
        let want = (n - done).min(CHUNK) as usize;
        let got = fin.read_into(off_in + done, &mut buf[..want]);
        let wrote = match fout.write(off_out + done, &buf[..got]) {
            Ok(w) => w as u64,
            // Out of space (or past the largest size) after copying some:
            // report what was copied, as a short write does.
            Err(_) if done > 0 => break,
            Err(e) => return Err(e),
        };
        done += wrote;
        if wrote < want as u64 {
            break;
        }
    }
    Ok(done)
}
