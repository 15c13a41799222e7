//! Last closes of removed files, after the reply.
//!
//! A local file system frees a removed file's blocks in its last `iput`,
//! which `unlink(2)` does *after* unlocking the directory: other
//! processes may list and look up in that directory while ext4 frees
//! (which can take most of a second for a large file). Through FUSE the
//! kernel holds the directory locked until the server answers the UNLINK,
//! so a server whose own `unlinkat` (or the close of its cached fd that
//! follows) frees the blocks keeps the directory locked for as long, and
//! an `ls` of it waits (figures in docs/results.md, "FUSE over io_uring").
//! Small files cost the same way where freeing waits for the device:
//! ext4 without a journal (or with `data=writeback`) mounted `discard`
//! discards each freed range and waits for it, tens of microseconds a
//! file, all of it inside the UNLINK that `rm -rf` waits for, where a
//! local `rm` also waits but once, not behind a round trip. So the
//! removal of any file that holds storage keeps an `O_PATH` fd of it
//! across the `unlinkat` (`PassthroughFs::hold_freed`), which makes that
//! call quick, and that fd's close, the last, happens here, on a thread
//! of its own, once the answer has gone: the next removal's round trip
//! and this free overlap.
//!
//! At most [`MAX_PENDING`] fds wait here at once, for all mounts of the
//! process (they are outside the fd budget): past that, a removal closes
//! in place.

use uvfs_vfs::DropLater;

/// Most fds waiting for their close at once.
pub(crate) const MAX_PENDING: u64 = 32;

/// The closing thread, weighed in fds.
pub(crate) static CLOSER: DropLater = DropLater::new("uvfs-closer", MAX_PENDING);
