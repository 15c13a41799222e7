//! memfs gives removed files' memory back to the system, as tmpfs does,
//! even when the server goes idle right after the removal. Skipped (with
//! a message) where mounting is not possible.

mod common;

use common::{can_mount, Mounted};
use std::fs;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

#[test]
fn removed_files_give_their_memory_back() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("memory", &[]);
    let before = m.counter("process.rss_bytes");
    assert!(before > 0, "the server reports its resident memory");

    // One large file and many small ones (a page each, spread over the
    // allocator's pages by the interleaving).
    let chunk = vec![0x5au8; MIB as usize];
    let big = m.mnt.join("big");
    let mut f = fs::File::create(&big).unwrap();
    for _ in 0..192 {
        std::io::Write::write_all(&mut f, &chunk).unwrap();
    }
    drop(f);
    let small = m.mnt.join("small");
    fs::create_dir(&small).unwrap();
    for i in 0..16_384 {
        fs::write(small.join(i.to_string()), &chunk[..100]).unwrap();
    }
    let full = m.counter("process.rss_bytes");
    assert!(
        full >= before + 200 * MIB,
        "256 MiB of data should be resident: {before} -> {full}"
    );

    fs::remove_file(&big).unwrap();
    fs::remove_dir_all(&small).unwrap();
    // Then nothing: no request of ours may be what releases the memory.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut now = m.counter("process.rss_bytes");
    while now > before + 48 * MIB && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        now = m.counter("process.rss_bytes");
    }
    assert!(
        now <= before + 48 * MIB,
        "resident memory stayed up after the files went: {} MiB before, {} MiB \
         with them, {} MiB 15 s after removing them",
        before / MIB,
        full / MIB,
        now / MIB
    );
}
