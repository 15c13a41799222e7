//! What a subsystem tells `uvfs stat`: its counters, each under a dotted
//! name and with a line saying what it counts.
//!
//! Each subsystem implements [`Counted`] next to the state it counts (the
//! node table in `nodes.rs`, the evictor in `evict.rs`...), so a new
//! counter is named, read and described in one place; `stats.rs` only
//! asks each in turn and adds what belongs to no subsystem (the vnode
//! layer's, the process's, the file system's).

use std::borrow::Cow;

/// Counters collected for the statistics report, in the order put.
#[derive(Default, Debug)]
pub(crate) struct Report {
    counters: Vec<Counter>,
}

/// One counter of a [`Report`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Counter {
    /// Dotted name, `fuse.nodes.forgotten` and the like.
    pub name: Cow<'static, str>,
    pub value: u64,
    /// What it counts, for people (`uvfs stat` prints it after a `#`).
    pub description: &'static str,
}

impl Report {
    /// Adds counter `name`.
    pub(crate) fn put(
        &mut self,
        name: impl Into<Cow<'static, str>>,
        value: u64,
        description: &'static str,
    ) {
        self.counters.push(Counter {
            name: name.into(),
            value,
            description,
        });
    }

    /// Adds the counters of `part`.
    pub(crate) fn add(&mut self, part: &dyn Counted) {
        part.report(self);
    }

    /// The counters put, in order.
    pub(crate) fn counters(&self) -> &[Counter] {
        &self.counters
    }
}

/// A subsystem whose counters `uvfs stat` shows.
pub(crate) trait Counted {
    /// Puts this subsystem's counters into `out`.
    fn report(&self, out: &mut Report);
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Two;

    impl Counted for Two {
        fn report(&self, out: &mut Report) {
            out.put("a.one", 1, "first");
            out.put(format!("a.{}", "two"), 2, "second");
        }
    }

    #[test]
    fn counters_keep_the_order_put() {
        let mut r = Report::default();
        r.put("z", 0, "before");
        r.add(&Two);
        let names: Vec<_> = r.counters().iter().map(|c| c.name.as_ref()).collect();
        assert_eq!(names, ["z", "a.one", "a.two"]);
        assert_eq!(r.counters()[2].value, 2);
        assert_eq!(r.counters()[2].description, "second");
    }
}
