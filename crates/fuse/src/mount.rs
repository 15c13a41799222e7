//! Mounting and serving: builds the fuser session with several request
//! loops, the control socket and the signal thread, and runs until the
//! file system is unmounted; or serves a FUSE channel it is given
//! (`serve_fd`), mounting nothing.

use crate::control::{normalize_mountpoint, ControlSocket};
use crate::daemon::Readiness;
use crate::kmount::{self, KernelMount, Unmounter, MOUNT_FLAGS};
use crate::mountinfo;
use crate::server::{Inner, Server, Timeouts};
use crate::signals::BlockedSignals;
use fuser::{Session, SessionACL};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use uvfs_vfs::{FileSystem, VnodeLayer};

/// How to serve a file system.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Where to mount.
    pub mountpoint: PathBuf,
    /// Request loops (threads), each with its own `/dev/fuse` clone.
    pub threads: usize,
    /// Kernel cache lifetimes.
    pub timeouts: Timeouts,
    /// Shown as the mount's source in `/proc/mounts`.
    pub fsname: String,
    /// Serve the `uvfs stat` control socket.
    pub control: bool,
    /// Have the kernel open directories through the server (OPENDIR and
    /// RELEASEDIR on every open) instead of alone: two more round trips
    /// per directory walked, for file systems that need to see opens.
    pub server_opendir: bool,
    /// FUSE over io_uring (Linux 6.14+, the `fuse` module's `enable_uring`
    /// on): requests reach a server thread on the caller's CPU instead of
    /// whichever thread reads /dev/fuse. Without kernel support the mount
    /// serves through /dev/fuse as usual.
    pub uring: bool,
    /// Serve read-only: the mount is made read-only (the kernel refuses
    /// changes with EROFS before they reach us), and the server answers
    /// EROFS to any request that would change the file system all the
    /// same, so the promise holds after `mount -o remount,rw` and against
    /// a peer that is not a kernel (`serve_fd`).
    pub read_only: bool,
    /// Further per-mount flags of mount(2), as fstab options name them:
    /// any of `MOUNT_FLAGS` (`nosuid`, `nodev`, `noexec`, ...); 0 for
    /// none.
    pub mount_flags: libc::c_ulong,
    /// Let the kernel read, write and map open files on their backing
    /// files itself (FUSE passthrough, Linux 6.9+, the server with
    /// CAP_SYS_ADMIN), for a file system that has them
    /// (`FileSystem::backing_file`: a passthrough). Off, or where the
    /// kernel or the file does not allow it, READs and WRITEs come here.
    pub kernel_io: bool,
    /// Fetch a directory's attributes again in the background after it is
    /// listed (`refresh.rs`), so its next `stat` is answered from the
    /// kernel's cache: without it the first `stat` of a directory after
    /// each listing is a round trip (the kernel marks its atime stale).
    /// Needs CAP_SYS_ADMIN (it clones the mount); nothing to do on a
    /// read-only mount, or with an attribute timeout under 10 s (what it
    /// fetches would expire before use).
    pub dir_refresh: bool,
    /// Let every user reach the mount, not only the server's owner
    /// (FUSE's `allow_other`). Root's mounts always do; a user's only
    /// with `user_allow_other` in /etc/fuse.conf (`fusermount3` refuses
    /// it otherwise).
    pub allow_other: bool,
    /// How to start a successor that takes the mount over without
    /// unmounting (`uvfs upgrade`, `upgrade/`); None: this server cannot
    /// be upgraded in place.
    pub successor: Option<crate::upgrade::Successor>,
    /// Start a supervisor that starts a new server (`successor`'s binary)
    /// if this one dies (`supervise/`), for a file system whose nodes a
    /// new server can find again (`FileSystem::journal_record`).
    pub supervise: bool,
}

impl ServeConfig {
    /// What a file system served by a library user gets unless it says
    /// otherwise: two request loops (or FUSE over io_uring where the
    /// kernel has it), names and attributes cached for a second, the
    /// kernel opening directories alone, `nosuid,nodev`, no control
    /// socket, no kernel I/O on backing files. Change fields as needed:
    /// `ServeConfig { read_only: true, ..ServeConfig::new(mnt) }`.
    pub fn new(mountpoint: impl Into<PathBuf>) -> ServeConfig {
        let second = std::time::Duration::from_secs(1);
        ServeConfig {
            mountpoint: mountpoint.into(),
            threads: 2,
            timeouts: Timeouts {
                entry: second,
                attr: second,
            },
            fsname: "uvfs".into(),
            control: false,
            server_opendir: false,
            uring: true,
            read_only: false,
            mount_flags: libc::MS_NOSUID | libc::MS_NODEV,
            kernel_io: false,
            dir_refresh: false,
            allow_other: false,
            successor: None,
            supervise: false,
        }
    }
}

