//! The background reclaimer (FreeBSD's `vnlru` thread): works off the
//! backlog allocation leaves when it finds nothing free and overcommits,
//! bringing the vnode count back under the low watermark as releases make
//! vnodes free. It sleeps on a doorbell rung by real events (an
//! overcommitted allocation; a vnode freed while that backlog stands),
//! never a fixed timer. At the limit with free vnodes, allocations recycle
//! one for one on their own path, which costs less than recycling here
//! (see "Who recycles" in the layer's docs).

use crate::shared::{Doorbell, Shared};
use crate::sync::{Arc, AtomicBool, Ordering};
use std::sync::Weak;
use std::thread::JoinHandle;

/// Vnodes per reclaim batch: small enough to interleave with allocators,
/// large enough to amortise a wakeup.
const BATCH: usize = 256;

/// What the reclaimer works on: the layer, seen only through the state it
/// shares with its vnodes and the one operation it runs.
pub(crate) trait Reclaim: Send + Sync + 'static {
    /// Counters, limits and the doorbell.
    fn shared(&self) -> &Arc<Shared>;
    /// Recycles up to `n` free vnodes across mounts; returns how many.
    fn reclaim_global(&self, n: usize) -> usize;
}

pub(crate) struct Reclaimer {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Reclaimer {
    pub(crate) fn spawn<L: Reclaim>(layer: Weak<L>) -> std::io::Result<Reclaimer> {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name("uvfs-vnlru".into())
            .spawn(move || run(layer, stop2))?;
        Ok(Reclaimer {
            stop,
            handle: Some(handle),
        })
    }

    /// Stops the thread and joins it (unless we are that thread: the last
    /// `Arc` of the layer can be dropped by the reclaimer itself).
    pub(crate) fn stop(&mut self, bell: &Doorbell) {
        self.stop.store(true, Ordering::Release);
        bell.shutdown();
        if let Some(h) = self.handle.take() {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

fn run<L: Reclaim>(layer: Weak<L>, stop: Arc<AtomicBool>) {
    let stopped = || stop.load(Ordering::Acquire);
    let Some(shared) = layer.upgrade().map(|l| l.shared().clone()) else {
        return;
    };
    loop {
        // Sleep first: a pass runs only when rung (a backlog), never
        // because the thread happened to start while the count was high.
        // Never sleep holding the layer alive.
        shared.bell.wait(&stopped);
        let Some(l) = layer.upgrade() else { return };
        if stopped() {
            return;
        }
        shared.ev.reclaimer_wakeups.inc();
        let low = shared.cfg.low_water() as isize;
        shared.backlog.store(false, Ordering::SeqCst);
        while !stopped() {
            let over = shared.numvnodes.approx() - low;
            if over <= 0 {
                break;
            }
            let n = l.reclaim_global(over.min(BATCH as isize) as usize);
            shared.ev.reclaimer_recycles.add(n as u64);
            if n == 0 {
                // Nothing free: wait for a release to ring us, which it
                // does only while the backlog is marked.
                if shared.numvnodes.approx() > shared.cfg.recycle_at() as isize {
                    shared.backlog.store(true, Ordering::SeqCst);
                }
                break;
            }
        }
    }
}
