//! The file systems under test: which ones a run compares (`choose_fs`,
//! from what this build's `uvfs mount` takes), and each one set up with
//! its tree and, if served, its server or peer process (`build_target`).
//! Apart from the passes so that adding a configuration touches one file.

use super::{
    FuseStatOpts, FBR, FBR_FH, GOFUSE, LIBFUSE, MEMFS, MEMFS_DEV, MEMFS_NOREF, NATIVE, PASSTHROUGH,
    PASSTHROUGHS, PASSTHROUGH_DEFAULT, PASSTHROUGH_DEFAULT_NOSUP, PASSTHROUGH_DEV,
    PASSTHROUGH_DEV_NOSUP, PASSTHROUGH_NORA, PASSTHROUGH_NOREF, PASSTHROUGH_NOWATCH, PEERS, TMPFS,
};
use crate::fuse_mount::{ScratchDir, ServerMount, Tmpfs};
use crate::peers::{PeerKind, PeerMount, PeerOptions};
use crate::procstat::{self};
use crate::walk::{self, TreeShape};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One file system under test: where its tree is, and its server if any.
pub(super) struct Target {
    pub(super) name: &'static str,
    pub(super) root: PathBuf,
    pub(super) server: Option<ServerMount>,
    pub(super) peer: Option<PeerMount>,
    /// Why it could not be set up (a peer that failed to build or start):
    /// its rows say so instead of measuring.
    pub(super) setup_error: Option<String>,
    /// The server's soft fd limit.
    pub(super) fd_limit: Option<u64>,
    /// uvfs passthrough's fd pool budget (`passthrough.fds.budget`): the
    /// process holds a few more (stdio, /dev/fuse clones, its socket).
    pub(super) fd_budget: Option<u64>,
    pub(super) _tmpfs: Option<Tmpfs>,
    pub(super) _dir: Option<ScratchDir>,
    pub(super) build_secs: f64,
}

impl Target {
    /// The pid of the process serving it, if one does.
    pub(super) fn pid(&self) -> Option<u32> {
        match (&self.server, &self.peer) {
            (Some(s), _) => s.pid(),
            (_, Some(p)) => Some(p.pid()),
            _ => None,
        }
    }

    /// Whether a server process stands behind it (or was meant to).
    pub(super) fn served(&self) -> bool {
        self.name.starts_with("uvfs") || PEERS.contains(&self.name)
    }
}

/// Targets torn down in reverse order (a passthrough mount before the
/// native tree it serves).
pub(super) struct Targets(pub(super) Vec<Target>);

impl Drop for Targets {
    fn drop(&mut self) {
        while let Some(t) = self.0.pop() {
            drop(t);
        }
    }
}

pub(super) fn server_args(
    o: &FuseStatOpts,
    shape: &TreeShape,
    source: Option<&Path>,
    name: &str,
) -> Vec<String> {
    // What a user types: the source, and the flag that names the row.
    if name == PASSTHROUGH_DEFAULT
        || name == PASSTHROUGH_NOWATCH
        || name == PASSTHROUGH_DEFAULT_NOSUP
    {
        let mut a: Vec<String> = source
            .map(|s| vec!["--source".into(), s.display().to_string()])
            .unwrap_or_default();
        if name == PASSTHROUGH_NOWATCH {
            a.push("--no-watch".into());
        }
        if name == PASSTHROUGH_DEFAULT_NOSUP {
            a.push("--no-supervisor".into());
        }
        return a;
    }
    let t = o.timeout.to_string();
    let mut a = vec![
        "--entry-timeout".into(),
        t.clone(),
        "--attr-timeout".into(),
        t,
        // Every node stays held by the kernel: keep the (soft) vnode limit
        // above the tree so the server never recycles during a walk.
        "--vnodes".into(),
        (shape.entries() * 2 + 1024).max(262_144).to_string(),
    ];
    if let Some(n) = o.server_threads {
        a.extend(["--threads".into(), n.to_string()]);
    }
    if let Some(s) = source {
        a.extend(["--source".into(), s.display().to_string()]);
    }
    if name == MEMFS_DEV || name == PASSTHROUGH_DEV || name == PASSTHROUGH_DEV_NOSUP {
        a.extend(["--transport".into(), "dev".into()]);
    }
    if name == PASSTHROUGH_DEV_NOSUP {
        a.push("--no-supervisor".into());
    }
    if name == PASSTHROUGH_NORA {
        a.push("--no-dir-readahead".into());
    }
    if name == MEMFS_NOREF || name == PASSTHROUGH_NOREF {
        a.push("--no-dir-refresh".into());
    }
    a
}

pub(super) fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// What this build's `uvfs mount` takes (from its `--help`).
#[derive(Clone, Copy, Debug)]
pub(super) struct MountFlags {
    /// `--source DIR`: the passthrough.
    pub(super) source: bool,
    /// `--no-watch`: the passthrough without its host-change watcher.
    pub(super) no_watch: bool,
}