/// Mounts the file system `make` builds and serves it until it is
/// unmounted (`umount`, `fusermount3 -u`) or the process gets SIGINT or
/// SIGTERM (then it unmounts itself): the one call a program serving its
/// own file system needs. `vnodes` bounds the vnodes the file system
/// caches (the vnode layer recycles the least recently used beyond it).
///
/// Blocks the termination signals before the vnode layer starts its
/// threads, so that they reach the server's handler, not a thread that
/// would die of them: call it before starting threads of your own that
/// should not see those signals either.
pub fn mount_and_serve<F>(cfg: &ServeConfig, vnodes: usize, make: F) -> std::io::Result<()>
where
    F: FnOnce(&Arc<VnodeLayer>) -> std::io::Result<Arc<dyn FileSystem>>,
{
    let signals = BlockedSignals::block()?;
    let layer = VnodeLayer::new(uvfs_vnode::Config::with_limit(vnodes));
    let fs = make(&layer)?;
    serve(fs, layer, cfg, signals, &mut Readiness::foreground())
}

/// Mounts `fs` and serves it until unmounted (by `umount`, `fusermount3
/// -u` or a termination signal). `ready` learns whether the mount came up.
pub fn serve(
    fs: Arc<dyn FileSystem>,
    layer: Arc<VnodeLayer>,
    cfg: &ServeConfig,
    signals: BlockedSignals,
    ready: &mut Readiness,
) -> std::io::Result<()> {
    let r = start(fs, layer, cfg, signals);
    let (session, control) = match r {
        Ok(x) => {
            log::info!("mounted {} ({})", cfg.mountpoint.display(), cfg.fsname);
            ready.report(&Ok(()));
            x
        }
        Err(e) => {
            // The caller says it on the terminal (target: uvfs-logger's
            // REPORTED keeps it off stderr).
            log::error!(target: "uvfs::reported", "mounting {} failed: {e}", cfg.mountpoint.display());
            ready.report(&Err(std::io::Error::new(e.kind(), e.to_string())));
            return Err(e);
        }
    };
    serve_until_gone(session, control, cfg)
}

/// How long a server that handed its mount over lives on, for its
/// host-change watcher to pass on what it had read before the
/// successor's started (the two overlap; none is lost in between).
const WATCHER_DRAIN: std::time::Duration = std::time::Duration::from_millis(100);

/// Runs `session` until the mount goes or a successor takes it, and says
/// which.
fn serve_until_gone(
    session: Session<Server>,
    control: Option<ControlSocket>,
    cfg: &ServeConfig,
) -> std::io::Result<()> {
    let r = run(session);
    let handed = control.as_ref().is_some_and(ControlSocket::handed_over);
    if handed {
        // Host changes: the successor's watcher saw every change since
        // before it took the connection; this one's may still hold some
        // from before that, which it turns into invalidations while it
        // lives.
        std::thread::sleep(WATCHER_DRAIN);
    }
    drop(control);
    log::logger().flush();
    let why = match crate::signals::taken() {
        _ if handed => "handed over to a successor".into(),
        Some(sig) => format!("unmounted on {}", crate::signals::name(sig)),
        None => "unmounted".into(),
    };
    match &r {
        Ok(()) => log::info!("stopped serving {}: {why}", cfg.mountpoint.display()),
        Err(e) => log::error!("stopped serving {}: {e}", cfg.mountpoint.display()),
    }
    r
}

