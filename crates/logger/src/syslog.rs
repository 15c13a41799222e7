//! The system log: one datagram per message to `/dev/log`, where
//! systemd-journald or a syslog daemon listens, in the local form of RFC
//! 3164 that glibc's `syslog(3)` sends (`<PRI>TAG[PID]: MSG`; the
//! receiver stamps the time).

use std::os::unix::net::UnixDatagram;
use std::path::Path;

/// Where local syslog listens.
pub const DEV_LOG: &str = "/dev/log";

/// Whether something listens on `/dev/log` (a socket is there).
pub fn listening() -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(DEV_LOG).is_ok_and(|m| m.file_type().is_socket())
}

/// The `daemon` facility.
const LOG_DAEMON: u8 = 3 << 3;

/// A connection to the system log; sends that fail are dropped (a
/// restarted journal is reconnected on the next message).
pub struct Syslog {
    path: &'static Path,
    sock: Option<UnixDatagram>,
}

/// syslog's severity of a `log` level.
fn severity(level: log::Level) -> u8 {
    match level {
        log::Level::Error => 3,
        log::Level::Warn => 4,
        log::Level::Info => 6,
        log::Level::Debug | log::Level::Trace => 7,
    }
}

/// The datagram for `msg`.
pub fn format(level: log::Level, pid: u32, msg: &str) -> String {
    format!("<{}>uvfs[{pid}]: {msg}", LOG_DAEMON | severity(level))
}

impl Syslog {
    /// Connects to `/dev/log` (or not yet: it is tried again per message).
    pub fn new() -> Syslog {
        let path = Path::new(DEV_LOG);
        Syslog {
            path,
            sock: connect(path),
        }
    }

    /// Sends one message.
    pub fn send(&mut self, level: log::Level, msg: &str) {
        let line = format(level, std::process::id(), msg);
        if let Some(s) = &self.sock {
            if s.send(line.as_bytes()).is_ok() {
                return;
            }
        }
        self.sock = connect(self.path);
        if let Some(s) = &self.sock {
            let _ = s.send(line.as_bytes());
        }
    }
}

fn connect(path: &Path) -> Option<UnixDatagram> {
    let s = UnixDatagram::unbound().ok()?;
    s.connect(path).ok()?;
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_facility_severity_tag_and_pid() {
        assert_eq!(
            format(log::Level::Warn, 42, "open on node 7: EACCES"),
            "<28>uvfs[42]: open on node 7: EACCES"
        );
        assert_eq!(format(log::Level::Info, 1, "x"), "<30>uvfs[1]: x");
        assert_eq!(format(log::Level::Error, 1, "x"), "<27>uvfs[1]: x");
    }

    #[test]
    fn a_listening_socket_gets_the_datagram() {
        let dir = std::env::temp_dir().join(format!("uvfs-syslog-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("log");
        let _ = std::fs::remove_file(&path);
        let server = UnixDatagram::bind(&path).unwrap();
        let path: &'static Path = Box::leak(path.into_boxed_path());
        let mut s = Syslog {
            path,
            sock: connect(path),
        };
        s.send(log::Level::Warn, "hello");
        let mut buf = [0u8; 128];
        let n = server.recv(&mut buf).unwrap();
        let got = std::str::from_utf8(&buf[..n]).unwrap();
        assert!(
            got.starts_with("<28>uvfs[") && got.ends_with("]: hello"),
            "{got}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
