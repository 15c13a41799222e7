//! The server's state as a successor receives it: everything the request
//! loops need to go on serving the same kernel connection, plus the file
//! system's own state ([`uvfs_vfs::Saved`]) and the embedding program's
//! options, opaque here.
//!
//! # Versions
//! A state starts with [`MAGIC`] and [`VERSION`]; a successor reads its
//! own version and the previous one ([`READS`], `previous.rs`) and
//! refuses any other (`EPROTO`) before reading the rest, so a state
//! written by another build of uvfs is rejected whole, never misread.
//! Change `VERSION` with any change to [`ServerState`], and move the
//! layout it replaces to `previous.rs`.
//!
//! # Layout
//! `MAGIC`, `VERSION` (u32), the header's length (u64), the header
//! ([`ServerState`] but its two large fields, bincode), the node count
//! (u64), the nodes ([`NODE`] bytes each: id, inode, count as u64,
//! little-endian, sorted by id), the file system's bytes' length (u64)
//! and those bytes, which end the state.
//! The two large parts are copied as they are: a million nodes and the
//! file system's records of them are tens of megabytes, which bincode
//! would write and read one element, or one byte, at a time while every
//! request waits.

use super::previous;
use serde::{Deserialize, Serialize};

/// What every state starts with.
const MAGIC: &[u8; 14] = b"uvfs-handover\0";
/// The layout of [`ServerState`] this build writes and reads.
pub(crate) const VERSION: u32 = 6;
/// Bytes per node in the encoding.
const NODE: usize = 24;
/// Every version this build reads: its own and the previous one
/// (`previous.rs`), so that the build before can hand a mount to it.
pub(crate) const READS: [u32; 2] = [previous::VERSION, VERSION];

/// The environment variable through which a predecessor (or a
/// supervisor) tells the binary it starts which version it writes. A
/// predecessor that says nothing is of a build from before it was set,
/// which checks that the successor's hello names exactly its version: the
/// previous one, if this build is to be its successor at all.
pub(crate) const VERSION_ENV: &str = "UVFS_STATE_VERSION";

/// The version a successor's hello names: the one its predecessor writes
/// (`told`, from [`VERSION_ENV`]) if this build reads it, the previous
/// version if the predecessor said nothing (see [`VERSION_ENV`]), else
/// its own (which the predecessor then refuses, saying both).
pub(crate) fn hello_version(told: Option<&str>) -> u32 {
    match told.map(|t| t.trim().parse::<u32>()) {
        Some(Ok(v)) if READS.contains(&v) => v,
        Some(_) => VERSION,
        None => previous::VERSION,
    }
}

/// Whether a successor's hello (`state_version`, and `state_versions`
/// from builds that send it) says it reads what this build writes.
pub(crate) fn reads_ours(hello: &serde_json::Value) -> bool {
    let ours = u64::from(VERSION);
    hello.get("state_version").and_then(|v| v.as_u64()) == Some(ours)
        || hello
            .get("state_versions")
            .and_then(|v| v.as_array())
            .is_some_and(|a| a.iter().any(|v| v.as_u64() == Some(ours)))
}

/// One node the kernel holds.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct NodeState {
    /// Its node id.
    pub id: u64,
    /// Its inode number in the file system.
    pub ino: u64,
    /// The kernel's lookup count.
    pub count: u64,
}

/// One open file or directory.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct HandleState {
    /// The handle the kernel knows.
    pub fh: u64,
    /// Inode number of the file.
    pub ino: u64,
    /// The file system's handle.
    pub fs_fh: u64,
    /// Open for writing.
    pub writable: bool,
    /// Counted in the node's I/O mode (`backing.rs`).
    pub backing_node: Option<u64>,
    /// Written by the kernel on its backing file.
    pub kernel_writer: bool,
    /// The flags it was opened with.
    pub flags: i32,
    /// Its node's backing id, if the kernel does its I/O.
    pub backing_id: Option<u32>,
}

/// The mount, for unmounting it on a signal.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct MountState {
    /// Where it is mounted.
    pub mountpoint: std::path::PathBuf,
    /// Its device, if known.
    pub device: Option<u64>,
    /// Mounted through fusermount3.
    pub helper: bool,
}