/// In a successor (`upgrade/`): serves the mount `handoff` came with,
/// from `fs` as rebuilt from the predecessor's state, until it is
/// unmounted or handed over again. Anything that fails before the
/// connection is taken is told to the predecessor, which serves on.
pub fn serve_successor(
    fs: Arc<dyn FileSystem>,
    layer: Arc<VnodeLayer>,
    cfg: &ServeConfig,
    mut handoff: crate::upgrade::Handoff,
    signals: BlockedSignals,
) -> std::io::Result<()> {
    handoff.mark("file system restored");
    let taken = take_over(fs, layer, cfg, &mut handoff);
    handoff.mark("request loops started");
    let (mut session, control, km, inner, upgradable) = match taken {
        Ok(x) => x,
        Err(e) => {
            handoff.fail(&e.to_string());
            return Err(e);
        }
    };
    let mountpoint = normalize_mountpoint(&cfg.mountpoint)?;
    handoff.taking()?;
    inner.fs.taken_over();
    // Supervised by the predecessor's supervisor (or, first supervised
    // now): linked only once the connection is ours, so a successor that
    // fails before leaves the supervisor with the server it had.
    let link = handoff.link.take();
    if link.is_some() || cfg.supervise {
        let resumed = handoff.resumable.take();
        supervise(&inner, &mut session, upgradable.as_deref(), link, resumed);
        handoff.mark("linked to the supervisor");
    }
    signals.on_signal(&mountpoint, Unmounter(km), leaver(&inner))?;
    // Requests the predecessor read and did not answer (a lock wait)
    // come again, now to these loops.
    if let Err(e) = session.notifier().resend() {
        log::warn!("requests in flight at the upgrade could not be sent again: {e}");
    }
    let generation = handoff.generation();
    let pause = handoff.done();
    inner
        .lineage
        .last_pause_us
        .store(pause, std::sync::atomic::Ordering::Relaxed);
    log::info!(
        "took {} over (server generation {generation}): {} nodes, {} open handles; \
         requests waited {pause} us",
        mountpoint.display(),
        inner.nodes.len(),
        inner.handles.len(),
    );
    serve_until_gone(session, control, cfg)
}

type TakenOver = (
    Session<Server>,
    Option<ControlSocket>,
    Arc<KernelMount>,
    Arc<Inner>,
    Option<Arc<crate::upgrade::Upgradable>>,
);

fn take_over(
    fs: Arc<dyn FileSystem>,
    layer: Arc<VnodeLayer>,
    cfg: &ServeConfig,
    handoff: &mut crate::upgrade::Handoff,
) -> std::io::Result<TakenOver> {
    let mountpoint = normalize_mountpoint(&cfg.mountpoint)?;
    let (server, inner) = new_server(fs.clone(), layer, cfg)?;
    handoff.mark("server made");
    crate::upgrade::import(&inner, handoff).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("rebuilding the server's nodes and handles: {e}"),
        )
    })?;
    handoff.mark("nodes and handles imported");
    let negotiated = fuser::Negotiated::from_bytes(handoff.negotiated())?;
    // INIT agreed to io_uring queues once for the connection: this server
    // serves them too.
    inner.uring_on.store(
        negotiated.io_uring_payload.is_some(),
        std::sync::atomic::Ordering::Relaxed,
    );
    let dev = handoff
        .take_dev()
        .ok_or_else(|| std::io::Error::other("no connection received"))?;
    let config = session_config(cfg, rustix::process::geteuid().is_root());
    let mut session = Session::resume(server, dev.try_clone()?, config.acl, config, negotiated)?;
    session.set_ring_root(&mountpoint);
    session
        .adopt_ring_entries(std::mem::take(&mut handoff.ring))
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("taking the io_uring queues' entries: {e}"),
            )
        })?;
    for (node, raw, opens) in handoff.backings(|ino| inner.nodes.node_id(ino)) {
        let mode = match raw {
            Some(r) => crate::backing::Mode::Kernel(Arc::new(session.adopt_backing(r))),
            None => crate::backing::Mode::Server,
        };
        inner.backings.import(node, mode, opens);
    }
    let m = handoff.mount();
    let km = Arc::new(KernelMount::adopt(dev, &mountpoint, m.device, m.helper)?);
    let upgradable = upgradable(&session, &km, cfg, &mountpoint)?;
    let control = start_around(
        &fs,
        &inner,
        &session,
        &km,
        cfg,
        &mountpoint,
        true,
        upgradable.clone(),
    )?;
    Ok((session, control, km, inner, upgradable))
}

/// Serves until the file system goes. The request loops end with ENODEV
/// when it is unmounted, which fuser takes as success, and with
/// ECONNABORTED when the kernel aborted the connection while tearing the
/// mount down (seen when a lazily detached mount loses its last open
/// file): also a normal end for a server, not an error to report.
fn run(session: Session<Server>) -> std::io::Result<()> {
    match session.run() {
        Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => Ok(()),
        r => r,
    }
}

