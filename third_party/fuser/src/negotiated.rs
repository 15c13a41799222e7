//! What INIT established on a FUSE connection, as plain data.
//!
//! INIT happens once per connection, so a process that takes over a live
//! connection (`Session::resume`) cannot ask the kernel again: it gets these
//! values from the process that did the handshake, through `to_bytes` and
//! `from_bytes`.

use std::io;

use crate::InitFlags;
use crate::ll::Version;

/// Leads every encoding, so that bytes of some other kind are refused.
const MAGIC: [u8; 8] = *b"FUSERNEG";
/// The encoding `to_bytes` writes; `from_bytes` reads only this one.
const FORMAT: u32 = 1;
/// Magic, format, then the fields in declaration order, little-endian,
/// `io_uring_payload` as a u64 with 0 for none.
const ENCODED_LEN: usize = 8 + 4 + 4 * 2 + 8 * 2 + 4 * 2 + 2 * 3 + 4 * 3 + 8;

/// The state of an initialized FUSE connection that request loops and
/// replies depend on, and what the file system's `init` was told and
/// answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Negotiated {
    /// Protocol major version the kernel reported.
    pub major: u32,
    /// Protocol minor version the kernel reported.
    pub minor: u32,
    /// Capabilities the kernel offered in INIT (`InitFlags` bits).
    pub kernel_flags: u64,
    /// Capabilities in force: the ones the file system asked for that the
    /// kernel offered (`InitFlags` bits).
    pub flags: u64,
    /// `max_readahead` of the INIT reply.
    pub max_readahead: u32,
    /// `max_write` of the INIT reply.
    pub max_write: u32,
    /// `max_background` of the INIT reply.
    pub max_background: u16,
    /// `congestion_threshold` of the INIT reply.
    pub congestion_threshold: u16,
    /// `max_pages` of the INIT reply.
    pub max_pages: u16,
    /// `time_gran` of the INIT reply, in nanoseconds.
    pub time_gran_ns: u32,
    /// `max_stack_depth` of the INIT reply (0 unless passthrough is in force).
    pub max_stack_depth: u32,
    /// Effective uid of the process that did the handshake: the session's
    /// owner for `SessionACL::Owner` and `RootAndOwner` checks, which must not
    /// change when another process takes the connection over.
    pub owner_uid: u32,
    /// Payload buffer size of an io_uring ring entry when INIT negotiated
    /// `FUSE_OVER_IO_URING`; `None` when requests come through /dev/fuse only.
    pub io_uring_payload: Option<u64>,
}

impl Negotiated {
    /// The protocol version the kernel reported.
    pub fn version(&self) -> Version {
        Version(self.major, self.minor)
    }

    /// Capabilities in force.
    pub fn init_flags(&self) -> InitFlags {
        InitFlags::from_bits_retain(self.flags)
    }

    /// Whether the kernel announced `FUSE_NOTIFY_RESEND` (`FUSE_HAS_RESEND`
    /// in INIT, Linux 6.9+), which a successor needs to get back the
    /// requests its predecessor had read but not answered.
    pub fn has_resend(&self) -> bool {
        InitFlags::from_bits_retain(self.kernel_flags).contains(InitFlags::FUSE_HAS_RESEND)
    }

    /// Whether requests also come through FUSE-over-io_uring queues.
    pub fn io_uring(&self) -> bool {
        self.io_uring_payload.is_some()
    }

    /// A versioned, fixed-size encoding for shipping to another process.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(ENCODED_LEN);
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&FORMAT.to_le_bytes());
        b.extend_from_slice(&self.major.to_le_bytes());
        b.extend_from_slice(&self.minor.to_le_bytes());
        b.extend_from_slice(&self.kernel_flags.to_le_bytes());
        b.extend_from_slice(&self.flags.to_le_bytes());
        b.extend_from_slice(&self.max_readahead.to_le_bytes());
        b.extend_from_slice(&self.max_write.to_le_bytes());
        b.extend_from_slice(&self.max_background.to_le_bytes());
        b.extend_from_slice(&self.congestion_threshold.to_le_bytes());
        b.extend_from_slice(&self.max_pages.to_le_bytes());
        b.extend_from_slice(&self.time_gran_ns.to_le_bytes());
        b.extend_from_slice(&self.max_stack_depth.to_le_bytes());
        b.extend_from_slice(&self.owner_uid.to_le_bytes());
        b.extend_from_slice(&self.io_uring_payload.unwrap_or(0).to_le_bytes());
        debug_assert_eq!(b.len(), ENCODED_LEN);
        b
    }

    /// Reads what `to_bytes` wrote. Bytes of another kind, of another
    /// format version, or of the wrong length are refused (`InvalidData`),
    /// never read as something else.
    pub fn from_bytes(bytes: &[u8]) -> io::Result<Negotiated> {
        let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
        if bytes.len() < MAGIC.len() + 4 || bytes[..MAGIC.len()] != MAGIC {
            return Err(bad("not an encoded fuser::Negotiated".into()));
        }
        let mut r = Reader(&bytes[MAGIC.len()..]);
        let format = r.u32();
        if format != FORMAT {
            return Err(bad(format!(
                "fuser::Negotiated format {format} is unknown (this build reads {FORMAT})"
            )));
        }
        if bytes.len() != ENCODED_LEN {
            return Err(bad(format!(
                "fuser::Negotiated format {FORMAT} is {ENCODED_LEN} bytes, got {}",
                bytes.len()
            )));
        }
        let n = Negotiated {
            major: r.u32(),
            minor: r.u32(),
            kernel_flags: r.u64(),
            flags: r.u64(),
            max_readahead: r.u32(),
            max_write: r.u32(),
            max_background: r.u16(),
            congestion_threshold: r.u16(),
            max_pages: r.u16(),
            time_gran_ns: r.u32(),
            max_stack_depth: r.u32(),
            owner_uid: r.u32(),
            io_uring_payload: match r.u64() {
                0 => None,
                n => Some(n),
            },
        };
        Ok(n)
    }
}

/// Takes little-endian integers off the front of a slice whose length was
/// checked beforehand.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        out
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Negotiated {
        Negotiated {
            major: 7,
            minor: 41,
            kernel_flags: 0x8000_0000_1234_5678,
            flags: 0x0000_0010_0000_00ff,
            max_readahead: 131072,
            max_write: 1 << 20,
            max_background: 16,
            congestion_threshold: 12,
            max_pages: 256,
            time_gran_ns: 1,
            max_stack_depth: 1,
            owner_uid: 1000,
            io_uring_payload: Some(1 << 20),
        }
    }

    #[test]
    fn round_trips() {
        for n in [
            sample(),
            Negotiated {
                io_uring_payload: None,
                ..sample()
            },
        ] {
            assert_eq!(Negotiated::from_bytes(&n.to_bytes()).unwrap(), n);
        }
    }

    #[test]
    fn refuses_unknown_format_and_bad_lengths() {
        let mut b = sample().to_bytes();
        b[8..12].copy_from_slice(&2u32.to_le_bytes());
        let e = Negotiated::from_bytes(&b).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("format 2"), "{e}");

        let good = sample().to_bytes();
        for len in [0, 7, 12, good.len() - 1] {
            assert!(Negotiated::from_bytes(&good[..len]).is_err(), "len {len}");
        }
        let mut long = good.clone();
        long.push(0);
        assert!(Negotiated::from_bytes(&long).is_err());
        let mut other = good;
        other[0] = b'X';
        assert!(Negotiated::from_bytes(&other).is_err());
    }
}
