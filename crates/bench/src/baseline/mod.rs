//! **Benchmark baselines**, not for production use: the locks `uvfs bench
//! readseek` compares [`RangeLock`] against, all behind
//! one trait.
//!
//! * [`NoLock`] (`none`): no locking at all; correct only for pure readers.
//! * [`WholeFile`] (`rwlock`): one reader/writer lock for the whole file.
//! * [`MutexList`] (`mutex-list`): one mutex over a list of requests,
//!   rescanned on every lock and unlock, as FreeBSD's rangelock before 2023.
//! * [`RangeLock`] (`uvfs`).

mod mutex_list;

pub use mutex_list::MutexList;

use uvfs_rangelock::{ByteRange, RangeLock};

/// What a benchmark needs from a file's range lock.
pub trait BenchLock: Send + Sync + 'static {
    /// The name in benchmark tables.
    const NAME: &'static str;
    /// False for a lock that does not exclude writers from readers (then a
    /// benchmark must not run writers with it).
    const EXCLUSIVE: bool = true;
    type Read<'a>
    where
        Self: 'a;
    type Write<'a>
    where
        Self: 'a;
    fn new() -> Self;
    fn read(&self, r: ByteRange) -> Self::Read<'_>;
    fn write(&self, r: ByteRange) -> Self::Write<'_>;
}

/// `none`: takes nothing.
#[derive(Default)]
pub struct NoLock;

impl BenchLock for NoLock {
    const NAME: &'static str = "none";
    const EXCLUSIVE: bool = false;
    type Read<'a> = ();
    type Write<'a> = ();
    fn new() -> Self {
        NoLock
    }
    #[inline]
    fn read(&self, _: ByteRange) {}
    #[inline]
    fn write(&self, _: ByteRange) {}
}

/// `rwlock`: one whole-file reader/writer lock (`parking_lot::RwLock`).
#[derive(Default)]
pub struct WholeFile(parking_lot::RwLock<()>);

impl BenchLock for WholeFile {
    const NAME: &'static str = "rwlock";
    type Read<'a> = parking_lot::RwLockReadGuard<'a, ()>;
    type Write<'a> = parking_lot::RwLockWriteGuard<'a, ()>;
    fn new() -> Self {
        Self::default()
    }
    #[inline]
    fn read(&self, _: ByteRange) -> Self::Read<'_> {
        self.0.read()
    }
    #[inline]
    fn write(&self, _: ByteRange) -> Self::Write<'_> {
        self.0.write()
    }
}

impl BenchLock for RangeLock {
    const NAME: &'static str = "uvfs";
    type Read<'a> = uvfs_rangelock::ReadGuard<'a>;
    type Write<'a> = uvfs_rangelock::WriteGuard<'a>;
    fn new() -> Self {
        RangeLock::new()
    }
    #[inline]
    fn read(&self, r: ByteRange) -> Self::Read<'_> {
        RangeLock::read(self, r)
    }
    #[inline]
    fn write(&self, r: ByteRange) -> Self::Write<'_> {
        RangeLock::write(self, r)
    }
}
