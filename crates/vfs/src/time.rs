//! Timestamps with nanoseconds, including times before 1970.
//!
//! `utimensat(2)` accepts any `timespec`, negative seconds included, and
//! POSIX test suites set such times and read them back; `SystemTime` can
//! hold them too, but a plain (seconds, nanoseconds) pair is what every
//! file system stores and compares.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Seconds and nanoseconds since the Unix epoch; `nsec < 1_000_000_000`.
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq, Ord, PartialOrd, Hash)]
pub struct Timespec {
    /// Whole seconds, negative before 1970.
    pub sec: i64,
    /// Nanoseconds within the second.
    pub nsec: u32,
}

impl Timespec {
    /// The wall-clock time now.
    pub fn now() -> Timespec {
        Timespec::from(SystemTime::now())
    }

    /// A time from its parts; nanoseconds beyond a second carry into seconds.
    pub fn new(sec: i64, nsec: u32) -> Timespec {
        Timespec {
            sec: sec.saturating_add(i64::from(nsec / 1_000_000_000)),
            nsec: nsec % 1_000_000_000,
        }
    }

    /// The same instant as a `SystemTime` (saturating at the far ends).
    pub fn to_system_time(self) -> SystemTime {
        if self.sec >= 0 {
            UNIX_EPOCH + Duration::new(self.sec as u64, self.nsec)
        } else {
            // -1.5 s is sec = -2, nsec = 5e8: epoch - 2 s + 0.5 s.
            let back = Duration::from_secs(self.sec.unsigned_abs());
            UNIX_EPOCH
                .checked_sub(back)
                .and_then(|t| t.checked_add(Duration::from_nanos(u64::from(self.nsec))))
                .unwrap_or(UNIX_EPOCH)
        }
    }
}

impl From<SystemTime> for Timespec {
    fn from(t: SystemTime) -> Timespec {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Timespec {
                sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                nsec: d.subsec_nanos(),
            },
            Err(e) => {
                let d = e.duration();
                let mut sec = -i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
                let mut nsec = d.subsec_nanos();
                if nsec > 0 {
                    sec -= 1;
                    nsec = 1_000_000_000 - nsec;
                }
                Timespec { sec, nsec }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_before_and_after_epoch() {
        for t in [
            Timespec::new(0, 0),
            Timespec::new(1_700_000_000, 123_456_789),
            Timespec::new(-2, 500_000_000),
            Timespec::new(-1_000_000, 1),
        ] {
            assert_eq!(Timespec::from(t.to_system_time()), t);
        }
    }

    #[test]
    fn nanos_carry() {
        assert_eq!(
            Timespec::new(1, 1_500_000_000),
            Timespec {
                sec: 2,
                nsec: 500_000_000
            }
        );
    }
}