type Started = (Session<Server>, Option<ControlSocket>);

fn start(
    fs: Arc<dyn FileSystem>,
    layer: Arc<VnodeLayer>,
    cfg: &ServeConfig,
    signals: BlockedSignals,
) -> std::io::Result<Started> {
    let (session, unmounter, control, inner) = mount(fs, layer, cfg)?;
    let mountpoint = normalize_mountpoint(&cfg.mountpoint)?;
    signals.on_signal(&mountpoint, unmounter, leaver(&inner))?;
    Ok((session, control))
}

/// How the signal thread ends a server whose connection outlives its
/// unmount here (`signals.rs`): the supervisor told first, so that it
/// ends too rather than start another server.
fn leaver(inner: &Arc<Inner>) -> Box<dyn FnOnce() + Send> {
    let inner = inner.clone();
    Box::new(move || {
        if let Some(bye) = inner.bye.get() {
            bye();
        }
    })
}

type Mounted = (
    Session<Server>,
    Unmounter,
    Option<ControlSocket>,
    Arc<Inner>,
);

/// Refuses (`AlreadyExists`, said plainly) a mountpoint a live uvfs
/// server serves: mounting over it would stack a second mount whose
/// control socket cannot be had (the first one's answers), and fail only
/// after waiting for the first to exit (`bind_replacing`). A server still
/// answering with nothing mounted is on its way out. Also for a front end
/// to call before it detaches, so that the refusal reaches the terminal
/// and not the running server's log.
pub fn refuse_if_served(mountpoint: &std::path::Path) -> std::io::Result<()> {
    // A mountpoint that cannot be resolved is not served; what is wrong
    // with it is said where it is used.
    let Ok(mountpoint) = normalize_mountpoint(mountpoint) else {
        return Ok(());
    };
    if crate::control::answers(&mountpoint) && mountinfo::device_of(&mountpoint).is_some() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!(
                "{} is already served by uvfs (`uvfs stat` reads it); unmount it first",
                mountpoint.display()
            ),
        ));
    }
    Ok(())
}

fn mount(
    fs: Arc<dyn FileSystem>,
    layer: Arc<VnodeLayer>,
    cfg: &ServeConfig,
) -> std::io::Result<Mounted> {
    let mountpoint = normalize_mountpoint(&cfg.mountpoint)?;
    if cfg.control {
        refuse_if_served(&mountpoint)?;
    }
    let known = MOUNT_FLAGS.iter().fold(0, |a, &(_, f)| a | f);
    if cfg.mount_flags & !known != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("unsupported mount flags {:#x}", cfg.mount_flags & !known),
        ));
    }
    let root = rustix::process::geteuid().is_root();
    if cfg.allow_other && !root && !crate::fusermount::user_allow_other() {
        return Err(crate::fusermount::allow_other_refused());
    }
    let (server, inner) = new_server(fs.clone(), layer, cfg)?;
    let config = session_config(cfg, root);
    // Idmapped mounts only where every caller is served: the kernel then
    // leaves the caller's ids out of most requests, and fuser's check of
    // an owner-only session would refuse them.
    inner.idmap.store(
        config.acl == SessionACL::All,
        std::sync::atomic::Ordering::Relaxed,
    );
    // mount(2) ourselves (or through fusermount3), so that fuser never
    // unmounts by path (kmount.rs says why).
    let (fd, km) = kmount::mount(
        &mountpoint,
        &cfg.fsname,
        config.acl == SessionACL::All,
        cfg.read_only,
        cfg.mount_flags,
    )?;
    let km = Arc::new(km);
    let mut session = Session::from_fd(server, fd, config.acl, config).inspect_err(|_| {
        let _ = km.unmount().or_else(|_| km.detach());
    })?;
    let mut unmounter = Unmounter(km.clone());
    let upgradable = upgradable(&session, &km, cfg, &mountpoint)?;
    if cfg.supervise {
        supervise(&inner, &mut session, upgradable.as_deref(), None, None);
    }
    match start_around(
        &fs,
        &inner,
        &session,
        &km,
        cfg,
        &mountpoint,
        false,
        upgradable,
    ) {
        Ok(control) => Ok((session, unmounter, control, inner)),
        Err(e) => {
            let _ = unmounter.unmount().or_else(|_| unmounter.detach());
            drop(session);
            Err(e)
        }
    }
}

