//! Descriptors a server opens beside a file system's own, counted in the
//! file system's fd budget.

/// A share of a file system's fd budget, held while the server keeps
/// descriptors of its own open (see `FileSystem::reserve_fds`); given back
/// when dropped. What it holds is the file system's business.
#[derive(Default)]
pub struct FdReservation(Vec<Box<dyn Send>>);

impl FdReservation {
    /// A reservation made of the file system's own tokens (each gives its
    /// share back when dropped).
    pub fn of(parts: Vec<Box<dyn Send>>) -> FdReservation {
        FdReservation(parts)
    }

    /// How many tokens it holds (none for a file system with no budget).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
