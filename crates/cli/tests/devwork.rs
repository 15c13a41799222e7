//! `uvfs bench devwork --quick` end to end on memfs: every step runs and
//! passes its check (the unpacked tree is the tarball's, git and SQLite
//! print what they must), the row carries the unpack's requests by opcode
//! and the transport. (That a corrupted tree fails the check is tested in
//! `crates/bench/src/devwork/manifest.rs`.) Skipped (with a message) when
//! mounting is not possible or `git`/`sqlite3` are missing.

mod common;

use common::can_mount;
use serde_json::Value;
use std::process::Command;

fn have(prog: &str) -> bool {
    Command::new(prog)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn quick_devwork_on_memfs_passes_its_checks() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    if let Some(p) = ["tar", "git", "sqlite3"].into_iter().find(|p| !have(p)) {
        eprintln!("skipped: no {p} (scripts/install-deps.sh installs it)");
        return;
    }
    let json = std::env::temp_dir().join(format!("uvfs-devwork-test-{}.json", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_uvfs"))
        .args([
            "bench",
            "devwork",
            "--quick",
            "--fs",
            "uvfs-memfs",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&json);
    let _ = std::fs::remove_file(&json);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&text.unwrap()).unwrap();
    assert_eq!(v["workload"], "devwork");
    let row = &v["rows"][0];
    assert_eq!(row["fs"], "uvfs-memfs");
    assert_eq!(row["ok"], true, "{row}");
    assert!(row["tree_checksum"].is_string(), "{row}");
    for step in [
        "untar",
        "git_commit",
        "git_status",
        "git_grep",
        "sqlite",
        "rm_rf",
    ] {
        assert!(row[step].as_f64().is_some_and(|s| s > 0.0), "{step}: {row}");
    }
    // An untar creates every file: its requests include a CREATE per
    // regular file, and at least one request per member.
    let files = row["files"].as_u64().unwrap();
    assert!(files >= 500, "{row}");
    assert!(
        row["untar_ops"]["create"].as_u64() >= row["regular_files"].as_u64(),
        "{row}"
    );
    assert!(row["req_per_file"].as_f64().unwrap() >= 1.0, "{row}");
    assert!(row["untar_errors"].is_u64(), "{row}");
    let transport = row["transport"].as_str().unwrap();
    assert!(
        ["io_uring", "/dev/fuse", "io_uring+/dev/fuse"].contains(&transport),
        "{transport}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("uvfs-memfs untar:") && stdout.contains("requests per file"));
}