/// Starts (or, given `existing`, links to) the mount's supervisor and
/// journals from now on (`supervise/`); without it the mount just ends
/// with its server, as said in the log.
fn supervise(
    inner: &Arc<Inner>,
    session: &mut Session<Server>,
    ctx: Option<&crate::upgrade::Upgradable>,
    existing: Option<OwnedFd>,
    resumed: Option<crate::journal::Resumable>,
) {
    let r = (|| {
        let ctx = ctx.ok_or_else(|| {
            std::io::Error::other("the server cannot start a successor (no binary to start)")
        })?;
        let (state, fds) = crate::upgrade::predecessor::base_state(inner, ctx)?;
        let exe = &ctx.successor.exe;
        let hello = crate::supervise::hello(std::process::id(), exe, &state.encode()?);
        let link = crate::supervise::Link::start(inner, exe, hello, fds, existing, resumed)?;
        // io_uring entries (those taken over now, then each one the
        // queues register) are kept before the kernel can give them a
        // request: a server started after a crash answers from them.
        session.set_ring_keeper(link.ring_keeper());
        link.kept_all()?;
        // The request loops' clones, made now so the supervisor holds
        // what they read (a loop's requests in flight survive its death).
        let clones = session.clone_channels()?;
        link.clones(&clones)?;
        let _ = inner.journal.set(link.journal().clone());
        let link = Arc::new(link);
        let l = link.clone();
        let _ = inner.bye.set(Box::new(move || l.bye()));
        let _ = ctx.link.set(Box::new(move || link.dup()));
        Ok::<_, std::io::Error>(())
    })();
    match r {
        Ok(()) => log::debug!("supervised: a crash of this server starts another"),
        Err(e) => log::info!("no supervisor ({e}): a crash of this server ends the mount"),
    }
}

/// What a successor needs of this server to take its mount over, if the
/// program said how to start one (`ServeConfig::successor`).
fn upgradable(
    session: &Session<Server>,
    km: &Arc<KernelMount>,
    cfg: &ServeConfig,
    mountpoint: &Path,
) -> std::io::Result<Option<Arc<crate::upgrade::Upgradable>>> {
    let Some(successor) = cfg.successor.clone() else {
        return Ok(None);
    };
    session.set_ring_root(mountpoint);
    Ok(Some(Arc::new(crate::upgrade::Upgradable {
        pauser: session.pauser(),
        negotiated: session.negotiated().to_bytes(),
        dev: km.dup_dev()?,
        mount: crate::upgrade::MountState {
            mountpoint: mountpoint.to_path_buf(),
            device: km.device(),
            helper: km.helper(),
        },
        successor,
        busy: Default::default(),
        link: Default::default(),
    })))
}