/// The file systems to run, checked, in setup order, and messages about
/// those skipped.
pub(super) fn choose_fs(
    o: &FuseStatOpts,
    mount: MountFlags,
) -> io::Result<(Vec<&'static str>, Vec<String>)> {
    let passthrough = mount.source;
    let all = [
        MEMFS,
        MEMFS_DEV,
        MEMFS_NOREF,
        TMPFS,
        NATIVE,
        PASSTHROUGH_DEFAULT,
        PASSTHROUGH_NOWATCH,
        PASSTHROUGH_DEFAULT_NOSUP,
        PASSTHROUGH,
        PASSTHROUGH_DEV,
        PASSTHROUGH_DEV_NOSUP,
        PASSTHROUGH_NORA,
        PASSTHROUGH_NOREF,
        LIBFUSE,
        FBR,
        FBR_FH,
        GOFUSE,
    ];
    let wanted: Vec<String> = match &o.fs {
        Some(v) => v.clone(),
        None if passthrough => all
            .iter()
            .filter(|&&a| {
                ![
                    PASSTHROUGH_DEFAULT_NOSUP,
                    PASSTHROUGH_DEV,
                    PASSTHROUGH_DEV_NOSUP,
                    PASSTHROUGH_NORA,
                    PASSTHROUGH_NOREF,
                    MEMFS_NOREF,
                ]
                .contains(&a)
            })
            .map(|s| s.to_string())
            .collect(),
        None => vec![MEMFS.into(), MEMFS_DEV.into(), TMPFS.into()],
    };
    for w in &wanted {
        if !all.contains(&w.as_str()) {
            return Err(bad(format!("unknown --fs {w:?} ({})", all.join(", "))));
        }
    }
    if wanted.iter().any(|w| PASSTHROUGHS.contains(&w.as_str())) && !passthrough {
        return Err(bad(
            "uvfs-passthrough needs `uvfs mount --source DIR`, which this build lacks".into(),
        ));
    }
    let mut skipped = Vec::new();
    let mut wanted = wanted;
    if !mount.no_watch && wanted.iter().any(|w| w == PASSTHROUGH_NOWATCH) {
        wanted.retain(|w| w != PASSTHROUGH_NOWATCH);
        skipped.push(format!(
            "{PASSTHROUGH_NOWATCH}: skipped: this `uvfs mount` has no --no-watch"
        ));
    }
    // The passthrough mount and the peers serve the native tree, so they
    // need it built.
    let native = wanted
        .iter()
        .any(|w| w == NATIVE || PASSTHROUGHS.contains(&w.as_str()) || PEERS.contains(&w.as_str()));
    let names = all
        .into_iter()
        .filter(|a| (*a == NATIVE && native) || wanted.iter().any(|w| w == a))
        .collect();
    Ok((names, skipped))
}

pub(super) fn build_target(
    name: &'static str,
    o: &FuseStatOpts,
    shape: &TreeShape,
    native_root: Option<&Path>,
) -> io::Result<Target> {
    let mut t = Target {
        name,
        root: PathBuf::new(),
        server: None,
        peer: None,
        setup_error: None,
        fd_limit: None,
        fd_budget: None,
        _tmpfs: None,
        _dir: None,
        build_secs: 0.0,
    };
    match name {
        MEMFS | MEMFS_DEV | MEMFS_NOREF => {
            let tag = name.trim_start_matches("uvfs-");
            let m = ServerMount::start(tag, &server_args(o, shape, None, name))?;
            t.root = m.root().to_path_buf();
            t.fd_limit = m.pid().and_then(|p| procstat::fd_limit(p).ok().flatten());
            t.server = Some(m);
        }
        TMPFS => {
            let m = Tmpfs::start("tmpfs")?;
            t.root = m.root.clone();
            t._tmpfs = Some(m);
        }
        NATIVE => {
            let dir = o
                .native_dir
                .join(format!("uvfs-bench-{}-native", std::process::id()));
            let d = ScratchDir::create(dir, true)?;
            t.root = d.path.clone();
            t._dir = Some(d);
        }
        PASSTHROUGH_DEFAULT
        | PASSTHROUGH_NOWATCH
        | PASSTHROUGH_DEFAULT_NOSUP
        | PASSTHROUGH
        | PASSTHROUGH_DEV
        | PASSTHROUGH_DEV_NOSUP
        | PASSTHROUGH_NORA
        | PASSTHROUGH_NOREF => {
            let src = native_root.ok_or_else(|| bad("passthrough without a native tree".into()))?;
            let tag = name.trim_start_matches("uvfs-");
            let m = ServerMount::start(tag, &server_args(o, shape, Some(src), name))?;
            t.root = m.root().to_path_buf();
            t.fd_limit = m.pid().and_then(|p| procstat::fd_limit(p).ok().flatten());
            t.fd_budget = m
                .report()
                .ok()
                .and_then(|v| v.pointer("/counters/passthrough.fds.budget")?.as_u64());
            t.server = Some(m);
            // The tree is the native one, already built.
            return Ok(t);
        }
        LIBFUSE | FBR | FBR_FH | GOFUSE => {
            let src = native_root.ok_or_else(|| bad(format!("{name} without a native tree")))?;
            let kind = PeerKind::from_name(name).expect("a peer's name");
            let opts = PeerOptions {
                timeout_secs: Some(o.timeout),
                threads: o.server_threads,
            };
            // A peer that cannot be had is a result (rows with the reason),
            // not the end of the run.
            match PeerMount::start_with(kind, src, kind.binary(), &opts) {
                Ok(p) => {
                    t.root = p.root().to_path_buf();
                    t.fd_limit = procstat::fd_limit(p.pid()).ok().flatten();
                    t.peer = Some(p);
                }
                Err(e) => t.setup_error = Some(e.to_string()),
            }
            return Ok(t);
        }
        _ => unreachable!("checked by choose_fs"),
    }
    let start = Instant::now();
    walk::build(&t.root, shape)?;
    t.build_secs = start.elapsed().as_secs_f64();
    Ok(t)
}