/// Everything a successor needs besides descriptors.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct ServerState {
    /// fuser's negotiated connection state (`fuser::Negotiated`).
    pub negotiated: Vec<u8>,
    /// The kernel opens directories alone (FUSE_NO_OPENDIR_SUPPORT).
    pub no_opendir: bool,
    /// Kernel I/O on backing files was agreed at INIT.
    pub backings_on: bool,
    /// Nodes the kernel holds, sorted by id (written after the header).
    #[serde(skip)]
    pub nodes: Vec<NodeState>,
    /// Open files and directories.
    pub handles: Vec<HandleState>,
    /// The next handle number.
    pub next_handle: u64,
    /// Open nodes' I/O modes: node id, backing id if the kernel does the
    /// node's I/O, opens.
    pub backings: Vec<(u64, Option<u32>, u64)>,
    /// Nodes the kernel may be writing on their backing files: node id,
    /// backing files opened for writing whose close was not yet told
    /// (`backing::Writers`; the open files count their opens).
    pub written: Vec<(u64, u64)>,
    /// The mount.
    pub mount: MountState,
    /// Servers before this one on the mount (0 for the first).
    pub generation: u64,
    /// Of those hand-overs, how many were restarts (all, for now).
    pub restarts: u64,
    /// When the predecessor stopped taking requests (CLOCK_MONOTONIC, ns:
    /// one clock for every process of the machine).
    pub parked_at_ns: u64,
    /// Request counters by name, to go on counting.
    pub counters: Vec<(String, u64)>,
    /// The file system's state format (`Saved::format`) and bytes; its
    /// descriptors follow the connection's in the frame.
    pub fs_format: String,
    /// (Written last, after the nodes.)
    #[serde(skip)]
    pub fs_bytes: bytes::Bytes,
    /// Descriptors of the file system's state.
    pub fs_fds: u32,
    /// The embedding program's own state (the CLI's mount options).
    pub app: Vec<u8>,
    /// A server that died left this state (`supervise/`): `nodes` and
    /// `handles` are empty and its crash journal follows the file
    /// system's descriptors, the file system's state being what it saved
    /// at mount (`journal/`).
    pub journal: bool,
    /// A live upgrade of a supervised server: its crash journal's table
    /// follows the file system's descriptors, for the successor to go on
    /// writing (it holds what the kernel knows, which the hand-over does
    /// not change) instead of journaling every node anew while requests
    /// wait.
    pub journal_live: bool,
    /// The mount's supervisor link follows (last): the successor is
    /// supervised by the same process.
    pub link: bool,
    /// FUSE-over-io_uring entries holding requests (`fuser::RingEntry`):
    /// queue, address, whether the reply is written; their memfds follow
    /// the connection's descriptor, before the file system's.
    pub ring: Vec<(u16, u64, bool)>,
    /// With `journal`: the descriptors the crashed server's file system
    /// had the supervisor keep (`FdKeeper`): key and what it said of each;
    /// the descriptors follow the file system's.
    pub kept: Vec<(u64, Vec<u8>)>,
}