/// Starts what serves beside the request loops of a new session: the
/// file system learns its device, the directory refresher, the
/// host-change sink, the evictor and the control socket (taken from the
/// predecessor with `take_over`; `upgradable` serves its `upgrade`
/// requests). Returns the control socket.
#[allow(clippy::too_many_arguments)]
fn start_around(
    fs: &Arc<dyn FileSystem>,
    inner: &Arc<Inner>,
    session: &Session<Server>,
    km: &Arc<KernelMount>,
    cfg: &ServeConfig,
    mountpoint: &Path,
    take_over: bool,
    upgradable: Option<Arc<crate::upgrade::Upgradable>>,
) -> std::io::Result<Option<ControlSocket>> {
    // Before any request is answered: the mount's device, so that a file
    // system reaching back into it by path refuses (mountinfo.rs).
    let dev = km.device().or_else(|| mountinfo::device_of(mountpoint));
    if let Some(dev) = dev {
        fs.mounted_as(dev);
    }
    // The kernel's atime flags of the mount, which the file system
    // applies itself (a remount tells it again: `control.rs`); a
    // read-only server is read-only whatever the kernel's mount says.
    if let Some(flags) = mountinfo::flags_of(mountpoint) {
        fs.remounted(flags | if cfg.read_only { libc::MS_RDONLY } else { 0 });
    }
    // A read-only superblock keeps its atimes: nothing to refresh; with a
    // short attribute timeout nothing refreshed would last until used.
    let worth = cfg.timeouts.attr >= crate::refresh::MIN_ATTR_TIMEOUT;
    match (cfg.dir_refresh, worth, cfg.read_only, dev) {
        (true, true, false, Some(dev)) => {
            if let Err(e) = inner.refresh.start(mountpoint, dev, Arc::downgrade(fs)) {
                log::warn!("directory attribute refresh off: {e}");
            }
        }
        // Asked off, or turned off by `uvfs mount` (which said why).
        (false, ..) => log::info!(
            "directory attribute refresh off: --no-dir-refresh, or a server without \
             CAP_SYS_ADMIN (it may not clone the mount)"
        ),
        (_, false, ..) => log::info!(
            "directory attribute refresh off: the attribute timeout is under {:?}",
            crate::refresh::MIN_ATTR_TIMEOUT
        ),
        (_, _, true, _) => {
            log::info!("directory attribute refresh off: a read-only mount keeps its atimes")
        }
        (.., None) => log::warn!("directory attribute refresh off: the mount's device is unknown"),
    }
    let pruner = km.dup_dev().ok().map(crate::prune::Pruner::new);
    // Changes made behind the kernel's back, reported by the file system
    // (a passthrough's watcher) from now on.
    let raw = km.dup_dev().ok().map(crate::prune::Pruner::new);
    let cache = crate::changes::KernelCache::new(session.notifier(), raw, inner);
    fs.watch(Arc::new(crate::changes::Sink(Arc::new(cache))));
    start_helpers(
        inner, session, pruner, cfg, mountpoint, take_over, upgradable,
    )
}

/// fuser's settings for a session of `cfg` on a mount made by root (or
/// not): a request loop per thread, each on its own clone of the
/// connection.
fn session_config(cfg: &ServeConfig, root: bool) -> fuser::Config {
    let mut config = fuser::Config::default();
    // Everyone may use the mount when root serves it (allow_other), as a
    // system file system, or when asked; otherwise only the owner.
    config.acl = if root || cfg.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(cfg.threads.max(1));
    config.clone_fd = true;
    config
}

/// The server of `fs`, and the state it shares with the control socket.
fn new_server(
    fs: Arc<dyn FileSystem>,
    layer: Arc<VnodeLayer>,
    cfg: &ServeConfig,
) -> std::io::Result<(Server, Arc<Inner>)> {
    // Names that expire within seconds are better refreshed by listing
    // directories again than one LOOKUP each (`Server::opendir`), which
    // needs the OPENDIR that says whether the listing may be kept.
    let opendir = cfg.server_opendir || cfg.timeouts.entry < crate::server::LISTING_KEPT_FROM;
    let server = Server::new(fs, layer, cfg.timeouts, opendir, cfg.read_only)
        .map_err(|e| std::io::Error::from_raw_os_error(e.raw()))?;
    let inner = server.inner().clone();
    inner
        .uring
        .store(cfg.uring, std::sync::atomic::Ordering::Relaxed);
    inner
        .backings
        .wanted
        .store(cfg.kernel_io, std::sync::atomic::Ordering::Relaxed);
    Ok((server, inner))
}

/// Starts what runs beside the request loops: the evictor and, if asked,
/// the control socket for `mountpoint`.
fn start_helpers(
    inner: &Arc<Inner>,
    session: &Session<Server>,
    pruner: Option<crate::prune::Pruner>,
    cfg: &ServeConfig,
    mountpoint: &Path,
    take_over: bool,
    upgradable: Option<Arc<crate::upgrade::Upgradable>>,
) -> std::io::Result<Option<ControlSocket>> {
    // Kernel-forget of cold nodes over the vnode limit (evict.rs): by
    // prune where `pruner` writes it, else by entry invalidation; a
    // server without it still works, its vnode count just unbounded.
    let asker = crate::evict::Asker {
        pruner,
        notifier: session.notifier(),
    };
    inner.locks.set_notifier(session.notifier());
    let _ = inner.notifier.set(session.notifier());
    if let Err(e) = inner.evict.start(asker, Arc::downgrade(inner)) {
        log::warn!("kernel-forget of cold nodes off ({e}): the vnode count is unbounded");
    }
    if !cfg.control {
        return Ok(None);
    }
    ControlSocket::start(inner.clone(), mountpoint, take_over, upgradable)
        .map(Some)
        .map_err(|e| std::io::Error::new(e.kind(), format!("control socket: {e}")))
}

