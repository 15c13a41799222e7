//! Changes the kernel sends again (`FUSE_UNIQUE_RESEND`) to a server
//! started after the one that read them died: a change the dead server
//! had done is answered as done, on both file systems; the same request
//! sent for the first time still fails, and a resent one fails too where
//! what it finds is not what it would have made.

use super::kernel::Kernel;
use super::wire::{
    b, create_in, mkdir_in, release_in, rename_in, CREATE, ENOENT, MKDIR, RELEASE, RENAME, RMDIR,
    ROOT, UNLINK,
};
use super::{memfs, passthrough};

fn name(n: &[u8]) -> Vec<u8> {
    b().name(n).done()
}

fn resent_changes(k: &mut Kernel) {
    // UNLINK: done, resent (answered as done), sent anew (ENOENT).
    let (f, fh) = k.create(ROOT, b"f");
    assert!(k.call(RELEASE, f, &release_in(fh)).ok());
    assert!(k.call(UNLINK, ROOT, &name(b"f")).ok());
    let r = k.call_resent(UNLINK, ROOT, &name(b"f"));
    assert!(r.ok(), "resent UNLINK: {}", r.errno());
    assert_eq!(k.call(UNLINK, ROOT, &name(b"f")).errno(), ENOENT);
    // MKDIR: resent, the same directory; over a file, EEXIST.
    let d = k.mkdir(ROOT, b"d").nodeid();
    let r = k.call_resent(MKDIR, ROOT, &mkdir_in(0o755, b"d"));
    assert!(r.ok(), "resent MKDIR: {}", r.errno());
    assert_eq!(r.nodeid(), d);
    let (g, fh) = k.create(ROOT, b"g");
    assert!(k.call(RELEASE, g, &release_in(fh)).ok());
    let r = k.call_resent(MKDIR, ROOT, &mkdir_in(0o755, b"g"));
    assert_eq!(r.errno(), libc::EEXIST, "resent MKDIR over a file");
    // RMDIR.
    assert!(k.call(RMDIR, ROOT, &name(b"d")).ok());
    let r = k.call_resent(RMDIR, ROOT, &name(b"d"));
    assert!(r.ok(), "resent RMDIR: {}", r.errno());
    // RENAME: done and resent; resent with neither name there, ENOENT.
    assert!(k.call(RENAME, ROOT, &rename_in(ROOT, b"g", b"h")).ok());
    let r = k.call_resent(RENAME, ROOT, &rename_in(ROOT, b"g", b"h"));
    assert!(r.ok(), "resent RENAME: {}", r.errno());
    let r = k.call_resent(RENAME, ROOT, &rename_in(ROOT, b"g", b"i"));
    assert_eq!(r.errno(), ENOENT, "resent RENAME of nothing");
    // An exclusive CREATE resent finds its file and opens it.
    let excl = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
    assert_eq!(
        k.call(CREATE, ROOT, &create_in(excl, 0o644, b"h")).errno(),
        libc::EEXIST
    );
    let r = k.call_resent(CREATE, ROOT, &create_in(excl, 0o644, b"h"));
    assert!(r.ok(), "resent exclusive CREATE: {}", r.errno());
    assert_eq!(r.nodeid(), g);
}

#[test]
fn memfs_answers_a_resent_change_already_done_as_done() {
    let (fs, layer) = memfs();
    let mut k = Kernel::start(fs, layer, false);
    resent_changes(&mut k);
    k.finish();
}

#[test]
fn passthrough_answers_a_resent_change_already_done_as_done() {
    let (fs, layer, _src) = passthrough("resent");
    let mut k = Kernel::start(fs, layer, false);
    // Its removed file, held by no open, is gone from the source.
    k.held_may_vanish = true;
    resent_changes(&mut k);
    k.finish();
}
