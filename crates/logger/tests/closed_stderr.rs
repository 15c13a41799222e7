//! A server whose stderr is a pipe nobody reads any more (the terminal
//! or the parent went away) goes on logging and serving: every write to
//! stderr fails with EPIPE, which `eprintln!` would turn into a panic.

use std::process::{Command, Stdio};

const CHILD: &str = "UVFS_LOGGER_CLOSED_STDERR_CHILD";

/// In the child: log more than the rate limit lets through, to every
/// level, with stderr closed; the log file shows it went on.
fn child(file: &str) {
    uvfs_logger::init(&uvfs_logger::Config {
        level: Some("trace".into()),
        file: Some(file.into()),
        foreground: true,
    })
    .unwrap();
    for i in 0..200 {
        log::error!("error {i}");
        log::warn!("warning {i}");
        log::info!("info {i}");
        log::debug!("debug {i}");
    }
    log::logger().flush();
    log::info!("child done");
}

#[test]
fn logging_to_a_closed_stderr_does_not_panic() {
    if let Ok(file) = std::env::var(CHILD) {
        child(&file);
        return;
    }
    let file = std::env::temp_dir().join(format!("uvfs-closed-stderr-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&file);
    let mut c = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "logging_to_a_closed_stderr_does_not_panic",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(CHILD, &file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Close the only reading end before the child writes anything.
    drop(c.stderr.take());
    let status = c.wait().unwrap();
    let log = std::fs::read_to_string(&file).unwrap_or_default();
    let _ = std::fs::remove_file(&file);
    assert!(status.success(), "{status}; log:\n{log}");
    assert!(log.contains("child done"), "{log}");
    // Debug lines are all there; the rate limit kept warnings to a burst
    // and said how many it dropped.
    assert_eq!(log.matches("DEBUG").count(), 200, "{log}");
    assert!(log.matches("warning ").count() < 20, "{log}");
    assert!(log.contains("suppressed"), "{log}");
}
