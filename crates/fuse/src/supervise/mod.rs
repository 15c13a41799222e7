//! Crash recovery: a small supervisor process per mount holds a
//! duplicate of the FUSE connection and the server's crash journal
//! (`journal/`), and when the server dies for any reason (a bug, the OOM
//! killer, `kill -9`) starts a new one that goes on serving the same
//! connection: programs using the mount see their requests answered late,
//! not failed, and their open files, working directories and node ids
//! stay valid.
//!
//! # How
//! 1. A server that can be recovered (one whose file system records its
//!    nodes, `FileSystem::journal_record`) starts `BINARY __supervise FD`
//!    once its session is up, or links to the supervisor a predecessor
//!    handed it (a live upgrade keeps the supervisor). It sends its base
//!    state (`hello`: a live upgrade's state with no nodes or handles and
//!    the file system's state at mount) with a descriptor of the
//!    connection, then each journal table it writes, and the clones of
//!    the connection its request loops read (their unanswered requests
//!    would be aborted when the last descriptor of a clone closes).
//! 2. The supervisor waits. A "bye" (the server leaves on purpose) ends
//!    it; so does the connection going away (unmounted). The link
//!    closing without either is a crash.
//! 3. It then starts `BINARY __takeover FD` and plays the predecessor of
//!    a live upgrade (`upgrade/`), with the base state, the journal
//!    (`ServerState::journal`) and a new link: the successor rebuilds the
//!    file system from its state at mount plus the journal's nodes and
//!    opens (reopened by handle), adopts the counts and handles, and sends
//!    `FUSE_NOTIFY_RESEND`, so requests the dead server had read come
//!    again (Linux 6.9+; on older kernels they fail with `ECONNABORTED` or
//!    wait forever, which is why the clones are held).
//! 4. A successor that fails is retried with backoff; after the last try
//!    the supervisor logs why and exits, which ends the connection: the
//!    mount then answers `ENOTCONN` until unmounted.
//!
//! # Pieces
//! - `link.rs`: the server's side.
//! - `supervisor.rs`: the supervisor process.

mod link;
mod supervisor;

pub use link::Link;
pub use supervisor::run;

/// The argument that starts a binary as a supervisor: `BINARY __supervise FD`.
pub const SUPERVISE_ARG: &str = "__supervise";

/// The first byte of each frame from a server to its supervisor.
pub(crate) mod frame {
    /// The server's base state (then: pid, binary, state).
    pub const HELLO: u8 = b'H';
    /// A journal table (its memfd).
    pub const TABLE: u8 = b'T';
    /// Clones of the connection the request loops read.
    pub const CLONES: u8 = b'C';
    /// The server leaves on purpose.
    pub const BYE: u8 = b'B';
    /// Keep a descriptor (then: key, what it is; the descriptor).
    pub const KEEP: u8 = b'K';
    /// Close a kept descriptor (then: key), answered with [`ACK`].
    pub const FORGET: u8 = b'F';
    /// The server kept all it holds: what a predecessor kept is done with.
    pub const KEPT_ALL: u8 = b'E';
    /// The supervisor closed what a [`FORGET`] named.
    pub const ACK: u8 = b'A';
}

/// The hello frame: what the supervisor needs to start a successor.
pub(crate) fn hello(pid: u32, exe: &std::path::Path, state: &[u8]) -> Vec<u8> {
    let head = serde_json::json!({ "pid": pid, "exe": exe }).to_string();
    let mut out = Vec::with_capacity(5 + head.len() + state.len());
    out.push(frame::HELLO);
    out.extend_from_slice(&(head.len() as u32).to_le_bytes());
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(state);
    out
}