fn eproto(why: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl ServerState {
    /// The state as bytes.
    pub fn encode(&self) -> std::io::Result<Vec<u8>> {
        let mut out = self.encode_head()?;
        out.extend_from_slice(&self.fs_bytes);
        Ok(out)
    }

    /// The state as bytes but the file system's, which follow these
    /// (sent apart, [`wire::send_parts`](super::wire::send_parts), to
    /// spare copying tens of megabytes while requests wait).
    pub fn encode_head(&self) -> std::io::Result<Vec<u8>> {
        let header = bincode::serialize(self).map_err(|e| eproto(e.to_string()))?;
        let mut out = Vec::with_capacity(MAGIC.len() + 28 + header.len() + self.nodes.len() * NODE);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(header.len() as u64).to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&(self.nodes.len() as u64).to_le_bytes());
        for n in &self.nodes {
            out.extend_from_slice(&n.id.to_le_bytes());
            out.extend_from_slice(&n.ino.to_le_bytes());
            out.extend_from_slice(&n.count.to_le_bytes());
        }
        out.extend_from_slice(&(self.fs_bytes.len() as u64).to_le_bytes());
        Ok(out)
    }

    /// Reads a state written by [`encode`](Self::encode) of this very
    /// version; anything else is refused. The file system's bytes are
    /// `b`'s own (a slice of it, not a copy: tens of megabytes that
    /// requests would wait for).
    pub fn decode(b: &bytes::Bytes) -> std::io::Result<ServerState> {
        let head = MAGIC.len() + 4;
        if b.len() < head || &b[..MAGIC.len()] != MAGIC {
            return Err(eproto("not a uvfs server state".into()));
        }
        let v = u32::from_le_bytes(b[MAGIC.len()..head].try_into().expect("4 bytes"));
        if v == previous::VERSION {
            return previous::decode(&b[head..])
                .map(ServerState::from)
                .map_err(|e| eproto(format!("corrupt server state (version {v}): {e}")));
        }
        if v != VERSION {
            return Err(eproto(format!(
                "server state version {v}, this build reads versions {:?} only",
                READS
            )));
        }
        let short = || eproto("corrupt server state: truncated".into());
        let len = b
            .get(head..head + 8)
            .map(|_| u64_at(b, head))
            .ok_or_else(short)?;
        let at = usize::try_from(len)
            .ok()
            .and_then(|l| (head + 8).checked_add(l))
            .filter(|&e| e + 8 <= b.len())
            .ok_or_else(short)?;
        let mut s: ServerState = bincode::deserialize(&b[head + 8..at])
            .map_err(|e| eproto(format!("corrupt server state: {e}")))?;
        let count = usize::try_from(u64_at(b, at)).map_err(|_| short())?;
        let nodes = count
            .checked_mul(NODE)
            .and_then(|n| n.checked_add(at + 8))
            .filter(|&e| e + 8 <= b.len())
            .ok_or_else(short)?;
        if u64_at(b, nodes) != (b.len() - nodes - 8) as u64 {
            return Err(short());
        }
        s.nodes = b[at + 8..nodes]
            .chunks_exact(NODE)
            .map(|r| NodeState {
                id: u64_at(r, 0),
                ino: u64_at(r, 8),
                count: u64_at(r, 16),
            })
            .collect();
        s.fs_bytes = b.slice(nodes + 8..);
        Ok(s)
    }
}

impl From<previous::V4> for ServerState {
    fn from(s: previous::V4) -> ServerState {
        let mut nodes: Vec<NodeState> = s
            .nodes
            .into_iter()
            .map(|n| NodeState {
                id: n.id,
                ino: n.ino,
                count: n.count,
            })
            .collect();
        // Sorted by id as this version sends them (version 4's are in its
        // table's order).
        nodes.sort_unstable_by_key(|n| n.id);
        ServerState {
            negotiated: s.negotiated,
            no_opendir: s.no_opendir,
            backings_on: s.backings_on,
            nodes,
            handles: s
                .handles
                .into_iter()
                .map(|h| HandleState {
                    fh: h.fh,
                    ino: h.ino,
                    fs_fh: h.fs_fh,
                    writable: h.writable,
                    backing_node: h.backing_node,
                    kernel_writer: h.kernel_writer,
                    flags: h.flags,
                    backing_id: h.backing_id,
                })
                .collect(),
            next_handle: s.next_handle,
            backings: s.backings,
            // Version 4 has no backing files waited for past their close.
            written: Vec::new(),
            mount: MountState {
                mountpoint: s.mount.mountpoint,
                device: s.mount.device,
                helper: s.mount.helper,
            },
            generation: s.generation,
            restarts: s.restarts,
            parked_at_ns: s.parked_at_ns,
            counters: s.counters,
            fs_format: s.fs_format,
            fs_bytes: s.fs_bytes.into(),
            fs_fds: s.fs_fds,
            app: s.app,
            journal: s.journal,
            journal_live: s.journal_live,
            link: s.link,
            ring: s.ring,
            kept: s.kept,
        }
    }
}