/// Serves `fs` on `fd`, one end of a channel whose peer speaks FUSE as
/// the kernel does on `/dev/fuse` (FUSE_INIT first, then one request per
/// read(2) and one reply per write(2); a `SOCK_SEQPACKET` socket pair
/// keeps those boundaries), without mounting anything: for tests that
/// play the kernel, and for embedders that own the channel.
///
/// Returns once the peer's FUSE_INIT is answered, so the peer must have
/// sent it already (or send it from another thread). The request loops
/// share `fd` (there is no `/dev/fuse` to clone) and run until the peer
/// sends FUSE_DESTROY or closes its end; `unmount` then only waits for
/// them. Every request is served whatever its uid: the peer decides who
/// may ask, as the kernel does with `default_permissions`.
/// `cfg.mountpoint` only names the file system in reports and for the
/// control socket; `cfg.fsname` is unused.
pub fn serve_fd(
    fs: Arc<dyn FileSystem>,
    layer: Arc<VnodeLayer>,
    fd: OwnedFd,
    cfg: &ServeConfig,
) -> std::io::Result<BackgroundMount> {
    let (server, inner) = new_server(fs, layer, cfg)?;
    inner
        .idmap
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let mut config = fuser::Config::default();
    config.acl = SessionACL::All;
    config.n_threads = Some(cfg.threads.max(1));
    config.clone_fd = false;
    let session = Session::from_fd(server, fd, config.acl, config)?;
    let control = start_helpers(&inner, &session, None, cfg, &cfg.mountpoint, false, None)?;
    BackgroundMount::spawn(session, None, control, inner, cfg.mountpoint.clone())
}

/// A file system served by request loops on background threads (for
/// tests and embedding); no signal handling, no detaching.
pub struct BackgroundMount {
    /// None for a served fd (`serve_fd`): nothing is mounted.
    unmounter: Option<Unmounter>,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
    inner: Arc<Inner>,
    mountpoint: PathBuf,
    _control: Option<ControlSocket>,
}

impl BackgroundMount {
    /// Mounts `fs` and serves it on background threads.
    pub fn start(
        fs: Arc<dyn FileSystem>,
        layer: Arc<VnodeLayer>,
        cfg: &ServeConfig,
    ) -> std::io::Result<BackgroundMount> {
        let (session, unmounter, control, inner) = mount(fs, layer, cfg)?;
        let mountpoint = normalize_mountpoint(&cfg.mountpoint)?;
        Self::spawn(session, Some(unmounter), control, inner, mountpoint)
    }

    fn spawn(
        session: Session<Server>,
        unmounter: Option<Unmounter>,
        control: Option<ControlSocket>,
        inner: Arc<Inner>,
        mountpoint: PathBuf,
    ) -> std::io::Result<BackgroundMount> {
        let thread = std::thread::Builder::new()
            .name("uvfs-session".into())
            .spawn(move || run(session))?;
        Ok(BackgroundMount {
            unmounter,
            thread: Some(thread),
            inner,
            mountpoint,
            _control: control,
        })
    }

    /// The statistics report (`check`: verify vnode accounting).
    pub fn report(&self, check: bool) -> serde_json::Value {
        crate::stats::report(&self.inner, &self.mountpoint.display().to_string(), check)
    }

    /// Unmounts and waits for the request loops to finish (a served fd
    /// has nothing to unmount: this waits for the peer to end the session).
    pub fn unmount(mut self) -> std::io::Result<()> {
        if let Some(u) = &mut self.unmounter {
            u.unmount()?;
        }
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(std::io::Error::other("session thread panicked")),
            None => Ok(()),
        }
    }
}

impl Drop for BackgroundMount {
    // A served fd's loops are left to end with the peer's channel.
    fn drop(&mut self) {
        if let (Some(t), Some(u)) = (self.thread.take(), &mut self.unmounter) {
            if u.unmount().is_ok() {
                let _ = t.join();
            } else {
                // Busy: a process still uses it. Detached from the tree, it
                // goes once they let go instead of outliving this process
                // as a dead mount (ENOTCONN) that someone must unmount;
                // its users are served while this process lasts.
                let _ = u.detach();
            }
        }
    }
}