/// CLOCK_MONOTONIC now, in nanoseconds.
pub(crate) fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ServerState {
        ServerState {
            negotiated: vec![1, 2, 3],
            no_opendir: true,
            backings_on: false,
            nodes: vec![
                NodeState {
                    id: 1,
                    ino: 2,
                    count: 3,
                },
                NodeState {
                    id: 5,
                    ino: 5,
                    count: 1,
                },
            ],
            handles: vec![HandleState {
                fh: 7,
                ino: 2,
                fs_fh: 9,
                writable: true,
                backing_node: None,
                kernel_writer: false,
                flags: 2,
                backing_id: None,
            }],
            next_handle: 8,
            backings: vec![],
            written: vec![(4, 1)],
            mount: MountState {
                mountpoint: "/mnt".into(),
                device: Some(42),
                helper: false,
            },
            generation: 1,
            restarts: 1,
            parked_at_ns: 5,
            counters: vec![("requests".into(), 10)],
            fs_format: "uvfs-memfs/1".into(),
            fs_bytes: vec![0; 100].into(),
            fs_fds: 0,
            app: b"{}".to_vec(),
            journal: false,
            journal_live: false,
            link: false,
            ring: vec![(1, 0x7f00_0000_0000, true)],
            kept: vec![],
        }
    }

    #[test]
    fn a_state_reads_back_as_written() {
        let s = sample();
        assert_eq!(ServerState::decode(&s.encode().unwrap().into()).unwrap(), s);
    }

    /// `s` as the build of version 4 sent it: magic, version, bincode.
    fn encode_v4(s: &ServerState) -> Vec<u8> {
        let v4 = previous::V4 {
            negotiated: s.negotiated.clone(),
            no_opendir: s.no_opendir,
            backings_on: s.backings_on,
            nodes: s
                .nodes
                .iter()
                .map(|n| previous::Node {
                    id: n.id,
                    ino: n.ino,
                    count: n.count,
                })
                .collect(),
            handles: s
                .handles
                .iter()
                .map(|h| previous::Handle {
                    fh: h.fh,
                    ino: h.ino,
                    fs_fh: h.fs_fh,
                    writable: h.writable,
                    backing_node: h.backing_node,
                    kernel_writer: h.kernel_writer,
                    flags: h.flags,
                    backing_id: h.backing_id,
                })
                .collect(),
            next_handle: s.next_handle,
            backings: s.backings.clone(),
            mount: previous::MountAt {
                mountpoint: s.mount.mountpoint.clone(),
                device: s.mount.device,
                helper: s.mount.helper,
            },
            generation: s.generation,
            restarts: s.restarts,
            parked_at_ns: s.parked_at_ns,
            counters: s.counters.clone(),
            fs_format: s.fs_format.clone(),
            fs_bytes: s.fs_bytes.to_vec(),
            fs_fds: s.fs_fds,
            app: s.app.clone(),
            journal: s.journal,
            journal_live: s.journal_live,
            link: s.link,
            ring: s.ring.clone(),
            kept: s.kept.clone(),
        };
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&previous::VERSION.to_le_bytes());
        b.extend_from_slice(&bincode::serialize(&v4).unwrap());
        b
    }

    #[test]
    fn a_state_of_the_previous_version_reads_as_this_one() {
        let mut s = sample();
        s.nodes.reverse();
        let old = encode_v4(&s);
        let got = ServerState::decode(&old.clone().into()).unwrap();
        s.nodes.reverse();
        // What version 4 had not: no backing file of a closed file is
        // left waited for.
        s.written.clear();
        assert_eq!(got, s);
        assert!(ServerState::decode(&old[..old.len() - 3].to_vec().into()).is_err());
    }

    #[test]
    fn a_hello_names_the_version_its_predecessor_writes_if_read() {
        assert_eq!(hello_version(Some("6")), VERSION);
        assert_eq!(hello_version(Some("4")), 4);
        assert_eq!(hello_version(None), previous::VERSION);
        assert_eq!(hello_version(Some("3")), VERSION);
        assert_eq!(hello_version(Some("junk")), VERSION);
        let ok = serde_json::json!({ "state_version": 4, "state_versions": READS });
        assert!(reads_ours(&ok));
        assert!(reads_ours(&serde_json::json!({ "state_version": VERSION })));
        assert!(!reads_ours(&serde_json::json!({ "state_version": 4 })));
        assert!(!reads_ours(&serde_json::json!({ "pid": 1 })));
    }

    #[test]
    fn another_version_or_a_damaged_state_is_refused_not_misread() {
        let good = sample().encode().unwrap();
        let mut other = good.clone();
        other[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&(VERSION + 1).to_le_bytes());
        let e = ServerState::decode(&other.clone().into()).unwrap_err();
        assert!(e.to_string().contains("version"), "{e}");
        assert!(
            ServerState::decode(&bytes::Bytes::from_static(b"something else entirely")).is_err()
        );
        assert!(ServerState::decode(&good[..good.len() - 10].to_vec().into()).is_err());
        assert!(ServerState::decode(&good[..MAGIC.len()].to_vec().into()).is_err());
    }
}
